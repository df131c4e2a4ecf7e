"""Shared helper: one tensor-IR function run at every level that executes it."""

from __future__ import annotations

import numpy as np

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.compiler.to_loops.lower_blocks import lower_to_loops
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel


def every_level(fn: Function, args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """The single result of `fn` on `args` from the tensor-IR interpreter, the loop-IR
    interpreter (after verifying the loop program) and native code, in that order."""
    bound = bind_arguments(fn, args)
    program = lower_to_loops(fn)
    verify_program(program)
    (interpreted,) = interpret(fn, bound.arrays, bound.dims)
    (looped,) = run_program(program, bound.arrays, bound.dims)
    (native,) = native_kernel(fn)(bound)
    return interpreted, looped, native
