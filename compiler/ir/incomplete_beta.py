"""The regularised incomplete beta function I_x(a, b) = B(x; a, b)/B(a, b) (`betainc`, SciPy's
argument order: a, b, x): its NumPy semantics and the constants that the math library's
body (`backend/mathlib_incomplete_beta.py`) takes the same steps with.

One computation in f64 with a fixed number of steps (so that the native body is
branch-free and vectorises): the prefactor e^L = xᵃ (1 − x)ᵇ / B(a, b), L = a log x +
b log1p(−x) − betaln(a, b); then the continued fraction of Numerical Recipes' `betacf`
(modified Lentz, `FRACTION_TERMS` pairs of levels), I = e^L F(a, b, x) / a below x =
(a + 1)/(a + b + 2), and by the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) above, where the
fraction converges fast.

Special values as SciPy: NaN for a < 0, b < 0, x outside [0, 1], a = b = 0, a = b = inf
and NaN operands; I = 0 at x = 0 and 1 at x = 1, else 0 for b = 0 or a = inf, 1 for a = 0
or b = inf. The steps
suffice for a, b ≤ 100 (the accuracy measured in docs/mathlib.md).

Derivatives: ∂I/∂x = x^(a−1) (1 − x)^(b−1) / B(a, b); with respect to a and b there is none (a
CompileError, `transforms/reverse_rules.py`).
"""

from __future__ import annotations

import numpy as np

from reverie.compiler.ir.special import betaln_array

FRACTION_TERMS = 100
LENTZ_TINY = 1e-300        # the modified Lentz method's stand-in for a zero denominator


def _guard(v: np.ndarray) -> np.ndarray:
    return np.where(np.abs(v) < LENTZ_TINY, LENTZ_TINY, v)


def _fraction(p: np.ndarray, q: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Numerical Recipes' `betacf(p, q, z)` by the modified Lentz method."""
    c = np.ones_like(z)
    d = 1 / _guard(1 - (p + q) * z / (p + 1))
    h = d
    for m in range(1, FRACTION_TERMS + 1):
        even = m * (q - m) * z / ((p - 1 + 2 * m) * (p + 2 * m))
        odd = -(p + m) * (p + q + m) * z / ((p + 2 * m) * (p + 1 + 2 * m))
        for step in (even, odd):
            d = 1 / _guard(1 + step * d)
            c = _guard(1 + step / c)
            h = h * (d * c)
    return h


def betainc_array(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """I_x(a, b) in f64, by the steps of the module docstring."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, x)))
    with np.errstate(all="ignore"):
        prefactor = np.exp(a * np.log(x) + b * np.log1p(-x) - betaln_array(a, b))
        flip = x * (a + b + 2) >= a + 1           # where the fraction converges fast
        p, q = np.where(flip, b, a), np.where(flip, a, b)
        part = prefactor * _fraction(p, q, np.where(flip, 1 - x, x)) / p
        result = np.where(flip, 1 - part, part)
        result = np.where((b == 0) | (a == np.inf), 0.0,
                          np.where((a == 0) | (b == np.inf), 1.0, result))
        result = np.where(x == 0, 0.0, np.where(x == 1, 1.0, result))   # x first
        undefined = (np.isnan(a) | np.isnan(b) | np.isnan(x) | (a < 0) | (b < 0) | (x < 0)
                     | (x > 1) | ((a == 0) & (b == 0)) | ((a == np.inf) & (b == np.inf)))
        return np.where(undefined, np.nan, result)
