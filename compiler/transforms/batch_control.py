"""Batching rules of the control-flow ops `if` and `while` (docs/language.md §11.1), as JAX's
`vmap` of `cond` and `while_loop` does it.

`if` with an unbatched condition stays an `if`: both branches are batched, and a result
batched in either branch is batched in both. With a batched condition c: [B] each batch
element may take a different branch, so both branches run on the whole batch and each
result is selected element by element:

    y: [B, …] = select(c, then(x), else(x))

`while` with a condition that does not depend on batched values stays a `while` over the
batched states. Otherwise it runs until no element's condition holds, and element b's
states change only while its own condition holds (a per-element mask m = cond(u)):

    while any(cond(u)) { u = select(cond(u), body(u), u) }

so each element ends in the state its own loop ends in. A counted `while` (reverse mode's,
`reverse_control.py`) then counts each element's iterations: its count becomes [B].
Running both branches (and idle elements of a loop) evaluates code whose results are
discarded: a bounds-checked subscript there still raises, as under JAX.

A `trip_dim` of a batched count n: [B] gives the largest count the trip dimension, so one
history of that many rows holds every element's states: n' = minimum(n, trip_dim(max n)).
"""

from __future__ import annotations

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import IfOp, WhileOp
from reverie.compiler.transforms.batch_rules import (
    BATCH_RULES,
    BatchContext,
    Flags,
    dependent_values,
    lift,
    spread_mask,
)

I64 = scalar("i64")


def _batched(new: Value, old: Value) -> bool:
    return new.type.rank != old.type.rank


@BATCH_RULES.register("if")
def _if(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """if c { y = then(x) } else { y = else(x) } with x: [B, …]: an `if` of the batched
    branches; with c: [B], y: [B, …] = select(c, then(x), else(x)) (both branches run)"""
    view = IfOp(op)
    branches = [ctx.region(b, [Value(x.type, name=p.name) for p, x in
                               zip(b.params, xs[1:], strict=True)])
                for b in (view.then, view.orelse)]
    if flags[0]:  # a batched condition: every result is chosen element by element
        s = ctx.scope
        for scope, results in branches:
            scope.block.results = results
        then, orelse = ([lift(s, ctx.size, v, _batched(v, old)) for v, old in
                         zip(s.clone(scope.block, xs[1:]), op.results, strict=True)]
                        for scope, _ in branches)
        return [s.select(spread_mask(s, xs[0], t.type.shape), t, e)
                for t, e in zip(then, orelse, strict=True)]
    batched = [any(_batched(r[k], old) for _, r in branches)
               for k, old in enumerate(op.results)]
    for scope, results in branches:
        scope.block.results = [lift(scope, ctx.size, r, _batched(r, old)) if b else r
                               for r, old, b in zip(results, op.results, batched, strict=True)]
    return list(ctx.scope.emit("if", xs, {}, [scope.block for scope, _ in branches]).results)


def while_batching(op: Op, flags: Flags) -> tuple[Flags, bool]:
    """Which states of a `while` are batched (a fixed point over its body), and whether its
    condition is (then every state is)."""
    loop = WhileOp(op)
    states, invariants = loop.split(flags)
    while True:
        inner = dependent_values(loop.body, states + invariants)
        updated = [s or r in inner for s, r in zip(states, loop.body.results, strict=True)]
        if updated == states:
            break
        states = updated
    condition = loop.before.results[0] in dependent_values(loop.before, states + invariants)
    return ([True] * len(states) if condition else states), condition


@BATCH_RULES.register("while")
def _while(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """while cond(u) { u = body(u) } with u: [B, …]: the same loop over the batch when cond
    is unbatched; else while any(cond(u)) { u = select(cond(u), body(u), u) }"""
    loop, s = WhileOp(op), ctx.scope
    states, condition = while_batching(op, flags)
    init_xs, invariant_xs = loop.split(xs)
    inits = [ctx.lift(x, f) if b else x for x, b, f in
             zip(init_xs, states, loop.split(flags)[0], strict=True)]
    operands = inits + invariant_xs
    regions = [ctx.region(r, [Value(x.type, name=p.name) for p, x in
                              zip(r.params, operands, strict=True)])
               for r in (loop.before, loop.body)]
    (before, (cond,)), (body, results) = regions
    before.block.results, body.block.results = [cond], results
    if not condition:
        body.block.results = [lift(body, ctx.size, r, not b or _batched(r, old))
                              for r, old, b in zip(results, loop.body.results, states,
                                                   strict=True)]
        return list(s.emit("while", operands, dict(op.attrs),
                           [before.block, body.block]).results)
    return _masked_while(ctx, op, operands, before.block, body.block)


def _masked_while(ctx: BatchContext, op: Op, operands: list[Value], before: Block,
                  body: Block) -> list[Value]:
    """The loop over every element until none runs; element b's states (and, for a counted
    loop, its own trip count) change only while cond(u)[b] holds."""
    loop, s = WhileOp(op), ctx.scope
    carried, counted = loop.carried, loop.counted
    states, invariants = loop.split(operands)
    if counted:
        states.append(s.zeros(I64.with_shape((ctx.size,))))
    operands = states + invariants

    def params() -> list[Value]:
        return [Value(v.type, name=p.name) for v, p in zip(operands, [
            *loop.before.params[:carried], *([Value(I64, name="count")] * counted),
            *loop.before.params[carried:]], strict=True)]

    def running(scope: Scope, values: list[Value]) -> Value:
        """cond(u): [B] for the current states (the count is not a parameter of cond)."""
        (mask,) = scope.clone(before, values[:carried] + values[carried + counted:])
        return mask

    check = Scope(Block(params=params()))
    mask = running(check, check.block.params)
    number = check.op("cast", [mask], {"dtype": "i64"})
    check.block.results = [check.op("gt", [check.op("reduce_max", [number], {"axes": (0,)}),
                                           check.zeros(I64)])]
    step = Scope(Block(params=params()))
    values = step.block.params
    mask = running(step, values)
    new = step.clone(body, values[:carried] + values[carried + counted:])
    new = [lift(step, ctx.size, v, _batched(v, old))
           for v, old in zip(new, loop.body.results, strict=True)]
    if counted:
        new.append(step.add(values[carried], step.op("cast", [mask], {"dtype": "i64"})))
    step.block.results = [step.select(spread_mask(step, mask, v.type.shape), v, old)
                          for v, old in zip(new, values[:carried + counted], strict=True)]
    attrs = {"carried": carried + counted, "limit": loop.limit}
    return list(s.emit("while", operands, attrs, [check.block, step.block]).results)


@BATCH_RULES.register("trip_dim")
def _trip_dim(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """trip_dim n with n: [B]: the dimension holds the largest count, each element keeps
    its own: minimum(n, broadcast(trip_dim(max(max_b n_b, 0))))"""
    s, (counts,) = ctx.scope, xs
    largest = s.op("maximum", [s.op("reduce_max", [counts], {"axes": [0]}), s.zeros(I64)])
    bound = s.op("trip_dim", [largest], dict(op.attrs))
    return [s.op("minimum", [counts, lift(s, ctx.size, bound, False)])]
