"""The regularised incomplete gamma functions P(a, x) = γ(a, x)/Γ(a) (`gammainc`) and
Q(a, x) = Γ(a, x)/Γ(a) = 1 − P (`gammaincc`): their NumPy semantics and the constants that
the math library's body (`backend/mathlib_incomplete_gamma.py`) takes the same steps with.

Both come from one computation, in f64, with a fixed number of steps (so that the native
body is branch-free and vectorises):

- the prefactor e^L = xᵃ e⁻ˣ / Γ(a + 1): L = a log x − x − lgamma(a + 1) for a < 10;
  from 10 on a(log1p(t) − t) + ½ log(a/2π) − c(a) − log a with t = (x − a)/a (log(x/a)
  for t < −½) and c Stirling's correction, which does not cancel near x = a;
- below x = a + 1 the series P = e^L Σₙ xⁿ / ((a + 1) ⋯ (a + n)), `SERIES_TERMS` terms,
  and Q = 1 − P;
- from x = a + 1 on the continued fraction Q = a e^L / (x + 1 − a − 1(1 − a)/(x + 3 − a −
  2(2 − a)/(x + 5 − a − ⋯))), `FRACTION_TERMS` levels by the modified Lentz method, and
  P = 1 − Q.

Special values as SciPy: NaN for a < 0, x < 0, a = x = 0, a = x = inf and NaN operands;
P(a, 0) = 0, P(0, x > 0) = 1, P(a, inf) = 1, P(inf, x) = 0 (Q the complement). The steps
suffice for a ≤ 100 (the accuracy measured in docs/mathlib.md); beyond, near x = a, where
the series and the fraction need about √(80a) steps, the result loses accuracy.

Derivatives: ∂P/∂x = e⁻ˣ xᵃ⁻¹ / Γ(a) = −∂Q/∂x; with respect to a there is none (a
CompileError, `transforms/reverse_rules.py`).
"""

from __future__ import annotations

import math

import numpy as np

from reverie.compiler.ir.special import lgamma_array, stirling_correction

SERIES_TERMS = 100
FRACTION_TERMS = 100
STIRLING_FROM = 10.0       # the prefactor through Stirling's series from a = 10 on
LENTZ_TINY = 1e-300        # the modified Lentz method's stand-in for a zero denominator
HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


def incomplete_gamma_array(a: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(a, x), Q(a, x)) in f64, by the steps of the module docstring."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    with np.errstate(all="ignore"):
        big = np.maximum(a, STIRLING_FROM)
        t = (x - big) / big
        log_ratio = np.where(t < -0.5, np.log(x / big), np.log1p(t))
        stirling = (big * (log_ratio - t) + 0.5 * np.log(big) - HALF_LOG_TWO_PI
                    - stirling_correction(big) - np.log(big))
        direct = a * np.log(x) - x - lgamma_array(a + 1)
        prefactor = np.exp(np.where(a >= STIRLING_FROM, stirling, direct))
        fraction = x >= a + 1
        xs = np.where(fraction, 0.0, x)                 # each method on its own domain
        term = total = np.ones_like(a)
        for n in range(1, SERIES_TERMS + 1):
            term = term * xs / (a + n)
            total = total + term
        p_series = prefactor * total
        b = np.where(fraction, x, a + 1) + 1 - a
        c, d = np.full_like(a, 1 / LENTZ_TINY), 1 / b
        h = d
        for i in range(1, FRACTION_TERMS + 1):
            an = -i * (i - a)
            b = b + 2
            d = an * d + b
            d = 1 / np.where(np.abs(d) < LENTZ_TINY, LENTZ_TINY, d)
            c = b + an / c
            c = np.where(np.abs(c) < LENTZ_TINY, LENTZ_TINY, c)
            h = h * (d * c)
        q_fraction = a * prefactor * h
        p = np.where(fraction, 1 - q_fraction, p_series)
        q = np.where(fraction, q_fraction, 1 - p_series)
        p, q = _special_values(a, x, p, q)
    return p, q


def _special_values(a: np.ndarray, x: np.ndarray, p: np.ndarray,
                    q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SciPy's values at the edges of the domain (see the module docstring)."""
    zero = (x == 0) | (a == np.inf)
    one = ((a == 0) | (x == np.inf)) & ~zero
    p = np.where(zero, 0.0, np.where(one, 1.0, p))
    q = np.where(zero, 1.0, np.where(one, 0.0, q))
    undefined = (np.isnan(a) | np.isnan(x) | (a < 0) | (x < 0) | ((a == 0) & (x == 0))
                 | ((a == np.inf) & (x == np.inf)))
    return np.where(undefined, np.nan, p), np.where(undefined, np.nan, q)


def gammainc_array(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P(a, x), the regularised lower incomplete gamma function."""
    return incomplete_gamma_array(a, x)[0]


def gammaincc_array(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Q(a, x), the regularised upper incomplete gamma function."""
    return incomplete_gamma_array(a, x)[1]
