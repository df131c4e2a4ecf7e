"""Inverse trigonometric and inverse hyperbolic functions of the math library: arctan,
arctan2, arcsin, arccos, arcsinh, arccosh and arctanh (f32, f64).

`BODIES` maps each function (by its NumPy name, the op's) to its body, as in
`mathlib_elementary.py`. Every body computes in f64 (f32 arguments are widened exactly and
the result rounded once), branch-free so that loops vectorise. Method (after fdlibm):

- arctan: |x| > 1 is reflected, atan|x| = π/2 − atan(1/|x|); on [0, 1], arguments above
  tan(π/8) are moved next to 0, atan r = π/4 + atan((r − 1)/(r + 1)); there
  atan t = t + t³ S(t²), S a minimax polynomial on t² ≤ tan²(π/8). π/2 and π/4 are
  added as hi + lo. arctan2(y, x) takes atan of min/max(|x|, |y|) ∈ [0, 1] the same way,
  then π/2 − a where |y| > |x|, π − a where x has its sign bit set, and y's sign.
- arcsin: asin s = s + s³ R(s²) for |s| ≤ ½ (R minimax); above, asin|x| = π/2 − 2 asin √z
  with z = (1 − |x|)/2 (exact). arccos: π/2 − asin x for |x| ≤ ½, 2 asin √((1 − x)/2)
  above ½, π − 2 asin √((1 + x)/2) below −½.
- arcsinh: log1p(|x| + x²/(1 + √(1 + x²))) up to 2, log(2|x| + 1/(√(x² + 1) + |x|)) up to
  2²⁸, log|x| + log 2 beyond; arccosh: log1p(t + √(2t + t²)), t = x − 1, up to 2, then
  log(2x − 1/(x + √(x² − 1))), log x + log 2 beyond 2²⁸; arctanh: ½ log1p(2|x| +
  2|x|²/(1 − |x|)) below ½, ½ log1p(2|x|/(1 − |x|)) above.

Special values are those of NumPy (C99): ±0 keep their sign, arctan(±inf) = ±π/2, arctan2
of zeros and infinities by the quadrant of the signs, arcsin/arccos/arccosh/arctanh are NaN
outside their domains, arctanh(±1) = ±inf; NaN gives NaN. Measured errors: docs/mathlib.md.
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value, in_f64

PIO2 = (1.5707963267948966, 6.123233995736766e-17)    # π/2 as hi + lo
PIO4 = (0.7853981633974483, 3.061616997868383e-17)
PI = (3.141592653589793, 1.2246467991473532e-16)
LN2 = 0.6931471805599453
TAN_PI_8 = 0.41421356237309503
HUGE = 2.0**28                 # beyond it, x² + 1 rounds to x²
# atan t = t + t³ S(t²), t² ≤ tan²(π/8): minimax for the relative error of atan, 1.3e-18
ATAN_POLY = (-0.333333333333332, 0.19999999999953205, -0.14285714280162073,
             0.1111111078192099, -0.09090897718275515, 0.07692059589365624,
             -0.06663097706740759, 0.058478481028404, -0.050391389283120876,
             0.03806080374770872, -0.01790354763425406)
# asin s = s + s³ R(s²), s² ≤ 1/4: minimax for the relative error of asin, 9.6e-19
ASIN_POLY = (0.1666666666666676, 0.07499999999970756, 0.04464285717465481,
             0.030381942705638022, 0.022372215050401753, 0.017351610846708776,
             0.01398083499680572, 0.011398790311820593, 0.01078095647744571,
             0.0037036748863898206, 0.02171428032591186, -0.021008985118011983,
             0.03263498432994104)


def _minus(e: Emitter, constant: tuple[float, float], v: Value) -> Value:
    """constant − v, with the constant as hi + lo."""
    return e.sub(constant[0], e.sub(v, constant[1]))


def _atan_unit(e: Emitter, r: Value) -> Value:
    """atan r for r in [0, 1] (NaN stays NaN)."""
    shifted = e.cmp(">", r, TAN_PI_8)
    t = e.select(shifted, e.div(e.sub(r, 1.0), e.add(r, 1.0)), r)
    z = e.mul(t, t)
    tail = e.mul(e.mul(t, z), e.poly(z, ATAN_POLY))
    near = e.add(t, tail)
    return e.select(shifted, e.add(PIO4[0], e.add(t, e.add(tail, PIO4[1]))), near)


def _arctan(e: Emitter, x: Value) -> Value:
    """atan x = ±(π/2 − atan(1/|x|)) for |x| > 1."""
    ax = e.fabs(x)
    reflect = e.cmp(">", ax, 1.0)
    a = _atan_unit(e, e.select(reflect, e.div(1.0, ax), ax))
    return e.copysign(e.select(reflect, _minus(e, PIO2, a), a), x)


def _arctan2(e: Emitter, y: Value, x: Value) -> Value:
    """The angle of (x, y) in (−π, π], by the quadrant of the signs (C99's zeros and
    infinities: 0/0 counts as 0, inf/inf as 1)."""
    ay, ax = e.fabs(y), e.fabs(x)
    steep = e.cmp(">", ay, ax)
    small, large = e.select(steep, ax, ay), e.select(steep, ay, ax)
    r = e.div(small, large)
    r = e.select(e.cmp("==", large, 0.0), 0.0, r)
    r = e.select(e.cmp("==", small, float("inf")), 1.0, r)
    a = _atan_unit(e, r)
    a = e.select(steep, _minus(e, PIO2, a), a)
    a = e.select(e.sign_bit_set(x), _minus(e, PI, a), a)
    result = e.copysign(a, y)
    return e.select(e.either(e.isnan(x), e.isnan(y)), e.add(x, y), result)


def _asin_small(e: Emitter, s: Value) -> Value:
    """asin s for |s| ≤ ½."""
    z = e.mul(s, s)
    return e.add(s, e.mul(e.mul(s, z), e.poly(z, ASIN_POLY)))


def _arcsin(e: Emitter, x: Value) -> Value:
    """asin x; π/2 − 2 asin √((1 − |x|)/2) above ½."""
    ax = e.fabs(x)
    near = _asin_small(e, x)
    twice = e.mul(2.0, _asin_small(e, e.intrinsic("llvm.sqrt", e.mul(e.sub(1.0, ax), 0.5))))
    far = e.copysign(_minus(e, PIO2, twice), x)
    return e.select(e.cmp("<=", ax, 0.5), near, far)


def _arccos(e: Emitter, x: Value) -> Value:
    """acos x = π/2 − asin x, 2 asin √((1 − x)/2) above ½, π − 2 asin √((1 + x)/2) below."""
    ax = e.fabs(x)
    middle = _minus(e, PIO2, _asin_small(e, x))
    twice = e.mul(2.0, _asin_small(e, e.intrinsic("llvm.sqrt", e.mul(e.sub(1.0, ax), 0.5))))
    far = e.select(e.sign_bit_set(x), _minus(e, PI, twice), twice)
    return e.select(e.cmp("<=", ax, 0.5), middle, far)


def _sqrt(e: Emitter, x: Value) -> Value:
    return e.intrinsic("llvm.sqrt", x)


def _arcsinh(e: Emitter, x: Value) -> Value:
    """asinh x = ±log(|x| + √(x² + 1)), in the form of each range that does not cancel."""
    ax = e.fabs(x)
    x2 = e.mul(ax, ax)
    root = _sqrt(e, e.add(x2, 1.0))
    near = e.log1p(e.add(ax, e.div(x2, e.add(1.0, root))))
    middle = e.log(e.add(e.mul(2.0, ax), e.div(1.0, e.add(root, ax))))
    huge = e.add(e.log(ax), LN2)
    result = e.select(e.cmp(">", ax, 2.0), e.select(e.cmp(">", ax, HUGE), huge, middle), near)
    return e.copysign(result, x)


def _arccosh(e: Emitter, x: Value) -> Value:
    """acosh x = log(x + √(x² − 1)) for x ≥ 1, NaN below."""
    t = e.sub(x, 1.0)
    near = e.log1p(e.add(t, _sqrt(e, e.fma(t, t, e.add(t, t)))))
    middle = e.log(e.sub(e.mul(2.0, x), e.div(1.0, e.add(x, _sqrt(e, e.fma(x, x, -1.0))))))
    huge = e.add(e.log(x), LN2)
    result = e.select(e.cmp(">", x, 2.0), e.select(e.cmp(">", x, HUGE), huge, middle), near)
    return e.select(e.cmp_unordered("<", x, 1.0), float("nan"), result)


def _arctanh(e: Emitter, x: Value) -> Value:
    """atanh x = ±½ log1p(2|x|/(1 − |x|)); ±inf at ±1, NaN beyond."""
    ax = e.fabs(x)
    two_ax = e.add(ax, ax)
    rest = e.sub(1.0, ax)
    near = e.add(two_ax, e.div(e.mul(two_ax, ax), rest))
    far = e.div(two_ax, rest)
    result = e.mul(0.5, e.log1p(e.select(e.cmp("<", ax, 0.5), near, far)))
    result = e.select(e.cmp_unordered(">", ax, 1.0), float("nan"), result)
    return e.copysign(result, x)


BODIES: dict[str, Callable[..., Value]] = {
    "arctan": in_f64(_arctan),
    "arctan2": in_f64(_arctan2),
    "arcsin": in_f64(_arcsin),
    "arccos": in_f64(_arccos),
    "arcsinh": in_f64(_arcsinh),
    "arccosh": in_f64(_arccosh),
    "arctanh": in_f64(_arctanh),
}
