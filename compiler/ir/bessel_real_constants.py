"""The constants of the Bessel functions of real order v (`bessel_real_order.py`), which
depend on v alone and are computed once per order, in Python, when a kernel is built.

Γ of a real argument is computed here to 30 digits with the standard library alone
(`decimal`: Stirling's series past 40, the recurrence down to the argument), so that the
coefficients built from it are correctly rounded; neither SciPy nor mpmath is a run-time
dependency. Every table is a tuple of floats (`functools.cache` per order):

- `series_coefficients(v, sign, count, unit)`: the power series (x/2)ᵛ Σ signᵏ
  (x²/4)ᵏ/(k! Γ(v + k + 1)) of Iᵥ (sign +1) and Jᵥ (sign −1) as a polynomial in
  w = x² ÷ unit²; 0 where v + k + 1 is a pole.
- `series_end(v)`: where `SERIES_TERMS` terms of Iᵥ's series stop being enough.
- `debye_coefficients(order, sign)`: Σₖ signᵏ uₖ(t)/orderᵏ as one polynomial in t (Debye's
  uniform expansions of I and K, the polynomials uₖ of DLMF 10.41.10 in exact rationals).
- `hankel_coefficients(v)`: the amplitudes P, Q of Hankel's expansion (DLMF 10.17.3) as
  polynomials in 1/x², and cos φ, sin φ of its phase φ = (v/2 + 1/4)π.
- `neumann_coefficients(v, count)`: cⱼ of Neumann's expansion (x/2)ᵛ = Σⱼ cⱼ J_{v+2j}(x)
  (the normalisation of Miller's recurrence), cⱼ = (v + 2j) Γ(v + j)/j!, c₀ = Γ(v + 1).
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction
from functools import cache

DEBYE_ORDER = 30        # Debye's expansion is used from this order on (shifted to it below)
DEBYE_TERMS = 14        # u₀ … u₁₃: the first term left out is below 5e-19 from order 30
SERIES_TERMS = 128      # terms of Iᵥ's power series
HANKEL_TERMS = 12       # terms of P and of Q in Hankel's expansion (from x = 25: < 1e-17)
_DIGITS = 40
_PI = decimal.Decimal("3.1415926535897932384626433832795028841971693993751")
_BERNOULLI = (Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30),
              Fraction(5, 66), Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510),
              Fraction(43867, 798), Fraction(-174611, 330))


def _decimal(q: Fraction) -> decimal.Decimal:
    return decimal.Decimal(q.numerator) / decimal.Decimal(q.denominator)


def gamma_exact(z: Fraction) -> decimal.Decimal:
    """Γ(z) to about 35 digits for a real z that is not a pole: Stirling's series at
    z + n ≥ 40, divided by z (z + 1) … (z + n − 1) (exact)."""
    with decimal.localcontext() as context:
        context.prec = _DIGITS + 10
        shift = max(0, 40 - math.floor(z))
        w = z + shift
        d = _decimal(w)
        log_gamma = (d - decimal.Decimal("0.5")) * d.ln() - d + (2 * _PI).ln() / 2
        for k, b in enumerate(_BERNOULLI, start=1):
            log_gamma += _decimal(b / (2 * k * (2 * k - 1))) / d ** (2 * k - 1)
        product = Fraction(1)
        for i in range(shift):
            product *= z + i
        return log_gamma.exp() / _decimal(product)


def _is_pole(z: Fraction) -> bool:
    return z <= 0 and z.denominator == 1


@cache
def series_coefficients(v: float, sign: int, count: int, unit: float) -> tuple[float, ...]:
    """hₖ = signᵏ (½ unit)²ᵏ/(k! Γ(v + k + 1)), k < count (0 at the poles of Γ): the power
    series is (x/2)ᵛ Σ hₖ wᵏ in w = x² ÷ unit² ≤ 1, so that no coefficient under- or
    overflows."""
    first = next((k for k in range(count) if not _is_pole(Fraction(v) + k + 1)), count)
    coefficients = [0.0] * first
    if first < count:
        y = _decimal(Fraction(unit) ** 2 / 4)
        h = y ** first / gamma_exact(Fraction(v) + first + 1) / math.factorial(first)
        for k in range(first, count):
            coefficients.append(float(h) * sign ** k)
            h *= y / ((k + 1) * _decimal(Fraction(v) + k + 1))
    return tuple(coefficients)


@cache
def series_end(v: float) -> float:
    """The largest x (of a grid of 1/8) where the terms of Iᵥ's series left out (from k =
    `SERIES_TERMS`) stay below 10⁻¹⁸ of the largest one, and shrink at least twofold (v not
    a negative integer: Iᵥ of an integral order is I_|v|'s)."""
    def log_term(k: int, y: float) -> float:
        return k * math.log(y) - math.lgamma(k + 1) - math.lgamma(v + k + 1)

    x = 1.0
    while x < 400:
        nxt = x + 0.125
        y = nxt * nxt / 4
        last = SERIES_TERMS
        largest = max(log_term(k, y) for k in range(last))
        if log_term(last, y) - largest > math.log(1e-18) or \
                y / (last * (last + v)) > 0.5:
            break
        x = nxt
    return x


def _debye_polynomials(count: int) -> list[list[Fraction]]:
    """u₀ … u_{count−1} (coefficients in t, lowest first): u₀ = 1, uₖ₊₁(t) =
    ½ t²(1 − t²) uₖ'(t) + ⅛ ∫₀ᵗ (1 − 5s²) uₖ(s) ds."""
    polys = [[Fraction(1)]]
    while len(polys) < count:
        u = polys[-1]
        nxt = [Fraction(0)] * (len(u) + 3)
        for i, c in enumerate(u):
            if i:
                nxt[i + 1] += i * c / 2
                nxt[i + 3] -= i * c / 2
            nxt[i + 1] += c / (8 * (i + 1))
            nxt[i + 3] -= 5 * c / (8 * (i + 3))
        polys.append(nxt)
    return polys


@cache
def debye_coefficients(order: float, sign: int) -> tuple[float, ...]:
    """Σₖ signᵏ uₖ(t)/orderᵏ (k < `DEBYE_TERMS`; sign +1 for I, −1 for K) as the
    coefficients of one polynomial in t."""
    total = [Fraction(0)] * (3 * DEBYE_TERMS)
    for k, u in enumerate(_debye_polynomials(DEBYE_TERMS)):
        for i, c in enumerate(u):
            total[i] += c * sign ** k / Fraction(order) ** k
    return tuple(float(c) for c in total)


@cache
def hankel_coefficients(v: float) -> tuple[tuple[float, ...], tuple[float, ...], float, float]:
    """(P, Q, cos φ, sin φ): P(u) = Σ (−1)ʲ a₂ⱼ uʲ and Q(u) = Σ (−1)ʲ a₂ⱼ₊₁ uʲ (u = 1/x²;
    Q is multiplied by 1/x), aₖ = Πⱼ≤ₖ (4v² − (2j − 1)²)/(k! 8ᵏ); φ = (v/2 + 1/4)π."""
    four_v2 = 4 * Fraction(v) ** 2
    a, terms = Fraction(1), []
    for k in range(2 * HANKEL_TERMS):
        terms.append(a * (-1) ** (k // 2))
        a *= (four_v2 - (2 * k + 1) ** 2) / (8 * (k + 1))
    with decimal.localcontext() as context:
        context.prec = _DIGITS
        turns = (Fraction(v) / 4 + Fraction(1, 8)) % 2           # φ/(2π), reduced exactly
        phi = float(_decimal(turns) * 2 * _PI)
    return (tuple(float(t) for t in terms[0::2]), tuple(float(t) for t in terms[1::2]),
            math.cos(phi), math.sin(phi))


@cache
def neumann_coefficients(v: float, count: int) -> tuple[float, ...]:
    """cⱼ (j < count) with (x/2)ᵛ = Σⱼ cⱼ J_{v+2j}(x): c₀ = Γ(v + 1), cⱼ = (v + 2j) Γ(v + j)/j!
    (2 for v = 0)."""
    base = gamma_exact(Fraction(v) + 1)
    coefficients, ratio = [float(base)], Fraction(1)          # ratio = Γ(v + j)/(Γ(v + 1) j!)
    for j in range(1, count):
        ratio = ratio / j if j == 1 else ratio * (Fraction(v) + j - 1) / j
        coefficients.append(float(base * _decimal((Fraction(v) + 2 * j) * ratio)) if v else
                            2.0)
    return tuple(coefficients)
