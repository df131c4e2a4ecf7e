"""The error function's complement and inverses in the math library: erfc, erfinv and
erfcinv (f32, f64).

Every body computes in f64 (f32 arguments widened exactly, the result rounded once),
branch-free, against the operations that `mathlib.MathEmitter` shares with the MLIR export's
`MlirArith` (`NEUTRAL`: `backend="mlir"` runs the same algorithm; MLIR has no erfc op).

- erfc x = 1 − erf x below 0.84375; e^(−x²) G(|x|) up to 5.95, with G ≈ e^(x²) erfc x from
  erf's piece below 2 and `ERFCX_PIECES` above (erf's own piece there is accurate only as far
  as erf needs: 2e-8 relative at 5); T(1/x²) e^(−x²) / (|x|√π) up to 27.5; x² split exactly
  into hi + lo, e^(−x²) = e^(−hi)(1 − lo), so that the tail keeps its relative accuracy down
  to the subnormals; 2 − erfc|x| for negative x.
- erfinv x and erfcinv q solve erf y = |x| (erfc y = q) for y ≥ 0 by three Halley steps,
  y ← y − u/(1 + y u) with u = f/f' = (√π/2) e^(y²) (erf y − |x|), from Winitzki's
  approximation (relative error below 2e-3; a series for |x| < ½). The residual is taken in
  the form that is exact for the input: erf y − |x| for |x| < ½, else q − erfc y =
  (√π/2)(q / e^(−y²) − e^(y²) erfc y) with q = 1 − |x| (exact) or q itself, so that the
  deep tail (erfcinv(1e-300) = 26.2) keeps its relative accuracy. erfcinv q = −erfcinv(2 − q)
  above 1 (2 − q exact). erfinv(±1) = ±inf, erfcinv(0) = inf, erfcinv(2) = −inf; NaN
  outside [−1, 1] and [0, 2].
"""

from __future__ import annotations

import math
from collections.abc import Callable

from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_formats import F64

# x √π e^(x²) erfc(x) = T(1/x²) for x in [5.95, 27.5] (erfc underflows beyond): minimax
# for the relative error, 2.2e-19
ERFC_TAIL = (1.0, -0.4999999999999564, 0.7499999999656308, -1.8749999855047257,
             6.562496299142636, -29.530637161466064, 162.35326171244625, -1050.4210345267395,
             7628.911245544511, -56274.80873417822, 345180.5222177287, -1194805.4840140683)
# e^(x²) erfc(x) = Gᵢ(x − cᵢ) on [2, 3), [3, 4), [4, 5), [5, 5.95) (minimax for the relative
# error, below 1e-17; erf's piece from 2 on is accurate only as far as erf needs)
ERFCX_PIECES = (
    (2.0, 2.5, (
        0.2108063640611436, -0.07434734678979472, 0.024937997086656873, -0.008001569382093923,
        0.0024670368157024302, -0.0007335909374714267, 0.00021101982429426398,
        -5.8868958366850396e-05, 1.5961852452136706e-05, -4.214357738686666e-06,
        1.0852322593625435e-06, -2.7263031462274196e-07, 6.707984175652613e-08,
        -1.7021676181629475e-08, 3.995469825835056e-09)),
    (3.0, 3.5, (
        0.1552936556088943, -0.041323577833252495, 0.010661133192510575, -0.0026730744396433904,
        0.0006526863268788971, -0.00015546891823835205, 3.6181704362394024e-05,
        -8.237986344577465e-06, 1.8371878223737637e-06, -4.0174190563438207e-07,
        8.622003739001762e-08, -1.816549986637799e-08, 3.765092692734675e-09,
        -7.971764703988702e-10, 1.595328641710529e-10)),
    (4.0, 4.5, (
        0.12248480427384142, -0.026015928630939815, 0.005413125434612246, -0.0011045761167897924,
        0.00022126645452905718, -4.3550828564236795e-05, 8.429241997653663e-06,
        -1.6054970095043084e-06, 3.0112634895962293e-07, -5.56508803157821e-08,
        1.013959783833933e-08, -1.8216994524648546e-09, 3.2311207661933553e-10,
        -5.818966112213677e-11, 1.0048463319079519e-11)),
    (5.0, 5.475, (
        0.10140902770783637, -0.017950313694704303, 0.003131060229330329, -0.0005385059594138285,
        9.137005076991682e-05, -1.530197257965896e-05, 2.5305836292297964e-06,
        -4.1343634080310866e-07, 6.675495211708706e-08, -1.0656266055380346e-08,
        1.682143202556019e-09, -2.627391333804912e-10, 4.136817797049566e-11,
        -6.324547950559863e-12, 0.0)),
)
SQRT_PI = 1.7724538509055159
ERFC_NEAR = 0.84375       # below, erfc x = 1 − erf x
ERFC_ZERO = 30.0          # erfc x rounds to 0 from 27.3 on


def erfc_parts(d: Emitter, ax: Value) -> tuple[Value, Value]:
    """(D, S) with erfc(ax) = D · S for ax ≥ 0 (f64): D = e^(−ax²), S the scaled complement
    e^(ax²) erfc(ax) ((1 − erf ax)/D below 0.84375); ax is clamped at 30."""
    ax = d.clamp(ax, 0.0, ERFC_ZERO)
    z = d.mul(ax, ax)
    square_lo = d.exact_fma(ax, ax, d.neg(z))
    decay = d.exp(d.neg(z))
    decay = d.fma(decay, d.neg(square_lo), decay)
    lower = d.poly(d.sub(ax, F64.erfcx_centres[0]), F64.erfcx_polys[0])
    centre, coeffs = ERFCX_PIECES[0][1], list(ERFCX_PIECES[0][2])
    for start, piece_centre, piece in ERFCX_PIECES[1:]:
        beyond = d.cmp(">=", ax, start)
        centre = d.select(beyond, piece_centre, centre)
        coeffs = [d.select(beyond, new, old) for new, old in zip(piece, coeffs, strict=True)]
    upper = d.poly(d.sub(ax, centre), coeffs)
    middle = d.select(d.cmp(">=", ax, 2.0), upper, lower)
    tail = d.div(d.poly(d.div(1.0, z), ERFC_TAIL), d.mul(ax, SQRT_PI))
    scaled = d.select(d.cmp(">=", ax, F64.erf_max), tail, middle)
    near = d.select(d.cmp("<", ax, ERFC_NEAR), d.div(d.sub(1.0, erf_near(d, ax)), decay), scaled)
    return decay, near


def erf_near(d: Emitter, x: Value) -> Value:
    """erf x for |x| < 0.84375 (f64): x + x E(x²)."""
    return d.fma(x, d.poly(d.mul(x, x), F64.erf_small_poly), x)


def _erfc(e: Emitter, x: Value) -> Value:
    """erfc x: D · S of |x|, 2 − that for negative x (see the module docstring)."""
    d = e.wide()
    x = d.extend(x)
    decay, scaled = erfc_parts(d, d.fabs(x))
    positive = d.mul(decay, scaled)
    result = d.select(d.cmp("<", x, 0.0), d.sub(2.0, positive), positive)
    result = d.select(d.cmp("<", d.fabs(x), ERFC_NEAR), d.sub(1.0, erf_near(d, x)), result)
    return d.narrow(d.select(d.isnan(x), x, result), e.fmt)


# ---------------------------------------------------------------- inverses

WINITZKI = 0.147
# erfinv x ≈ (√π/2) Σ cₖ x²ᵏ⁺¹ below ½ (relative error below 1e-3): its Maclaurin series
ERFINV_SERIES = tuple(SQRT_PI / 2 * c for c in (
    1.0, math.pi / 12, 7 * math.pi ** 2 / 480, 127 * math.pi ** 3 / 40320,
    4369 * math.pi ** 4 / 5806080))
HALLEY_STEPS = 3


def _solve(d: Emitter, ax: Value, q: Value) -> Value:
    """y ≥ 0 with erf y = ax, erfc y = q (q = 1 − ax; one of them exact: ax below ½)."""
    central = d.cmp("<", ax, 0.5)
    log_q = d.select(central, d.log1p(d.neg(d.mul(ax, ax))), d.log(d.mul(q, d.sub(2.0, q))))
    shift = d.fma(log_q, 0.5, 2 / (math.pi * WINITZKI))
    root = d.sqrt(d.sub(d.mul(shift, shift), d.div(log_q, WINITZKI)))
    far = d.sqrt(d.sub(root, shift))
    near = d.mul(ax, d.poly(d.mul(ax, ax), ERFINV_SERIES))
    y = d.select(central, near, far)
    for _ in range(HALLEY_STEPS):
        decay, scaled = erfc_parts(d, y)
        from_q = d.mul(SQRT_PI / 2, d.sub(d.div(q, decay), scaled))
        from_x = d.mul(d.mul(SQRT_PI / 2, d.exp(d.mul(y, y))), d.sub(erf_near(d, y), ax))
        u = d.select(central, from_x, from_q)
        y = d.sub(y, d.div(u, d.fma(y, u, 1.0)))
    return y


def _erfinv(e: Emitter, x: Value) -> Value:
    """y with erf y = x: ±inf at ±1, NaN outside [−1, 1]."""
    d = e.wide()
    x = d.extend(x)
    ax = d.fabs(x)
    y = d.copysign(_solve(d, ax, d.sub(1.0, ax)), x)
    y = d.select(d.cmp("==", ax, 1.0), d.copysign(math.inf, x), y)
    y = d.select(d.cmp("==", x, 0.0), x, y)
    return d.narrow(d.select(d.cmp_unordered(">", ax, 1.0), math.nan, y), e.fmt)


def _erfcinv(e: Emitter, q: Value) -> Value:
    """y with erfc y = q: inf at 0, −inf at 2, 0 at 1, NaN outside [0, 2]."""
    d = e.wide()
    q = d.extend(q)
    upper = d.cmp(">", q, 1.0)
    small = d.select(upper, d.sub(2.0, q), q)            # in [0, 1], exact
    y = _solve(d, d.sub(1.0, small), small)
    y = d.select(d.cmp("==", small, 0.0), math.inf, y)
    y = d.select(d.cmp("==", small, 1.0), 0.0, y)
    y = d.select(upper, d.neg(y), y)
    outside = d.either(d.cmp_unordered("<", q, 0.0), d.cmp(">", q, 2.0))
    return d.narrow(d.select(outside, math.nan, y), e.fmt)


NEUTRAL: dict[str, Callable[..., Value]] = {
    "erfc": _erfc,
    "erfinv": _erfinv,
    "erfcinv": _erfcinv,
}
BODIES = NEUTRAL
