"""Bessel functions of real order of the math library: iv, ive and jv (f32, f64), the
order v a float attribute (`rv.iv.order2.5.f64`, one function per order).

The algorithm is the one of `ir/bessel_real_order.py` (the NumPy semantics run the same
steps): power series, Debye's and Hankel's expansions, Miller's recurrence, with counts of
terms fixed by v, branch-free. It computes in f64 (f32 arguments widened, the result
rounded once) against the operations the MLIR export shares (`NEUTRAL`). Measured accuracy:
docs/mathlib.md.
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.ir.bessel_real_order import bessel_i, bessel_j


def _in_f64(compute: Callable[[Emitter, Value, float], Value], doc: str) -> Callable[..., Value]:
    """The body of one function: `compute(d, x, v)` on the argument widened to f64."""
    def body(e: Emitter, x: Value, order: float) -> Value:
        d = e.wide()
        return d.narrow(compute(d, d.extend(x), order), e.fmt)

    body.__doc__ = doc
    return body


NEUTRAL: dict[str, Callable[..., Value]] = {
    "iv": _in_f64(lambda d, x, v: bessel_i(d, x, v, scaled=False), "Iᵥ(x)."),
    "ive": _in_f64(lambda d, x, v: bessel_i(d, x, v, scaled=True), "e^(−|x|) Iᵥ(x)."),
    "jv": _in_f64(bessel_j, "Jᵥ(x), v not an integer."),
}
BODIES = NEUTRAL
