"""Γ and the beta function in the math library: gamma, multigammaln, beta and betaln (f32,
f64).

Every body computes in f64 (f32 arguments widened exactly, the result rounded once),
branch-free, against the operations `mathlib.MathEmitter` shares with the MLIR export's
`MlirArith` (`NEUTRAL`: the MLIR export writes the same algorithm), on top of lgamma's
pieces (`mathlib_special.py`):

- gamma, for z > 0: below 10, Γ(z) = Γ(t) · t(t + 1)⋯(z − 1) with t = 1 + frac(z) ∈ [1, 2)
  and Γ(t) = exp(lgamma(t)), accurate because |lgamma(t)| < 0.13 (z < 1: Γ(z + 1)/z);
  from 10, Stirling's Γ(z) = √(2π) p · (p e⁻ᶻ) · exp(Σ B₂ₖ/(2k(2k−1) z²ᵏ⁻¹)), p = z^((z−½)/2)
  (pow, so that nothing overflows before Γ does). Below 0 the reflection
  Γ(x) = −π / (x sin(πx) Γ(−x)) (−x exact, where 1 − x would round), sin(πx) from
  x − rint(x) (exact), divided factor by factor so that Γ(x) reaches the subnormals near
  −180 without an infinite Γ(−x).
  Γ(±0) = ±inf, NaN at the negative integers and −inf, inf from 171.62 on (SciPy's values).
- a + b rounds: Γ(a + b) and lgamma(a + b) are corrected by its exact rounding error δ,
  Γ(s + δ) = Γ(s)(1 + ψ(s) δ), where δ would cost ψ(s)·δ relative (hundreds of ulps).
- betaln(a, b) = lgamma(a) + lgamma(b) − lgamma(a + b), but where the larger argument a is
  at least 10 the terms that cancel are subtracted in closed form (Stirling's series
  c(z) = Σ B₂ₖ/(2k(2k−1) z²ᵏ⁻¹)): with s = a + b,
  lgamma(b) − (a − ½) log1p(b/a) − b (log s − 1) + c(a) − c(s), and when b ≥ 10 too,
  ½ log 2π − (a − ½) log1p(b/a) − (b − ½) log1p(a/b) − ½ log s + c(a) + c(b) − c(s).
- multigammaln {d} (x) = d(d − 1)/4 log π + Σ_{j<d} lgamma(x − j/2), NaN for x ≤ (d − 1)/2
  (SciPy raises there).
- beta(a, b) = Γ(a) (Γ(b) / Γ(a + b)) while a + b < 171 (every Γ finite), else
  exp(betaln(a, b)) (positive arguments).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_special import (
    STIRLING,
    lgamma_body,
    lgamma_positive,
    polygamma_body,
    sin_cos_pi,
)

SQRT_TWO_PI = 2.5066282746310002
HALF_LOG_TWO_PI = 0.9189385332046727
STIRLING_FROM = 10.0       # Stirling's series from here on (7 terms: < 2⁻⁵⁶ relative)
RECURRENCE_STEPS = 8       # downward steps from [1, 10) to [1, 2)
GAMMA_OVERFLOW = 171.625   # Γ(x) > the largest double beyond
UNDERFLOW = -190.0         # |Γ(x)| < the smallest subnormal below
BETA_BY_GAMMA = 171.0      # beta through Γ while a + b is below


def stirling_correction(e: Emitter, z: Value) -> Value:
    """c(z) = Σₖ B₂ₖ/(2k(2k−1) z²ᵏ⁻¹) for z ≥ 10."""
    w = e.div(1.0, z)
    return e.mul(w, e.poly(e.mul(w, w), STIRLING))


def _gamma_factors(e: Emitter, z: Value) -> tuple[Value, Value]:
    """(A, B) with Γ(z) = A · B for z > 0, each finite while Γ(z) is below about 10³⁰⁰."""
    whole = e.floor(z)
    t = e.add(e.sub(z, whole), 1.0)                   # in [1, 2), exact
    product = e.value(1.0)
    for j in range(RECURRENCE_STEPS + 1):            # t (t + 1) ⋯ (z − 1)
        product = e.mul(product, e.select(e.cmp("<", float(j), e.sub(z, t)), e.add(t, float(j)),
                                          1.0))
    near = e.mul(e.exp(lgamma_positive(e, t)), product)
    near = e.select(e.cmp("<", z, 1.0), e.div(near, z), near)      # Γ(z + 1)/z
    p = e.pow(z, e.mul(e.sub(z, 0.5), 0.5))
    far_a = e.mul(e.mul(SQRT_TWO_PI, p), e.exp(stirling_correction(e, e.select(
        e.cmp(">=", z, STIRLING_FROM), z, STIRLING_FROM))))
    far_b = e.mul(p, e.exp(e.neg(z)))
    far = e.cmp(">=", z, STIRLING_FROM)
    return e.select(far, far_a, near), e.select(far, far_b, 1.0)


def _signed_sin_pi_over_pi(e: Emitter, x: Value) -> Value:
    """sin(πx)/π, from x − rint(x)."""
    sin_over_pi, _, r = sin_cos_pi(e, x)
    half = e.mul(e.rint(x), 0.5)
    signed = e.copysign(sin_over_pi, r)
    return e.select(e.cmp("!=", e.floor(half), half), e.neg(signed), signed)


def _gamma(e: Emitter, x: Value) -> Value:
    """Γ(x) with its sign (see the module docstring)."""
    d = e.wide()
    x = d.extend(x)
    reflect = d.cmp("<", x, 0.0)
    a, b = _gamma_factors(d, d.fabs(x))
    positive = d.select(d.cmp(">=", x, GAMMA_OVERFLOW), math.inf, d.mul(a, b))
    sin_pi = _signed_sin_pi_over_pi(d, x)
    reflected = d.div(d.div(d.div(-1.0, d.mul(x, sin_pi)), a), b)
    reflected = d.select(d.cmp("<", x, UNDERFLOW), d.copysign(0.0, sin_pi), reflected)
    result = d.select(reflect, reflected, positive)
    integral = d.cmp("==", d.floor(x), x)
    result = d.select(d.both(reflect, integral), math.nan, result)      # poles, −inf
    result = d.select(d.cmp("==", x, 0.0), d.copysign(math.inf, x), result)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


def _sum_and_error(e: Emitter, a: Value, b: Value) -> tuple[Value, Value]:
    """(s, δ) with s = fl(a + b) and a + b = s + δ exactly (Knuth's TwoSum)."""
    s = e.add(a, b)
    b_part = e.sub(s, a)
    return s, e.add(e.sub(a, e.sub(s, b_part)), e.sub(b, b_part))


def betaln_f64(d: Emitter, a: Value, b: Value) -> Value:
    """log |B(a, b)| in f64 (see the module docstring)."""
    swap = d.cmp("<", a, b)
    a, b = d.select(swap, b, a), d.select(swap, a, b)         # a ≥ b
    s, rounding = _sum_and_error(d, a, b)
    of_sum = d.fma(polygamma_body(d, s, 0), rounding, lgamma_body(d, s))   # lgamma(a + b)
    plain = d.sub(d.add(lgamma_body(d, a), lgamma_body(d, b)), of_sum)
    big_a = d.select(d.cmp(">=", a, STIRLING_FROM), a, STIRLING_FROM)
    big_b = d.select(d.cmp(">=", b, STIRLING_FROM), b, STIRLING_FROM)
    big_s = d.add(big_a, d.select(d.cmp(">", b, 0.0), b, 1.0))
    log_s = d.log(big_s)
    ca, cs = stirling_correction(d, big_a), stirling_correction(d, big_s)
    lead = d.neg(d.mul(d.sub(big_a, 0.5), d.log1p(d.div(b, big_a))))
    one_large = d.add(d.add(lgamma_body(d, b), lead),
                      d.sub(d.sub(ca, cs), d.mul(b, d.sub(log_s, 1.0))))
    both_large = d.add(d.sub(lead, d.mul(d.sub(big_b, 0.5), d.log1p(d.div(big_a, big_b)))),
                       d.add(d.sub(HALF_LOG_TWO_PI, d.mul(0.5, log_s)),
                             d.sub(d.add(ca, stirling_correction(d, big_b)), cs)))
    large = d.both(d.cmp(">=", a, STIRLING_FROM), d.cmp(">", b, 0.0))
    result = d.select(large, d.select(d.cmp(">=", b, STIRLING_FROM), both_large, one_large),
                      plain)
    return d.select(d.either(d.isnan(a), d.isnan(b)), d.add(a, b), result)


def _betaln(e: Emitter, a: Value, b: Value) -> Value:
    d = e.wide()
    return d.narrow(betaln_f64(d, d.extend(a), d.extend(b)), e.fmt)


def _beta(e: Emitter, a: Value, b: Value) -> Value:
    """Γ(a) Γ(b) / Γ(a + b) while a + b < 171, else exp(betaln(a, b))."""
    d = e.wide()
    a, b = d.extend(a), d.extend(b)
    s, rounding = _sum_and_error(d, a, b)
    by_gamma = d.mul(_gamma(d, a), d.div(_gamma(d, b), _gamma(d, s)))
    by_gamma = d.fma(d.neg(by_gamma), d.mul(polygamma_body(d, s, 0), rounding), by_gamma)
    by_log = d.exp(betaln_f64(d, a, b))
    result = d.select(d.cmp("<", d.add(a, b), BETA_BY_GAMMA), by_gamma, by_log)
    return d.narrow(result, e.fmt)


def _multigammaln(e: Emitter, x: Value, d: int) -> Value:
    """log Γ_d(x) = d(d − 1)/4 · log π + Σ_{j<d} lgamma(x − j/2); NaN for x ≤ (d − 1)/2."""
    w = e.wide()
    x = w.extend(x)
    total = w.value(d * (d - 1) / 4 * math.log(math.pi))
    for j in range(d):
        total = w.add(total, lgamma_body(w, w.sub(x, j / 2)))
    outside = w.cmp_unordered("<=", x, (d - 1) / 2)
    return w.narrow(w.select(outside, math.nan, total), e.fmt)


NEUTRAL: dict[str, Callable[..., Value]] = {
    "gamma": _gamma,
    "multigammaln": _multigammaln,
    "beta": _beta,
    "betaln": _betaln,
}
BODIES = NEUTRAL
