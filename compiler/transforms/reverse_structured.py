"""VJP rules of the index-notation ops: `generic` and `generic_scatter`.

Index notation (`generic`, docs/language.md §10). The body computes one value v(p) per point
p of the loop nest. Its adjoint copies the body into a new loop nest, seeds v with a
per-point cotangent s(p), and transposes the scalar body; each `read` x[e(p)] is a leaf
whose adjoint r̄(p) is added into x̄ at the same position e(p):
- when e(p) is a permutation of loop indices over whole axes (`A[i, k]` in a matmul), x̄ is
  an ordinary `generic` summing r̄ over the other indices;
- otherwise (gathers `z[n, labels[n]]`, stencils `x[i + j - 1]`, diagonals) it is a
  `generic_scatter`, which drops out-of-range positions of `zero`-mode reads;
- a scalar operand used directly gets the sum of its adjoint over all points.
The seed is ȳ at p's output position for no reduction and `sum`; for `max`/`min` it is ȳ
split evenly among the points equal to the extremum, the NaN points where it is NaN
(`reverse_rules.where_extremal`, like torch.max()); for `prod` it is ȳ
times the product of the other factors, exact when some factors are 0.


Loops (`for`, `for_history`) are in `reverse_loops.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import GenericOp, GenericScatterOp, LoopNestOp, ReadOp
from reverie.compiler.transforms.reverse_rules import (
    VJP_RULES,
    Bars,
    RuleContext,
    product_partials,
    where_extremal,
)

I64 = scalar("i64")
Seed = Callable[[Scope, list[Value], list[Value]], Value]


# ---------------------------------------------------------------- generic


def _output_read(s: Scope, tensor: Value, indices: list[Value], ranges: list) -> Value:
    """`tensor` at the output position of the loop indices (index minus its range start)."""
    positions = [i if lo == Dim.const(0) else s.sub(i, s.op("dim", [], {"dim": lo}))
                 for i, (_, lo, _) in zip(indices, ranges, strict=True)]
    return s.op("read", [tensor, *positions],
                {"modes": ("direct",) * len(positions), "label": "adjoint"})


def _per_point_reduce(ctx: RuleContext, op: Op, reduce: str,
                      per_point: Callable[[Scope, list[Value], Value], Value]) -> Value:
    """A generic over `op`'s loop nest reducing `per_point(scope, indices, v)` by `reduce`."""
    generic = GenericOp(op)
    params = [Value(I64, name=name) for name, _, _ in generic.ranges]
    block = Block(params=list(params))
    inner = ctx.scope.child(block)
    (value,) = inner.clone(generic.body, params + [inner.use(x) for x in op.operands])
    block.results = [per_point(inner, params, value)]
    attrs = {"indices": op.attrs["indices"], "reduce": reduce, "over": op.attrs["over"]}
    return ctx.scope.emit("generic", inner.outer_operands(), attrs, [block]).result


@VJP_RULES.register("generic")
def _generic(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d generic: a read x[e(p)] adds s(p) · ∂v/∂x[e(p)] into x̄[e(p)]; s(p) is ȳ at p's
    output position (shared among maxima, times the other factors of a product)"""
    ybar, y, kind = bars[0], op.result, GenericOp(op).reduce
    out = GenericOp(op).indices

    def at_out(s: Scope, tensor: Value, indices: list[Value]) -> Value:
        return _output_read(s, tensor, indices[:len(out)], out)

    if kind in ("max", "min"):
        def count(s: Scope, indices: list[Value], v: Value) -> Value:
            return where_extremal(s, v, at_out(s, y, indices), s.const(1, v.type))

        share = ctx.scope.div(ybar, _per_point_reduce(ctx, op, "sum", count))

        def seed(s: Scope, indices: list[Value], results: list[Value]) -> Value:
            v = results[0]
            return where_extremal(s, v, at_out(s, y, indices), at_out(s, share, indices))
    elif kind == "prod":
        def is_zero(s: Scope, v: Value) -> Value:
            return s.eq(v, s.zeros(v.type))

        nonzero = _per_point_reduce(ctx, op, "prod", lambda s, _, v: s.select(
            is_zero(s, v), s.const(1, v.type), v))
        zeros = _per_point_reduce(ctx, op, "sum", lambda s, _, v: s.select(
            is_zero(s, v), s.const(1, v.type), s.zeros(v.type)))
        zero_sum = _per_point_reduce(ctx, op, "sum", lambda s, _, v: s.select(
            is_zero(s, v), v, s.zeros(v.type)))

        def seed(s: Scope, indices: list[Value], results: list[Value]) -> Value:
            partial = product_partials(s, results[0], at_out(s, nonzero, indices),
                                       at_out(s, zeros, indices), at_out(s, zero_sum, indices))
            return s.mul(at_out(s, ybar, indices), partial)
    else:
        def seed(s: Scope, indices: list[Value], results: list[Value]) -> Value:
            return at_out(s, ybar, indices)

    return _operand_adjoints(ctx, op, seed)


@VJP_RULES.register("generic_scatter")
def _generic_scatter(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d scatter-add: each point's value v(p) gets ȳ at its position e(p) (0 where the write
    was dropped), pulled back through the body like a generic"""
    ybar, modes = bars[0], GenericScatterOp(op).modes

    def seed(s: Scope, indices: list[Value], results: list[Value]) -> Value:
        return s.op("read", [ybar, *results[:-1]], {"modes": modes, "label": "adjoint"})

    return _operand_adjoints(ctx, op, seed)


def _operand_adjoints(ctx: RuleContext, op: Op, seed: Seed) -> Bars:
    """Sum, per wanted operand, the adjoints of its reads and of its direct (scalar) uses."""
    nest = LoopNestOp(op)
    out: Bars = []
    for x, param, want in zip(op.operands, nest.operand_params, ctx.wants, strict=True):
        parts: list[Value | None] = []
        if want:
            parts = [_read_adjoint(ctx, op, seed, read) for read in nest.body.ops
                     if read.name == "read" and read.operands[0] is param]
            if x.type.rank == 0:
                parts.append(_direct_adjoint(ctx, op, seed, param))
        total = None
        for part in parts:
            if part is not None:
                total = part if total is None else ctx.scope.add(total, part)
        out.append(total)
    return out


def _adjoint_region(ctx: RuleContext, op: Op, seed: Seed,
                    order: list[int]) -> tuple[Block, Scope, Any]:
    """A region over `op`'s loop nest, index parameters in `order`, holding the body and its
    adjoint for the per-point cotangent `seed`: (block, inner scope, BlockVJP)."""
    nest = LoopNestOp(op)
    ranges = nest.ranges
    params = [Value(I64, name=ranges[i][0]) for i in order]
    block = Block(params=list(params))
    inner = ctx.scope.child(block)
    indices = [params[order.index(i)] for i in range(len(ranges))]
    body = nest.body
    args = indices + [inner.use(x) for x in op.operands]
    positions = len(body.results) - 1
    vjp = ctx.transpose(inner, body, args, [False] * len(ranges) + ctx.wants,
                        [False] * positions + [True], ctx.checkpoint, ("read",))
    results = vjp.forward()
    vjp.backward([None] * positions + [seed(inner, indices, results)])
    return block, inner, vjp


def _read_adjoint(ctx: RuleContext, op: Op, seed: Seed, read: Op) -> Value | None:
    """The contribution of one read x[e(p)] to x̄: a generic when e(p) permutes whole-axis
    loop indices, else a generic_scatter."""
    nest, view = LoopNestOp(op), ReadOp(read)
    ranges, index_params = nest.ranges, nest.index_params
    positions, modes = view.subscripts, view.modes
    shape = view.tensor.type.shape
    axes = [next((i for i, p in enumerate(index_params) if p is q), None) for q in positions]
    whole_axes = all(
        mode == "direct" and a is not None and ranges[a][1] == Dim.const(0)
        and ranges[a][2] == size for a, mode, size in zip(axes, modes, shape, strict=True))
    if whole_axes and len(set(axes)) == len(axes):
        rest = [i for i in range(len(ranges)) if i not in axes]
        block, inner, vjp = _adjoint_region(ctx, op, seed, axes + rest)
        bar = vjp.adjoint(read.result)
        if bar is None:
            return None
        block.results = [bar]
        attrs: dict = {"indices": tuple(ranges[a] for a in axes)}
        if rest:
            attrs.update(reduce="sum", over=tuple(ranges[i] for i in rest))
        return ctx.scope.emit("generic", inner.outer_operands(), attrs, [block]).result
    block, inner, vjp = _adjoint_region(ctx, op, seed, list(range(len(ranges))))
    bar = vjp.adjoint(read.result)
    if bar is None:
        return None
    block.results = [vjp.values[p] for p in positions] + [bar]
    attrs = {"shape": shape, "indices": tuple(ranges), "modes": modes, "label": view.label}
    return ctx.scope.emit("generic_scatter", inner.outer_operands(), attrs, [block]).result


def _direct_adjoint(ctx: RuleContext, op: Op, seed: Seed, param: Value) -> Value | None:
    """The adjoint of a scalar operand used directly in the body: summed over all points."""
    ranges = LoopNestOp(op).ranges
    block, inner, vjp = _adjoint_region(ctx, op, seed, list(range(len(ranges))))
    bar = vjp.adjoint(param)
    if bar is None:
        return None
    block.results = [bar]
    attrs = {"indices": (), "reduce": "sum", "over": tuple(ranges)} if ranges else {"indices": ()}
    return ctx.scope.emit("generic", inner.outer_operands(), attrs, [block]).result
