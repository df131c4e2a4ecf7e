"""VJP rule of the loops `for` and `for_history`, and the active primal loops it needs.

The reverse sweep is a `for` loop visiting t = hi − 1 down to lo; each step re-runs the
body on the state it started from and transposes it, carrying the state's adjoint and
accumulating the adjoints of loop invariants:

    x̄_t = (∂ body/∂x)ᵀ x̄_{t+1}  for t = hi − 1 … lo,   w̄ = Σ_t (∂ body/∂w)ᵀ x̄_{t+1}.

Where the starting states come from (T = max(hi − lo, 0), the trip count):
- stored (default): when T is a dimension expression (bounds built from literals,
  dimensions and i64 arguments), the primal loop is emitted as `for_history` with
  `rows = T` (clamped at 0 unless T is an axis length) and the reverse step reads row
  t − lo; an empty range stores no rows and reverses no steps;
- checkpointed (`checkpoint=True`, T a dimension expression): one checkpoint every
  S = ⌈√T⌉ iterations (at most S rows), then, segment by segment from the last, the
  segment re-run from its checkpoint as a `for_history` of S rows and reversed as above:
  O(√T) states, about 2T body evaluations, gradients bit-identical to the stored ones.
  A constant T gives a constant S, and the primal loop stores the checkpoints itself
  (`for_history` with `stride = S`); otherwise S is the dimension `ceil_sqrt(T)`,
  computed at call time, and the sweep first runs the loop once more, as a
  `for_history` over its segments, to store the checkpoints;
- any other trip count (an i32 argument, a computed integer, a `while`'s): the count
  T = max(hi − lo, 0) gets a trip dimension (`trip_dim`, `ir/capacity.py`: a dimension
  no argument binds, whose size the runner grows until T fits) and hi becomes lo + T, so
  T is a dimension expression and the two strategies above apply as they are.

So every loop the reverse sweep meets has a dimension trip count (`loop_forward` gives
one to the loops it emits), and no state is ever recomputed from the loop's start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from reverie.compiler.ir.capacity import fresh_trip_symbol, is_trip_symbol
from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim, ceil_sqrt, nonnegative
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import ForHistoryOp, ForOp
from reverie.compiler.transforms.reverse_rules import VJP_RULES, Bars, RuleContext

I64 = scalar("i64")


# ---------------------------------------------------------------- loops: forward


def static_int(value: Value) -> Dim | None:
    """The Dim an integer scalar equals, when it is built from literals and dimensions."""
    op = value.op
    if op is None or not value.type.is_int or value.type.rank:
        return None
    if op.name == "const":
        return Dim.const(op.attrs["value"])
    if op.name in ("dim", "trip_dim"):
        return op.attrs["dim"]
    if op.name == "cast":
        return static_int(op.operands[0])
    if op.name in ("add", "sub", "mul", "floordiv"):
        a, b = (static_int(v) for v in op.operands)
        if a is None or b is None:
            return None
        if op.name == "floordiv":
            return a // b if b.is_const and b.value > 0 else None
        return a + b if op.name == "add" else a - b if op.name == "sub" else a * b
    return None


def _axis_names(scope: Scope) -> set[str]:
    """Dimension names that size a whole axis of a parameter of the function being built:
    bound to an array's length, so never negative."""
    while scope.parent is not None:
        scope = scope.parent
    return {d.symbol for p in scope.block.params for d in p.type.shape if d.symbol}


def _static_trip(scope: Scope, lo: Value, hi: Value) -> Dim | None:
    """The trip count max(hi − lo, 0) as a Dim, or None."""
    if hi.op is not None and hi.op.name == "add" and hi.op.operands[0] is lo and \
            hi.op.operands[1].op is not None and hi.op.operands[1].op.name == "trip_dim":
        return hi.op.operands[1].op.attrs["dim"]  # hi = lo + T, T given a trip dimension
    a, b = static_int(lo), static_int(hi)
    if a is None or b is None:
        return None
    trips = {symbol for symbol in b.symbols() if is_trip_symbol(symbol)}
    return nonnegative(b - a, _axis_names(scope) | trips)


def _taken_trip_symbols(scope: Scope) -> set[str]:
    """The trip dimensions the function being built already uses (its ops so far, their
    regions included, and every type they mention). A region still being built is not
    seen, so two loops there may share one, which is correct (`ir/capacity.py`)."""
    while scope.parent is not None:
        scope = scope.parent
    taken = set()
    for op in scope.block.walk():
        dims = [op.attrs["dim"]] if op.name == "trip_dim" else []
        dims += [d for v in op.results for d in v.type.shape]
        taken.update(s for d in dims for s in d.symbols() if is_trip_symbol(s))
    return taken


def trip_count(scope: Scope, count: Value) -> Value:
    """`count` (an i64 ≥ 0 known only at run time) as `trip_dim` of a fresh trip dimension,
    so a history can be sized by it (`ir/capacity.py`)."""
    return scope.op("trip_dim", [count], {"dim": _fresh_trip_dim(scope)})


def _fresh_trip_dim(scope: Scope) -> Dim:
    """A trip dimension the function being built does not use yet."""
    return Dim.sym(fresh_trip_symbol(_taken_trip_symbols(scope)))


def loop_forward(scope: Scope, op: Op, operands: list[Value], checkpoint: bool) -> Op:
    """Emit an active primal loop so the reverse sweep finds its states (module docstring)."""
    trip = _static_trip(scope, operands[0], operands[1])
    if trip is None:  # a run-time count: hi = lo + T with T given a trip dimension
        lo, hi = operands[:2]
        trip = _fresh_trip_dim(scope)
        count = scope.op("maximum", [scope.sub(hi, lo), scope.zeros(I64)])
        counted = scope.op("trip_dim", [count], {"dim": trip})
        operands = [lo, scope.add(lo, counted), *operands[2:]]
    body = [copy_block(ForOp(op).body)]
    if not checkpoint:
        return scope.emit("for_history", operands, {**op.attrs, "rows": trip, "stride": 1}, body)
    if trip.is_const and trip.value > 0:
        stride = math.isqrt(trip.value - 1) + 1
        rows = Dim.const(-(-trip.value // stride))
        return scope.emit("for_history", operands, {**op.attrs, "rows": rows, "stride": stride},
                          body)
    return scope.emit("for", operands, dict(op.attrs), body)


# ---------------------------------------------------------------- loops: reverse


@dataclass
class Loop:
    """A loop op under transposition: its bounds, operands, body and active states."""

    op: Op
    lo: Value
    hi: Value
    inits: list[Value]
    invariants: list[Value]
    states_active: list[bool]
    invariants_active: list[bool]

    @property
    def body(self) -> Block:
        return ForOp(self.op).body

    def run(self, s: Scope, lo: Value, hi: Value, states: list[Value]) -> list[Value]:
        """Emit the loop from `states` over iterations lo..hi; the states it ends in."""
        return s.emit("for", [lo, hi, *states, *self.invariants], {"carried": len(states)},
                      [copy_block(self.body)]).results

    def history(self, s: Scope, lo: Value, hi: Value, states: list[Value],
                rows: Dim) -> list[Value]:
        """Emit the loop over lo..hi as a for_history of `rows` rows; its histories."""
        n = len(states)
        op = s.emit("for_history", [lo, hi, *states, *self.invariants],
                    {"carried": n, "rows": rows, "stride": 1}, [copy_block(self.body)])
        return op.results[n:]

    def checkpoints(self, s: Scope, length: Value, count: Value, rows: Dim) -> list[Value]:
        """Emit the loop as `count` segments of `length` iterations, a for_history over the
        segments (capacity `rows`): row r of each history is the state segment r starts at."""
        n = len(self.inits)
        r = Value(I64, name="segment")
        states = [Value(v.type, name=v.name) for v in self.inits]
        block = Block(params=[r, *states])
        inner = s.child(block)
        start = inner.add(self.lo, inner.mul(r, length))
        stop = inner.op("minimum", [inner.add(start, length), self.hi])
        block.results = self.run(inner, start, stop, states)
        op = s.emit("for_history", [s.zeros(I64), count, *self.inits, *inner.outer_operands()],
                    {"carried": n, "rows": rows, "stride": 1}, [block])
        return op.results[n:]


@dataclass
class LoopBars:
    """Adjoints carried by a reverse loop: one per active state and per active invariant."""

    states: list[Value | None]
    invariants: list[Value | None]

    def values(self) -> list[Value]:
        return [v for v in self.states + self.invariants if v is not None]

    def rebind(self, values: list[Value]) -> LoopBars:
        """The same layout filled, in order, with `values`."""
        it = iter(values)
        return LoopBars([None if v is None else next(it) for v in self.states],
                        [None if v is None else next(it) for v in self.invariants])


def _history_rows(s: Scope, histories: list[Value], row: Value) -> list[Value]:
    """Row `row` of each history."""
    return [s.op("dynamic_index", [h, row], {"axis": 0, "label": "history"}) for h in histories]


def _row(s: Scope, t: Value, lo: Value, history: Value) -> Value:
    """The row of iteration t in `history`, t − lo. A history sized by a trip dimension
    (a count that batching may make per element) is read at max(t − lo, 0), so a batch
    element whose loop already ended (its step masked, `batch_rules.py`) reads row 0."""
    row = s.sub(t, lo)
    if any(is_trip_symbol(symbol) for symbol in history.type.shape[0].symbols()):
        row = s.op("maximum", [row, s.zeros(I64)])
    return row


def _rows(histories: list[Value], lo: Value) -> Callable[[Scope, Value], list[Value]]:
    """States at iteration t read from histories whose row 0 is iteration `lo`."""
    if not histories:
        return lambda s, t: []
    return lambda s, t: _history_rows(s, histories, _row(s, t, lo, histories[0]))


@VJP_RULES.register("for", "for_history")
def loop_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d for: a reverse loop t = hi − 1 … lo; each step re-runs the body on its starting state
    and pulls the new state's adjoint back to the old state and the invariants"""
    view, s = ForOp(op), ctx.scope
    n = view.carried
    loop = Loop(op, view.lo, view.hi, view.inits, view.invariants,
                ctx.state_activity(op, ctx.wants), view.split_operands(ctx.wants)[2])
    history_bars = bars[n:] or [None] * n
    carry = LoopBars(
        [(bar or s.zeros(v.type)) if active else None
         for bar, v, active in zip(bars[:n], loop.inits, loop.states_active, strict=True)],
        [s.zeros(v.type) if active else None
         for v, active in zip(loop.invariants, loop.invariants_active, strict=True)])
    if op.name == "for" or ForHistoryOp(op).stride > 1:
        carry = _reverse_segments(ctx, loop, carry, history_bars)
    else:
        carry = _reverse_steps(ctx, loop, loop.lo, loop.hi, carry,
                               _rows(view.histories, loop.lo), history_bars)
    return [None, None, *carry.states, *carry.invariants]


def _reverse_steps(ctx: RuleContext, loop: Loop, lo: Value, hi: Value, carry: LoopBars,
                   state_at: Callable[[Scope, Value], list[Value]],
                   history_bars: Bars | None = None) -> LoopBars:
    """Emit `for k in lo..hi` transposing the body at t = hi − 1 − (k − lo); `state_at` gives
    the state at the start of iteration t; `history_bars` add to it, row t − lo."""
    s, body, view = ctx.scope, loop.body, ForOp(loop.op)
    names = [f"{p.name}_bar" if p.name else None for p in body.params[1:]]
    k = Value(I64, name=f"{view.index_param.name}_rev")
    block = Block(params=[k])
    block.params += [Value(v.type, name=name)
                     for v, name in zip(carry.states + carry.invariants, names, strict=True)
                     if v is not None]
    inner = s.child(block)
    bars = carry.rebind(block.params[1:])
    t = inner.sub(inner.sub(hi, inner.const(1, I64)), inner.sub(k, lo))
    args = [t, *state_at(inner, t), *loop.invariants]
    vjp = ctx.transpose(inner, body, args,
                        [False, *loop.states_active, *loop.invariants_active],
                        [b is not None for b in bars.states], ctx.checkpoint)
    vjp.forward()
    vjp.backward(bars.states)
    states: Bars = []
    for j, (param, bar) in enumerate(zip(view.state_params, bars.states, strict=True)):
        if bar is not None:
            bar = vjp.adjoint(param) or inner.zeros(param.type)
            if history_bars and history_bars[j] is not None:
                (row,) = _history_rows(inner, [history_bars[j]],
                                       _row(inner, t, lo, history_bars[j]))
                bar = inner.add(bar, row)
        states.append(bar)
    invariants: Bars = []
    for param, total in zip(view.invariant_params, bars.invariants, strict=True):
        step = vjp.adjoint(param) if total is not None else None
        invariants.append(total if step is None else inner.add(total, step))
    block.results = LoopBars(states, invariants).values()
    carried = carry.values()
    results = s.emit("for", [lo, hi, *carried, *inner.outer_operands()],
                     {"carried": len(carried)}, [block]).results
    return carry.rebind(results)


@dataclass
class Segments:
    """How a reverse sweep walks a loop in segments: `count` segments of `length` iterations
    (the last may be shorter), row r of `checkpoints` the state segment r starts from, and
    `rows`, the capacity of one segment's history."""

    length: Value
    count: Value
    checkpoints: list[Value]
    rows: Dim


def _segment_count(s: Scope, loop: Loop, length: Value) -> Value:
    """⌈(hi − lo) / length⌉, at most 0 for an empty range."""
    return s.op("floordiv", [s.add(s.sub(loop.hi, loop.lo), s.sub(length, s.const(1, I64))),
                             length])


def _segments(ctx: RuleContext, loop: Loop) -> Segments:
    """The segments of a checkpointed loop."""
    s, op, one = ctx.scope, loop.op, ctx.scope.const(1, I64)
    if op.name == "for_history":  # constant trip count: stride-S checkpoints stored forward
        stride = ForHistoryOp(op).stride
        length = s.const(stride, I64)
        return Segments(length, _segment_count(s, loop, length), ForOp(op).histories,
                        Dim.const(stride))
    trip = _static_trip(s, loop.lo, loop.hi)
    assert trip is not None, "loop_forward gives every reversed loop a dimension trip count"
    rows = ceil_sqrt(trip)  # S = ⌈√T⌉ at call time, checkpoints stored now
    length = s.op("maximum", [s.op("dim", [], {"dim": rows}), one])
    count = _segment_count(s, loop, length)
    return Segments(length, count, loop.checkpoints(s, length, count, rows), rows)


def _reverse_segments(ctx: RuleContext, loop: Loop, carry: LoopBars,
                      history_bars: Bars) -> LoopBars:
    """Reverse the loop segment by segment, last segment first: each segment re-runs from
    its checkpoint as a history of its states, then is reversed."""
    s = ctx.scope
    plan = _segments(ctx, loop)
    length, count = plan.length, plan.count
    segment = Value(I64, name="segment")
    block = Block(params=[segment] + [Value(v.type, name=v.name) for v in carry.values()])
    inner = s.child(block)
    bars = carry.rebind(block.params[1:])
    row = inner.sub(inner.sub(count, inner.const(1, I64)), segment)
    start = inner.add(loop.lo, inner.mul(row, length))
    stop = inner.op("minimum", [inner.add(start, length), loop.hi])
    states = _history_rows(inner, plan.checkpoints, row)
    histories = loop.history(inner, start, stop, states, plan.rows)
    bars = _reverse_steps(replace(ctx, scope=inner), loop, start, stop, bars,
                          _rows(histories, start))
    for j, history_bar in enumerate(history_bars):
        if history_bar is not None and bars.states[j] is not None:
            (checkpoint,) = _history_rows(inner, [history_bar], row)
            bars.states[j] = inner.add(bars.states[j], checkpoint)
    block.results = bars.values()
    carried = carry.values()
    results = s.emit("for", [s.zeros(I64), count, *carried, *inner.outer_operands()],
                     {"carried": len(carried)}, [block]).results
    return carry.rebind(results)
