"""The elementary functions of the math library: exp, expm1, log, log1p, tanh, sigmoid,
softplus and pow, as LLVM IR written against `mathlib_emitter.Emitter` (f32 and f64).

Each body takes an emitter and its arguments and returns the result; `mathlib.py` wraps it
in an internal `alwaysinline` function. Method: reduce the argument with exact Cody-Waite
steps and exponent bit tricks, evaluate a minimax polynomial (fitted with a Remez exchange
in mpmath; coefficients in `mathlib_formats.py`) on the reduced range, rebuild the result,
then patch special values (+-0, +-inf, NaN, overflow, underflow) with selects so that they
match NumPy. Measured error bounds: docs/mathlib.md.

The f32 pow is computed in f64. The f64 pow carries log(x) as a double-double and uses
`llvm.fma` for exact products, which is one instruction on hosts with FMA (every x86-64 since
2013, every AArch64).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_formats import (
    F64,
    INF,
    LOG2E,
    LOG_TAIL_F64,
    TWO_THIRDS_HI,
    TWO_THIRDS_LO,
)


def reduce_ln2(e: Emitter, x: Value) -> tuple[Value, Value]:
    """(k, r) with x = k ln2 + r, |r| <= ln2/2, for |x| within the exp clamp range."""
    k = e.rint(e.mul(x, LOG2E))
    r = e.fma(k, -e.fmt.ln2_hi, x)
    return k, e.fma(k, -e.fmt.ln2_lo, r)


def expm1_reduced(e: Emitter, r: Value) -> Value:
    """expm1(r) for |r| <= ln2/2."""
    return e.fma(e.mul(r, r), e.poly(r, e.fmt.expm1_poly), r)


def limit(e: Emitter, x: Value, lo: float | None, hi: float) -> Value:
    """x limited to [lo, hi] (no lower limit for lo None); NaN stays NaN, so that it runs
    through the arithmetic into the result without a select to patch it."""
    x = e.select(e.cmp(">", x, hi), hi, x)
    return x if lo is None else e.select(e.cmp("<", x, lo), lo, x)


def exp_core(e: Emitter, x: Value, lo: Value | None = None) -> Value:
    """exp(x + lo) for any x; NaN for NaN (lo: a small correction, used by pow)."""
    k, r = reduce_ln2(e, limit(e, x, e.fmt.exp_min, e.fmt.exp_max))
    if lo is not None:
        r = e.add(r, lo)
    return e.scale(e.add(1.0, expm1_reduced(e, r)), k)


def _exp(e: Emitter, x: Value) -> Value:
    """e**x = 2**k * exp(r) with x = k ln2 + r."""
    return exp_core(e, x)


def _expm1(e: Emitter, x: Value) -> Value:
    """e**x - 1 = t expm1(r) + (t - 1) with t = 2**k; plain 2**k e**r where t - 1 == t."""
    fmt = e.fmt
    k, r = reduce_ln2(e, e.clamp(x, fmt.expm1_min, fmt.exp_max))
    em1 = expm1_reduced(e, r)
    half = e.floor(e.mul(k, 0.5))
    low_scale, high_scale = e.pow2(half), e.pow2(e.sub(k, half))
    t = e.mul(low_scale, high_scale)
    near = e.fma(t, em1, e.sub(t, 1.0))
    far = e.mul(e.mul(e.add(1.0, em1), low_scale), high_scale)
    result = e.select(e.cmp(">", k, fmt.mantissa_bits + 2), far, near)
    return e.select(e.cmp_unordered("==", x, 0.0), x, result)


def _log_reduced(e: Emitter, k: Value, f: Value, c: Value | None = None) -> Value:
    """k ln2 + log(1 + f) + c for sqrt(1/2) - 1 <= f < sqrt(2) - 1 and a tiny correction c."""
    fmt = e.fmt
    s = e.div(f, e.add(2.0, f))
    z = e.mul(s, s)
    tail = e.mul(z, e.poly(z, fmt.log_poly))
    half_f2 = e.mul(e.mul(0.5, f), f)
    low = e.mul(k, fmt.ln2_lo)
    if c is not None:
        low = e.add(low, c)
    inner = e.fma(s, e.add(half_f2, tail), low)
    return e.sub(e.mul(k, fmt.ln2_hi), e.sub(e.sub(half_f2, inner), f))


def log_positive(e: Emitter, x: Value) -> Value:
    """log(x) for finite x > 0, subnormals included."""
    fmt = e.fmt
    shift = fmt.mantissa_bits + 2
    tiny = e.cmp("<", x, 2.0 ** (1 - fmt.bias))
    k, m = e.split_exponent(e.select(tiny, e.mul(x, 2.0**shift), x))
    k = e.sub(k, e.select(tiny, float(shift), 0.0))
    return _log_reduced(e, k, e.sub(m, 1.0))


def _log(e: Emitter, x: Value) -> Value:
    """log x, with log 0 = -inf and NaN for x < 0."""
    result = log_positive(e, x)
    result = e.select(e.cmp("==", x, INF), x, result)
    result = e.select(e.cmp("==", x, 0.0), -INF, result)
    return e.select(e.cmp_unordered("<", x, 0.0), math.nan, result)


def _log1p(e: Emitter, x: Value) -> Value:
    """log(1 + x) = log u + c/u, where u = fl(1 + x) and c = (1 + x) - u exactly."""
    u = e.add(1.0, x)
    k, m = e.split_exponent(u)
    rounding = e.select(e.cmp(">=", k, 2.0), e.sub(1.0, e.sub(u, x)), e.sub(x, e.sub(u, 1.0)))
    exact = e.cmp("==", k, 0.0)
    f = e.select(exact, x, e.sub(m, 1.0))
    c = e.select(exact, 0.0, e.div(rounding, u))
    result = _log_reduced(e, k, f, c)
    result = e.select(e.cmp("==", x, INF), x, result)
    result = e.select(e.cmp("==", x, -1.0), -INF, result)
    result = e.select(e.cmp_unordered("<", x, -1.0), math.nan, result)
    return e.select(e.cmp("==", x, 0.0), x, result)


def _tanh(e: Emitter, x: Value) -> Value:
    """tanh|x| = -t/(t+2) with t = expm1(-2|x|) below 1, else 1 - 2/(t+2) with t = expm1(2|x|),
    as one quotient: q = (|t| or -2) / (t+2), plus 0 or 1; NaN runs through."""
    ax = limit(e, e.fabs(x), None, e.fmt.tanh_max)
    small = e.cmp("<", ax, 1.0)
    two_ax = e.add(ax, ax)
    k, r = reduce_ln2(e, e.select(small, e.neg(two_ax), two_ax))
    scale = e.pow2(k)
    t = e.fma(scale, expm1_reduced(e, r), e.sub(scale, 1.0))
    quotient = e.div(e.select(small, e.fabs(t), -2.0), e.add(t, 2.0))
    return e.copysign(e.add(quotient, e.select(small, 0.0, 1.0)), x)


def _sigmoid(e: Emitter, x: Value) -> Value:
    """1 / (1 + e**-x) for x >= 0, e**x / (1 + e**x) below: no overflow either side."""
    ex = exp_core(e, e.neg(e.fabs(x)))
    numerator = e.select(e.cmp(">=", x, 0.0), 1.0, ex)
    result = e.div(numerator, e.add(1.0, ex))
    return e.select(e.isnan(x), x, result)


def _softplus(e: Emitter, x: Value) -> Value:
    """log(1 + e**x) = log1p(e**-|x|) + max(x, 0)."""
    ex = exp_core(e, e.neg(e.fabs(x)))
    result = e.add(_log1p(e, ex), e.select(e.cmp(">", x, 0.0), x, 0.0))
    return e.select(e.isnan(x), x, result)


def log_double_double(d: Emitter, x: Value) -> tuple[Value, Value]:
    """log(x) as hi + lo, about 2**-65 relative, for finite x > 0 (f64 only)."""
    shift = 54
    tiny = d.cmp("<", x, 2.0**-1022)
    k, m = d.split_exponent(d.select(tiny, d.mul(x, 2.0**shift), x))
    k = d.sub(k, d.select(tiny, float(shift), 0.0))
    u = d.sub(m, 1.0)
    v = d.add(1.0, m)
    v_lo = d.sub(m, d.sub(v, 1.0))
    s = d.div(u, v)
    s_lo = d.div(d.sub(d.exact_fma(d.neg(s), v, u), d.mul(s, v_lo)), v)
    z = d.mul(s, s)
    z_lo = d.exact_fma(s, s, d.neg(z))
    cube = d.mul(s, z)
    cube_lo = d.add(d.exact_fma(s, z, d.neg(cube)),
                    d.add(d.mul(s, z_lo), d.mul(d.mul(3.0, z), s_lo)))
    third = d.mul(cube, TWO_THIRDS_HI)
    third_lo = d.add(d.exact_fma(cube, TWO_THIRDS_HI, d.neg(third)),
                     d.add(d.mul(cube_lo, TWO_THIRDS_HI), d.mul(cube, TWO_THIRDS_LO)))
    tail = d.mul(d.mul(cube, z), d.poly(z, LOG_TAIL_F64))
    two_s = d.mul(2.0, s)
    head = d.add(two_s, third)
    head_lo = d.sub(third, d.sub(head, two_s))
    whole = d.mul(k, F64.ln2_hi)
    total = d.add(whole, head)
    back = d.sub(total, whole)
    total_lo = d.add(d.sub(whole, d.sub(total, back)), d.sub(head, back))
    low_terms = (head_lo, d.mul(2.0, s_lo), third_lo, tail, d.mul(k, F64.ln2_lo))
    low = total_lo
    for term in low_terms:
        low = d.add(low, term)
    hi = d.add(total, low)
    return hi, d.sub(low, d.sub(hi, total))


def _pow(e: Emitter, x: Value, y: Value) -> Value:
    """x**y = e**(y log|x|) in f64 (log in double-double for f64), C99/NumPy special cases."""
    d = e.wide()
    x, y = d.extend(x), d.extend(y)
    ax = d.fabs(x)
    regular_base = d.both(d.cmp(">", ax, 0.0), d.cmp("<", ax, INF))
    base = d.select(regular_base, ax, 1.0)
    if e.fmt is F64:
        log_hi, log_lo = log_double_double(d, base)
        product = d.mul(y, log_hi)
        product_lo = d.fma(y, log_lo, d.exact_fma(y, log_hi, d.neg(product)))
        in_range = d.cmp("<", d.fabs(product), 1000.0)
        magnitude = exp_core(d, product, d.select(in_range, product_lo, 0.0))
    else:
        magnitude = exp_core(d, d.mul(y, log_positive(d, base)))
    y_negative = d.cmp("<", y, 0.0)
    zero_or_inf = d.b.icmp_unsigned("==", d.cmp("==", ax, 0.0), y_negative)
    magnitude = d.select(regular_base, magnitude, d.select(zero_or_inf, INF, 0.0))
    grows = d.b.icmp_unsigned("==", d.cmp("<", ax, 1.0), y_negative)
    infinite_y = d.select(d.cmp("==", ax, 1.0), 1.0, d.select(grows, INF, 0.0))
    magnitude = d.select(d.cmp("==", d.fabs(y), INF), infinite_y, magnitude)
    y_integral = d.cmp("==", d.floor(y), y)
    half_y = d.mul(y, 0.5)
    y_odd = d.both(y_integral, d.cmp("!=", d.floor(half_y), half_y))
    result = d.select(d.both(d.sign_bit_set(x), y_odd), d.neg(magnitude), magnitude)
    negative_finite = d.both(d.cmp("<", x, 0.0), d.cmp(">", x, -INF))
    any_nan = d.b.fcmp_unordered("uno", x, y)
    invalid = d.either(d.both(negative_finite, d.b.not_(y_integral)), any_nan)
    result = d.select(invalid, math.nan, result)
    result = d.select(d.either(d.cmp("==", y, 0.0), d.cmp("==", x, 1.0)), 1.0, result)
    return d.narrow(result, e.fmt)


BODIES: dict[str, Callable[..., Value]] = {
    "exp": _exp,
    "expm1": _expm1,
    "log": _log,
    "log1p": _log1p,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "softplus": _softplus,
    "pow": _pow,
}
