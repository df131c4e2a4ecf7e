"""Bessel functions of integer order n ≥ 2, Jₙ and Yₙ (SciPy's jn and yn): their NumPy
semantics and the constants that native code shares.

Both start from J₀, J₁, Y₀, Y₁ (`special.bessel_jy_array`, the bodies of j0 ... y1):

- Yₙ by forward recurrence Yₖ₊₁ = (2k/x) Yₖ − Yₖ₋₁ (Y is the dominant solution, so the
  recurrence is stable). Y is NaN below 0 and −inf at 0 and where it overflows.
- Jₙ by the same forward recurrence where |x| > n (there it is stable too), and below by
  Miller's backward recurrence from the index `miller_start(n)` (f_M+1 = 0, f_M = 1), scaled
  down by 10⁻²⁰⁰ whenever it passes 10²⁰⁰ and normalised by J₀/f₀ or J₁/f₁, whichever of
  |J₀|, |J₁| is larger (they have no common zero). Below |x| = 10⁻⁹ the series' first term
  (|x|/2)ⁿ/n! (relative error below x²/(4(n + 1)) < 10⁻¹⁸). Jₙ(−x) = (−1)ⁿ Jₙ(x).

The start index is fixed by n alone, so that the code is a straight line of selects.
"""

from __future__ import annotations

import math

import numpy as np

from reverie.compiler.ir.special import bessel_jy_array

SERIES_END = 1e-9         # below: Jₙ(x) = (x/2)ⁿ/n!
RESCALE_ABOVE = 1e200     # Miller's recurrence is scaled down by RESCALE beyond this
RESCALE = 1e-200


def miller_start(n: int) -> int:
    """The index from which Miller's recurrence starts for Jₙ(x), |x| ≤ n: even, and far
    enough that J_M(x)/Jₙ(x) < 10⁻¹⁷ for every such x (n + √(400 n) + 10; checked against
    mpmath up to n = 200 in the tests)."""
    start = n + math.isqrt(400 * n) + 10
    return start + start % 2


def bessel_jn_array(x: np.ndarray, order: int) -> np.ndarray:
    """Jₙ(x) in f64 for n = `order` ≥ 0, as the native body computes it."""
    x = np.asarray(x, np.float64)
    if order < 2:
        return bessel_jy_array(x, "j", order)
    ax = np.abs(x)
    j0, j1 = bessel_jy_array(ax, "j", 0), bessel_jy_array(ax, "j", 1)
    with np.errstate(all="ignore"):
        below, value = j0, j1
        for k in range(1, order):
            below, value = value, (2 * k / ax) * value - below
        forward = value
        bx = np.clip(ax, SERIES_END, order)
        inverse = 2 / bx
        above, f, saved = np.zeros_like(bx), np.ones_like(bx), np.zeros_like(bx)
        for k in range(miller_start(order), 0, -1):
            above, f = f, (k * inverse) * f - above
            if k - 1 == order:
                saved = f
            scale = np.where(np.abs(f) > RESCALE_ABOVE, RESCALE, 1.0)
            above, f, saved = above * scale, f * scale, saved * scale
        backward = saved * np.where(np.abs(j0) >= np.abs(j1), j0 / f, j1 / above)
        series = np.ones_like(ax)
        for k in range(1, order + 1):
            series = series * (ax * 0.5 / k)
        value = np.where(ax > order, forward, np.where(ax < SERIES_END, series, backward))
        if order % 2:
            value = np.where(x < 0, -value, value)
        return np.where(np.isnan(x), x, value)


def bessel_yn_array(x: np.ndarray, order: int) -> np.ndarray:
    """Yₙ(x) in f64 for n = `order` ≥ 0, as the native body computes it."""
    x = np.asarray(x, np.float64)
    if order < 2:
        return bessel_jy_array(x, "y", order)
    below, value = bessel_jy_array(x, "y", 0), bessel_jy_array(x, "y", 1)
    with np.errstate(all="ignore"):
        for k in range(1, order):
            below, value = value, (2 * k / x) * value - below
        value = np.where(x > 0, np.where(np.isnan(value), -np.inf, value), value)
        return np.where(x == 0, -np.inf, value)
