"""Elementwise ops: one declaration each, from which every per-op table takes its entry.

An `Elementwise` row says everything about one op applied element by element:

- its NumPy semantics (`numpy`, on arrays of one shape) and the dtype classes its operands
  may have; the result has the operands' dtype unless `result` names another;
- its derivative. A unary op declares ONE local derivative f'(x) (`Derivative`, with its
  maths line), from which reverse mode builds x̄ += ȳ · f'(x) and forward mode
  ẏ = f'(x) · ẋ (`transforms/reverse_rules.py`, `transforms/forward_rules.py`). Binary
  ops, `select` and `cast` keep one hand-written rule per mode there: their cheapest VJP
  and JVP are different expressions (the JVP of a / b is (ȧ − y·ḃ) / b, one division,
  where the transposed form needs two). `no_derivative` says why an op needs neither;
- how the back ends compute it: a `math` op is a function of the math library
  (`backend/mathlib*.py`, under the op's name) for float operands; the others are a few
  instructions in `backend/scalar_ops.py`. `mlir` names the MLIR op per dtype class
  (`arith.addf`; a comparison with its predicate, `arith.cmpf olt`); a class without one is
  written out by `export/mlir_scalar.py` (a composite, or the math library's
  backend-neutral algorithm);
- `cheap`: a single instruction, recomputed in every loop nest instead of being stored;
  `same_type_is_identity` (cast): the op changes nothing when the result type is the
  operand's, so the simplifier drops it;
  `fusion`: its class in loop fusion (every elementwise op is fused, except
  `stop_gradient`, a view); `builtin`: users call it by name, `tanh(x)` or `arctan2(y, x)`,
  so the name is reserved (`dsl/check.py`) and lowered as a call of its arity
  (`lower/builtins.py`, from `builtin_names`);
- `attrs`: the op's integer attributes (`polygamma {order = 2}`), or real ones where
  `attr_types` types them `float` (`iv {order = 2.5}`). The NumPy function gets them as
  keywords; in loop IR they follow the operands of the scalar op as i64 or f64 constants
  (`%3 = polygamma %2, 2 : f64`), where native code reads them. `attr_types` declares the
  attributes that an op's own `infer`/`evaluate` read (`cast {dtype = f64}`); the op's
  attribute schema (`OpDef.attrs`) is both, the integer ones typed `int`.

Batching and loop lowering treat every op of this kind alike. This module holds data and
callables over `Scope` (the IR builder): the IR layer imports no transform and no back end;
those import these rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import DType, Schema
from reverie.compiler.ir.bessel_integer_order import bessel_jn_array, bessel_yn_array
from reverie.compiler.ir.bessel_real_order import iv_array, ive_array, jv_array
from reverie.compiler.ir.incomplete_beta import betainc_array
from reverie.compiler.ir.incomplete_gamma import gammainc_array, gammaincc_array
from reverie.compiler.ir.op_defs import (
    FUSED,
    VIEW,
    Evaluate,
    Infer,
    cast_array,
    dtype_class,
    expect_arity,
    no_derivative,
    register,
)
from reverie.compiler.ir.special import (
    TWO_OVER_SQRT_PI,
    bessel_i_array,
    bessel_jy_array,
    beta_array,
    betaln_array,
    erf_array,
    erfc_array,
    erfcinv_array,
    erfinv_array,
    gamma_array,
    lgamma_array,
    logit_array,
    multigammaln_array,
    polygamma_array,
)
from reverie.compiler.ir.types import NUMPY_DTYPES, ShapeError, TensorType

if TYPE_CHECKING:  # rules are handed a Scope when they run: the table imports no builder
    from reverie.compiler.ir.core import Op, Value
    from reverie.compiler.ir.scope import Scope

    # (scope, x, y, attrs) -> a value of x's type; y is the op's result
    Local = Callable[[Scope, Value, Value, Mapping[str, Any]], Value]
    # A rule of reverse or forward mode: (context with a `scope`, op, seeds) -> one value each
    ModeRule = Callable[[Any, Op, list[Value | None]], list[Value | None]]

FLOAT, NUMERIC, ANY = ("float",), ("float", "int"), ("float", "int", "bool")

SCALE, DIVIDE, NEGATE, MASK = "scale", "divide", "negate", "mask"


@dataclass(frozen=True)
class Derivative:
    """dy/dx of a unary op and how it multiplies a cotangent ȳ or a tangent ẋ:

    - scale:  f' = local(x, y)                   x̄ += ȳ · f',   ẏ = f' · ẋ
    - divide: f' = 1 / local(x, y)               x̄ += ȳ / g,    ẏ = ẋ / g   (one division)
    - negate: f' = −1                             x̄ += −ȳ,       ẏ = −ẋ
    - mask:   f' = 1 where local(x, y), else 0   x̄ += select(c, ȳ, 0), ẏ = select(c, ẋ, 0)
    """

    maths: str
    form: str
    local: Local | None = None

    def vjp(self, s: Scope, op: Op, ybar: Value) -> Value:
        """The cotangent contribution x̄ = ȳ · f'(x) of one use of `op`."""
        return self._times(s, op, ybar, cotangent=True)

    def jvp(self, s: Scope, op: Op, xdot: Value) -> Value:
        """The tangent ẏ = f'(x) · ẋ of `op`'s result."""
        return self._times(s, op, xdot, cotangent=False)

    def _times(self, s: Scope, op: Op, seed: Value, cotangent: bool) -> Value:
        if self.form == NEGATE:
            return s.neg(seed)
        x = op.operands[0]
        local = self.local(s, x, op.result, op.attrs)
        if self.form == SCALE:
            return s.mul(seed, local) if cotangent else s.mul(local, seed)
        if self.form == DIVIDE:
            return s.div(seed, local)
        return s.select(local, seed, s.zeros(x.type))


def builtin_names(arity: int) -> tuple[str, ...]:
    """The ops of `arity` operands that users call by name (`builtin` in their row)."""
    return tuple(name for name, row in ELEMENTWISE.items() if row.builtin and row.arity == arity)


def derivative_rules(mode: str, formula: str) -> dict[str, ModeRule]:
    """The rule of every unary op with a declared derivative in one mode, "vjp" (the seed
    is ȳ) or "jvp" (ẋ); each rule's docstring is the op's maths line and `formula`."""
    rules = {}
    for name, row in ELEMENTWISE.items():
        if row.derivative is not None:
            rules[name] = _derivative_rule(getattr(row.derivative, mode),
                                           f"{row.derivative.maths}; {formula}")
    return rules


def _derivative_rule(times: Callable[[Scope, Op, Value], Value], doc: str) -> ModeRule:
    def apply(ctx: Any, op: Op, seeds: list[Value | None]) -> list[Value | None]:
        return [times(ctx.scope, op, seeds[0])]

    apply.__doc__ = doc
    return apply


def scale(maths: str, local: Local) -> Derivative:
    """The derivative f'(x) = local(x, y)."""
    return Derivative(maths, SCALE, local)


def divide(maths: str, local: Local) -> Derivative:
    """The derivative f'(x) = 1 / local(x, y), applied as one division."""
    return Derivative(maths, DIVIDE, local)


@dataclass(frozen=True)
class Elementwise:
    """One elementwise op (see the module docstring for each field)."""

    name: str
    numpy: Callable[..., np.ndarray]
    operands: tuple[str, ...] = FLOAT
    arity: int = 1
    result: str | None = None
    derivative: Derivative | None = None
    no_derivative: str = ""
    math: bool = False
    mlir: Mapping[str, str] = field(default_factory=dict)
    cheap: bool = False
    fusion: str = FUSED
    builtin: bool = False
    same_type_is_identity: bool = False
    attrs: tuple[str, ...] = ()
    attr_types: Schema = field(default_factory=dict)
    infer: Infer | None = None
    evaluate: Evaluate | None = None
    doc: str = ""


# ---------------------------------------------------------------- shape rules


def _check_classes(name: str, t: TensorType, allowed: tuple[str, ...]) -> None:
    if dtype_class(t.dtype) not in allowed:
        wanted = " or ".join(allowed)
        raise ShapeError(f"'{name}' needs {wanted} operands, got {t.dtype}")


def _same_shape_infer(row: Elementwise) -> Infer:
    """Operands of one dtype and shape, of an allowed class; the result keeps the shape."""
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(row.name, ops, row.arity)
        first = ops[0]
        for other in ops[1:]:
            if other.dtype != first.dtype:
                raise ShapeError(f"'{row.name}' operands have different dtypes {first.dtype} "
                                 f"and {other.dtype}")
            if other.shape != first.shape:
                raise ShapeError(f"'{row.name}' operands have different shapes {first} "
                                 f"and {other}")
        _check_classes(row.name, first, row.operands)
        for attr in row.attrs:
            if row.attr_types.get(attr) is float:   # a real constant: `iv {order = 2.5}`
                if not isinstance(attrs.get(attr), int | float) or \
                        not math.isfinite(attrs[attr]):
                    raise ShapeError(f"'{row.name}' needs a finite real '{attr}'")
            elif not isinstance(attrs.get(attr), int) or attrs[attr] < 0:
                raise ShapeError(f"'{row.name}' needs a non-negative integer '{attr}'")
        return [first.with_dtype(row.result) if row.result else first]

    return infer


def _numpy_evaluate(row: Elementwise) -> Evaluate:
    def evaluate(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
        return [row.numpy(*args, **{a: op.attrs[a] for a in row.attrs})]

    return evaluate


ELEMENTWISE: dict[str, Elementwise] = {}


def declare(row: Elementwise) -> Elementwise:
    """Register `row` as an op of the table (kind `elementwise`)."""
    example = f"`%1 = {row.name} %x : f32[N]`" if row.arity == 1 else \
        f"`%2 = {row.name} %a, %b : f32[N]`"
    doc = row.doc or (f"Elementwise {row.name}: {example}." if row.arity == 1 else
                      f"Elementwise {row.name} of equal-shaped operands: {example}.")
    exempt = no_derivative(row.no_derivative) if row.no_derivative else {}
    register(row.name, "elementwise", row.infer or _same_shape_infer(row),
             row.evaluate or _numpy_evaluate(row), doc, fusion=row.fusion, cheap=row.cheap,
             same_type_is_identity=row.same_type_is_identity, exempt=exempt, elementwise=row,
             attrs={**dict.fromkeys(row.attrs, int), **row.attr_types})
    ELEMENTWISE[row.name] = row
    return row


# ---------------------------------------------------------------- NumPy semantics


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _order_one_slope(s: Scope, x: Value, y: Value, order_zero: str) -> Value:
    """d Z₁(x)/dx = Z₀(x) − Z₁(x)/x for Z = I, J, Y (`order_zero` names Z₀), ½ at 0 (I, J);
    the quotient divides by 1 there, so that differentiating it again gives 0, no 0/0."""
    at_zero = s.eq(x, s.zeros(x.type))
    safe = s.select(at_zero, s.const(1, x.type), x)
    slope = s.sub(s.op(order_zero, [x]), s.div(y, safe))
    return s.select(at_zero, s.const(0.5, x.type), slope)


def bessel_of_order(s: Scope, kind: str, order: int, x: Value) -> Value:
    """Jₙ(x) or Yₙ(x) (`kind` "j" or "y") for any integer n: the op j0, j1, y0, y1 or
    jn/yn {order = |n|}, negated for odd negative n (Z₋ₙ = (−1)ⁿ Zₙ)."""
    n = abs(order)
    value = s.op(f"{kind}{n}", [x]) if n < 2 else s.op(f"{kind}n", [x], {"order": n})
    return s.neg(value) if order < 0 and n % 2 else value


def _integer_order_slope(s: Scope, kind: str, x: Value, order: int) -> Value:
    """d Zₙ(x)/dx = (Zₙ₋₁(x) − Zₙ₊₁(x))/2 for Z = J, Y."""
    difference = s.sub(bessel_of_order(s, kind, order - 1, x),
                       bessel_of_order(s, kind, order + 1, x))
    return s.mul(s.const(0.5, x.type), difference)


def bessel_j_of_real_order(s: Scope, order: float, x: Value) -> Value:
    """Jᵥ(x) for a real constant v: `bessel_of_order`'s ops for an integral v, else the op
    jv {order = v}."""
    if float(order).is_integer():
        return bessel_of_order(s, "j", int(order), x)
    return s.op("jv", [x], {"order": float(order)})


def _real_order_slope(s: Scope, name: str, x: Value, y: Value, order: float) -> Value:
    """d/dx of Iᵥ, e^(−|x|) Iᵥ, Jᵥ from the neighbouring orders v ± 1 (ops of the family)."""
    if name == "jv":
        low, high = (bessel_j_of_real_order(s, order + step, x) for step in (-1, 1))
        return s.mul(s.const(0.5, x.type), s.sub(low, high))
    low, high = (s.op(name, [x], {"order": float(order + step)}) for step in (-1, 1))
    mean = s.mul(s.const(0.5, x.type), s.add(low, high))
    return mean if name == "iv" else s.sub(mean, s.mul(s.op("sign", [x]), y))


def _multigammaln_slope(s: Scope, x: Value, d: int) -> Value:
    """Σ_{j<d} digamma(x − j/2)."""
    total = s.op("digamma", [x])
    for j in range(1, d):
        total = s.add(total, s.op("digamma", [s.sub(x, s.const(j / 2, x.type))]))
    return total


def _one_minus_square(s: Scope, x: Value) -> Value:
    """(1 − x)(1 + x): 1 − x², without cancelling near ±1."""
    one = s.const(1, x.type)
    return s.mul(s.sub(one, x), s.add(one, x))


def _sinc_slope(s: Scope, x: Value, y: Value) -> Value:
    """sinc'(x) = (cos(πx) − sinc x) / x, which cancels near 0: there (|x| < ½) its Taylor
    series x · Σₖ cₖ x²ᵏ (`SINC_SLOPE_SERIES`), so that sinc'(0) = 0 and sinc''(0) = −π²/3.
    The quotient divides by 1 in place of x on the series' side, so that differentiating it
    again multiplies no 0 cotangent by 1/0."""
    near = s.op("lt", [s.op("abs", [x]), s.const(0.5, x.type)])
    safe = s.select(near, s.const(1, x.type), x)
    cos = s.op("cos", [s.mul(x, s.const(math.pi, x.type))])
    quotient = s.div(s.sub(cos, y), safe)
    square = s.mul(x, x)
    series = s.const(SINC_SLOPE_SERIES[-1], x.type)
    for c in reversed(SINC_SLOPE_SERIES[:-1]):
        series = s.add(s.mul(series, square), s.const(c, x.type))
    return s.select(near, s.mul(x, series), quotient)


# sinc'(x) = Σₖ₌₁ (−1)ᵏ 2k π²ᵏ x²ᵏ⁻¹ / (2k + 1)!: the coefficients of x · Σ cₖ (x²)ᵏ⁻¹,
# enough that the first omitted term is below 2⁻⁵⁶ of the sum for |x| < ½
SINC_SLOPE_SERIES = tuple((-1) ** k * 2 * k * math.pi ** (2 * k) / math.factorial(2 * k + 1)
                          for k in range(1, 14))


def sinc_array(x: np.ndarray) -> np.ndarray:
    """sin(πx)/(πx) in f64, with sin(πx) = (−1)ⁿ sin(πr), x = n + r, n = rint(x) (exact):
    accurate next to the integers, where NumPy's sin(π·x) is not; 1 at 0."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        n = np.rint(x)
        sign = np.where(np.fmod(n, 2) == 0, 1.0, -1.0)
        value = sign * np.sin(np.pi * (x - n)) / (np.pi * x)
        return np.where(x == 0, 1.0, value)


PIECEWISE_CONSTANT = "it is piecewise constant: its derivative is 0 wherever it exists"
BOOLEAN = "its result is bool, which carries no derivative"


def unary(name: str, numpy: Callable[..., np.ndarray], **row: Any) -> Elementwise:
    return declare(Elementwise(name, numpy, **row))


def binary(name: str, numpy: Callable[..., np.ndarray], operands: tuple[str, ...],
            **row: Any) -> Elementwise:
    return declare(Elementwise(name, numpy, operands, arity=2, **row))


def _predicates(float_predicate: str, int_predicate: str) -> dict[str, str]:
    """The MLIR comparisons of one predicate (bools compare as integers)."""
    return {"float": f"arith.cmpf {float_predicate}", "int": f"arith.cmpi {int_predicate}",
            "bool": f"arith.cmpi {int_predicate}"}


# ---------------------------------------------------------------- unary ops

unary("neg", np.negative, operands=NUMERIC, cheap=True, mlir={"float": "arith.negf"},
       derivative=Derivative("d (−x)/dx = −1", NEGATE))
unary("abs", np.abs, operands=NUMERIC, cheap=True, builtin=True, math=True,
       mlir={"float": "math.absf"},
       derivative=scale("d |x|/dx = sign(x)   (0 at x = 0)", lambda s, x, y, a: s.op("sign", [x])))
unary("sign", np.sign, operands=NUMERIC, cheap=True, builtin=True,
       no_derivative=PIECEWISE_CONSTANT)
unary("exp", np.exp, builtin=True, math=True, mlir={"float": "math.exp"},
       derivative=scale("d exp(x)/dx = y", lambda s, x, y, a: y))
unary("expm1", np.expm1, builtin=True, math=True, mlir={"float": "math.expm1"},
       derivative=scale("d expm1(x)/dx = y + 1",
                        lambda s, x, y, a: s.add(y, s.const(1, y.type))))
unary("log", np.log, builtin=True, math=True, mlir={"float": "math.log"},
       derivative=divide("d log(x)/dx = 1 / x   (inf at 0)", lambda s, x, y, a: x))
unary("log1p", np.log1p, builtin=True, math=True, mlir={"float": "math.log1p"},
       derivative=divide("d log1p(x)/dx = 1 / (1 + x)",
                         lambda s, x, y, a: s.add(x, s.const(1, x.type))))
unary("sqrt", np.sqrt, builtin=True, math=True, mlir={"float": "math.sqrt"},
       derivative=divide("d sqrt(x)/dx = 1 / (2y)   (inf at 0)",
                         lambda s, x, y, a: s.mul(s.const(2, y.type), y)))
unary("rsqrt", lambda x: 1 / np.sqrt(x), builtin=True,
       derivative=scale("d rsqrt(x)/dx = −½ y³",
                        lambda s, x, y, a: s.mul(s.const(-0.5, y.type), s.mul(y, s.mul(y, y)))))
unary("sin", np.sin, builtin=True, math=True, mlir={"float": "math.sin"},
       derivative=scale("d sin(x)/dx = cos(x)", lambda s, x, y, a: s.op("cos", [x])))
unary("cos", np.cos, builtin=True, math=True, mlir={"float": "math.cos"},
       derivative=scale("d cos(x)/dx = −sin(x)", lambda s, x, y, a: s.neg(s.op("sin", [x]))))
unary("tan", np.tan, builtin=True, math=True, mlir={"float": "math.tan"},
       derivative=scale("d tan(x)/dx = 1 + y²",
                        lambda s, x, y, a: s.add(s.const(1, y.type), s.mul(y, y))))
unary("tanh", np.tanh, builtin=True, math=True, mlir={"float": "math.tanh"},
       derivative=scale("d tanh(x)/dx = 1 − y²",
                        lambda s, x, y, a: s.sub(s.const(1, y.type), s.mul(y, y))))
unary("sigmoid", _sigmoid, builtin=True, math=True,
       derivative=scale("d sigmoid(x)/dx = y · (1 − y)",
                        lambda s, x, y, a: s.mul(y, s.sub(s.const(1, y.type), y))))
unary("relu", lambda x: np.maximum(x, np.zeros_like(x)), builtin=True, cheap=True,
       derivative=Derivative("d relu(x)/dx = 1 where x > 0, else 0   (0 at x = 0)", MASK,
                             lambda s, x, y, a: s.op("gt", [x, s.zeros(x.type)])))
unary("softplus", lambda x: np.logaddexp(np.zeros_like(x), x), builtin=True, math=True,
       derivative=scale("d softplus(x)/dx = sigmoid(x)", lambda s, x, y, a: s.op("sigmoid", [x])))
unary("floor", np.floor, builtin=True, math=True, mlir={"float": "math.floor"},
       no_derivative=PIECEWISE_CONSTANT)
unary("ceil", np.ceil, builtin=True, math=True, mlir={"float": "math.ceil"},
       no_derivative=PIECEWISE_CONSTANT)
# NumPy's names (docs/mathlib.md: the native bodies and their measured errors)
unary("sinh", np.sinh, builtin=True, math=True, mlir={"float": "math.sinh"},
      derivative=scale("d sinh(x)/dx = cosh(x)", lambda s, x, y, a: s.op("cosh", [x])))
unary("cosh", np.cosh, builtin=True, math=True, mlir={"float": "math.cosh"},
      derivative=scale("d cosh(x)/dx = sinh(x)", lambda s, x, y, a: s.op("sinh", [x])))
unary("arcsin", np.arcsin, builtin=True, math=True, mlir={"float": "math.asin"},
      derivative=divide("d arcsin(x)/dx = 1 / √((1 − x)(1 + x))   (inf at ±1)",
                        lambda s, x, y, a: s.op("sqrt", [_one_minus_square(s, x)])))
unary("arccos", np.arccos, builtin=True, math=True, mlir={"float": "math.acos"},
      derivative=divide("d arccos(x)/dx = −1 / √((1 − x)(1 + x))   (−inf at ±1)",
                        lambda s, x, y, a: s.neg(s.op("sqrt", [_one_minus_square(s, x)]))))
unary("arctan", np.arctan, builtin=True, math=True, mlir={"float": "math.atan"},
      derivative=divide("d arctan(x)/dx = 1 / (1 + x²)",
                        lambda s, x, y, a: s.add(s.const(1, x.type), s.mul(x, x))))
unary("arcsinh", np.arcsinh, builtin=True, math=True, mlir={"float": "math.asinh"},
      derivative=divide("d arcsinh(x)/dx = 1 / hypot(x, 1)",
                        lambda s, x, y, a: s.op("hypot", [x, s.const(1, x.type)])))
unary("arccosh", np.arccosh, builtin=True, math=True, mlir={"float": "math.acosh"},
      derivative=divide("d arccosh(x)/dx = 1 / √((x − 1)(x + 1))   (inf at 1)",
                        lambda s, x, y, a: s.op("sqrt", [s.neg(_one_minus_square(s, x))])))
unary("arctanh", np.arctanh, builtin=True, math=True, mlir={"float": "math.atanh"},
      derivative=divide("d arctanh(x)/dx = 1 / ((1 − x)(1 + x))   (inf at ±1)",
                        lambda s, x, y, a: _one_minus_square(s, x)))
unary("exp2", np.exp2, builtin=True, math=True, mlir={"float": "math.exp2"},
      derivative=scale("d exp2(x)/dx = y · log 2",
                       lambda s, x, y, a: s.mul(y, s.const(math.log(2), y.type))))
unary("log2", np.log2, builtin=True, math=True, mlir={"float": "math.log2"},
      derivative=divide("d log2(x)/dx = 1 / (x · log 2)   (inf at 0)",
                        lambda s, x, y, a: s.mul(x, s.const(math.log(2), x.type))))
unary("log10", np.log10, builtin=True, math=True, mlir={"float": "math.log10"},
      derivative=divide("d log10(x)/dx = 1 / (x · log 10)   (inf at 0)",
                        lambda s, x, y, a: s.mul(x, s.const(math.log(10), x.type))))
unary("sinc", lambda x: sinc_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d sinc(x)/dx = (cos(πx) − y) / x; its Taylor series below ½ (0 at 0)",
                       lambda s, x, y, a: _sinc_slope(s, x, y)))
unary("deg2rad", np.deg2rad, builtin=True, math=True,
      derivative=scale("d deg2rad(x)/dx = π/180",
                       lambda s, x, y, a: s.const(math.pi / 180, x.type)))
unary("rad2deg", np.rad2deg, builtin=True, math=True,
      derivative=scale("d rad2deg(x)/dx = 180/π",
                       lambda s, x, y, a: s.const(180 / math.pi, x.type)))
unary("not", np.logical_not, operands=("bool",), cheap=True, no_derivative=BOOLEAN)
unary("stop_gradient", lambda x: x, operands=ANY, cheap=True, fusion=VIEW,
       no_derivative="it stops derivatives: that is what it is for")

# ---------------------------------------------------------------- binary ops

binary("add", np.add, NUMERIC, cheap=True, mlir={"float": "arith.addf", "int": "arith.addi"})
binary("sub", np.subtract, NUMERIC, cheap=True,
        mlir={"float": "arith.subf", "int": "arith.subi"})
binary("mul", np.multiply, NUMERIC, cheap=True,
        mlir={"float": "arith.mulf", "int": "arith.muli"})
binary("div", np.divide, FLOAT, mlir={"float": "arith.divf"})
binary("floordiv", np.floor_divide, NUMERIC, no_derivative=PIECEWISE_CONSTANT)
binary("mod", np.mod, NUMERIC)
binary("pow", np.power, FLOAT, math=True, mlir={"float": "math.powf"})
binary("maximum", np.maximum, NUMERIC, cheap=True,
        mlir={"float": "arith.maximumf", "int": "arith.maxsi"})
binary("minimum", np.minimum, NUMERIC, cheap=True,
        mlir={"float": "arith.minimumf", "int": "arith.minsi"})
# NumPy's names; their derivatives: `transforms/reverse_rules.BINARY_PARTIALS`
binary("arctan2", np.arctan2, FLOAT, builtin=True, math=True, mlir={"float": "math.atan2"},
       doc="Elementwise arctan2 of equal-shaped operands, the angle of the point (x, y) in "
           "(−π, π]: `%2 = arctan2 %y, %x : f32[N]`.")
binary("hypot", np.hypot, FLOAT, builtin=True, math=True)
binary("logaddexp", np.logaddexp, FLOAT, builtin=True, math=True)
binary("logaddexp2", np.logaddexp2, FLOAT, builtin=True, math=True)
for _name, _fn, _operands, _float, _int in (
        ("lt", np.less, NUMERIC, "olt", "slt"), ("le", np.less_equal, NUMERIC, "ole", "sle"),
        ("gt", np.greater, NUMERIC, "ogt", "sgt"), ("ge", np.greater_equal, NUMERIC, "oge", "sge"),
        ("eq", np.equal, ANY, "oeq", "eq"), ("ne", np.not_equal, ANY, "une", "ne")):
    binary(_name, _fn, _operands, result="bool", cheap=True, no_derivative=BOOLEAN,
            mlir=_predicates(_float, _int))
binary("and", np.logical_and, ("bool",), cheap=True, no_derivative=BOOLEAN,
        mlir={"bool": "arith.andi"})
binary("or", np.logical_or, ("bool",), cheap=True, no_derivative=BOOLEAN,
        mlir={"bool": "arith.ori"})

# ---------------------------------------------------------------- select and cast


def _infer_select(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("select", ops, 3)
    cond, a, b = ops
    if cond.dtype != "bool":
        raise ShapeError(f"the condition of 'where' must be bool, got {cond.dtype}")
    if a.dtype != b.dtype:
        raise ShapeError(f"'where' branches have different dtypes {a.dtype} and {b.dtype}")
    if not (cond.shape == a.shape == b.shape):
        raise ShapeError(f"'where' operands have different shapes {cond}, {a}, {b}")
    return [a]


declare(Elementwise(
    "select", np.where, ANY, arity=3, cheap=True, infer=_infer_select,
    doc="Pick from a where cond holds, else b: `%3 = select %c, %a, %b : f32[N]`."))


def _infer_cast(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("cast", ops, 1)
    return [ops[0].with_dtype(attrs["dtype"])]


def _eval_cast(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [cast_array(np.asarray(args[0]), NUMPY_DTYPES[op.attrs["dtype"]])]


declare(Elementwise(
    "cast", cast_array, ANY, cheap=True, same_type_is_identity=True, infer=_infer_cast,
    evaluate=_eval_cast, attr_types={"dtype": DType},
    doc="Convert the element type: `%1 = cast %x {dtype = f64} : f64[N]`."))

# ---------------------------------------------------------------- special functions
# (their NumPy semantics and constants: `special.py`)

unary("erf", lambda x: erf_array(x).astype(x.dtype), builtin=True, math=True,
      mlir={"float": "math.erf"},
      derivative=scale("d erf(x)/dx = 2/√π · exp(−x²)",
                       lambda s, x, y, a: s.mul(s.const(TWO_OVER_SQRT_PI, x.type),
                                                s.op("exp", [s.neg(s.mul(x, x))]))))
unary("lgamma", lambda x: lgamma_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d lgamma(x)/dx = digamma(x)",
                       lambda s, x, y, a: s.op("digamma", [x])))
unary("digamma", lambda x: polygamma_array(x, 0).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d digamma(x)/dx = polygamma₁(x)   (trigamma)",
                       lambda s, x, y, a: s.op("polygamma", [x], {"order": 1})))
unary("polygamma", lambda x, order: polygamma_array(x, order).astype(x.dtype), math=True,
      attrs=("order",),
      derivative=scale("d polygammaₙ(x)/dx = polygammaₙ₊₁(x)",
                       lambda s, x, y, a: s.op("polygamma", [x], {"order": a["order"] + 1})),
      doc="The n-th derivative of digamma, ψ⁽ⁿ⁾ (internal: the derivatives of digamma): "
          "`%1 = polygamma %x {order = 2} : f64[N]`.")
unary("erfc", lambda x: erfc_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d erfc(x)/dx = −2/√π · exp(−x²)",
                       lambda s, x, y, a: s.mul(s.const(-TWO_OVER_SQRT_PI, x.type),
                                                s.op("exp", [s.neg(s.mul(x, x))]))))
unary("erfinv", lambda x: erfinv_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d erfinv(x)/dx = √π/2 · exp(y²)   (inf at ±1)",
                       lambda s, x, y, a: s.mul(s.const(1 / TWO_OVER_SQRT_PI, y.type),
                                                s.op("exp", [s.mul(y, y)]))))
unary("erfcinv", lambda x: erfcinv_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d erfcinv(q)/dq = −√π/2 · exp(y²)   (−inf at 0 and 2)",
                       lambda s, x, y, a: s.mul(s.const(-1 / TWO_OVER_SQRT_PI, y.type),
                                                s.op("exp", [s.mul(y, y)]))))
unary("gamma", lambda x: gamma_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d Γ(x)/dx = Γ(x) · digamma(x)",
                       lambda s, x, y, a: s.mul(y, s.op("digamma", [x]))))
unary("logit", lambda x: logit_array(x).astype(x.dtype), builtin=True, math=True,
      derivative=divide("d logit(p)/dp = 1 / (p (1 − p))   (inf at 0 and 1)",
                        lambda s, x, y, a: s.mul(x, s.sub(s.const(1, x.type), x))))
# their derivatives: `transforms/reverse_rules.BINARY_PARTIALS`
binary("beta", lambda a, b: beta_array(a, b).astype(a.dtype), FLOAT, builtin=True, math=True,
       doc="Elementwise beta function B(a, b) = Γ(a)Γ(b)/Γ(a + b): `%2 = beta %a, %b : f64[N]`.")
binary("betaln", lambda a, b: betaln_array(a, b).astype(a.dtype), FLOAT, builtin=True,
       math=True, doc="Elementwise log |B(a, b)|: `%2 = betaln %a, %b : f64[N]`.")
# their derivatives in x: `transforms/reverse_rules.LAST_OPERAND_SLOPES` (none in a, b)
binary("gammainc", lambda a, x: gammainc_array(a, x).astype(a.dtype), FLOAT, builtin=True,
       math=True, doc="Regularised lower incomplete gamma function P(a, x) = γ(a, x)/Γ(a): "
                      "`%2 = gammainc %a, %x : f64[N]`.")
binary("gammaincc", lambda a, x: gammaincc_array(a, x).astype(a.dtype), FLOAT, builtin=True,
       math=True, doc="Regularised upper incomplete gamma function Q(a, x) = 1 − P(a, x): "
                      "`%2 = gammaincc %a, %x : f64[N]`.")
declare(Elementwise(
    "betainc", lambda a, b, x: betainc_array(a, b, x).astype(a.dtype), FLOAT, arity=3,
    math=True, doc="Regularised incomplete beta function I_x(a, b) (SciPy's betainc; users "
                   "call betainc(a, b, x)): `%3 = betainc %a, %b, %x : f64[N]`."))
unary("multigammaln", lambda x, d: multigammaln_array(x, d).astype(x.dtype), math=True,
      attrs=("d",),
      derivative=scale("d multigammaln_d(x)/dx = Σ_{j<d} digamma(x − j/2)",
                       lambda s, x, y, a: _multigammaln_slope(s, x, a["d"])),
      doc="log of the multivariate gamma function Γ_d (users call multigammaln(x, d), d an "
          "integer constant): `%1 = multigammaln %x {d = 3} : f64[N]`.")
unary("i0", lambda x: bessel_i_array(x, 0).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d I₀(x)/dx = I₁(x)", lambda s, x, y, a: s.op("i1", [x])))
unary("i1", lambda x: bessel_i_array(x, 1).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d I₁(x)/dx = I₀(x) − I₁(x)/x   (½ at 0)",
                       lambda s, x, y, a: _order_one_slope(s, x, y, "i0")))
unary("j0", lambda x: bessel_jy_array(x, "j", 0).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d J₀(x)/dx = −J₁(x)", lambda s, x, y, a: s.neg(s.op("j1", [x]))))
unary("j1", lambda x: bessel_jy_array(x, "j", 1).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d J₁(x)/dx = J₀(x) − J₁(x)/x   (½ at 0)",
                       lambda s, x, y, a: _order_one_slope(s, x, y, "j0")))
unary("y0", lambda x: bessel_jy_array(x, "y", 0).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d Y₀(x)/dx = −Y₁(x)", lambda s, x, y, a: s.neg(s.op("y1", [x]))))
unary("y1", lambda x: bessel_jy_array(x, "y", 1).astype(x.dtype), builtin=True, math=True,
      derivative=scale("d Y₁(x)/dx = Y₀(x) − Y₁(x)/x",
                       lambda s, x, y, a: _order_one_slope(s, x, y, "y0")))
for _kind, _array in (("j", bessel_jn_array), ("y", bessel_yn_array)):
    unary(f"{_kind}n", lambda x, order, array=_array: array(x, order).astype(x.dtype),
          math=True, attrs=("order",),
          derivative=scale(f"d {_kind.upper()}ₙ(x)/dx = ({_kind.upper()}ₙ₋₁(x) − "
                           f"{_kind.upper()}ₙ₊₁(x))/2",
                           lambda s, x, y, a, kind=_kind: _integer_order_slope(
                               s, kind, x, a["order"])),
          doc=f"Bessel function {_kind.upper()}ₙ of integer order n ≥ 0 (users call "
              f"{_kind}n(n, x), n an integer constant, negative too): "
              f"`%1 = {_kind}n %x {{order = 2}} : f64[N]`.")
_REAL_ORDER_MATHS = {"iv": "d Iᵥ(x)/dx = (Iᵥ₋₁(x) + Iᵥ₊₁(x))/2",
                     "ive": "d ive_v(x)/dx = (ive_v−1(x) + ive_v+1(x))/2 − sign(x) ive_v(x)",
                     "jv": "d Jᵥ(x)/dx = (Jᵥ₋₁(x) − Jᵥ₊₁(x))/2"}
_REAL_ORDER_DOCS = {"iv": "modified Bessel function Iᵥ", "ive": "e^(−|x|) Iᵥ(x)",
                    "jv": "Bessel function Jᵥ (v not an integer: those are jn's)"}
for _name, _array in (("iv", iv_array), ("ive", ive_array), ("jv", jv_array)):
    unary(_name, lambda x, order, array=_array: array(x, order).astype(x.dtype),
          math=True, attrs=("order",), attr_types={"order": float},
          derivative=scale(_REAL_ORDER_MATHS[_name],
                           lambda s, x, y, a, name=_name: _real_order_slope(
                               s, name, x, y, a["order"])),
          doc=f"{_REAL_ORDER_DOCS[_name]} of real order v, a constant (users call "
              f"{_name}(v, x)): `%1 = {_name} %x {{order = 2.5}} : f64[N]`.")
