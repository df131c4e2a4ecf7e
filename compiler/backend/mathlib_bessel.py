"""Bessel functions of the math library: i0, i1 (modified), j0, j1, y0, y1 and jn, yn of
integer order n (an attribute; `ir/bessel_integer_order.py` describes their recurrences)
(f32, f64).

J and Y (`_bessel_jy`): Chebyshev series in x²/32 − 1 below 8 (Y₀ − (2/π) log(x/2) J₀ and
(Y₁ − (2/π)(J₁ log(x/2) − 1/x))/x, which are smooth), the Hankel form with amplitudes P, Q
in 16/x − 1 above, its phase from sin x and cos x (exact reduction, so large arguments keep
their accuracy, where SciPy's j0(1e10) has six digits). Accuracy is absolute near the zeros,
as for every method that does not factor them out. J₁ is odd, J₀ even; Y is NaN below 0,
−inf at 0; all are 0 at ±inf.


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
from reverie.compiler.ir.bessel_integer_order import (
    RESCALE,
    RESCALE_ABOVE,
    SERIES_END,
    miller_start,
)
from reverie.compiler.ir.special import (
    I0_FAR,
    I0_NEAR,
    I1_FAR,
    I1_NEAR,
    J0_NEAR,
    J0_P,
    J0_Q,
    J1_NEAR,
    J1_P,
    J1_Q,
    Y0_NEAR,
    Y1_NEAR,
)

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


def _bessel_jy(kind: str, order: int) -> Callable[[Emitter, Value], Value]:
    """The body of Jₙ or Yₙ (n = 0, 1): Chebyshev series in x²/32 − 1 below 8 (Y with its
    log term added back), the Hankel form √(2/(πx)) (P cos ξ − Q sin ξ) (Y: P sin ξ +
    Q cos ξ), ξ = x − (2n + 1)π/4, above, with √2 cos ξ and √2 sin ξ from sin x and cos x
    (whose reduction is exact), P and Q Chebyshev series in 16/x − 1."""
    near_coeffs = J0_NEAR if order == 0 else J1_NEAR
    p_coeffs, q_coeffs = (J0_P, J0_Q) if order == 0 else (J1_P, J1_Q)

    def body(e: Emitter, x: Value) -> Value:
        d = e.wide()
        x = d.extend(x)
        ax = d.fabs(x)
        near_x = d.select(d.cmp("<=", ax, NEAR_END), x, NEAR_END)     # signed
        t = d.sub(d.mul(d.mul(near_x, near_x), 1 / 32), 1.0)
        j_near = _chebyshev(d, t, near_coeffs)
        if order:                                               # J₁ is odd
            j_near = d.mul(j_near, near_x)
        far_x = d.select(d.cmp(">", ax, NEAR_END), ax, NEAR_END)
        w = d.sub(d.div(16.0, far_x), 1.0)
        p, q = _chebyshev(d, w, p_coeffs), _chebyshev(d, w, q_coeffs)
        s, c = d.sin(far_x), d.cos(far_x)
        cos_xi, sin_xi = (d.add(c, s), d.sub(s, c)) if order == 0 else \
            (d.sub(s, c), d.neg(d.add(s, c)))                          # times √2
        amplitude = d.div(1.0, d.sqrt(d.mul(math.pi, far_x)))
        infinite = d.cmp("==", ax, math.inf)
        if kind == "j":
            far = d.mul(amplitude, d.sub(d.mul(p, cos_xi), d.mul(q, sin_xi)))
            far = d.select(infinite, 0.0, far)
            if order:
                far = d.select(d.cmp("<", x, 0.0), d.neg(far), far)
            result = d.select(d.cmp("<=", ax, NEAR_END), j_near, far)
        else:
            log_term = d.mul(2 / math.pi, d.log(d.mul(near_x, 0.5)))
            near = d.fma(log_term, j_near, _chebyshev(d, t, Y0_NEAR)) if order == 0 else \
                d.sub(d.fma(log_term, j_near, d.mul(near_x, _chebyshev(d, t, Y1_NEAR))),
                      d.div(2 / math.pi, near_x))
            far = d.mul(amplitude, d.add(d.mul(p, sin_xi), d.mul(q, cos_xi)))
            result = d.select(d.cmp("<=", ax, NEAR_END), near, d.select(infinite, 0.0, far))
            result = d.select(d.cmp("==", x, 0.0), -math.inf, result)
            result = d.select(d.cmp("<", x, 0.0), math.nan, result)
        return d.narrow(d.select(d.isnan(x), x, result), e.fmt)

    body.__doc__ = f"{kind.upper()}{order}(x) (see `_bessel_jy`)."
    return body


def _forward(d: Emitter, x: Value, z0: Value, z1: Value, order: int) -> Value:
    """Zₙ from Z₀, Z₁ by Zₖ₊₁ = (2k/x) Zₖ − Zₖ₋₁."""
    below, value = z0, z1
    for k in range(1, order):
        below, value = value, d.sub(d.mul(d.div(2.0 * k, x), value), below)
    return value


def _jn(e: Emitter, x: Value, order: int) -> Value:
    """Jₙ(x) (`ir/bessel_integer_order.py`): forward recurrence from J₀, J₁ above |x| = n,
    Miller's backward recurrence from a start index fixed by n below, normalised by J₀ or
    J₁, and (|x|/2)ⁿ/n! below 10⁻⁹."""
    if order < 2:
        return _J_BODIES[order](e, x)
    d = e.wide()
    x = d.extend(x)
    ax = d.fabs(x)
    j0, j1 = _J_BODIES[0](d, ax), _J_BODIES[1](d, ax)
    forward = _forward(d, ax, j0, j1, order)
    bx = d.select(d.cmp("<", ax, SERIES_END), SERIES_END,
                  d.select(d.cmp("<", ax, float(order)), ax, float(order)))
    inverse = d.div(2.0, bx)
    above, f, saved = d.value(0.0), d.value(1.0), d.value(0.0)
    for k in range(miller_start(order), 0, -1):
        above, f = f, d.sub(d.mul(d.mul(float(k), inverse), f), above)
        if k - 1 == order:
            saved = f
        scale = d.select(d.cmp(">", d.fabs(f), RESCALE_ABOVE), RESCALE, 1.0)
        above, f, saved = d.mul(above, scale), d.mul(f, scale), d.mul(saved, scale)
    norm = d.select(d.cmp(">=", d.fabs(j0), d.fabs(j1)), d.div(j0, f), d.div(j1, above))
    series = d.value(1.0)
    for k in range(1, order + 1):
        series = d.mul(series, d.mul(ax, 0.5 / k))
    inner = d.select(d.cmp("<", ax, SERIES_END), series, d.mul(saved, norm))
    result = d.select(d.cmp(">", ax, float(order)), forward, inner)
    if order % 2:
        result = d.select(d.cmp("<", x, 0.0), d.neg(result), result)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


def _yn(e: Emitter, x: Value, order: int) -> Value:
    """Yₙ(x) by forward recurrence from Y₀, Y₁ (stable: Y dominates); −inf at 0 and where
    it overflows (the recurrence's −inf − (−inf)), NaN below 0."""
    if order < 2:
        return _Y_BODIES[order](e, x)
    d = e.wide()
    x = d.extend(x)
    value = _forward(d, x, _Y_BODIES[0](d, x), _Y_BODIES[1](d, x), order)
    value = d.select(d.cmp(">", x, 0.0), d.select(d.isnan(value), -math.inf, value), value)
    return d.narrow(d.select(d.cmp("==", x, 0.0), -math.inf, value), e.fmt)


_J_BODIES = (_bessel_jy("j", 0), _bessel_jy("j", 1))
_Y_BODIES = (_bessel_jy("y", 0), _bessel_jy("y", 1))
NEUTRAL: dict[str, Callable[..., Value]] = {
    "i0": _bessel_i(0), "i1": _bessel_i(1),
    **{f"{kind}{order}": _bessel_jy(kind, order) for kind in "jy" for order in (0, 1)},
    "jn": _jn, "yn": _yn,
}
BODIES = NEUTRAL
