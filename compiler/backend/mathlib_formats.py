"""Constants and minimax coefficients of the math library, per float format.

`Format` holds one float type's bit layout, range limits and the polynomial coefficients
that `mathlib.py` evaluates (fitted with a Remez exchange in mpmath; the method and the
measured error bounds are in docs/mathlib.md). `F32` and `F64` are the two instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

LOG2E = 1.4426950408889634
TWO_OVER_PI = 0.6366197723675814
# pi/2 in pieces of 27 significant bits (the last one full): k * piece is exact for |k| < 2**26.
PIO2_PIECES = (1.570796325802803, 9.920935739593517e-10, 5.721188709663575e-18,
               1.6446256936324258e-26)
TWO_THIRDS_HI, TWO_THIRDS_LO = 0.6666666666666666, 3.700743415417188e-17
# log(1+f) = 2s + (2/3)s^3 + s^5 * R(s^2), s = f/(2+f): the tail used by the f64 pow.
LOG_TAIL_F64 = (0.4000000000000225, 0.2857142857010315, 0.2222222251929478,
                0.18181784421211925, 0.15386754878495082, 0.13256873990609658,
                0.13195814401868666)
INF = math.inf


@dataclass(frozen=True)
class Format:
    """Bit layout, range limits and polynomial coefficients of one float type."""

    name: str
    float_type: ir.Type
    int_type: ir.IntType
    mantissa_bits: int
    bias: int
    ln2_hi: float          # ln 2 with enough trailing zero bits that k * ln2_hi is exact
    ln2_lo: float
    exp_min: float         # exp(x) rounds to 0 below, to inf above exp_max
    exp_max: float
    expm1_min: float       # expm1(x) rounds to -1 below
    tanh_max: float        # tanh(x) rounds to 1 above
    erf_max: float         # erf(x) rounds to 1 above
    expm1_poly: tuple[float, ...]   # expm1(r) = r + r^2 P(r),            |r| <= ln2/2
    log_poly: tuple[float, ...]     # log(1+f) = 2s + s z Q(z), z = s^2,  |s| <= 0.1716
    sin_poly: tuple[float, ...]     # sin r = r + r^3 S(r^2),             |r| <= pi/4
    cos_poly: tuple[float, ...]     # cos r = 1 - r^2/2 + r^4 C(r^2)
    erf_small_poly: tuple[float, ...]   # erf x = x + x E(x^2),            |x| < 0.84375
    erfcx_centres: tuple[float, float]  # erfc x = exp(-x^2) G_i(x - centre_i) on
    erfcx_polys: tuple[tuple[float, ...], tuple[float, ...]]  # [0.84375, 2), [2, erf_max]

    @property
    def magic(self) -> float:
        """1.5 * 2**mantissa_bits: adding it to a small integral float exposes it in the bits."""
        return 1.5 * 2.0**self.mantissa_bits


F32 = Format(
    "f32", ir.FloatType(), ir.IntType(32), 23, 127, 0.693145751953125, 1.428606765330187e-06,
    exp_min=-105.0, exp_max=89.0, expm1_min=-32.0, tanh_max=10.0, erf_max=4.0,
    expm1_poly=(0.5, 0.16666549444198608, 0.04166685789823532, 0.00836596917361021,
                0.0013897859025746584),
    log_poly=(0.6666677594184875, 0.39977574348449707, 0.29870936274528503),
    sin_poly=(-0.16666655242443085, 0.00833216030150652, -0.00019515250460244715),
    cos_poly=(0.04166664555668831, -0.0013887316454201937, 2.443312041577883e-05),
    erf_small_poly=(0.12837916612625122, -0.37612593173980713, 0.11282911896705627,
                    -0.026809535920619965, 0.0050618816167116165, -0.000637496414128691),
    erfcx_centres=(0.84375, 2.0),
    erfcx_polys=(
        (0.47436806559562683, -0.32788196206092834, 0.19768893718719482, -0.10711198300123215,
         0.05238287150859833, -0.02198515646159649, 0.006778379436582327,
         -0.0010735344840213656),
        (0.25539568066596985, -0.10679705440998077, 0.04181453213095665, -0.015539792366325855,
         0.0056672971695661545, -0.0021158817689865828, 0.0007040479686111212,
         -0.0001278718700632453),
    ),
)

F64 = Format(
    "f64", ir.DoubleType(), ir.IntType(64), 52, 1023, 0.6931471803691238, 1.9082149292705877e-10,
    exp_min=-746.0, exp_max=710.0, expm1_min=-64.0, tanh_max=20.0, erf_max=5.95,
    expm1_poly=(0.5, 0.16666666666666677, 0.04166666666666651, 0.0083333333333217,
                0.0013888888888962299, 0.00019841269885939708, 2.480158717264248e-05,
                2.755724440357541e-06, 2.7557402586644823e-07, 2.510896768525358e-08,
                2.0875337273460286e-09),
    log_poly=(0.6666666666666734, 0.39999999999416375, 0.2857142874201507, 0.22222198610831262,
              0.18183562402601194, 0.15314098900696016, 0.1479547450839733),
    sin_poly=(-0.1666666666666663, 0.008333333333322113, -0.0001984126982958485,
              2.7557313619700766e-06, -2.50507474903906e-08, 1.5896213887997593e-10),
    cos_poly=(0.041666666666666595, -0.001388888888887305, 2.4801587288846544e-05,
              -2.755731417776634e-07, 2.0875700628756917e-09, -1.1358525222429332e-11),
    erf_small_poly=(0.1283791670955126, -0.3761263890318375, 0.11283791670954721,
                    -0.026866170645026027, 0.005223977624025366, -0.0008548326910649086,
                    0.00012055327275079868, -1.4925459756421453e-05, 1.6457850399743316e-06,
                    -1.6302428903300478e-07, 1.4201671342051874e-08, -8.869720312236181e-10),
    erfcx_centres=(1.421875, 3.975),
    erfcx_polys=(
        (0.3348494624055177, -0.1761510083798216, 0.08438474736545898, -0.03744429714637025,
         0.015571818680230326, -0.006121246984304468, 0.002289390208084722,
         -0.0008188629348117734, 0.0002812673705543936, -9.309689833044087e-05,
         2.9779010519509337e-05, -9.227943682113614e-06, 2.7765653558433696e-06,
         -8.131065871100252e-07, 2.3065417709083468e-07, -6.302282129087264e-08,
         1.9205944327245454e-08, -5.931017875894457e-09),
        (0.13781373758690227, -0.03275995327861982, 0.0075929233227606625,
         -0.0017187219863442358, 0.0003805016778494212, -8.249170523622506e-05,
         1.7531236794256575e-05, -3.6588592533428727e-06, 7.490099451914462e-07,
         -1.4793275677202e-07, 3.3818375216545544e-08, -3.9056238459943386e-09,
         5.756603723548047e-10, -1.5882098822519743e-09, -8.797232385035579e-10,
         -3.408446403251408e-10, -6.64688680592932e-11, -6.605035594693104e-12),
    ),
)
