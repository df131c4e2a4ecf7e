"""Batching rules of the primitive ops: an op on batched operands, as IR over the batch.

Consumes one primal op, its operands in the batched function (each either unbatched, with
the primal type, or batched: one more leading axis of the batch size B), and emits IR
computing the op for every batch element at once; produces the new results (a result
whose rank grew by one is batched). `batch.py` calls a rule only when some operand is
batched. Every rule is registered in `BATCH_RULES` (a `RuleTable`) under the op's name,
with its batched form in its docstring (`x: [B, …]` is a batched operand, `x` an unbatched
one); `batch.py` imports the other modules that register into it (`batch_control.py`,
`scan_rules.py`).

Most rules move axis attributes by one. Those that need a per-element index (a batched
subscript, matmul with both sides batched, a top-level `read`) become `generic` or
`generic_scatter` loop nests, whose batching rule adds the batch index to the iteration
space: no new ops are needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim, num_elements
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.reduce_kinds import REDUCE_OPS
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import (
    ArgReduceOp,
    ForHistoryOp,
    ForOp,
    GenericScatterOp,
    LoopNestOp,
    ReadOp,
)
from reverie.dsl.ast import NO_SPAN
from reverie.dsl.diagnostics import CompileError, error_at

Flags = list[bool]
BatchRule = Callable[["BatchContext", Op, list[Value], Flags], list[Value]]


@dataclass
class BatchContext:
    """What a rule sees besides its op: where to emit, the batch size, and the pass itself
    for loop bodies (`region(body, params)` batches `body` into a fresh block whose
    parameters are `params`, batched where their rank grew, and returns it with its
    results)."""

    scope: Scope
    size: Dim
    region: Callable[[Block, list[Value]], tuple[Scope, list[Value]]]

    def lift(self, value: Value, batched: bool) -> Value:
        """`value` with the batch axis: broadcast along it if it is not batched yet."""
        return lift(self.scope, self.size, value, batched)


def lift(scope: Scope, size: Dim, value: Value, batched: bool) -> Value:
    """`value` with a leading batch axis of `size`: broadcast along it unless `batched`."""
    if batched:
        return value
    return scope.op("broadcast", [value], {"shape": (size, *value.type.shape)})


BATCH_RULES: RuleTable[str, BatchRule] = RuleTable(
    "batching", "cannot batch '{op}': it has no batching rule")


def _zero() -> Dim:
    return Dim.const(0)


# ---------------------------------------------------------------- elementwise


@BATCH_RULES.register(*ELEMENTWISE)
def _elementwise(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """op(x: [B, …], y) = op(x, broadcast(y, [B, …]))"""
    operands = [ctx.lift(x, f) for x, f in zip(xs, flags, strict=True)]
    return [ctx.scope.op(op.name, operands, dict(op.attrs))]


@BATCH_RULES.register("broadcast")
def _broadcast(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """broadcast(x: [B, s], shape) = broadcast(reshape(x, [B, 1…, s]), [B, shape])"""
    (x,), shape = xs, tuple(op.attrs["shape"])
    padding = (Dim.const(1),) * (len(shape) + 1 - x.type.rank)
    aligned = ctx.scope.op("reshape", [x], {"shape": (ctx.size, *padding, *x.type.shape[1:])})
    return [ctx.scope.op("broadcast", [aligned], {"shape": (ctx.size, *shape)})]


# ---------------------------------------------------------------- reductions


@BATCH_RULES.register(*REDUCE_OPS)
def _reduce(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """reduce(x: [B, …], axes) = reduce(x, axes + 1)"""
    axes = tuple(a + 1 for a in op.attrs["axes"])
    return [ctx.scope.op(op.name, xs, {**op.attrs, "axes": axes})]


@BATCH_RULES.register(*ArgReduceOp.NAMES)
def _arg(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """argmax(x: [B, …], axis) = argmax(x, axis + 1); over all axes, of x as [B, n]"""
    (x,), axis = xs, op.attrs["axis"]
    if axis is None:
        flat = (ctx.size, num_elements(x.type.shape[1:]))
        x, axis = ctx.scope.op("reshape", [x], {"shape": flat}), 0
    return [ctx.scope.op(op.name, [x], {**op.attrs, "axis": axis + 1})]


@BATCH_RULES.register("argsort")
def _argsort(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """argsort(x: [B, …], axis) = argsort(x, axis + 1)"""
    return [ctx.scope.op(op.name, xs, {**op.attrs, "axis": op.attrs["axis"] + 1})]


# ---------------------------------------------------------------- linear algebra


@BATCH_RULES.register("matmul")
def _matmul(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """a: [B, N, K] @ b = reshape(reshape(a, [B·N, K]) @ b); a @ b: [B, K, M] through
    [K, B·M]; both batched: a generic over (B, N, M) reducing K; a batched product (3-D)
    over the batch of both batch axes"""
    s, (a, b), size = ctx.scope, xs, ctx.size
    if op.result.type.rank == 3:
        return [_stacked_matmul(ctx, op, xs, flags)]
    if all(flags):
        return [_as_generic(ctx, op, xs, flags)]
    if flags[0]:
        _, n, k = a.type.shape
        flat = s.op("matmul", [s.op("reshape", [a], {"shape": (size * n, k)}), b])
        return [s.op("reshape", [flat], {"shape": (size, n, b.type.shape[1])})]
    _, k, m = b.type.shape
    wide = s.op("reshape", [s.op("transpose", [b], {"perm": [1, 0, 2]})], {"shape": (k, size * m)})
    product = s.op("reshape", [s.op("matmul", [a, wide])], {"shape": (a.type.shape[0], size, m)})
    return [s.op("transpose", [product], {"perm": [1, 0, 2]})]


def _stacked_matmul(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> Value:
    """a: [B, P, N, K] @ b: [B, P, K, M] = reshape(a as [B·P, N, K] @ b as [B·P, K, M]), an
    unbatched operand broadcast along B first"""
    s, size = ctx.scope, ctx.size
    stacks = [s.op("reshape", [ctx.lift(x, f)],
                   {"shape": (size * x_type.shape[0], *x_type.shape[1:])})
              for x, f, x_type in zip(xs, flags, (v.type for v in op.operands), strict=True)]
    product = s.op("matmul", stacks)
    return s.op("reshape", [product], {"shape": (size, *op.result.type.shape)})


def _generic_matmul(op: Op) -> Op:
    """The unbatched matmul `op` as a generic: C[i, j] = sum[k](A[i, k] · B[k, j])."""
    a, b = op.operands
    (n, k), m = a.type.shape, b.type.shape[1]
    names = [Value(scalar("i64"), name=c) for c in "ijk"]
    i, j, kk = names
    params = [Value(a.type, name="lhs"), Value(b.type, name="rhs")]
    scope = Scope(Block(params=names + params))
    direct = {"modes": ("direct", "direct"), "label": "matmul"}
    left = scope.op("read", [params[0], i, kk], direct)
    right = scope.op("read", [params[1], kk, j], direct)
    scope.block.results = [scope.mul(left, right)]
    attrs = {"indices": (("i", _zero(), n), ("j", _zero(), m)), "reduce": "sum",
             "over": (("k", _zero(), k),)}
    return Op("generic", list(op.operands), attrs, list(op.results), [scope.block], op.span)


# ---------------------------------------------------------------- shape ops


@BATCH_RULES.register("transpose")
def _transpose(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """transpose(x: [B, …], p) = transpose(x, [0, p + 1])"""
    perm = [0] + [p + 1 for p in op.attrs["perm"]]
    return [ctx.scope.op("transpose", xs, {**op.attrs, "perm": perm})]


@BATCH_RULES.register("reshape")
def _reshape(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """reshape(x: [B, …], s) = reshape(x, [B, s])"""
    return [ctx.scope.op("reshape", xs, {"shape": (ctx.size, *op.attrs["shape"])})]


@BATCH_RULES.register("slice")
def _slice(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """slice(x: [B, …]) = slice(x) with the whole batch axis in front"""
    a = op.attrs
    attrs = {"starts": (_zero(), *a["starts"]), "stops": (ctx.size, *a["stops"]),
             "steps": (1, *a["steps"])}
    return [ctx.scope.op("slice", xs, attrs)]


@BATCH_RULES.register("pad")
def _pad(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """pad(x: [B, …]) = pad(x) with the whole batch axis in front"""
    a = op.attrs
    attrs = {"shape": (ctx.size, *a["shape"]), "starts": (_zero(), *a["starts"]),
             "steps": (1, *a["steps"])}
    return [ctx.scope.op("pad", xs, attrs)]


@BATCH_RULES.register("concat")
def _concat(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """concat(x: [B, …], y, axis) = concat(x, broadcast(y), axis + 1)"""
    parts = [ctx.lift(x, f) for x, f in zip(xs, flags, strict=True)]
    return [ctx.scope.op("concat", parts, {**op.attrs, "axis": op.attrs["axis"] + 1})]


@BATCH_RULES.register("roll")
def _roll(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """roll(x: [B, …], k, axis) = roll(x, k, axis + 1)"""
    return [ctx.scope.op("roll", xs, {**op.attrs, "axis": op.attrs["axis"] + 1})]


@BATCH_RULES.register("dynamic_index")
def _dynamic_index(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """x: [B, …][i] = x[:, i]; with i: [B], a generic reading x[b, …, i[b], …] (checked)"""
    if flags[1]:
        return [_as_generic(ctx, op, xs, flags)]
    return [ctx.scope.op("dynamic_index", xs, {**op.attrs, "axis": op.attrs["axis"] + 1})]


def _generic_dynamic_index(op: Op) -> Op:
    """The unbatched `x[i]` as a generic reading x at i on `axis` (a checked read)."""
    x, index = op.operands
    axis, label = op.attrs["axis"], op.attrs["label"]
    kept = [d for a, d in enumerate(x.type.shape) if a != axis]
    names = [Value(scalar("i64"), name=f"i{a}") for a in range(len(kept))]
    params = [Value(x.type, name="x"), Value(index.type, name="index")]
    scope = Scope(Block(params=names + params))
    position = params[1] if index.type.dtype == "i64" else \
        scope.op("cast", [params[1]], {"dtype": "i64"})
    subscripts = names[:axis] + [position] + names[axis:]
    modes = tuple("checked" if a == axis else "direct" for a in range(x.type.rank))
    scope.block.results = [scope.op("read", [params[0], *subscripts],
                                    {"modes": modes, "label": label})]
    attrs = {"indices": tuple((n.name, _zero(), d) for n, d in zip(names, kept, strict=True))}
    return Op("generic", list(op.operands), attrs, list(op.results), [scope.block], op.span)


@BATCH_RULES.register("dynamic_scatter")
def _dynamic_scatter(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """scatter(g: [B, …], i) = scatter(g, i) along axis + 1; with i: [B], a
    generic_scatter writing g[b, …] at (b, …, i[b], …) (checked)"""
    if flags[1]:
        return [_as_generic(ctx, op, xs, flags)]
    attrs = {**op.attrs, "shape": (ctx.size, *op.attrs["shape"]), "axis": op.attrs["axis"] + 1}
    return [ctx.scope.op("dynamic_scatter", xs, attrs)]


def _generic_dynamic_scatter(op: Op) -> Op:
    """The unbatched scatter as a generic_scatter over g's elements, placed at i on `axis`."""
    g, index = op.operands
    axis, shape = op.attrs["axis"], tuple(op.attrs["shape"])
    names = [Value(scalar("i64"), name=f"i{a}") for a in range(g.type.rank)]
    params = [Value(g.type, name="g"), Value(index.type, name="index")]
    scope = Scope(Block(params=names + params))
    position = params[1] if index.type.dtype == "i64" else \
        scope.op("cast", [params[1]], {"dtype": "i64"})
    value = scope.op("read", [params[0], *names],
                     {"modes": ("direct",) * g.type.rank, "label": op.attrs["label"]})
    scope.block.results = names[:axis] + [position] + names[axis:] + [value]
    attrs = {"shape": shape,
             "indices": tuple((n.name, _zero(), d) for n, d in zip(names, g.type.shape,
                                                                     strict=True)),
             "modes": tuple("checked" if a == axis else "direct" for a in range(len(shape))),
             "label": op.attrs["label"]}
    return Op("generic_scatter", list(op.operands), attrs, list(op.results), [scope.block],
              op.span)


@BATCH_RULES.register("read")
def _read(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """read(x, i…) outside a loop nest = a generic over B of the read at element b"""
    return [_as_generic(ctx, op, xs, flags)]


def _generic_read(op: Op) -> Op:
    """A top-level `read` as a generic with no indices whose body is the read."""
    params = [Value(v.type, name="x" if k == 0 else f"i{k}") for k, v in enumerate(op.operands)]
    scope = Scope(Block(params=params))
    scope.block.results = [scope.op("read", params, dict(op.attrs))]
    return Op("generic", list(op.operands), {"indices": ()}, list(op.results), [scope.block],
              op.span)


AS_GENERIC: dict[str, Callable[[Op], Op]] = {
    "matmul": _generic_matmul, "dynamic_index": _generic_dynamic_index,
    "dynamic_scatter": _generic_dynamic_scatter, "read": _generic_read}


def _as_generic(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> Value:
    """Batch `op` by rewriting it as an (unbatched) loop nest and batching that."""
    (result,) = _structured(ctx, AS_GENERIC[op.name](op), xs, flags)
    return result


# ---------------------------------------------------------------- loop nests


def _fresh_index_name(op: Op) -> str:
    """`b`, or `b1`, `b2`, … : a batch index name the loop nest does not use yet."""
    taken = {name for name, _, _ in LoopNestOp(op).ranges}
    name, k = "b", 0
    while name in taken:
        k += 1
        name = f"b{k}"
    return name


@BATCH_RULES.register("generic", "generic_scatter")
def _structured(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """generic over I reading x: [B, …] = generic over (b, I) reading x[b, …]; a batched
    scalar operand is read at b once; generic_scatter also writes at b"""
    nest = LoopNestOp(op)
    body = nest.body
    index = Value(scalar("i64"), name=_fresh_index_name(op))
    indices = [Value(p.type, name=p.name) for p in nest.index_params]
    params = [Value(x.type, name=p.name) for p, x in zip(nest.operand_params, xs, strict=True)]
    scope = Scope(Block(params=[index, *indices, *params]))
    values: dict[Value, Value] = dict(zip(nest.index_params, indices, strict=True))
    batched: dict[Value, Value] = {}
    for old, new, flag in zip(nest.operand_params, params, flags, strict=True):
        if not flag:
            values[old] = new
            continue
        batched[old] = new
        if old.type.rank == 0:
            values[old] = scope.op("read", [new, index], {"modes": ("direct",), "label": "batch"})
    for inner in body.ops:
        scope.span = inner.span
        if inner.name == "read" and inner.operands[0] in batched:
            subscripts = [values[v] for v in inner.operands[1:]]
            attrs = {**inner.attrs, "modes": ("direct", *ReadOp(inner).modes)}
            new = scope.emit("read", [batched[inner.operands[0]], index, *subscripts], attrs)
        else:
            if any(v not in values for v in inner.operands):
                raise error_at(inner.span or NO_SPAN, f"cannot batch a '{op.name}' whose body "
                               f"uses a batched tensor in '{inner.name}'", CompileError)
            new = scope.emit(inner.name, [values[v] for v in inner.operands], dict(inner.attrs),
                             [copy_block(r) for r in inner.regions])
        values.update(zip(inner.results, new.results, strict=True))
    results = [values[v] for v in body.results]
    batch_range = (index.name, _zero(), ctx.size)
    attrs = {**op.attrs, "indices": (batch_range, *op.attrs["indices"])}
    if op.name == "generic_scatter":
        scatter = GenericScatterOp(op)
        results = [index, *results]
        attrs.update(shape=(ctx.size, *scatter.shape), modes=("direct", *scatter.modes))
    scope.block.results = results
    return [ctx.scope.op(op.name, xs, attrs, [scope.block])]


# ---------------------------------------------------------------- loops


def dependent_values(block: Block, flags: Sequence[bool]) -> set[Value]:
    """The values of `block` that depend on a flagged parameter (through any op)."""
    found = {p for p, f in zip(block.params, flags, strict=True) if f}
    for op in block.ops:
        if any(v in found for v in op.operands):
            found.update(op.results)
    return found


def batched_states(op: Op, flags: Flags) -> Flags:
    """Which carried states of a loop are batched: a fixed point over the loop body."""
    loop = ForOp(op)
    _, states, invariants = loop.split_operands(flags)
    while True:
        inner = dependent_values(loop.body, [False] + states + invariants)
        updated = [s or r in inner for s, r in zip(states, loop.body.results, strict=True)]
        if updated == states:
            return states
        states = updated


@BATCH_RULES.register("for", "for_history")
def _loop(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """for over u: [B, …] = for over the batched state (bounds shared by the batch);
    for_history's histories [T, B, …] are transposed to [B, T, …]"""
    if flags[0] or flags[1]:
        return _masked_loop(ctx, op, xs, flags)
    loop = ForOp(op)
    body = loop.body
    states = batched_states(op, flags)
    bounds, init_xs, invariant_xs = loop.split_operands(xs)
    inits = [ctx.lift(x, f) if s else x for x, s, f in
             zip(init_xs, states, loop.split_operands(flags)[1], strict=True)]
    operands = [*bounds, *inits, *invariant_xs]
    index = Value(loop.index_param.type, name=loop.index_param.name)
    params = [index] + [Value(x.type, name=p.name)
                        for p, x in zip(body.params[1:], operands[2:], strict=True)]
    scope, results = ctx.region(body, params)
    scope.block.results = [lift(scope, ctx.size, r, not s or r.type.rank != old.type.rank)
                           for r, old, s in zip(results, body.results, states, strict=True)]
    new = ctx.scope.emit(op.name, operands, dict(op.attrs), [scope.block])
    if op.name == "for":
        return list(new.results)
    new_loop = ForOp(new)
    histories = [ctx.scope.op("transpose", [h], {"perm": [1, 0, *range(2, h.type.rank)]})
                 if s else h for h, s in zip(new_loop.histories, states, strict=True)]
    return new_loop.final_states + histories


def _masked_loop(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """for t in lo: [B]..hi: [B] = for t in min(lo)..max(hi) updating element b of every
    (batched) state only where lo[b] <= t < hi[b]; for_history (lo shared) also zeroes
    the history rows of element b from iteration hi[b] on"""
    if op.name == "for_history" and flags[0]:
        raise error_at(op.span or NO_SPAN, "cannot batch a 'for_history' whose start differs "
                       "between batch elements", CompileError)
    s, loop = ctx.scope, ForOp(op)
    body = loop.body
    bounds, init_xs, invariant_xs = loop.split_operands(xs)
    bound_flags, init_flags, _ = loop.split_operands(flags)
    lo, hi = (ctx.lift(x, f) for x, f in zip(bounds, bound_flags, strict=True))
    inits = [ctx.lift(x, f) for x, f in zip(init_xs, init_flags, strict=True)]
    index = Value(loop.index_param.type, name=loop.index_param.name)
    states = [Value(x.type, name=p.name)
              for p, x in zip(loop.state_params, inits, strict=True)]
    invariants = [Value(x.type, name=p.name)
                  for p, x in zip(loop.invariant_params, invariant_xs, strict=True)]
    scope, results = ctx.region(body, [index, *states, *invariants])
    bounds = [Value(lo.type, name="lo"), Value(hi.type, name="hi")]
    scope.block.params += bounds
    scope.defined.update(bounds)
    t = scope.op("broadcast", [index], {"shape": (ctx.size,)})
    running = scope.op("and", [scope.op("ge", [t, bounds[0]]), scope.op("lt", [t, bounds[1]])])
    scope.block.results = [
        scope.select(spread_mask(scope, running, state.type.shape),
                     lift(scope, ctx.size, new, new.type.rank != old.type.rank), state)
        for new, old, state in zip(results, body.results, states, strict=True)]
    first = s.op("reduce_min", [lo], {"axes": (0,)})
    last = s.op("reduce_max", [hi], {"axes": (0,)})
    operands = [first, last, *inits, *invariant_xs, lo, hi]
    new = ForOp(s.emit(op.name, operands, dict(op.attrs), [scope.block]))
    if op.name == "for":
        return list(new.op.results)
    history = ForHistoryOp(op)
    rows = _rows_in_range(ctx, xs[0], hi, history.rows, history.stride)
    histories = []
    for h in new.histories:
        h = s.op("transpose", [h], {"perm": [1, 0, *range(2, h.type.rank)]})
        histories.append(s.select(spread_mask(s, rows, h.type.shape), h, s.zeros(h.type)))
    return new.final_states + histories


def spread_mask(s: Scope, mask: Value, shape: tuple[Dim, ...]) -> Value:
    """A bool mask over the leading axes of `shape`, broadcast along the others."""
    ones = (Dim.const(1),) * (len(shape) - mask.type.rank)
    aligned = s.op("reshape", [mask], {"shape": (*mask.type.shape, *ones)})
    return s.op("broadcast", [aligned], {"shape": shape})


def _rows_in_range(ctx: BatchContext, lo: Value, hi: Value, rows: Dim, stride: int) -> Value:
    """bool[B, rows]: whether history row r of element b was stored, lo + r·stride < hi[b]."""
    b, r = Value(scalar("i64"), name="b"), Value(scalar("i64"), name="r")
    params = [Value(lo.type, name="lo"), Value(hi.type, name="hi")]
    body = Scope(Block(params=[b, r, *params]))
    end = body.op("read", [params[1], b], {"modes": ("direct",), "label": "hi"})
    step = body.op("mul", [r, body.const(stride, scalar("i64"))])
    body.block.results = [body.op("lt", [body.add(params[0], step), end])]
    attrs = {"indices": (("b", _zero(), ctx.size), ("r", _zero(), rows))}
    return ctx.scope.op("generic", [lo, hi], attrs, [body.block])
