"""The regularised incomplete gamma functions of the math library: gammainc P(a, x) and
gammaincc Q(a, x) = 1 − P (f32, f64).

The steps of `ir/incomplete_gamma.py` (its docstring gives the method; the NumPy semantics
take them too, with the same constants): the prefactor xᵃ e⁻ˣ / Γ(a + 1), then both the
series (below x = a + 1) and the continued fraction (from there on) with a fixed number of
terms, each on its arguments clamped into its own domain, and a select. The bodies compute
in f64 (f32 arguments widened, the result rounded once), branch-free, against the
operations the MLIR export shares (`NEUTRAL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_gamma import stirling_correction
from reverie.compiler.backend.mathlib_special import lgamma_positive
from reverie.compiler.ir.incomplete_gamma import (
    FRACTION_TERMS,
    HALF_LOG_TWO_PI,
    LENTZ_TINY,
    SERIES_TERMS,
    STIRLING_FROM,
)


def _log_prefactor(d: Emitter, a: Value, x: Value) -> Value:
    """L = log(xᵃ e⁻ˣ / Γ(a + 1)), through Stirling's series from a = 10 on."""
    big = d.select(d.cmp(">=", a, STIRLING_FROM), a, STIRLING_FROM)
    t = d.div(d.sub(x, big), big)
    log_ratio = d.select(d.cmp("<", t, -0.5), d.log(d.div(x, big)), d.log1p(t))
    log_big = d.log(big)
    stirling = d.sub(d.sub(d.fma(big, d.sub(log_ratio, t), d.mul(0.5, log_big)),
                           d.add(HALF_LOG_TWO_PI, stirling_correction(d, big))), log_big)
    direct = d.sub(d.sub(d.mul(a, d.log(x)), x), lgamma_positive(d, d.add(a, 1.0)))
    return d.select(d.cmp(">=", a, STIRLING_FROM), stirling, direct)


def _series(d: Emitter, a: Value, x: Value) -> Value:
    """Σₙ xⁿ / ((a + 1) ⋯ (a + n)), `SERIES_TERMS` terms."""
    term = total = d.value(1.0)
    for n in range(1, SERIES_TERMS + 1):
        term = d.mul(term, d.div(x, d.add(a, float(n))))
        total = d.add(total, term)
    return total


def _fraction(d: Emitter, a: Value, x: Value) -> Value:
    """1 / (x + 1 − a − 1(1 − a)/(x + 3 − a − ⋯)), `FRACTION_TERMS` levels (modified Lentz)."""
    b = d.sub(d.add(x, 1.0), a)
    c, dd = d.value(1 / LENTZ_TINY), d.div(1.0, b)
    h = dd
    for i in range(1, FRACTION_TERMS + 1):
        an = d.mul(-float(i), d.sub(float(i), a))
        b = d.add(b, 2.0)
        dd = d.fma(an, dd, b)
        dd = d.div(1.0, d.select(d.cmp("<", d.fabs(dd), LENTZ_TINY), LENTZ_TINY, dd))
        c = d.add(b, d.div(an, c))
        c = d.select(d.cmp("<", d.fabs(c), LENTZ_TINY), LENTZ_TINY, c)
        h = d.mul(h, d.mul(dd, c))
    return h


def _incomplete_gamma(upper: bool) -> Callable[[Emitter, Value, Value], Value]:
    def body(e: Emitter, a: Value, x: Value) -> Value:
        d = e.wide()
        a, x = d.extend(a), d.extend(x)
        prefactor = d.exp(_log_prefactor(d, a, x))
        fraction = d.cmp(">=", x, d.add(a, 1.0))
        p_series = d.mul(prefactor, _series(d, a, d.select(fraction, 0.0, x)))
        h = _fraction(d, a, d.select(fraction, x, d.add(a, 1.0)))
        q_fraction = d.mul(d.mul(a, prefactor), h)
        result = (d.select(fraction, q_fraction, d.sub(1.0, p_series)) if upper else
                  d.select(fraction, d.sub(1.0, q_fraction), p_series))
        zero = d.either(d.cmp("==", x, 0.0), d.cmp("==", a, math.inf))
        one = d.either(d.cmp("==", a, 0.0), d.cmp("==", x, math.inf))
        at_zero, at_one = (1.0, 0.0) if upper else (0.0, 1.0)
        result = d.select(zero, at_zero, d.select(one, at_one, result))
        undefined = d.either(
            d.either(d.cmp_unordered("<", a, 0.0), d.cmp_unordered("<", x, 0.0)),
            d.either(d.both(d.cmp("==", a, 0.0), d.cmp("==", x, 0.0)),
                     d.both(d.cmp("==", a, math.inf), d.cmp("==", x, math.inf))))
        return d.narrow(d.select(undefined, math.nan, result), e.fmt)

    body.__doc__ = ("Q(a, x)" if upper else "P(a, x)") + ": the steps of the module docstring."
    return body


NEUTRAL: dict[str, Callable[..., Value]] = {
    "gammainc": _incomplete_gamma(upper=False),
    "gammaincc": _incomplete_gamma(upper=True),
}
BODIES = NEUTRAL
