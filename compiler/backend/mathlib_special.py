"""Special functions of the math library: erf, lgamma, digamma and polygamma (f32, f64);
gamma, beta and betaln, built on lgamma's pieces, are in `mathlib_gamma.py`, erfc, erfinv
and erfcinv in `mathlib_error_function.py`.

`BODIES` maps each function to its body, as in `mathlib_elementary.py`. A body written only
against the operations that `mathlib.MathEmitter` shares with the MLIR export's scalar
writer (`export/mlir_scalar.MlirArith`) is listed in `NEUTRAL` as well, and the MLIR export
then writes the same algorithm out for an op MLIR lacks. Those operations: `value`, `add`,
`sub`, `mul`, `div`, `neg`, `fma`, `poly`, `fabs`, `floor`, `rint`, `copysign`, `clamp`,
`log`, `log1p`, `exp`, `exp2`, `sqrt`, `pow`, `exact_fma`, `cmp`, `cmp_unordered`, `isnan`,
`select`, `both`, `either`, and `wide`, `extend`, `narrow` to compute in f64 (`fmt` names
the format of the arguments).

The gamma family is computed in f64 (f32 arguments are widened, the result rounded once),
branch-free so that loops vectorise, in three steps (the NumPy reference in
`ir/special.py` takes the same ones, with its own constants):

1. Reflection below ½, with sin(πx) and cos(πx) from x − rint(x) (exact) by Taylor
   polynomials on [0, ¼] (the rest by symmetry), so that zeros and poles are exact:
   log|Γ(x)| = −log|sin(πx)/π| − log Γ(1 − x),
   ψ⁽ⁿ⁾(x) = (−1)ⁿ ψ⁽ⁿ⁾(1 − x) − πⁿ⁺¹ Pₙ(cot πx)   (dⁿ/dzⁿ cot z = Pₙ(cot z)).
2. Recurrence. lgamma steps down to [1.5, 2.5), log Γ(z) = log((z−1)⋯(z−m)) +
   log Γ(z − m), and takes log Γ(2 + t) from its Taylor series, (1 − γ)t + Σ (−1)ᵏ
   (ζ(k) − 1)/k tᵏ; below 1.5 it uses log Γ(1 + t) = log Γ(2 + t) − log1p(t), exact near
   the zeros at 1 and 2. ψ⁽ⁿ⁾ steps up, ψ⁽ⁿ⁾(z) = ψ⁽ⁿ⁾(z + 1) − (−1)ⁿ n!/zⁿ⁺¹, a fixed number
   of masked steps until z ≥ 10 (more for large n); digamma within ¼ of its positive zero
   x₀ = 1.4616… is instead Σ ψ⁽ᵏ⁾(x₀)/k! (x − x₀)ᵏ, where the recurrence would cancel.
3. Asymptotic series at large z: Stirling's, log Γ(z) = (z − ½)(log z − 1) + (log 2π − 1)/2
   + Σ B₂ₖ/(2k(2k−1) z²ᵏ⁻¹), and that of ψ⁽ⁿ⁾ (see `ir/special.py`), with as many terms as
   make the first omitted one smaller than 2⁻⁶⁰ of the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

from reverie.compiler.backend.mathlib_elementary import exp_core
from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.ir.special import bernoulli, cot_derivative, series_coefficient


def _erf(e: Emitter, x: Value) -> Value:
    """x + x E(x^2) near 0; 1 - e**(-x^2) G(|x|) (G: erfc scaled, two pieces) further out."""
    fmt = e.fmt
    z = e.mul(x, x)
    small = e.fma(x, e.poly(z, fmt.erf_small_poly), x)
    ax = e.clamp(e.fabs(x), 0.0, fmt.erf_max)
    upper = e.cmp(">=", ax, 2.0)
    lower_poly, upper_poly = fmt.erfcx_polys
    coeffs = [e.select(upper, hi, lo) for lo, hi in zip(lower_poly, upper_poly, strict=True)]
    centre = e.select(upper, fmt.erfcx_centres[1], fmt.erfcx_centres[0])
    erfcx = e.poly(e.sub(ax, centre), coeffs)
    erfc = e.mul(exp_core(e, e.neg(e.mul(ax, ax))), erfcx)
    large = e.copysign(e.sub(1.0, erfc), x)
    result = e.select(e.cmp("<", e.fabs(x), 0.84375), small, large)
    return e.select(e.isnan(x), x, result)


# ---------------------------------------------------------------- constants


EULER_MACLAURIN = tuple(float(bernoulli(2 * i)) / math.factorial(2 * i) for i in range(1, 12))


def hurwitz_zeta(s: int, q: float) -> float:
    """ζ(s, q) = Σⱼ (q + j)⁻ˢ for s ≥ 2, q > 0: Euler–Maclaurin summation from q + 10."""
    a = q + 10
    terms = [(q + j) ** -s for j in range(10)] + [a ** (1 - s) / (s - 1), a ** -s / 2]
    rising = float(s)  # s (s + 1) ⋯ (s + 2i − 2)
    for i, weight in enumerate(EULER_MACLAURIN, start=1):
        terms.append(weight * rising * a ** (-s - 2 * i + 1))
        rising *= (s + 2 * i - 1) * (s + 2 * i)
    return math.fsum(terms)


# sin(πa)/(πa) and cos(πa) for |a| ≤ 1/4, Taylor polynomials in a²
SIN_PI = tuple((-1) ** k * math.pi ** (2 * k) / math.factorial(2 * k + 1) for k in range(10))
COS_PI = tuple((-1) ** k * math.pi ** (2 * k) / math.factorial(2 * k) for k in range(11))
EULER_GAMMA = 0.5772156649015329
# log Γ(2 + t) / t for |t| ≤ 1/2: (1 − γ) + Σₖ (−1)ᵏ (ζ(k) − 1)/k tᵏ⁻¹, ζ(k) − 1 = ζ(k, 2)
LGAMMA_AT_TWO = (1 - EULER_GAMMA,) + tuple((-1) ** k * hurwitz_zeta(k, 2.0) / k
                                           for k in range(2, 29))
# Stirling's series: Σₖ B₂ₖ/(2k(2k−1)) w²ᵏ⁻¹ = w S(w²)
STIRLING = tuple(float(bernoulli(2 * k) / (2 * k * (2 * k - 1))) for k in range(1, 8))
HALF_LOG_TWO_PI_MINUS_HALF = 0.5 * math.log(2 * math.pi) - 0.5
SHIFT_TARGET = 10           # where the asymptotic series take over (at least)
LGAMMA_STEPS = 8            # downward steps from [1.5, 10) to [1.5, 2.5)
DIGAMMA_ROOT = (1.4616321449683622, 9.549995429965697e-17)   # ψ(x₀) = 0, as hi + lo
ROOT_WINDOW = 0.25
# ψ(x₀ + t) / t = Σₖ ψ⁽ᵏ⁾(x₀)/k! tᵏ⁻¹ with ψ⁽ᵏ⁾(x₀)/k! = (−1)ᵏ⁺¹ ζ(k + 1, x₀), |t| < 1/4
AT_ROOT = tuple((-1) ** (k + 1) * hurwitz_zeta(k + 1, DIGAMMA_ROOT[0]) for k in range(1, 24))


@cache
def polygamma_series(order: int) -> tuple[int, tuple[float, float], tuple[float, ...]]:
    """(target, (a₀, a₁), Q) with ψ⁽ⁿ⁾(z) = [log z if n = 0] + (−1)ⁿ⁺¹ wⁿ (a₀ + a₁w +
    w² Q(w²)) for z ≥ target, w = 1/z: a₀ = (n−1)! (0 for digamma), a₁ = n!/2, Q's terms the
    series coefficients. The target is the smallest from SHIFT_TARGET on where at most 16
    terms make the first omitted one smaller than 2⁻⁶⁰ of the leading term."""
    lead = math.factorial(order - 1) if order else 1
    for target in range(SHIFT_TARGET, 100 * SHIFT_TARGET):
        for terms in range(1, 17):
            omitted = abs(series_coefficient(order, terms + 1)) / target ** (2 * terms + 2)
            if omitted < lead * 2.0 ** -60:
                head = (float(math.factorial(order - 1)) if order else 0.0,
                        math.factorial(order) / 2)
                return target, head, tuple(float(series_coefficient(order, k))
                                           for k in range(1, terms + 1))
    raise ValueError(f"no asymptotic series for polygamma of order {order}")


# ---------------------------------------------------------------- gamma family


def _power(e: Emitter, w: Value, n: int) -> Value:
    """wⁿ by repeated squaring (n ≥ 0 is known when compiling)."""
    result, square = None, w
    while n:
        if n & 1:
            result = square if result is None else e.mul(result, square)
        n >>= 1
        if n:
            square = e.mul(square, square)
    return e.value(1.0) if result is None else result


def sin_cos_pi(e: Emitter, x: Value) -> tuple[Value, Value, Value]:
    """(|sin πx|/π, cos πx · sign(r), r) with x = rint(x) + r, |r| ≤ ½ (exact)."""
    r = e.sub(x, e.rint(x))
    u = e.fabs(r)
    big = e.cmp(">", u, 0.25)
    a = e.select(big, e.sub(0.5, u), u)        # in [0, 1/4]: sin π|r| = cos πa when big
    a2 = e.mul(a, a)
    sin_a = e.mul(a, e.poly(a2, SIN_PI))       # sin(πa)/π
    cos_a = e.poly(a2, COS_PI)
    sin_over_pi = e.select(big, e.mul(cos_a, 1 / math.pi), sin_a)
    return sin_over_pi, e.select(big, e.mul(math.pi, sin_a), cos_a), r


def _reflected(e: Emitter, x: Value) -> tuple[Value, Value]:
    """(x < ½, the argument of the functions on [½, ∞]: 1 − x or x)."""
    reflect = e.cmp("<", x, 0.5)
    return reflect, e.select(reflect, e.sub(1.0, x), x)


def _pole(e: Emitter, reflect: Value, r: Value, x: Value) -> Value:
    """Whether x is 0, a negative integer or −inf."""
    return e.either(e.both(reflect, e.cmp("==", r, 0.0)), e.cmp("==", x, -math.inf))


def lgamma_positive(e: Emitter, z: Value) -> Value:
    """log Γ(z) for z ≥ ½ (+inf included)."""
    small, far = e.cmp("<", z, 1.5), e.cmp(">=", z, float(SHIFT_TARGET))
    steps = e.clamp(e.floor(e.sub(z, 1.5)), 0.0, float(LGAMMA_STEPS))
    product = e.value(1.0)
    for k in range(1, LGAMMA_STEPS + 1):
        factor = e.select(e.cmp(">=", steps, float(k)), e.sub(z, float(k)), 1.0)
        product = e.mul(product, factor)
    t = e.select(small, e.sub(z, 1.0), e.sub(z, e.add(steps, 2.0)))   # exact, |t| ≤ 1/2
    # one log1p serves all three: −log1p(t), log(product) and Stirling's log z
    logs = e.log1p(e.select(small, t, e.sub(e.select(far, z, product), 1.0)))
    near = e.fma(t, e.poly(t, LGAMMA_AT_TWO), e.select(small, e.neg(logs), logs))
    w = e.div(1.0, z)
    series = e.mul(w, e.poly(e.mul(w, w), STIRLING))
    stirling = e.add(e.fma(e.sub(z, 0.5), e.sub(logs, 1.0), HALF_LOG_TWO_PI_MINUS_HALF), series)
    return e.select(far, stirling, near)


def lgamma_body(e: Emitter, x: Value) -> Value:
    """log |Γ(x)|: +inf at the poles (0, the negative integers, −inf), NaN for NaN."""
    d = e.wide()
    x = d.extend(x)
    reflect, z = _reflected(d, x)
    positive = lgamma_positive(d, z)
    sin_over_pi, _, r = sin_cos_pi(d, x)
    result = d.select(reflect, d.sub(d.neg(d.log(sin_over_pi)), positive), positive)
    result = d.select(_pole(d, reflect, r, x), math.inf, result)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


def _polygamma_positive(e: Emitter, z: Value, order: int) -> Value:
    """ψ⁽ⁿ⁾(z) for z ≥ ½: masked steps up to the series' target, then the series."""
    target, (a0, a1), q = polygamma_series(order)
    shifted, steps = z, e.value(0.0)
    for _ in range(math.ceil(target - 0.5)):
        below = e.cmp("<", shifted, float(target))
        term = _power(e, e.div(1.0, shifted), order + 1)
        steps = e.add(steps, e.select(below, term, 0.0))
        shifted = e.select(below, e.add(shifted, 1.0), shifted)
    w = e.div(1.0, shifted)
    series = e.mul(_power(e, w, order), e.fma(w, e.fma(w, e.poly(e.mul(w, w), q), a1), a0))
    magnitude = e.fma(steps, float(math.factorial(order)), series)
    if order:
        return magnitude if order % 2 else e.neg(magnitude)
    t = e.sub(e.sub(z, DIGAMMA_ROOT[0]), DIGAMMA_ROOT[1])
    near_root = e.cmp("<", e.fabs(t), ROOT_WINDOW)
    return e.select(near_root, e.mul(t, e.poly(t, AT_ROOT)), e.sub(e.log(shifted), magnitude))


def polygamma_body(e: Emitter, x: Value, order: int) -> Value:
    """ψ⁽ⁿ⁾(x); at the poles (0, the negative integers, −inf) (−1)ⁿ⁺¹·inf, for digamma NaN
    but −inf at +0 and +inf at −0 (scipy.special's values)."""
    d = e.wide()
    x = d.extend(x)
    reflect, z = _reflected(d, x)
    positive = _polygamma_positive(d, z, order)
    sin_over_pi, cos_r, r = sin_cos_pi(d, x)
    cot = d.div(cos_r, d.mul(math.pi, d.copysign(sin_over_pi, r)))
    odd = (order + 1) % 2            # Pₙ has the parity of n + 1: c^odd Q(c²)
    derivative = d.poly(d.mul(cot, cot), [float(c) for c in cot_derivative(order)[odd::2]])
    if odd:
        derivative = d.mul(derivative, cot)
    mirrored = positive if order % 2 == 0 else d.neg(positive)
    result = d.select(reflect, d.fma(-math.pi ** (order + 1), derivative, mirrored), positive)
    if order:
        at_pole: Value | float = math.inf if order % 2 else -math.inf
    else:
        at_pole = d.select(d.cmp("==", x, 0.0), d.copysign(math.inf, d.neg(x)), math.nan)
    result = d.select(_pole(d, reflect, r, x), at_pole, result)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


NEUTRAL: dict[str, Callable[..., Value]] = {
    "lgamma": lgamma_body,
    "digamma": lambda e, x: polygamma_body(e, x, 0),
    "polygamma": polygamma_body,
}
BODIES: dict[str, Callable[..., Value]] = {"erf": _erf, **NEUTRAL}
