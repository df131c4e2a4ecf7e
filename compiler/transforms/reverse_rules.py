"""VJP rules of the primitive ops, and the `Scope` builder the rules write adjoint IR with.

Consumes one primal op (already emitted into the adjoint function, so its operands and
results are values the rule may use) and the cotangents of its results (`None` where a
result has none); produces one cotangent contribution per operand (`None` for none). The
reverse pass (`reverse.py`) sums contributions over fan-out. Every rule is registered in
`VJP_RULES` (a `RuleTable`) under the op's name and carries its maths in its docstring;
`reverse.py` imports the other modules that register into it (control flow, loops, index
notation, scan), so the table is whole wherever the pass is imported.

Unary elementwise ops get their rule from the local derivative their declaration gives
(`ir/elementwise.py`); the other rules are written here. Ops in `NON_DIFFERENTIABLE` carry no
gradient (the op table says why: argmax/argmin, sign, floor, ceil, floordiv, stop_gradient,
and the comparisons and logic, whose bool results are never active): they need no rule.
gammainc, gammaincc and betainc are differentiable in their last operand x only
(`LAST_OPERAND_SLOPES`, which forward mode shares): a derivative reaching a (or b) is a
CompileError at the call.

Values at non-differentiable points follow PyTorch (docs/api.md §3): d|x| at 0 is 0 (ȳ·sign x),
relu'(0) = 0, sqrt'(0) = inf, maximum/minimum ties send half of ȳ to each side (and 0
to both where one is NaN, as torch.clamp, which Tensor.clamp is built from; torch.maximum
sends ȳ to both), reduce_max/min split ȳ evenly among the entries equal to their result,
the NaN entries where it is NaN (`where_extremal`), reduce_prod is exact in
the presence of zeros, pow follows torch's masks at 0 (computing the masked entries from
safe operands, so that its second derivatives there are 0, not 0 · inf), and `select`
routes ȳ by its condition, so the unselected branch receives an exact 0 (a NaN or inf
there is not multiplied in; but `where(x > 0, sqrt(x), 0)` at 0 still gives NaN, because sqrt's own
rule computes 0 / (2·0), exactly as torch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reverie.compiler.ir.core import Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.elementwise import derivative_rules
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import TensorType
from reverie.compiler.ir.views import WindowOp
from reverie.dsl.ast import NO_SPAN
from reverie.dsl.diagnostics import CompileError, error_at

Bars = list[Value | None]
Rule = Callable[["RuleContext", Op, Bars], Bars]


# ---------------------------------------------------------------- building adjoint IR


@dataclass
class RuleContext:
    """What a rule sees besides its op: where to emit, which operands want a cotangent,
    and the reverse pass itself for rules that transpose a region (`transpose` is
    `reverse.BlockVJP`; `state_activity` says which carried states of a loop are active)."""

    scope: Scope
    wants: list[bool]
    checkpoint: bool
    transpose: Callable[..., Any]
    state_activity: Callable[[Op, list[bool]], list[bool]]


VJP_RULES: RuleTable[str, Rule] = RuleTable(
    "reverse mode", "cannot differentiate '{op}': reverse mode has no rule for this operation")

NON_DIFFERENTIABLE = frozenset(name for name, op in OPS.items() if not op.differentiable)


# ---------------------------------------------------------------- elementwise, unary

for _name, _rule in derivative_rules("vjp", "x̄ += ȳ · f'(x)").items():
    VJP_RULES.register(_name)(_rule)


# ---------------------------------------------------------------- elementwise, binary


@VJP_RULES.register("add")
def _add(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (a + b): ā += ȳ, b̄ += ȳ"""
    return [bars[0], bars[0]]


@VJP_RULES.register("sub")
def _sub(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (a − b): ā += ȳ, b̄ += −ȳ"""
    return [bars[0], ctx.scope.neg(bars[0]) if ctx.wants[1] else None]


@VJP_RULES.register("mul")
def _mul(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (a · b): ā += ȳ · b, b̄ += ȳ · a"""
    s, (a, b) = ctx.scope, op.operands
    return [s.mul(bars[0], b) if ctx.wants[0] else None,
            s.mul(bars[0], a) if ctx.wants[1] else None]


@VJP_RULES.register("div")
def _div(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (a / b): ā += ȳ / b, b̄ += −ȳ · (y / b)"""
    s, b, y = ctx.scope, op.operands[1], op.result
    return [s.div(bars[0], b) if ctx.wants[0] else None,
            s.neg(s.mul(bars[0], s.div(y, b))) if ctx.wants[1] else None]


@VJP_RULES.register("mod")
def _mod(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (a mod b) = d (a − b·floor(a/b)): ā += ȳ, b̄ += −ȳ · floor(a / b)"""
    s, (a, b) = ctx.scope, op.operands
    return [bars[0], s.neg(s.mul(bars[0], s.op("floor", [s.div(a, b)]))) if ctx.wants[1] else None]


@VJP_RULES.register("pow")
def _pow(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d aᵇ: ā += ȳ · b · aᵇ⁻¹ (0 where b = 0), b̄ += ȳ · y · log a (0 where a = 0, b ≥ 0)"""
    s, (a, b), ybar = ctx.scope, op.operands, bars[0]
    zero = s.zeros(a.type)
    abar = bbar = None
    if ctx.wants[0]:
        abar = s.select(s.eq(b, zero), zero, s.mul(ybar, pow_base_slope(s, a, b)))
    if ctx.wants[1]:
        at_zero = pow_exponent_masked(s, a, b)
        bbar = s.mul(ybar, s.select(at_zero, zero, pow_exponent_slope(s, op.result, a, at_zero)))
    return [abar, bbar]


def pow_base_slope(s: Scope, a: Value, b: Value) -> Value:
    """∂aᵇ/∂a = b · aᵇ⁻¹ for b ≠ 0, the branch that torch masks to 0 where b = 0. There it
    is computed with exponent 1 in place of b (giving 0 · a⁰ = 0), not as 0 · a⁻¹: that is
    NaN at a = 0, and a 0 cotangent times the partials of a⁻¹ (inf at 0) is NaN too, which
    the mask would pass on to second derivatives (0 · inf in the adjoint of the branch)."""
    one = s.const(1, a.type)
    exponent = s.select(s.eq(b, s.zeros(b.type)), one, b)
    return s.mul(b, s.op("pow", [a, s.sub(exponent, one)]))


def pow_exponent_masked(s: Scope, a: Value, b: Value) -> Value:
    """Where torch masks ∂aᵇ/∂b to 0: a = 0 and b ≥ 0."""
    zero = s.zeros(a.type)
    return s.op("and", [s.eq(a, zero), s.op("ge", [b, zero])])


def pow_exponent_slope(s: Scope, y: Value, a: Value, masked: Value) -> Value:
    """∂aᵇ/∂b = y · log a (y = aᵇ) off the `masked` entries; on them it is computed with
    base 1 (giving y · 0 = 0), not as 0ᵇ · log 0 (NaN, or −inf for b = 0), for the same
    reason as `pow_base_slope`."""
    return s.mul(y, s.op("log", [s.select(masked, s.const(1, a.type), a)]))


# ---------------------------------------------------------------- binary functions of NumPy


def _arctan2_partials(s: Scope, a: Value, b: Value, y: Value) -> tuple[Value, Value]:
    """d arctan2(a, b) = (b, −a) / (a² + b²); (0, 0) at a = b = 0, as torch (the quotient
    divides by 1 there, so that differentiating it again stays finite)."""
    radius = s.add(s.mul(a, a), s.mul(b, b))
    origin = s.eq(radius, s.zeros(a.type))
    safe = s.select(origin, s.const(1, a.type), radius)
    zero = s.zeros(a.type)
    return (s.select(origin, zero, s.div(b, safe)),
            s.select(origin, zero, s.div(s.neg(a), safe)))


def _hypot_partials(s: Scope, a: Value, b: Value, y: Value) -> tuple[Value, Value]:
    """d hypot(a, b) = (a, b) / y; (0, 0) at a = b = 0 (torch: NaN), the subgradient that
    abs takes, |a| = hypot(a, 0)."""
    origin = s.eq(y, s.zeros(y.type))
    safe = s.select(origin, s.const(1, y.type), y)
    zero = s.zeros(a.type)
    return s.select(origin, zero, s.div(a, safe)), s.select(origin, zero, s.div(b, safe))


def _logaddexp_partials(scale: float) -> Callable[..., tuple[Value, Value]]:
    def partials(s: Scope, a: Value, b: Value, y: Value) -> tuple[Value, Value]:
        gap = s.sub(a, b)
        if scale != 1:
            gap = s.mul(gap, s.const(scale, a.type))
        return s.op("sigmoid", [gap]), s.op("sigmoid", [s.neg(gap)])

    partials.__doc__ = ("d logaddexp(a, b) = (sigmoid(a − b), sigmoid(b − a)) (NaN where a = b "
                        "= ±inf, as torch)" if scale == 1 else
                        "d logaddexp2(a, b) = (sigmoid((a − b) log 2), sigmoid((b − a) log 2))")
    return partials


def _betaln_partials(s: Scope, a: Value, b: Value, y: Value) -> tuple[Value, Value]:
    """d betaln(a, b) = (ψ(a) − ψ(a + b), ψ(b) − ψ(a + b))"""
    of_sum = s.op("digamma", [s.add(a, b)])
    return s.sub(s.op("digamma", [a]), of_sum), s.sub(s.op("digamma", [b]), of_sum)


def _beta_partials(s: Scope, a: Value, b: Value, y: Value) -> tuple[Value, Value]:
    """d B(a, b) = B · (ψ(a) − ψ(a + b), ψ(b) − ψ(a + b))"""
    da, db = _betaln_partials(s, a, b, y)
    return s.mul(y, da), s.mul(y, db)


# (scope, a, b, y) -> (∂y/∂a, ∂y/∂b) of a binary elementwise function: both modes build
# their rule from it (ā += ȳ · ∂y/∂a; ẏ = ∂y/∂a · ȧ + ∂y/∂b · ḃ)
BINARY_PARTIALS: dict[str, Callable[[Scope, Value, Value, Value], tuple[Value, Value]]] = {
    "arctan2": _arctan2_partials,
    "hypot": _hypot_partials,
    "logaddexp": _logaddexp_partials(1.0),
    "logaddexp2": _logaddexp_partials(math.log(2)),
    "beta": _beta_partials,
    "betaln": _betaln_partials,
}


def _partials_vjp(partials: Callable[..., tuple[Value, Value]]) -> Rule:
    """The VJP rule of a binary function from its partials: ā += ȳ · ∂y/∂a, b̄ += ȳ · ∂y/∂b."""
    def rule(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
        slopes = partials(ctx.scope, *op.operands, op.result)
        return [ctx.scope.mul(bars[0], slope) if want else None
                for slope, want in zip(slopes, ctx.wants, strict=True)]

    rule.__doc__ = f"{partials.__doc__}; ā += ȳ · ∂y/∂a, b̄ += ȳ · ∂y/∂b"
    return rule


for _name, _partials in BINARY_PARTIALS.items():
    VJP_RULES.register(_name)(_partials_vjp(_partials))


# ---------------------------------------------------------------- derivatives in x only


def _gamma_density(s: Scope, a: Value, x: Value) -> Value:
    """xᵃ⁻¹ e⁻ˣ / Γ(a): exp((a − 1) log x − x − lgamma a), at x = 0 x^(a − 1) / Γ(a) (1 for
    a = 1, where the logarithm's form is 0 · −inf)."""
    one, zero = s.const(1, x.type), s.zeros(x.type)
    at_zero = s.eq(x, zero)
    safe = s.select(at_zero, one, x)
    log_gamma = s.op("lgamma", [a])
    inside = s.op("exp", [s.sub(s.sub(s.mul(s.sub(a, one), s.op("log", [safe])), safe),
                                log_gamma)])
    edge = s.mul(s.op("pow", [x, s.sub(a, one)]), s.op("exp", [s.neg(log_gamma)]))
    return s.select(at_zero, edge, inside)


def _gammainc_slope(s: Scope, a: Value, x: Value, y: Value) -> Value:
    """∂P(a, x)/∂x = xᵃ⁻¹ e⁻ˣ / Γ(a)"""
    return _gamma_density(s, a, x)


def _gammaincc_slope(s: Scope, a: Value, x: Value, y: Value) -> Value:
    """∂Q(a, x)/∂x = −xᵃ⁻¹ e⁻ˣ / Γ(a)"""
    return s.neg(_gamma_density(s, a, x))


def _betainc_slope(s: Scope, a: Value, b: Value, x: Value, y: Value) -> Value:
    """∂I_x(a, b)/∂x = x^(a−1) (1 − x)^(b−1) / B(a, b): exp((a − 1) log x + (b − 1) log1p(−x)
    − betaln(a, b)), at x = 0 and 1 the powers themselves (0⁰ = 1)"""
    one = s.const(1, x.type)
    edge = s.op("or", [s.eq(x, s.zeros(x.type)), s.eq(x, one)])
    safe = s.select(edge, s.const(0.5, x.type), x)
    log_beta = s.op("betaln", [a, b])
    inside = s.op("exp", [s.sub(s.add(s.mul(s.sub(a, one), s.op("log", [safe])),
                                      s.mul(s.sub(b, one), s.op("log1p", [s.neg(safe)]))),
                                log_beta)])
    powers = s.mul(s.op("pow", [x, s.sub(a, one)]), s.op("pow", [s.sub(one, x), s.sub(b, one)]))
    return s.select(edge, s.mul(powers, s.op("exp", [s.neg(log_beta)])), inside)


# op -> (the names of its operands, (scope, *operands, y) -> ∂y/∂(last operand)): functions
# differentiable in their last operand only (the others, parameters, have no derivative
# here: asking for one is a CompileError)
LAST_OPERAND_SLOPES: dict[str, tuple[tuple[str, ...], Callable[..., Value]]] = {
    "gammainc": (("a", "x"), _gammainc_slope),
    "gammaincc": (("a", "x"), _gammaincc_slope),
    "betainc": (("a", "b", "x"), _betainc_slope),
}


def no_parameter_derivative(op: Op, wanted: Sequence[bool]) -> CompileError:
    """The error for a derivative of `op` (in `LAST_OPERAND_SLOPES`) with respect to the
    operands before its last (`wanted` says which were asked for; raise the result)."""
    names, _ = LAST_OPERAND_SLOPES[op.name]
    asked = [n for n, w in zip(names[:-1], wanted, strict=False) if w]
    which, verb = " and ".join(asked), "does" if len(asked) == 1 else "do"
    return error_at(op.span or NO_SPAN, f"cannot differentiate {op.name}({', '.join(names)}) "
                    f"with respect to {which}: only the derivative with respect to "
                    f"{names[-1]} is implemented; if {which} {verb} not depend on what you "
                    f"differentiate by, wrap {'it' if len(asked) == 1 else 'them'} in "
                    f"stop_gradient(...)", CompileError)


def _last_operand_vjp(slope: Callable[..., Value]) -> Rule:
    def rule(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
        if any(ctx.wants[:-1]):
            raise no_parameter_derivative(op, ctx.wants[:-1])
        last = ctx.scope.mul(bars[0], slope(ctx.scope, *op.operands, op.result)) \
            if ctx.wants[-1] else None
        return [None] * (len(op.operands) - 1) + [last]

    rule.__doc__ = f"{slope.__doc__}; x̄ += ȳ · ∂y/∂x (none w.r.t. the others: a CompileError)"
    return rule


for _name, (_, _slope) in LAST_OPERAND_SLOPES.items():
    VJP_RULES.register(_name)(_last_operand_vjp(_slope))


def where_extremal(s: Scope, x: Value, y: Value, value: Value) -> Value:
    """`value` where `x` is an extremal entry of the max/min `y` it is reduced to, else 0.

    The extremal entries are those equal to `y`, or its NaN entries where `y` is NaN: max
    and min propagate NaN, so a NaN entry makes `y` NaN. The gradient of a max/min is split
    evenly among them: torch's rule for its full reduction `x.max()`, whose Jacobian both
    modes share (torch's forward mode gives a NaN tangent there; torch.amax over axes a NaN
    gradient to the whole slice, `x.max(dim)` all of it to one index). Two selects over
    comparisons of x and y rather than one mask, so that loop fusion recomputes those in
    every loop nest that needs them instead of storing a mask; the inner one, on x == y,
    differs for every y, so the max and the min of one x share no select either."""
    is_nan = s.op("ne", [x, x])
    return s.select(is_nan, value, s.select(s.eq(x, y), value, s.zeros(value.type)))


# The comparison that picks the operand a maximum or minimum returns
WINS = {"maximum": "gt", "minimum": "lt"}


@VJP_RULES.register(*WINS)
def _extremum(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d max(a, b): ȳ to the larger (min: the smaller), ȳ/2 to each on a tie"""
    s, (a, b), ybar = ctx.scope, op.operands, bars[0]
    zero, wins = s.zeros(a.type), WINS[op.name]
    half = s.select(s.eq(a, b), s.mul(ybar, s.const(0.5, a.type)), zero)
    return [s.select(s.op(wins, [a, b]), ybar, half), s.select(s.op(wins, [b, a]), ybar, half)]


@VJP_RULES.register("select")
def _select(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d select(c, a, b): ā += select(c, ȳ, 0), b̄ += select(c, 0, ȳ)"""
    s, (cond, a, _) = ctx.scope, op.operands
    zero = s.zeros(a.type)
    return [None, s.select(cond, bars[0], zero) if ctx.wants[1] else None,
            s.select(cond, zero, bars[0]) if ctx.wants[2] else None]


@VJP_RULES.register("cast")
def _cast(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d cast: x̄ += cast(ȳ) back to x's float dtype"""
    return [ctx.scope.op("cast", [bars[0]], {"dtype": op.operands[0].type.dtype})]


# ---------------------------------------------------------------- broadcast and reductions


def expand(s: Scope, value: Value, shape: tuple[Dim, ...], axes: Sequence[int]) -> Value:
    """A reduced `value` broadcast back over the reduced `axes` to `shape`."""
    kept = tuple(Dim.const(1) if i in axes else d for i, d in enumerate(shape))
    return s.op("broadcast", [s.op("reshape", [value], {"shape": kept})], {"shape": shape})


def unbroadcast(s: Scope, bar: Value, target: TensorType) -> Value:
    """Sum a cotangent over the axes a broadcast to `bar`'s shape added or stretched."""
    lead = bar.type.rank - target.rank
    axes = list(range(lead)) + [lead + i for i, d in enumerate(target.shape)
                                if d == Dim.const(1) and bar.type.shape[lead + i] != d]
    if axes:
        bar = s.op("reduce_sum", [bar], {"axes": tuple(axes)})
    return s.op("reshape", [bar], {"shape": target.shape})


@VJP_RULES.register("broadcast")
def _broadcast(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d broadcast: x̄ += ȳ summed over the broadcast axes"""
    return [unbroadcast(ctx.scope, bars[0], op.operands[0].type)]


@VJP_RULES.register("reduce_sum")
def _reduce_sum(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d sum: x̄ += ȳ broadcast over the reduced axes"""
    return [expand(ctx.scope, bars[0], op.operands[0].type.shape, op.attrs["axes"])]


def _reduce_extremum(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d max/min over axes: ȳ / (number of extremal entries) to every extremal entry (the
    NaN entries where the result is NaN)"""
    s, x, axes = ctx.scope, op.operands[0], op.attrs["axes"]
    y = expand(s, op.result, x.type.shape, axes)
    count = s.op("reduce_sum", [where_extremal(s, x, y, s.const(1, x.type))], {"axes": axes})
    share = expand(s, s.div(bars[0], count), x.type.shape, axes)
    return [where_extremal(s, x, y, share)]


VJP_RULES.register("reduce_max", "reduce_min")(_reduce_extremum)


def product_partials(s: Scope, x: Value, nonzero_product: Value, zero_count: Value,
                     zero_sum: Value) -> Value:
    """∂(∏ x)/∂xᵢ = ∏_{j≠i} xⱼ, exact with zeros and differentiable again: (P'/xᵢ or P' at a
    zero xᵢ) times the product of the zero factors other than xᵢ, which is 1 when there
    are none, their sum when there is one (0, with the derivative of that factor) and 0
    otherwise (P' = product of the non-zero factors, Z = sum of the zero factors, which is
    0 but carries their derivatives; all operands of x's shape)."""
    zero, one = s.zeros(x.type), s.const(1, x.type)
    is_zero = s.eq(x, zero)
    others = s.div(nonzero_product, s.select(is_zero, one, x))
    zeros_elsewhere = s.sub(zero_count, s.select(is_zero, one, zero))
    lone_zero = s.sub(zero_sum, s.select(is_zero, x, zero))
    zero_factors = s.select(s.eq(zeros_elsewhere, zero), one,
                            s.select(s.eq(zeros_elsewhere, one), lone_zero, zero))
    return s.mul(others, zero_factors)


def prod_partials(s: Scope, x: Value, axes: Sequence[int]) -> Value:
    """∂(∏ x over `axes`)/∂xᵢ for every element of x (`product_partials`)."""
    zero, one = s.zeros(x.type), s.const(1, x.type)
    is_zero = s.eq(x, zero)
    attrs = {"axes": tuple(axes)}
    factors = [s.op("reduce_prod", [s.select(is_zero, one, x)], attrs),
               s.op("reduce_sum", [s.select(is_zero, one, zero)], attrs),
               s.op("reduce_sum", [s.select(is_zero, x, zero)], attrs)]
    return product_partials(s, x, *(expand(s, f, x.type.shape, axes) for f in factors))


@VJP_RULES.register("reduce_prod")
def _reduce_prod(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d prod: x̄ᵢ += ȳ · ∏_{j≠i} xⱼ (exact when some xⱼ are 0)"""
    s, x, axes = ctx.scope, op.operands[0], op.attrs["axes"]
    return [s.mul(expand(s, bars[0], x.type.shape, axes), prod_partials(s, x, axes))]


# ---------------------------------------------------------------- linear algebra and shapes


@VJP_RULES.register("matmul")
def _matmul(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d (A @ B): Ā += C̄ @ Bᵀ, B̄ += Aᵀ @ C̄ (ᵀ of a batched operand: of each matrix)"""
    s, (a, b), cbar = ctx.scope, op.operands, bars[0]
    t = {"perm": [*range(a.type.rank - 2), a.type.rank - 1, a.type.rank - 2]}
    return [s.op("matmul", [cbar, s.op("transpose", [b], t)]) if ctx.wants[0] else None,
            s.op("matmul", [s.op("transpose", [a], t), cbar]) if ctx.wants[1] else None]


@VJP_RULES.register("transpose")
def _transpose(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d transpose(x, p): x̄ += transpose(ȳ, p⁻¹)"""
    perm = list(op.attrs["perm"])
    inverse = [perm.index(i) for i in range(len(perm))]
    return [ctx.scope.op("transpose", [bars[0]], {"perm": inverse})]


@VJP_RULES.register("reshape")
def _reshape(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d reshape: x̄ += reshape(ȳ, shape of x)"""
    return [ctx.scope.op("reshape", [bars[0]], {"shape": op.operands[0].type.shape})]


@VJP_RULES.register("slice")
def _slice(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d slice: x̄ += ȳ placed back in a zero tensor (pad)"""
    attrs = {"shape": op.operands[0].type.shape, "starts": WindowOp(op).starts,
             "steps": WindowOp(op).steps}
    return [ctx.scope.op("pad", [bars[0]], attrs)]


@VJP_RULES.register("pad")
def _pad(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d pad: x̄ += the window of ȳ that x was placed in (slice)"""
    starts, steps, shape = WindowOp(op).starts, WindowOp(op).steps, op.operands[0].type.shape
    stops = tuple(a + n if s == 1 else a + (n - 1) * s + 1
                  for a, n, s in zip(starts, shape, steps, strict=True))
    return [ctx.scope.op("slice", [bars[0]], {"starts": starts, "stops": stops, "steps": steps})]


@VJP_RULES.register("concat")
def _concat(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d concat: each operand gets its slice of ȳ along the axis"""
    axis, shape = op.attrs["axis"], op.result.type.shape
    out: Bars = []
    offset = Dim.const(0)
    for part, want in zip(op.operands, ctx.wants, strict=True):
        size = part.type.shape[axis]
        if want:
            starts = tuple(offset if i == axis else Dim.const(0) for i in range(len(shape)))
            stops = tuple(offset + size if i == axis else d for i, d in enumerate(shape))
            attrs = {"starts": starts, "stops": stops, "steps": (1,) * len(shape)}
            out.append(ctx.scope.op("slice", [bars[0]], attrs))
        else:
            out.append(None)
        offset = offset + size
    return out


@VJP_RULES.register("roll")
def _roll(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d roll(x, k): x̄ += roll(ȳ, −k)"""
    attrs = {"shift": -op.attrs["shift"], "axis": op.attrs["axis"]}
    return [ctx.scope.op("roll", [bars[0]], attrs)]


@VJP_RULES.register("dynamic_index")
def _dynamic_index(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d x[i]: x̄ += ȳ placed at row i of a zero tensor (dynamic_scatter)"""
    x, index = op.operands
    attrs = {"shape": x.type.shape, "axis": op.attrs["axis"], "label": op.attrs["label"]}
    return [ctx.scope.op("dynamic_scatter", [bars[0], index], attrs), None]


@VJP_RULES.register("dynamic_scatter")
def _dynamic_scatter(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d scatter(g, i): ḡ += ȳ[i]"""
    attrs = {"axis": op.attrs["axis"], "label": op.attrs["label"]}
    return [ctx.scope.op("dynamic_index", [bars[0], op.operands[1]], attrs), None]
