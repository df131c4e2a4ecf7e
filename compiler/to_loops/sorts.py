"""The loop nest of `argsort` (`ir/ops_sort.py`): one run-time merge sort per line.

Used by `to_loops/lower_blocks.py`, whose `BlockLowering` (`lowering` below) supplies the
environment and the output buffer. The operand is in memory (fusion materialises a
computed one: `to_loops/fusion_plan.py`'s `reads_memory`); a loop nest over the other axes sorts
each line along the axis with one `Sort` statement, a call of the helper `rv_argsort`
(`runtime_library/sort.py`) that reads the line through its stride and writes the permutation
into the matching line of the result. `argsort(x, axis=0)` of an f64[N, D] `x`:

    for %i0 in 0..D {
      sort out0[%i0 : N step D] = argsort x[%i0 : N step D]  # scratch t0
    }

All lines share one i64 scratch temporary of `SORT_SCRATCH_PER_KEY` elements per key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Op
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops_sort import ArgsortOp
from reverie.compiler.loops.ir import SORT_SCRATCH_PER_KEY, Sort, View
from reverie.compiler.to_loops.emitter import Emitter

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering


def line_of(view: View, index: tuple[Dim, ...], axis: int) -> View:
    """The 1-D view along `axis` through `index` (whose entry at `axis` is ignored)."""
    start = index[:axis] + (Dim.const(0),) + index[axis + 1:]
    return View(view.buffer, (view.shape[axis],), view.flat(start), (view.strides[axis],))


def lower_argsort(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """p = argsort(x) along one axis: a `Sort` of each line, in a nest over the others."""
    view = ArgsortOp(op)
    x, axis = op.operands[0], view.axis
    keys, out = lowering.env[x], lowering.buffer_for(op.result)
    assert isinstance(keys, View), "fusion keeps argsort's operand in memory"
    shape = x.type.shape
    scratch = lowering.ctx.temp("i64", (shape[axis] * SORT_SCRATCH_PER_KEY,))
    others, body = em.nest([(Dim.const(0), d) for a, d in enumerate(shape) if a != axis])
    index = others[:axis] + (Dim.const(0),) + others[axis:]
    body.stmts.append(Sort(line_of(out, index, axis), line_of(keys, index, axis),
                           view.descending, scratch))
    lowering.env[op.result] = out
