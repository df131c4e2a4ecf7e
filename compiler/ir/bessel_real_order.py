"""Bessel functions of real order v (a constant attribute): Iᵥ (`iv`), e^(−|x|) Iᵥ (`ive`)
and Jᵥ (`jv`, v not an integer: integral orders are `jn`'s). The algorithm is written once,
against the arithmetic of the math library's emitter (`add`, `mul`, `select`, `pow`, ...),
and runs on NumPy arrays here (`NumpyArith`, the NumPy semantics of the ops) and as native
code and MLIR (`backend/mathlib_bessel_real.py`). Every step is branch-free: the regions
are selects, the counts of terms and of recurrence steps are fixed by v. Constants:
`bessel_real_constants.py`.

Iᵥ, for x ≥ 0 (v an integer: Iᵥ = I₋ᵥ, Iᵥ(−x) = (−1)ᵛ Iᵥ(x); otherwise NaN below 0):

- up to x = `series_end(v)` (130 to 170) the power series (x/2)ᵛ Σ (x²/4)ᵏ/(k! Γ(v + k + 1))
  with 128 terms, all positive for v > −1 (below, the first few alternate; they are the
  K part of I₋ᵥ = Iᵥ + (2/π) sin(vπ) Kᵥ, which the series includes);
- beyond, e^(−x) Iᵤ(x) by Debye's uniform expansion at u = |v| + m ≥ 30 and u + 1, then the
  backward recurrence I_{u−1} = I_{u+1} + (2u/x) Iᵤ (stable: I decreases with its order)
  down to |v| (Kᵥ is below 10⁻¹¹⁰ of Iᵥ there, so I₋ᵥ = Iᵥ). The exponent uη − x =
  u (w − asinh(u/x)), w = (u/x)/(1 + √(1 + (u/x)²)), has no cancellation.
  Iᵥ = e^(x/2) (e^(x/2) e^(−x) Iᵥ), so nothing overflows before Iᵥ does;
- v ≤ −20, not an integer: the series' first terms (the K part) alternate and cancel from
  about x = 0.35|v| on; there I₋ᵥ = Iᵥ + (2/π) sin(vπ) Kᵥ (v = |v|) with Kᵥ by Debye's
  expansion (the same polynomials, alternating).

Jᵥ, for x ≥ 0 (NaN below 0), with v = b + n, 0 < b < 1:

- up to x = max(1, √(v + 1)) the power series (16 terms, alternating, but its terms cancel
  less than e^½ there);
- up to X = max(25, v): Miller's backward recurrence J_{ν−1} = (2ν/x) J_ν − J_{ν+1} from
  order b + M (M = X + 10 X^(1/3) + 10, even) down to b, normalised by Neumann's sum
  (x/2)ᵇ = Σⱼ cⱼ J_{b+2j}(x), rescaled by 10⁻²⁰⁰ past 10²⁰⁰;
- beyond X: J_b and J_{b+1} by Hankel's expansion (12 + 12 terms, phase from sin x, cos x,
  whose reduction is exact), then the forward recurrence up to v (stable for x > v);
- negative v: from J_b, J_{b+1} (Miller's or Hankel's) the recurrence down to v (stable:
  J₋ᵥ grows with −v like Yᵥ).

Special values: Iᵥ(inf) = inf, ive(±inf) = 0, Jᵥ(inf) = 0 (SciPy: NaN for non-integral v);
at 0: 1 for v = 0, 0 for v > 0, ±inf for v < 0 with the sign of 1/Γ(v + 1) (the limit from
the right; SciPy's iv gives +inf); NaN for NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from reverie.compiler.ir.bessel_real_constants import (
    DEBYE_ORDER,
    SERIES_TERMS,
    debye_coefficients,
    hankel_coefficients,
    neumann_coefficients,
    series_coefficients,
    series_end,
)

J_SERIES_TERMS = 16       # terms of Jᵥ's power series (up to `j_series_end(v)`)
K_DEBYE_ORDER = 20.0      # I₋ᵥ as Iᵥ + (2/π) sin(vπ) Kᵥ from v = 20 on (K by Debye),
REFLECT_ABOVE = 0.35      # for x > 0.35 v
HANKEL_START = 25.0       # Hankel's expansion of J_b, J_{b+1} from here
RESCALE_ABOVE = 1e200     # Miller's recurrence is scaled down by RESCALE beyond this
RESCALE = 1e-200
MAX_ORDER = 150.0         # |v| beyond: a CompileError (Γ(v + 1) and (x/2)ᵛ would overflow)

Arith = Any               # the emitter's interface: `NumpyArith`, `MathEmitter`, `MlirArith`


def j_series_end(v: float) -> float:
    """Where Jᵥ's power series hands over to Miller's recurrence: max(1, √(v + 1)), where
    its terms cancel less than e^(x²/(2(v + 1))) ≤ e^½."""
    return max(1.0, math.sqrt(v + 1)) if v > 0 else 1.0


def miller_end(v: float) -> float:
    """Where Jᵥ's Miller recurrence hands over to Hankel's expansion."""
    return max(HANKEL_START, v)


def miller_start(end: float) -> int:
    """Steps of Miller's recurrence above the base order for x ≤ `end` (even): J_M(x) is
    below 10⁻¹⁸ of J's amplitude there."""
    start = math.ceil(end + 10 * end ** (1 / 3) + 10)
    return start + start % 2


# ---------------------------------------------------------------- Iᵥ


def _square(a: Arith, x: Any) -> tuple[Any, Any]:
    """x² = hi + lo exactly (Dekker's product: Veltkamp's split, no fused operations)."""
    c = a.mul(x, 134217729.0)                                  # 2²⁷ + 1
    high = a.sub(c, a.sub(c, x))
    low = a.sub(x, high)
    hi = a.mul(x, x)
    lo = a.add(a.add(a.sub(a.mul(high, high), hi), a.mul(a.mul(high, low), 2.0)),
               a.mul(low, low))
    return hi, lo


def _series(a: Arith, x: Any, v: float, sign: int, count: int, end: float) -> Any:
    """(x/2)ᵛ Σₖ signᵏ (x²/4)ᵏ/(k! Γ(v + k + 1)) for 0 ≤ x ≤ end, as S(w) + w_lo S'(w) in
    w + w_lo = (x/2ᵉ)², 2ᵉ ≥ end (exact): the rounding of w alone would cost k ulps where
    the k-th term dominates."""
    unit = 2.0 ** math.ceil(math.log2(end))
    coefficients = series_coefficients(v, sign, count, unit)
    hi, lo = _square(a, x)
    w, w_lo = a.mul(hi, unit ** -2), a.mul(lo, unit ** -2)
    total, slope = a.value(coefficients[-1]), a.value(0.0)
    for c in reversed(coefficients[:-1]):
        slope = a.fma(slope, w, total)
        total = a.fma(total, w, c)
    return a.mul(a.pow(a.mul(x, 0.5), a.value(v)), a.fma(w_lo, slope, total))


def _debye(a: Arith, x: Any, order: float) -> tuple[Any, Any]:
    """(order η − x, t) of Debye's expansion, t = 1/√(1 + z²), z = x/order (t = 0 at inf):
    order η − x = order (w − asinh(order/x)), w = (order/x)/(1 + √(1 + (order/x)²))."""
    ratio = a.div(order, x)
    root = a.sqrt(a.fma(ratio, ratio, 1.0))
    w = a.div(ratio, a.add(root, 1.0))
    exponent = a.mul(order, a.sub(w, a.log1p(a.fma(ratio, w, ratio))))   # asinh(order/x)
    return exponent, a.div(ratio, root)


def _debye_scaled(a: Arith, x: Any, order: float) -> Any:
    """e^(−x) I_order(x) = e^(order η − x) √(t/(2π order)) Σ uₖ(t)/orderᵏ."""
    exponent, t = _debye(a, x, order)
    amplitude = a.sqrt(a.mul(t, 1 / (2 * math.pi * order)))
    return a.mul(a.mul(a.exp(exponent), amplitude), a.poly(t, debye_coefficients(order, 1)))


def _debye_k(a: Arith, x: Any, order: float, scaled: bool) -> Any:
    """K_order(x) (times e^(−x) if `scaled`) = e^(−order η) √(πt/(2 order)) Σ (−1)ᵏ uₖ(t)/
    orderᵏ, order ≥ `K_DEBYE_ORDER`."""
    exponent, t = _debye(a, x, order)
    shift = a.add(x, x) if scaled else x
    amplitude = a.sqrt(a.mul(t, math.pi / (2 * order)))
    return a.mul(a.mul(a.exp(a.neg(a.add(exponent, shift))), amplitude),
                 a.poly(t, debye_coefficients(order, -1)))


def _scaled_far(a: Arith, x: Any, order: float) -> Any:
    """e^(−x) I_order(x), order ≥ 0, by Debye's expansion at order + m ≥ `DEBYE_ORDER` and
    the backward recurrence down to `order`."""
    shift = max(0, math.ceil(DEBYE_ORDER - order))
    top = order + shift
    above, value = _debye_scaled(a, x, top + 1), _debye_scaled(a, x, top)
    for k in range(shift):
        above, value = value, a.fma(a.div(2 * (top - k), x), value, above)
    return value


def _modified_i(a: Arith, x: Any, order: float, scaled: bool, end: float | None = None) -> Any:
    """I_order(x) (times e^(−x) if `scaled`) for x ≥ 0: the series up to `end` (by default
    `series_end`), Debye's expansion beyond."""
    end = series_end(order) if end is None else end
    near_x = a.select(a.cmp("<", x, end), x, end)
    near = _series(a, a.select(a.cmp(">", near_x, 0.0), near_x, 0.0), order, 1,
                   SERIES_TERMS, end)
    far_x = a.select(a.cmp(">", x, end), x, end)
    far = _scaled_far(a, far_x, abs(order))
    if scaled:
        near = a.mul(near, a.exp(a.neg(near_x)))
    else:
        half = a.exp(a.mul(far_x, 0.5))
        far = a.select(a.cmp("==", far_x, math.inf), math.inf, a.mul(a.mul(far, half), half))
    return a.select(a.cmp("<=", x, end), near, far)


def _reflected_i(a: Arith, x: Any, v: float, scaled: bool) -> Any:
    """Iᵥ(x) for v ≤ −`K_DEBYE_ORDER` (not an integer), whose power series' first terms
    cancel from x = 0.4|v| on: there I_|v| + (2/π) sin(|v|π) K_|v| (K by Debye's
    expansion), the series below (where its first term dominates)."""
    order, switch = -v, REFLECT_ABOVE * -v
    turns = math.fmod(order, 2.0)                              # sin(order π), exactly reduced
    weight = 2 / math.pi * math.sin(math.pi * (turns - 2 if turns > 1 else turns))
    x_k = a.select(a.cmp(">", x, switch), x, switch)
    reflected = a.fma(_debye_k(a, x_k, order, scaled), weight,
                      _modified_i(a, x_k, order, scaled))
    near = _modified_i(a, a.select(a.cmp("<", x, switch), x, switch), v, scaled, switch)
    return a.select(a.cmp("<=", x, switch), near, reflected)


def bessel_i(a: Arith, x: Any, v: float, scaled: bool) -> Any:
    """Iᵥ(x), or e^(−|x|) Iᵥ(x) if `scaled`, in f64 (the module docstring)."""
    integral = float(v).is_integer()
    order = abs(v) if integral else v
    ax = a.fabs(x) if integral else x
    result = _reflected_i(a, ax, order, scaled) if order <= -K_DEBYE_ORDER else \
        _modified_i(a, ax, order, scaled)
    if integral and order % 2:
        result = a.select(a.cmp("<", x, 0.0), a.neg(result), result)
    elif not integral:
        result = a.select(a.cmp("<", x, 0.0), math.nan, result)
    return a.select(a.isnan(x), x, result)


# ---------------------------------------------------------------- Jᵥ


def _hankel(a: Arith, x: Any, v: float) -> Any:
    """Jᵥ(x) = √(2/(πx)) (P cos ω − Q sin ω), ω = x − φ, for x ≥ `HANKEL_START`."""
    p, q, cos_phi, sin_phi = hankel_coefficients(v)
    inverse = a.div(1.0, x)
    u = a.mul(inverse, inverse)
    big_p, big_q = a.poly(u, p), a.mul(inverse, a.poly(u, q))
    s, c = a.sin(x), a.cos(x)
    cos_w = a.fma(c, cos_phi, a.mul(s, sin_phi))
    sin_w = a.fma(s, cos_phi, a.mul(c, -sin_phi))
    amplitude = a.sqrt(a.div(2 / math.pi, x))
    return a.mul(amplitude, a.fma(big_p, cos_w, a.neg(a.mul(big_q, sin_w))))


def _miller(a: Arith, x: Any, base: float, end: float, wanted: Sequence[int]) -> list[Any]:
    """J_{base+k}(x) for k in `wanted`, 1 ≤ x ≤ end, by Miller's recurrence normalised by
    Neumann's sum."""
    start = miller_start(end)
    coefficients = neumann_coefficients(base, start // 2 + 1)
    inverse = a.div(2.0, x)
    above, f = a.value(0.0), a.value(1.0)
    total = a.mul(f, coefficients[start // 2])
    saved = {k: a.value(0.0) for k in wanted}
    for k in range(start, 0, -1):
        above, f = f, a.fma(a.mul(inverse, base + k), f, a.neg(above))       # order base+k−1
        if k - 1 in saved:
            saved[k - 1] = f
        if (k - 1) % 2 == 0:
            total = a.fma(f, coefficients[(k - 1) // 2], total)
        scale = a.select(a.cmp(">", a.fabs(f), RESCALE_ABOVE), RESCALE, 1.0)
        above, f, total = a.mul(above, scale), a.mul(f, scale), a.mul(total, scale)
        saved = {j: a.mul(value, scale) for j, value in saved.items()}
    norm = a.div(a.pow(a.mul(x, 0.5), a.value(base)), total)
    return [a.mul(saved[k], norm) for k in wanted]


def _recur(a: Arith, x: Any, order: float, low: Any, high: Any, steps: int, up: bool) -> Any:
    """Z_{order ± steps} from Z_order = low, Z_{order+1} = high by Z_{ν±1} = (2ν/x) Zᵥ − Z_{ν∓1}
    (up: from order + 1; down: from order)."""
    inverse = a.div(2.0, x)
    below, value, nu = (low, high, order + 1) if up else (high, low, order)
    for _ in range(steps):
        below, value = value, a.fma(a.mul(inverse, nu), value, a.neg(below))
        nu += 1 if up else -1
    return value


def bessel_j(a: Arith, x: Any, v: float) -> Any:
    """Jᵥ(x) for v not an integer, in f64 (the module docstring)."""
    n = math.floor(v)
    base = v - n
    end, series_end = miller_end(v), j_series_end(v)
    tiny = a.select(a.cmp("<", x, series_end), x, series_end)
    series = _series(a, tiny, v, -1, J_SERIES_TERMS, series_end)
    inner_x = a.select(a.cmp(">", x, series_end), a.select(a.cmp("<", x, end), x, end),
                       series_end)
    outer_x = a.select(a.cmp(">", x, end), x, end)
    outer = (_hankel(a, outer_x, base), _hankel(a, outer_x, base + 1))
    if n >= 0:
        inner = _miller(a, inner_x, base, end, [n])[0]
        outer_value = outer[0] if n == 0 else _recur(a, outer_x, base, *outer, n - 1, up=True)
        far = a.select(a.cmp("<=", x, end), inner, outer_value)
    else:
        inner = _miller(a, inner_x, base, end, [0, 1])
        pair = [a.select(a.cmp("<=", x, end), i, o) for i, o in zip(inner, outer, strict=True)]
        far = _recur(a, a.select(a.cmp("<=", x, end), inner_x, outer_x), base, *pair, -n,
                     up=False)
    result = a.select(a.cmp("<=", x, series_end), series, far)
    result = a.select(a.cmp("==", x, math.inf), 0.0, result)
    result = a.select(a.cmp("<", x, 0.0), math.nan, result)
    return a.select(a.isnan(x), x, result)


# ---------------------------------------------------------------- NumPy semantics


class NumpyArith:
    """The emitter's arithmetic on f64 NumPy arrays (the NumPy semantics of the ops)."""

    def value(self, v: Any) -> np.ndarray:
        return np.asarray(v, np.float64)

    add, sub, mul, div = (staticmethod(np.add), staticmethod(np.subtract),
                          staticmethod(np.multiply), staticmethod(np.divide))
    neg, fabs, sqrt, exp = (staticmethod(np.negative), staticmethod(np.abs),
                            staticmethod(np.sqrt), staticmethod(np.exp))
    log1p, pow, sin, cos = (staticmethod(np.log1p), staticmethod(np.power),
                            staticmethod(np.sin), staticmethod(np.cos))
    isnan = staticmethod(np.isnan)

    def fma(self, a: Any, b: Any, c: Any) -> np.ndarray:
        return np.add(np.multiply(a, b), c)

    def poly(self, x: Any, coeffs: Sequence[float]) -> np.ndarray:
        acc = np.asarray(coeffs[-1], np.float64)
        for c in reversed(coeffs[:-1]):
            acc = acc * x + c
        return acc

    def cmp(self, op: str, a: Any, b: Any) -> np.ndarray:
        return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                "==": np.equal}[op](a, b)

    def select(self, cond: Any, a: Any, b: Any) -> np.ndarray:
        return np.where(cond, a, b)


def _array(compute: Any, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(compute(NumpyArith(), np.asarray(x, np.float64)), np.float64)


def iv_array(x: np.ndarray, order: float) -> np.ndarray:
    """Iᵥ(x) in f64, as the native body computes it."""
    return _array(lambda a, x: bessel_i(a, x, order, scaled=False), x)


def ive_array(x: np.ndarray, order: float) -> np.ndarray:
    """e^(−|x|) Iᵥ(x) in f64, as the native body computes it."""
    return _array(lambda a, x: bessel_i(a, x, order, scaled=True), x)


def jv_array(x: np.ndarray, order: float) -> np.ndarray:
    """Jᵥ(x) in f64 (v not an integer), as the native body computes it."""
    return _array(lambda a, x: bessel_j(a, x, order), x)
