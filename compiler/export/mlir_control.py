"""MLIR export rules for the control-flow ops `if` and `while` (docs/language.md §11.1).

Consumes an IR `Op` and its operand `Tensor`s; emits MLIR and returns the results, as the
rules of `mlir_regions.py` do:

- `if`: an `scf.if` with an else branch. Scalar results are yielded; each tensor result
  gets a buffer allocated before the `scf.if`, which either branch fills.
- `while`: an `scf.while`. Scalar states travel in its arguments, each tensor state lives
  in one buffer that the body overwrites at the end of each iteration (as for `for`), and
  an i64 counts the iterations. The `before` region runs the condition region and goes on
  while it holds and the count is below the op's `limit`; it forwards the condition too,
  so a loop stopped by the limit (its condition still true) reports the iteration-limit
  error through the status buffer (a RuntimeError), never running on.
- `trip_dim`: its count, with an error (a `CapacityError`, `ir/capacity.py`) unless the
  count fits its trip dimension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import LOWERINGS
from reverie.compiler.export.mlir_regions import carry_into_buffers
from reverie.compiler.export.mlir_writer import REGISTER, Tensor
from reverie.compiler.ir.capacity import MESSAGE
from reverie.compiler.ir.core import Block, Op
from reverie.compiler.ir.iteration_limit import limit_error
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import IfOp, WhileOp

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter


@LOWERINGS.register("if")
def _if(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w, view = ex.w, IfOp(op)
    cond, inputs = args[0], args[1:]
    buffers = [w.alloc(r.type) if r.type.rank else None for r in op.results]
    types = [REGISTER[r.type.dtype] for r in op.results if not r.type.rank]

    def branch(block: Block) -> list[str]:
        results = ex.block(block, inputs)
        for buffer, value in zip(buffers, results, strict=True):
            if buffer:
                ex.copy_into(value, buffer)
        ex.release(results)
        return [r.ssa for r in results if not r.is_buffer]

    finals = iter(w.scf_if(cond.ssa, types, lambda: branch(view.then),
                           lambda: branch(view.orelse)))
    return [b if b else Tensor(next(finals), r.type)
            for b, r in zip(buffers, op.results, strict=True)]


@LOWERINGS.register("while")
def _while(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w, loop = ex.w, WhileOp(op)
    initial, invariants = loop.split(args)
    buffers = [ex.copy(t) if t.is_buffer else None for t in initial]
    inits = [(t.ssa, REGISTER[t.type.dtype]) for t in initial if not t.is_buffer]
    inits.append((w.const(0, "i64"), "i64"))
    limit = w.const(loop.limit, "i64")

    def states(scalars: list[str]) -> list[Tensor]:
        values = iter(scalars)
        return [Tensor(b.ssa, b.type, b.memref) if b else Tensor(next(values), init.type)
                for b, init in zip(buffers, initial, strict=True)]

    def before(values: list[str]) -> tuple[str, list[str]]:
        *scalars, count = values
        (cond,) = ex.block(loop.before, [*states(scalars), *invariants])
        below = w.assign(f"arith.cmpi slt, {count}, {limit} : i64")
        return w.assign(f"arith.andi {cond.ssa}, {below} : i1"), [*values, cond.ssa]

    def body(values: list[str]) -> list[str]:
        *scalars, count, _ = values
        results = ex.block(loop.body, [*states(scalars), *invariants])
        carry_into_buffers(ex, buffers, results)
        following = w.assign(f"arith.addi {count}, {w.const(1, 'i64')} : i64")
        return [r.ssa for r in results if not r.is_buffer] + [following]

    *finals, count, running = w.scf_while(inits, [t for _, t in inits] + ["i1"], before, body)
    stopped = w.assign(f"arith.xori {running}, {w.const(True, 'i1')} : i1")
    ex.fail_unless(stopped, count, limit, limit_error(loop.limit))
    scalars = iter(finals)
    out = [b if b else Tensor(next(scalars), init.type)
           for b, init in zip(buffers, initial, strict=True)]
    return out + ([Tensor(count, scalar("i64"))] if loop.counted else [])


@LOWERINGS.register("trip_dim")
def _trip_dim(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w, (count,), dim = ex.w, args, op.attrs["dim"]
    capacity = w.dim(dim)
    fits = w.assign(f"arith.cmpi sle, {count.ssa}, {capacity} : i64")
    ex.fail_unless(fits, count.ssa, capacity, MESSAGE.format(needed="{value}", symbol=dim))
    return [Tensor(count.ssa, op.result.type)]
