"""The loop passes as the pass tests call them: the one place that knows how to call them.

`program_of(fn)` is the loop program the pass `loop_nests` builds from a tensor function
(after the ladder's stage `fuse`, as in the pipeline), before any loop pass;
`run_loop_pass(name, program)` runs one loop pass alone, by its REVERIE_PRINT_IR name, as
the ladder runs it (compiler/pipeline.py, stage `to_loops`), and checks its result with the
loop verifier; `printed_program` is its text:

    program = run_loop_pass("interchange", program_of(lowered(source)))
    filecheck(printed_program(program), "CHECK: store out0[%i1] = ...")
"""

from __future__ import annotations

from reverie.compiler.ir.core import Function
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.compiler.pipeline import climb, compile_function
from reverie.compiler.to_loops.lower_blocks import lower_function


def program_of(fn: Function) -> Program:
    """The loop program of `fn` as `loop_nests` lowers it, before any loop pass."""
    fused = compile_function(fn, "fuse")
    program = lower_function(fused.function, fused.plan)
    verify_program(program)
    return program


def run_loop_pass(name: str, program: Program) -> Program:
    """`program` after the loop pass `name` alone (verified)."""
    results = climb(program, start=name, stop=name)  # the ladder's row of that one pass
    result = list(results.values())[-1]
    verify_program(result)
    return result


def printed_program(program: Program) -> str:
    """The loop IR's text, as `module.ir("loops")` and REVERIE_PRINT_IR print it."""
    return format_program(program)
