"""JVP rules of the primitive ops: one tangent out per tangents in, keyed by op name.

Consumes one primal op already copied into the JVP function (so its operands and results
are values the rule may use) and the tangents of its operands (`None` where an operand has
a zero tangent, at least one is not `None`); produces one tangent per result (`None` for a
zero tangent). `forward.py` walks the ops and looks rules up in `JVP_RULES` (a
`RuleTable`, whole once `forward.py` has imported `scan_rules.py`, which adds scan's). Every rule
carries its maths in its docstring, with ẋ for the tangent of x. Unary elementwise ops
take theirs from the local derivative of their declaration (`ir/elementwise.py`), the
same one reverse mode builds its rule from.

Values at non-differentiable points match reverse mode and PyTorch (docs/api.md §3): d|x| at 0
is 0, relu'(0) = 0, maximum/minimum ties take the mean of both tangents, reduce_max/min
average the tangents of the entries equal to their result, the NaN ones where it is NaN
(`where_extremal` in `reverse_rules.py`; torch's forward mode gives NaN there, unlike its
reverse mode), reduce_prod is exact with zeros, and pow masks 0 like torch. Ops in
`NON_DIFFERENTIABLE` have no rule: their results never carry a tangent.

Region ops (`generic`, `generic_scatter`, `for`, `for_history`, `if`, `while`) transform
their regions with the same pass (`JvpContext.region`): a tangent generic reads the
operands' tangents where the primal reads the operands; a loop carries each active state's
tangent beside it; an `if` yields its results' tangents from both branches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.elementwise import derivative_rules
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.views import ForOp, GenericOp, IfOp, LoopNestOp, ReduceOp, WhileOp
from reverie.compiler.transforms.reverse_rules import (
    BINARY_PARTIALS,
    LAST_OPERAND_SLOPES,
    NON_DIFFERENTIABLE,
    WINS,
    expand,
    no_parameter_derivative,
    pow_base_slope,
    pow_exponent_masked,
    pow_exponent_slope,
    prod_partials,
    where_extremal,
)

Dots = list[Value | None]
JvpRule = Callable[["JvpContext", Op, Dots], Dots]

__all__ = ["JVP_RULES", "NON_DIFFERENTIABLE", "JvpContext", "JvpRegion", "JvpRule"]


@dataclass
class JvpRegion:
    """The JVP of a region body emitted into a fresh block (`scope.block`): the body's
    results and their tangents as values of that block, and the tangent parameters it
    added after the given ones (one per active parameter, in order)."""

    scope: Scope
    results: list[Value]
    tangents: Dots
    tangent_params: list[Value]


@dataclass
class JvpContext:
    """What a rule sees besides its op: where to emit, and the pass itself for regions.

    `region(body, params, active)` transforms region `body` with its parameters renamed to
    `params`, a tangent parameter added for each `active` one. `tangent_states(op, flags)`
    says which carried states of a loop get tangents. A rule that re-emits the primal op
    in a combined form (loops) stores the new primal results in `primal`.
    """

    scope: Scope
    region: Callable[[Block, list[Value], list[bool]], JvpRegion]
    tangent_states: Callable[[Op, list[bool]], list[bool]]
    primal: list[Value] | None = None


JVP_RULES: RuleTable[str, JvpRule] = RuleTable(
    "forward mode", "cannot differentiate '{op}' in forward mode: it has no JVP rule; wrap "
    "the value in stop_gradient(...) if no derivative should flow through it")


def _or_zeros(s: Scope, dot: Value | None, like: Value) -> Value:
    """`dot`, or zeros of `like`'s type when it is None."""
    return dot if dot is not None else s.zeros(like.type)


def _add(s: Scope, a: Value | None, b: Value | None) -> Value | None:
    """a + b where None stands for zero."""
    if a is None or b is None:
        return a if b is None else b
    return s.add(a, b)


# ---------------------------------------------------------------- elementwise, unary


for _name, _rule in derivative_rules("jvp", "ẏ = f'(x) · ẋ").items():
    JVP_RULES.register(_name)(_rule)


# ---------------------------------------------------------------- elementwise, binary


@JVP_RULES.register("add")
def _add_rule(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = ȧ + ḃ"""
    return [_add(ctx.scope, dots[0], dots[1])]


@JVP_RULES.register("sub")
def _sub(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = ȧ − ḃ"""
    s, (da, db) = ctx.scope, dots
    return [s.neg(db) if da is None else da if db is None else s.sub(da, db)]


@JVP_RULES.register("mul")
def _mul(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = ȧ · b + a · ḃ"""
    s, (a, b), (da, db) = ctx.scope, op.operands, dots
    return [_add(s, s.mul(da, b) if da is not None else None,
                 s.mul(a, db) if db is not None else None)]


@JVP_RULES.register("div")
def _div(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = (ȧ − y · ḃ) / b"""
    s, (_, b), (da, db), y = ctx.scope, op.operands, dots, op.result
    numerator = da if db is None else s.sub(_or_zeros(s, da, y), s.mul(y, db))
    return [s.div(numerator, b)]


@JVP_RULES.register("mod")
def _mod(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = ȧ − floor(a / b) · ḃ   (a mod b = a − b·floor(a/b))"""
    s, (a, b), (da, db) = ctx.scope, op.operands, dots
    if db is None:
        return [da]
    return [s.sub(_or_zeros(s, da, a), s.mul(s.op("floor", [s.div(a, b)]), db))]


@JVP_RULES.register("pow")
def _pow(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = b·aᵇ⁻¹ · ȧ (0 where b = 0) + y·log a · ḃ (0 where a = 0, b ≥ 0)"""
    s, (a, b), (da, db) = ctx.scope, op.operands, dots
    zero = s.zeros(a.type)
    from_base = from_exponent = None
    if da is not None:
        from_base = s.mul(s.select(s.eq(b, zero), zero, pow_base_slope(s, a, b)), da)
    if db is not None:
        at_zero = pow_exponent_masked(s, a, b)
        slope = pow_exponent_slope(s, op.result, a, at_zero)
        from_exponent = s.mul(s.select(at_zero, zero, slope), db)
    return [_add(s, from_base, from_exponent)]


def _partials_jvp(partials: Callable[..., tuple[Value, Value]]) -> JvpRule:
    """The JVP rule of a binary function from its partials: ẏ = ∂y/∂a · ȧ + ∂y/∂b · ḃ."""
    def rule(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
        s = ctx.scope
        slopes = partials(s, *op.operands, op.result)
        terms = [s.mul(slope, dot) if dot is not None else None
                 for slope, dot in zip(slopes, dots, strict=True)]
        return [_add(s, *terms)]

    rule.__doc__ = f"{partials.__doc__}; ẏ = ∂y/∂a · ȧ + ∂y/∂b · ḃ"
    return rule


for _name, _partials in BINARY_PARTIALS.items():
    JVP_RULES.register(_name)(_partials_jvp(_partials))


def _last_operand_jvp(slope: Callable[..., Value]) -> JvpRule:
    """The JVP rule of a function differentiable in its last operand only."""
    def rule(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
        if any(dot is not None for dot in dots[:-1]):
            raise no_parameter_derivative(op, [dot is not None for dot in dots[:-1]])
        return [ctx.scope.mul(slope(ctx.scope, *op.operands, op.result), dots[-1])]

    rule.__doc__ = f"{slope.__doc__}; ẏ = ∂y/∂x · ẋ (none w.r.t. the others: a CompileError)"
    return rule


for _name, (_, _slope) in LAST_OPERAND_SLOPES.items():
    JVP_RULES.register(_name)(_last_operand_jvp(_slope))


@JVP_RULES.register(*WINS)
def _extremum(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = the tangent of the larger operand (min: the smaller); their mean on a tie"""
    s, (a, b) = ctx.scope, op.operands
    da, db = _or_zeros(s, dots[0], a), _or_zeros(s, dots[1], b)
    tie = s.mul(s.add(da, db), s.const(0.5, a.type))
    return [s.select(s.eq(a, b), tie, s.select(s.op(WINS[op.name], [a, b]), da, db))]


@JVP_RULES.register("select")
def _select(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = select(c, ȧ, ḃ)"""
    s, (cond, a, b) = ctx.scope, op.operands
    return [s.select(cond, _or_zeros(s, dots[1], a), _or_zeros(s, dots[2], b))]


@JVP_RULES.register("cast")
def _cast(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = cast(ẋ) to y's float dtype"""
    return [ctx.scope.op("cast", [dots[0]], dict(op.attrs))]


# ---------------------------------------------------------------- linear ops


@JVP_RULES.register("broadcast", "reduce_sum", "transpose", "reshape", "slice", "pad", "roll",
      "dynamic_index", "dynamic_scatter", "read")
def _linear(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = op(ẋ) for an op linear in its one float operand (integer operands kept)"""
    operands = [dots[0], *op.operands[1:]]
    return [ctx.scope.op(op.name, operands, dict(op.attrs))]


@JVP_RULES.register("concat")
def _concat(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = concat(ẋ₁, …, ẋₙ)"""
    s = ctx.scope
    parts = [_or_zeros(s, d, x) for d, x in zip(dots, op.operands, strict=True)]
    return [s.op("concat", parts, dict(op.attrs))]


@JVP_RULES.register("matmul")
def _matmul(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """Ċ = Ȧ @ B + A @ Ḃ"""
    s, (a, b), (da, db) = ctx.scope, op.operands, dots
    return [_add(s, s.op("matmul", [da, b]) if da is not None else None,
                 s.op("matmul", [a, db]) if db is not None else None)]


# ---------------------------------------------------------------- reductions


def reduce_extremum_tangent(s: Scope, x: Value, y: Value, dx: Value, axes: Sequence[int]) -> Value:
    """ẏ = mean of ẋ over the entries where x equals its max/min y (reduced over `axes`),
    the NaN entries where y is NaN."""
    y = expand(s, y, x.type.shape, axes)
    count = s.op("reduce_sum", [where_extremal(s, x, y, s.const(1, x.type))],
                 {"axes": tuple(axes)})
    total = s.op("reduce_sum", [where_extremal(s, x, y, dx)], {"axes": tuple(axes)})
    return s.div(total, count)


def reduce_prod_tangent(s: Scope, x: Value, y: Value, dx: Value, axes: Sequence[int]) -> Value:
    """ẏ = Σᵢ (∏_{j≠i} xⱼ) · ẋᵢ over `axes`, exact when some xⱼ are 0."""
    return s.op("reduce_sum", [s.mul(prod_partials(s, x, axes), dx)], {"axes": tuple(axes)})


# The tangent of each non-linear reduction (a sum is linear: `_linear`), by its kind
REDUCE_TANGENTS = {"max": reduce_extremum_tangent, "min": reduce_extremum_tangent,
                   "prod": reduce_prod_tangent}


@JVP_RULES.register(*(REDUCE_KINDS[kind].op for kind in REDUCE_TANGENTS))
def _reduce(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = mean of ẋ at the extremal entries (max/min); Σᵢ ∏_{j≠i} xⱼ · ẋᵢ (prod)"""
    kind = ReduceOp(op).kind
    x, axes = op.operands[0], op.attrs["axes"]
    return [REDUCE_TANGENTS[kind](ctx.scope, x, op.result, dots[0], axes)]


# ---------------------------------------------------------------- structured ops


def _tangent_generic(ctx: JvpContext, op: Op, dots: Dots) -> Value | None:
    """The tangent of a generic/generic_scatter: the same op over the operands and the
    tangents of the active ones, its body yielding the primal positions (scatter) and the
    tangent of the value; None when that tangent is zero."""
    nest = LoopNestOp(op)
    body = nest.body
    params = [Value(p.type, name=p.name) for p in body.params]
    active = [False] * len(nest.index_params) + [d is not None for d in dots]
    region = ctx.region(body, params, active)
    if region.tangents[-1] is None:
        return None
    region.scope.block.results = region.results[:-1] + [region.tangents[-1]]
    operands = list(op.operands) + [d for d in dots if d is not None]
    return ctx.scope.op(op.name, operands, dict(op.attrs), [region.scope.block])


@JVP_RULES.register("generic")
def _generic(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = generic over the same indices of the body's tangent (a sum reduces it as is;
    prod/max/min first evaluate the unreduced body and apply their reduction rule)"""
    generic = GenericOp(op)
    kind = generic.reduce
    if kind in (None, "sum"):
        return [_tangent_generic(ctx, op, dots)]
    s, indices, over = ctx.scope, tuple(generic.indices), tuple(generic.over)
    full = s.emit("generic", op.operands, {"indices": indices + over},
                  [copy_block(generic.body)])
    dfull = _tangent_generic(ctx, full, dots)
    if dfull is None:
        return [None]
    axes = tuple(range(len(indices), len(indices) + len(over)))
    return [REDUCE_TANGENTS[kind](s, full.result, op.result, dfull, axes)]


@JVP_RULES.register("generic_scatter")
def _generic_scatter(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ẏ = generic_scatter of the value's tangent at the same positions"""
    return [_tangent_generic(ctx, op, dots)]


@JVP_RULES.register("for", "for_history")
def _loop(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """(u, u̇) ← (body(u), body'(u)·u̇) each iteration: every active state carries its
    tangent as extra state (and for_history keeps the tangents' histories too)"""
    loop = ForOp(op)
    s, carried = ctx.scope, loop.carried
    active = ctx.tangent_states(op, [d is not None for d in dots])
    _, init_dots, invariant_dots = loop.split_operands(dots)
    params = [Value(p.type, name=p.name) for p in loop.body.params]
    flags = [False] + active + [d is not None for d in invariant_dots]
    region = ctx.region(loop.body, params, flags)
    n = sum(active)
    index, states, invariants = loop.split_params(params)
    region.scope.block.params = [index, *states, *region.tangent_params[:n],
                                 *invariants, *region.tangent_params[n:]]
    region.scope.block.results = region.results + [
        _or_zeros(region.scope, t, r)
        for t, r, a in zip(region.tangents, region.results, active, strict=True) if a]
    init_dots = [_or_zeros(s, d, v)
                 for d, v, a in zip(init_dots, loop.inits, active, strict=True) if a]
    operands = [loop.lo, loop.hi, *loop.inits, *init_dots, *loop.invariants,
                *[d for d in invariant_dots if d is not None]]
    new = s.emit(op.name, operands, {**op.attrs, "carried": carried + n},
                 [region.scope.block])
    ctx.primal = new.results[:carried]
    out = _spread(new.results[carried:carried + n], active)
    if op.name == "for_history":
        histories = new.results[carried + n:]
        ctx.primal += histories[:carried]
        out += _spread(histories[carried:], active)
    return out


@JVP_RULES.register("if")
def _if(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """(y, ẏ) = (then(x), then'(x)·ẋ) if c, else (else(x), else'(x)·ẋ): each branch also
    yields its results' tangents"""
    view, s = IfOp(op), ctx.scope
    active = ctx.tangent_states(op, [d is not None for d in dots])
    input_dots = dots[1:]
    blocks = []
    for branch in (view.then, view.orelse):
        params = [Value(p.type, name=p.name) for p in branch.params]
        region = ctx.region(branch, params, [d is not None for d in input_dots])
        region.scope.block.results = region.results + [
            _or_zeros(region.scope, t, r)
            for t, r, a in zip(region.tangents, region.results, active, strict=True) if a]
        blocks.append(region.scope.block)
    operands = [view.cond, *view.inputs, *[d for d in input_dots if d is not None]]
    new = s.emit("if", operands, {}, blocks)
    ctx.primal = new.results[:len(op.results)]
    return _spread(new.results[len(op.results):], active)


@JVP_RULES.register("while")
def _while(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """(u, u̇) ← (body(u), body'(u)·u̇) while cond(u): every active state carries its
    tangent as extra state; the condition region ignores the tangents"""
    loop = WhileOp(op)
    s, carried = ctx.scope, loop.carried
    active = ctx.tangent_states(op, [d is not None for d in dots])
    init_dots, invariant_dots = loop.split(dots)
    n = sum(active)
    blocks = []
    for body in (loop.before, loop.body):
        params = [Value(p.type, name=p.name) for p in body.params]
        region = ctx.region(body, params, active + [d is not None for d in invariant_dots])
        states, invariants = loop.split(params)
        region.scope.block.params = [*states, *region.tangent_params[:n],
                                     *invariants, *region.tangent_params[n:]]
        region.scope.block.results = region.results
        if body is loop.body:
            region.scope.block.results += [
                _or_zeros(region.scope, t, r)
                for t, r, a in zip(region.tangents, region.results, active, strict=True) if a]
        blocks.append(region.scope.block)
    init_dots = [_or_zeros(s, d, v)
                 for d, v, a in zip(init_dots, loop.inits, active, strict=True) if a]
    operands = [*loop.inits, *init_dots, *loop.invariants,
                *[d for d in invariant_dots if d is not None]]
    new = s.emit("while", operands, {**op.attrs, "carried": carried + n}, blocks)
    ctx.primal = new.results[:carried] + new.results[carried + n:]
    return _spread(new.results[carried:carried + n], active) + [None] * loop.counted


def _spread(values: Sequence[Value], active: Sequence[bool]) -> Dots:
    """`values` placed at the active positions, None elsewhere."""
    it = iter(values)
    return [next(it) if a else None for a in active]
