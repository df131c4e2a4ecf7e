"""Loop nests for reductions: reduce_sum/prod/max/min, argmax/argmin, reducing generics.

Used by `to_loops/lower_blocks.py`, whose `BlockLowering` (`lowering` below) supplies the
environment, the evaluator of fused values and output buffers. Two shapes of nest:

- the reduced axes come last (a row sum, a full sum, index notation): one accumulator in a
  register per output element, updated with reassociable ops so the inner loop vectorises;
  f32 sums and products accumulate in f64 (the rule of `ir/reduce_kinds.py`):

      for %i0 in 0..N { %acc0: f64 = 0.0; for %i1 in 0..D { ... %acc0 = sum %acc0, %v } }

- otherwise (a column sum): the output (or an f64 copy of it) is filled with the identity
  and updated in the natural loop order, so the inner loop stays contiguous.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Op
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS, extreme_identity
from reverie.compiler.ir.views import ArgReduceOp, GenericOp, ReduceOp
from reverie.compiler.loops.ir import (
    Accumulate,
    Accumulator,
    ArgUpdate,
    Const,
    Operand,
    Store,
    View,
    row_major_strides,
)
from reverie.compiler.to_loops.emitter import Emitter

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering

def identity(kind: str, dtype: str) -> Const:
    """The starting value of a sum/prod/max/min (or argmax/argmin) accumulator."""
    value = REDUCE_KINDS[kind].identity(dtype) if kind in REDUCE_KINDS else \
        extreme_identity(kind, dtype)
    return Const(value, dtype)


def accumulator_dtype(kind: str, dtype: str) -> str:
    """f32 sums and products accumulate in f64 (`ir/reduce_kinds.py`)."""
    return REDUCE_KINDS[kind].accumulator_dtype(dtype)


def _merge(rank: int, kept: list[int], kept_index: tuple[Dim, ...], reduced: list[int],
           reduced_index: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """A full index from the kept-axis and reduced-axis loop variables."""
    full = [Dim.const(0)] * rank
    for axis, i in zip(kept, kept_index, strict=True):
        full[axis] = i
    for axis, i in zip(reduced, reduced_index, strict=True):
        full[axis] = i
    return tuple(full)


def _finish(lowering: BlockLowering, op: Op, result: Operand, index: tuple[Dim, ...],
            outer: Emitter) -> None:
    """Bind a rank-0 reduction to its scalar, or store one element of the output."""
    if not op.result.type.rank:
        lowering.env[op.result] = result
        return
    if op.result not in lowering.env:
        lowering.env[op.result] = lowering.buffer_for(op.result)
    outer.stmts.append(Store(lowering.env[op.result], index, result))


def lower_reduce(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """reduce_sum/prod/max/min over `axes`."""
    x, kind = op.operands[0], ReduceOp(op).kind
    axes = sorted(ReduceOp(op).axes)
    shape, dtype = x.type.shape, op.result.type.dtype
    kept = [a for a in range(len(shape)) if a not in axes]
    acc_dtype = accumulator_dtype(kind, dtype)
    if all(k < a for k in kept for a in axes):
        kept_index, outer = em.nest([(Dim.const(0), shape[k]) for k in kept])
        acc = lowering.ctx.var(acc_dtype, "%acc")
        outer.stmts.append(Accumulator(acc, identity(kind, acc_dtype)))
        reduced_index, inner = outer.nest([(Dim.const(0), shape[a]) for a in axes])
        value = lowering.eval.at(x, _merge(len(shape), kept, kept_index, axes, reduced_index),
                                 inner)
        if acc_dtype != dtype:
            value = inner.let("cast", (value,), acc_dtype)
        inner.stmts.append(Accumulate(acc, kind, value))
        result = acc if acc_dtype == dtype else outer.let("cast", (acc,), dtype)
        _finish(lowering, op, result, kept_index, outer)
        return
    out = lowering.buffer_for(op.result)
    acc = out if acc_dtype == dtype else View.of(lowering.ctx.temp(acc_dtype, out.shape))
    em.map_nest(acc, lambda index, body: identity(kind, acc_dtype))
    index, inner = em.nest([(Dim.const(0), d) for d in shape])
    value = lowering.eval.at(x, index, inner)
    if acc_dtype != dtype:
        value = inner.let("cast", (value,), acc_dtype)
    kept_index = tuple(index[k] for k in kept)
    old = inner.load(acc, kept_index)
    combined = inner.let(REDUCE_KINDS[kind].combine, (old, value), acc_dtype)
    inner.stmts.append(Store(acc, kept_index, combined))
    if acc is not out:
        em.map_nest(out, lambda i, body: body.let("cast", (body.load(acc, i),), dtype))
    lowering.env[op.result] = out


def lower_arg_reduce(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """argmax/argmin over one axis or (axis = None) over the flattened tensor."""
    x, axis = op.operands[0], ArgReduceOp(op).axis
    shape, dtype = x.type.shape, x.type.dtype
    size = Dim.const(1)
    for d in shape:
        size = size * d
    em.check(Dim.const(0), size, lowering.ctx.site("empty", op.name))
    axes = list(range(len(shape))) if axis is None else [axis]
    kept = [a for a in range(len(shape)) if a not in axes]
    kept_index, outer = em.nest([(Dim.const(0), shape[k]) for k in kept])
    best = lowering.ctx.var(dtype, "%acc")
    best_index = lowering.ctx.var("i64", "%acc")
    outer.stmts += [Accumulator(best, identity(op.name, dtype)),
                    Accumulator(best_index, Const(0, "i64"))]
    reduced_index, inner = outer.nest([(Dim.const(0), shape[a]) for a in axes])
    full = _merge(len(shape), kept, kept_index, axes, reduced_index)
    position = full[axis] if axis is not None else sum(
        (i * s for i, s in zip(full, row_major_strides(shape), strict=True)), Dim.const(0))
    inner.stmts.append(ArgUpdate(best, best_index, lowering.eval.at(x, full, inner), position,
                                 op.name))
    _finish(lowering, op, best_index, kept_index, outer)


def lower_generic_reduce(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """A reducing `generic` (index notation such as `sum[k](A[i, k] * B[k, j])`)."""
    generic = GenericOp(op)
    kind, dtype = generic.reduce, op.result.type.dtype
    acc_dtype = accumulator_dtype(kind, dtype)
    outs, overs = generic.indices, generic.over
    out_index, outer = em.nest([(Dim.const(0), hi - lo) for _, lo, hi in outs])
    acc = lowering.ctx.var(acc_dtype, "%acc")
    outer.stmts.append(Accumulator(acc, identity(kind, acc_dtype)))
    red_index, inner = outer.nest([(Dim.const(0), hi - lo) for _, lo, hi in overs])
    starts = [lo for _, lo, _ in generic.ranges]
    indices = [lo + i for lo, i in zip(starts, out_index + red_index, strict=True)]
    value = lowering.eval.generic_body(op, indices, inner)
    if acc_dtype != dtype:
        value = inner.let("cast", (value,), acc_dtype)
    inner.stmts.append(Accumulate(acc, kind, value))
    result = acc if acc_dtype == dtype else outer.let("cast", (acc,), dtype)
    _finish(lowering, op, result, out_index, outer)
