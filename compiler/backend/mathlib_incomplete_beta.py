"""The regularised incomplete beta function of the math library: betainc I_x(a, b) (f32,
f64).

The steps of `ir/incomplete_beta.py` (its docstring gives the method; the NumPy semantics
take them too, with the same constants): the prefactor xᵃ (1 − x)ᵇ / B(a, b), then the
continued fraction of the side where it converges fast, with the arguments swapped by
selects, so the body is branch-free; it computes in f64 (f32 arguments widened, the result
rounded once) against the operations the MLIR export shares (`NEUTRAL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_gamma import betaln_f64
from reverie.compiler.ir.incomplete_beta import FRACTION_TERMS, LENTZ_TINY


def _guard(d: Emitter, v: Value) -> Value:
    return d.select(d.cmp("<", d.fabs(v), LENTZ_TINY), LENTZ_TINY, v)


def _fraction(d: Emitter, p: Value, q: Value, z: Value) -> Value:
    """Numerical Recipes' `betacf(p, q, z)` by the modified Lentz method."""
    c = d.value(1.0)
    dd = d.div(1.0, _guard(d, d.sub(1.0, d.div(d.mul(d.add(p, q), z), d.add(p, 1.0)))))
    h = dd
    for m in range(1, FRACTION_TERMS + 1):
        even = d.div(d.mul(d.mul(float(m), d.sub(q, float(m))), z),
                     d.mul(d.add(p, float(2 * m - 1)), d.add(p, float(2 * m))))
        odd = d.div(d.mul(d.mul(d.neg(d.add(p, float(m))), d.add(d.add(p, q), float(m))), z),
                    d.mul(d.add(p, float(2 * m)), d.add(p, float(2 * m + 1))))
        for step in (even, odd):
            dd = d.div(1.0, _guard(d, d.fma(step, dd, 1.0)))
            c = _guard(d, d.add(1.0, d.div(step, c)))
            h = d.mul(h, d.mul(dd, c))
    return h


def _betainc(e: Emitter, a: Value, b: Value, x: Value) -> Value:
    """I_x(a, b): the steps of the module docstring."""
    d = e.wide()
    a, b, x = d.extend(a), d.extend(b), d.extend(x)
    log_prefactor = d.sub(d.add(d.mul(a, d.log(x)), d.mul(b, d.log1p(d.neg(x)))),
                          betaln_f64(d, a, b))
    prefactor = d.exp(log_prefactor)
    flip = d.cmp(">=", d.mul(x, d.add(d.add(a, b), 2.0)), d.add(a, 1.0))
    p, q = d.select(flip, b, a), d.select(flip, a, b)
    part = d.div(d.mul(prefactor, _fraction(d, p, q, d.select(flip, d.sub(1.0, x), x))), p)
    result = d.select(flip, d.sub(1.0, part), part)
    zero = d.either(d.cmp("==", b, 0.0), d.cmp("==", a, math.inf))
    one = d.either(d.cmp("==", a, 0.0), d.cmp("==", b, math.inf))
    result = d.select(zero, 0.0, d.select(one, 1.0, result))
    result = d.select(d.cmp("==", x, 0.0), 0.0, d.select(d.cmp("==", x, 1.0), 1.0, result))
    outside = d.either(d.either(d.cmp_unordered("<", a, 0.0), d.cmp_unordered("<", b, 0.0)),
                       d.either(d.cmp_unordered("<", x, 0.0), d.cmp_unordered(">", x, 1.0)))
    degenerate = d.either(d.both(d.cmp("==", a, 0.0), d.cmp("==", b, 0.0)),
                          d.both(d.cmp("==", a, math.inf), d.cmp("==", b, math.inf)))
    return d.narrow(d.select(d.either(outside, degenerate), math.nan, result), e.fmt)


NEUTRAL: dict[str, Callable[..., Value]] = {"betainc": _betainc}
BODIES = NEUTRAL
