"""Exponential-family functions of the math library built on its exp and log: sinh, cosh,
exp2, log2, log10, logaddexp, logaddexp2, hypot, sinc, deg2rad, rad2deg and logit (f32,
f64).

`BODIES` maps each function (its NumPy name, the op's) to its body, as in
`mathlib_elementary.py`; the bodies in `NEUTRAL` use only the operations that
`mathlib.MathEmitter` shares with the MLIR export's `MlirArith` (those listed in
`mathlib_special.py`, plus `exp`, `exp2` and `sqrt`), so the MLIR export writes the same
algorithm for the ops MLIR lacks (hypot, logaddexp, logaddexp2, sinc, deg2rad, rad2deg).
Every body computes in f64 (f32 arguments widened exactly, the result rounded once),
branch-free so that loops vectorise:

- sinh |x| = ½ (t + t/(t + 1)), t = expm1|x|, below 22; exp(|x| − log 2) above (with
  log 2 as hi + lo inside exp's reduction, so that sinh does not overflow before it must);
  cosh x = 1 + t²/(2(1 + t)) below ½ log 2, ½ (e + 1/e) with e = exp|x| up to 22, then as
  sinh.
- exp2 x = 2ᵏ · exp(r log 2) with k = rint(x), r = x − k exact, |r log 2| ≤ ½ log 2: exp's
  polynomial on the reduced argument, exact at the integers.
- log2 and log10: log x as a double-double (pow's, `mathlib_elementary.log_double_double`)
  times log₂e or log₁₀e as hi + lo: nearly correctly rounded, exact at the powers of 2
  and 10 that are exact in f64 (log10(1000) = 3).
- logaddexp(a, b) = max(a, b) + log1p(exp(−|a − b|)), max + log 2 where a = b (so that
  equal infinities give themselves); logaddexp2 the same with exp2, log₂e and 1.
- hypot(x, y) = M √(1 + (m/M)²) with M, m the larger and smaller of |x|, |y|; inf if either
  is infinite (even with a NaN), 0 at (0, 0).
- sinc x = sin(πx)/(πx) with sin(πx) from x − rint(x) (exact; `mathlib_special.sin_cos_pi`),
  so that sinc is accurate next to its zeros, the integers, where NumPy's sin(π·x) is not;
  sinc 0 = 1.
- deg2rad x = x · (π/180), rad2deg x = x · (180/π): NumPy's products.
- logit p = log(p/(1 − p)) = log p − log1p(−p) below 0.3, log1p((2p − 1)/(1 − p)) above.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend import mathlib_elementary as elementary
from reverie.compiler.backend.mathlib_emitter import Emitter, Value, in_f64
from reverie.compiler.backend.mathlib_formats import F64, INF
from reverie.compiler.backend.mathlib_special import sin_cos_pi

LN2 = 0.6931471805599453
LOG2E = (1.4426950408889634, 2.0355273740931033e-17)     # log₂e as hi + lo
LOG10E = (0.4342944819032518, 1.098319650216765e-17)     # log₁₀e as hi + lo
CUTOFF = 22.0              # e^−2|x| < 2⁻⁶³ beyond: sinh and cosh are exp|x| / 2
EXP2_LIMITS = (-1080.0, 1025.0)    # exp2 is 0 below, inf above, in f64


def half_exp(e: Emitter, ax: Value) -> Value:
    """exp(ax) / 2 = exp(ax − log 2) without overflowing early (ax ≥ 0, f64)."""
    return elementary.exp_core(e, e.sub(ax, F64.ln2_hi), e.value(-F64.ln2_lo))


def _sinh(e: Emitter, x: Value) -> Value:
    """±½ (t + t/(t + 1)), t = expm1|x|; exp(|x| − log 2) from 22 on."""
    ax = e.fabs(x)
    t = elementary.BODIES["expm1"](e, ax)
    near = e.mul(0.5, e.add(t, e.div(t, e.add(t, 1.0))))
    return e.copysign(e.select(e.cmp(">=", ax, CUTOFF), half_exp(e, ax), near), x)


def _cosh(e: Emitter, x: Value) -> Value:
    """1 + t²/(2(1 + t)), t = expm1|x|, near 0; ½ (e + 1/e), e = exp|x|; exp(|x| − log 2)."""
    ax = e.fabs(x)
    t = elementary.BODIES["expm1"](e, ax)
    near = e.add(1.0, e.div(e.mul(t, t), e.mul(2.0, e.add(1.0, t))))
    ex = elementary.exp_core(e, ax)
    middle = e.fma(0.5, ex, e.div(0.5, ex))
    result = e.select(e.cmp("<", ax, 0.5 * LN2), near, middle)
    return e.select(e.cmp(">=", ax, CUTOFF), half_exp(e, ax), result)


def exp2_core(e: Emitter, x: Value) -> Value:
    """2ˣ = 2ᵏ exp(r log 2), k = rint(x), r = x − k (f64; NaN stays NaN)."""
    x = elementary.limit(e, x, *EXP2_LIMITS)
    k = e.rint(x)
    reduced = e.mul(e.sub(x, k), LN2)
    return e.scale(e.add(1.0, elementary.expm1_reduced(e, reduced)), k)


def _log_times(constant: tuple[float, float]) -> Callable[[Emitter, Value], Value]:
    """The body of log(x) · constant (log2: log₂e, log10: log₁₀e), with log's special
    values: −inf at 0, NaN below 0 and for NaN, inf at inf."""
    def body(e: Emitter, x: Value) -> Value:
        regular = e.both(e.cmp(">", x, 0.0), e.cmp("<", x, INF))
        hi, lo = elementary.log_double_double(e, e.select(regular, x, 1.0))
        product = e.mul(hi, constant[0])
        error = e.exact_fma(hi, constant[0], e.neg(product))
        result = e.add(product, e.add(error, e.fma(hi, constant[1], e.mul(lo, constant[0]))))
        result = e.select(e.cmp("==", x, INF), x, result)
        result = e.select(e.cmp("==", x, 0.0), -INF, result)
        return e.select(e.cmp_unordered("<", x, 0.0), math.nan, result)

    return body


def _logaddexp_body(base_two: bool) -> Callable[..., Value]:
    """log(eᵃ + eᵇ) (base 2: log₂(2ᵃ + 2ᵇ)) = max + log1p(e^−|a−b|); max + log 2 (1) where
    a = b; NaN if either is."""
    def body(e: Emitter, a: Value, b: Value) -> Value:
        d = e.wide()
        a, b = d.extend(a), d.extend(b)
        larger = d.select(d.cmp(">", a, b), a, b)
        gap = d.neg(d.fabs(d.sub(a, b)))
        if base_two:
            tail = d.mul(d.log1p(d.exp2(gap)), LOG2E[0])
        else:
            tail = d.log1p(d.exp(gap))
        result = d.select(d.cmp("==", a, b), d.add(larger, 1.0 if base_two else LN2),
                          d.add(larger, tail))
        result = d.select(d.either(d.isnan(a), d.isnan(b)), d.add(a, b), result)
        return d.narrow(result, e.fmt)

    return body


def _hypot(e: Emitter, x: Value, y: Value) -> Value:
    """M √(1 + (m/M)²); inf where either is infinite, NaN where either is NaN otherwise."""
    d = e.wide()
    ax, ay = d.fabs(d.extend(x)), d.fabs(d.extend(y))
    wider = d.cmp(">", ax, ay)
    larger, smaller = d.select(wider, ax, ay), d.select(wider, ay, ax)
    ratio = d.div(smaller, larger)
    ratio = d.select(d.either(d.cmp("==", larger, 0.0), d.cmp("==", larger, INF)), 0.0, ratio)
    result = d.mul(larger, d.sqrt(d.fma(ratio, ratio, 1.0)))
    result = d.select(d.either(d.isnan(ax), d.isnan(ay)), math.nan, result)
    infinite = d.either(d.cmp("==", ax, INF), d.cmp("==", ay, INF))
    return d.narrow(d.select(infinite, INF, result), e.fmt)


def _sinc(e: Emitter, x: Value) -> Value:
    """sin(πx)/(πx) = (−1)ⁿ sin(πr)/(πx), x = n + r, n = rint(x); 1 at 0."""
    d = e.wide()
    x = d.extend(x)
    sin_over_pi, _, r = sin_cos_pi(d, x)
    n = d.rint(x)
    half = d.mul(n, 0.5)
    signed = d.copysign(sin_over_pi, r)
    signed = d.select(d.cmp("!=", d.floor(half), half), d.neg(signed), signed)
    result = d.select(d.cmp("==", x, 0.0), 1.0, d.div(signed, x))
    return d.narrow(result, e.fmt)


def _logit(e: Emitter, p: Value) -> Value:
    """log(p/(1 − p)): log p − log1p(−p) below 0.3, log1p((2p − 1)/(1 − p)) above (2p − 1
    and, from ½, 1 − p exact); −inf at 0, inf at 1, NaN outside [0, 1]."""
    d = e.wide()
    p = d.extend(p)
    low = d.sub(d.log(p), d.log1p(d.neg(p)))
    high = d.log1p(d.div(d.sub(d.add(p, p), 1.0), d.sub(1.0, p)))
    return d.narrow(d.select(d.cmp("<", p, 0.3), low, high), e.fmt)


def _times(factor: float) -> Callable[[Emitter, Value], Value]:
    """The body of x · factor (deg2rad, rad2deg)."""
    def body(e: Emitter, x: Value) -> Value:
        d = e.wide()
        return d.narrow(d.mul(d.extend(x), factor), e.fmt)

    return body


NEUTRAL: dict[str, Callable[..., Value]] = {
    "logit": _logit,
    "logaddexp": _logaddexp_body(base_two=False),
    "logaddexp2": _logaddexp_body(base_two=True),
    "hypot": _hypot,
    "sinc": _sinc,
    "deg2rad": _times(math.pi / 180),
    "rad2deg": _times(180 / math.pi),
}
BODIES: dict[str, Callable[..., Value]] = {
    "sinh": in_f64(_sinh),
    "cosh": in_f64(_cosh),
    "exp2": in_f64(exp2_core),
    "log2": in_f64(_log_times(LOG2E)),
    "log10": in_f64(_log_times(LOG10E)),
    **NEUTRAL,
}
