"""The loop nest of `scan` (cumsum and cumprod, `ir/ops_scan.py`): one pass along the axis.

Used by `to_loops/lower_blocks.py`, whose `BlockLowering` (`lowering` below) supplies the
environment, the evaluator of fused values and the output buffer. f32 sums and products
run in f64 (the rule of `ir/reduce_kinds.py`) and each partial result is rounded once.
Two shapes of nest, as for the reductions (`reductions.py`):

- the scan's axis is the last: the running value of a line lives in a register (an
  accumulator), which the loop along the axis updates and stores at every step:

      for %i0 in 0..B { %acc0: f64 = 0.0; for %i1 in 0..N {
          %0 = load x[%i0, %i1]; %acc0 = sum %acc0, %0; store out0[%i0, %i1] = %acc0 } }

- otherwise the running values of all lines live in a temporary `run` with the other
  axes' shape, set to the identity, then updated in the natural loop order, so the scan
  is sequential along its axis only and the loops over the axes after it stay innermost
  and contiguous (they vectorise). `cumsum(x, axis=0)` of an f32[N, D] `x`:

      for %i0 in 0..1 { for %i1 in 0..D { store t0[%i0, %i1] = 0.0 } }
      for %i2 in 0..N { for %i3 in 0..D {
          %0 = load x[%i2, %i3]; %1 = cast %0 : f64; %2 = load t0[0, %i3]
          %3 = add %2, %1 : f64; store t0[0, %i3] = %3
          %4 = cast %3 : f32; store out0[%i2, %i3] = %4 } }

A reverse scan visits the axis from its end: position n - 1 - k at step k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Op
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops_scan import ScanOp
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.loops.ir import Accumulate, Accumulator, Operand, Store, View
from reverie.compiler.to_loops.emitter import Emitter
from reverie.compiler.to_loops.reductions import accumulator_dtype, identity

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering


def lower_scan(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """y = scan(x) along one axis, carrying each line's running value (in a register
    when the axis is the last, else in the temporary `run`)."""
    scan = ScanOp(op)
    x, axis, kind = op.operands[0], scan.axis, scan.kind
    shape, dtype = x.type.shape, op.result.type.dtype
    acc_dtype = accumulator_dtype(kind, dtype)
    out = lowering.buffer_for(op.result)

    def element(steps: tuple[Dim, ...], inner: Emitter) -> tuple[tuple[Dim, ...], Operand]:
        """The position of the scan's step `steps` and x there, in the accumulator dtype."""
        step = steps[axis]
        position = shape[axis] - 1 - step if scan.reverse else step
        index = steps[:axis] + (position,) + steps[axis + 1:]
        value = lowering.eval.at(x, index, inner)
        return index, value if acc_dtype == dtype else inner.let("cast", (value,), acc_dtype)

    def store(index: tuple[Dim, ...], total: Operand, inner: Emitter) -> None:
        if acc_dtype != dtype:
            total = inner.let("cast", (total,), dtype)
        inner.stmts.append(Store(out, index, total))

    if axis == len(shape) - 1:
        outer_index, outer = em.nest([(Dim.const(0), d) for d in shape[:axis]])
        running = lowering.ctx.var(acc_dtype, "%acc")
        outer.stmts.append(Accumulator(running, identity(kind, acc_dtype)))
        step, inner = outer.nest([(Dim.const(0), shape[axis])])
        index, value = element(outer_index + step, inner)
        inner.stmts.append(Accumulate(running, kind, value))
        store(index, running, inner)
    else:
        run_shape = shape[:axis] + (Dim.const(1),) + shape[axis + 1:]
        run = View.of(lowering.ctx.temp(acc_dtype, run_shape))
        em.map_nest(run, lambda index, body: identity(kind, acc_dtype))
        steps, inner = em.nest([(Dim.const(0), d) for d in shape])
        index, value = element(steps, inner)
        line = steps[:axis] + (Dim.const(0),) + steps[axis + 1:]
        total = inner.let(REDUCE_KINDS[kind].combine, (inner.load(run, line), value), acc_dtype)
        inner.stmts.append(Store(run, line, total))
        store(index, total, inner)
    lowering.env[op.result] = out
