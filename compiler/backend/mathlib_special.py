"""Special functions of the math library: erf, erfc, lgamma, digamma and polygamma (f32,
f64); gamma, beta and betaln, built on lgamma's pieces, are in `mathlib_gamma.py`.

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
from reverie.compiler.backend.mathlib_formats import F64
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


# x √π e^(x²) erfc(x) = T(1/x²) for x in [5.95, 27.5] (erfc underflows beyond): minimax
# for the relative error, 2.2e-19
ERFC_TAIL = (1.0, -0.4999999999999564, 0.7499999999656308, -1.8749999855047257,
             6.562496299142636, -29.530637161466064, 162.35326171244625, -1050.4210345267395,
             7628.911245544511, -56274.80873417822, 345180.5222177287, -1194805.4840140683)
# e^(x²) erfc(x) = Gᵢ(x − cᵢ) on [2, 3), [3, 4), [4, 5), [5, 5.95) (minimax for the relative
# error, below 1e-17; erf's piece from 2 on is accurate only as far as erf needs)
ERFCX_PIECES = (
    (2.0, 2.5, (
        0.2108063640611436, -0.07434734678979472, 0.024937997086656873, -0.008001569382093923,
        0.0024670368157024302, -0.0007335909374714267, 0.00021101982429426398,
        -5.8868958366850396e-05, 1.5961852452136706e-05, -4.214357738686666e-06,
        1.0852322593625435e-06, -2.7263031462274196e-07, 6.707984175652613e-08,
        -1.7021676181629475e-08, 3.995469825835056e-09)),
    (3.0, 3.5, (
        0.1552936556088943, -0.041323577833252495, 0.010661133192510575, -0.0026730744396433904,
        0.0006526863268788971, -0.00015546891823835205, 3.6181704362394024e-05,
        -8.237986344577465e-06, 1.8371878223737637e-06, -4.0174190563438207e-07,
        8.622003739001762e-08, -1.816549986637799e-08, 3.765092692734675e-09,
        -7.971764703988702e-10, 1.595328641710529e-10)),
    (4.0, 4.5, (
        0.12248480427384142, -0.026015928630939815, 0.005413125434612246, -0.0011045761167897924,
        0.00022126645452905718, -4.3550828564236795e-05, 8.429241997653663e-06,
        -1.6054970095043084e-06, 3.0112634895962293e-07, -5.56508803157821e-08,
        1.013959783833933e-08, -1.8216994524648546e-09, 3.2311207661933553e-10,
        -5.818966112213677e-11, 1.0048463319079519e-11)),
    (5.0, 5.475, (
        0.10140902770783637, -0.017950313694704303, 0.003131060229330329, -0.0005385059594138285,
        9.137005076991682e-05, -1.530197257965896e-05, 2.5305836292297964e-06,
        -4.1343634080310866e-07, 6.675495211708706e-08, -1.0656266055380346e-08,
        1.682143202556019e-09, -2.627391333804912e-10, 4.136817797049566e-11,
        -6.324547950559863e-12, 0.0)),
)
SQRT_PI = 1.7724538509055159
ERFC_NEAR = 0.84375       # below, erfc x = 1 − erf x
ERFC_ZERO = 30.0          # erfc x rounds to 0 from 27.3 on


def _erfc(e: Emitter, x: Value) -> Value:
    """erfc x in f64: 1 − erf x below 0.84375; e^(−x²) G(|x|) (G ≈ e^(x²) erfc: erf's piece
    below 2, then `ERFCX_PIECES`) up to 5.95, T(1/x²)/(|x|√π) e^(−x²) beyond, with x²
    split exactly into hi + lo (e^(−x²) = e^(−hi)(1 − lo)), so the tail keeps its relative
    accuracy down to the subnormals; 2 − erfc|x| for negative x."""
    d = e.wide()
    x = d.extend(x)
    erf_near = d.fma(x, d.poly(d.mul(x, x), F64.erf_small_poly), x)
    ax = d.clamp(d.fabs(x), 0.0, ERFC_ZERO)
    z = d.mul(ax, ax)
    square_lo = d.exact_fma(ax, ax, d.neg(z))
    decay = d.exp(d.neg(z))
    decay = d.fma(decay, d.neg(square_lo), decay)
    lower = d.poly(d.sub(ax, F64.erfcx_centres[0]), F64.erfcx_polys[0])
    centre, coeffs = ERFCX_PIECES[0][1], list(ERFCX_PIECES[0][2])
    for start, piece_centre, piece in ERFCX_PIECES[1:]:
        beyond = d.cmp(">=", ax, start)
        centre = d.select(beyond, piece_centre, centre)
        coeffs = [d.select(beyond, new, old) for new, old in zip(piece, coeffs, strict=True)]
    upper = d.poly(d.sub(ax, centre), coeffs)
    middle = d.select(d.cmp(">=", ax, 2.0), upper, lower)
    w = d.div(1.0, z)
    tail = d.div(d.poly(w, ERFC_TAIL), d.mul(ax, SQRT_PI))
    scaled = d.select(d.cmp(">=", ax, F64.erf_max), tail, middle)
    far = d.mul(decay, scaled)
    far = d.select(d.cmp("<", x, 0.0), d.sub(2.0, far), far)
    result = d.select(d.cmp("<", ax, ERFC_NEAR), d.sub(1.0, erf_near), far)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


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
    "erfc": _erfc,
    "lgamma": lgamma_body,
    "digamma": lambda e, x: polygamma_body(e, x, 0),
    "polygamma": polygamma_body,
}
BODIES: dict[str, Callable[..., Value]] = {"erf": _erf, **NEUTRAL}
