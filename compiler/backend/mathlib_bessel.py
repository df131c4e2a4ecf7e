"""Modified Bessel functions of the math library: i0 and i1 (f32, f64).

Cephes' method, with coefficients of this project's own (`ir/special.py`, where the NumPy
semantics take the same steps): Chebyshev series of e^(−x) I(x) on [0, 8] in x/4 − 1 (of
e^(−x) I₁(x)/x for I₁) and of √x e^(−x) I(x) from 8 on in 16/x − 1, summed by Clenshaw's
recurrence; e^|x| is put back as e^(|x|/2) twice beyond 8, so that nothing overflows before
I does (near 713.9). I₀ is even, I₁ odd; both are inf at ±inf (I₁: ±inf), NaN for NaN. The
bodies compute in f64 (f32 arguments widened, the result rounded once), branch-free,
against the operations the MLIR export shares (`NEUTRAL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.ir.special import I0_FAR, I0_NEAR, I1_FAR, I1_NEAR

NEAR_END = 8.0


def _chebyshev(e: Emitter, t: Value, coeffs: tuple[float, ...]) -> Value:
    """Σ cₖ Tₖ(t) by Clenshaw's recurrence."""
    b1, b2 = e.value(0.0), e.value(0.0)
    two_t = e.add(t, t)
    for c in reversed(coeffs[1:]):
        b1, b2 = e.add(e.fma(two_t, b1, e.neg(b2)), c), b1
    return e.add(e.fma(t, b1, e.neg(b2)), coeffs[0])


def _bessel_i(order: int) -> Callable[[Emitter, Value], Value]:
    near_coeffs, far_coeffs = (I0_NEAR, I0_FAR) if order == 0 else (I1_NEAR, I1_FAR)

    def body(e: Emitter, x: Value) -> Value:
        d = e.wide()
        x = d.extend(x)
        ax = d.fabs(x)
        clamped = d.select(d.cmp("<=", ax, NEAR_END), ax, NEAR_END)
        near = d.mul(d.exp(clamped), _chebyshev(d, d.sub(d.mul(clamped, 0.25), 1.0),
                                                near_coeffs))
        if order:
            near = d.mul(near, x)
        far_x = d.select(d.cmp(">", ax, NEAR_END), ax, NEAR_END)
        half = d.exp(d.mul(far_x, 0.5))
        series = _chebyshev(d, d.sub(d.div(16.0, far_x), 1.0), far_coeffs)
        far = d.mul(half, d.div(d.mul(half, series), d.sqrt(far_x)))
        far = d.select(d.cmp("==", ax, math.inf), math.inf, far)
        if order:
            far = d.copysign(far, x)
        result = d.select(d.cmp("<=", ax, NEAR_END), near, far)
        return d.narrow(d.select(d.isnan(x), x, result), e.fmt)

    body.__doc__ = f"I{order}(x): the Chebyshev series of the module docstring."
    return body


NEUTRAL: dict[str, Callable[..., Value]] = {"i0": _bessel_i(0), "i1": _bessel_i(1)}
BODIES = NEUTRAL
