"""Special functions of the math library: erf (more to come in the same style).

`BODIES` maps each function to its body, as in `mathlib_elementary.py`. A body written only
against the operations that `mathlib.MathEmitter` shares with the MLIR export's scalar
writer (`export/mlir_scalar.MlirArith`) is listed in `NEUTRAL` as well, and the MLIR export
then writes the same algorithm out for an op MLIR lacks. Those operations: `value`, `add`,
`sub`, `mul`, `div`, `neg`, `fma`, `poly`, `fabs`, `floor`, `rint`, `copysign`, `clamp`,
`log`, `log1p`, `cmp`, `cmp_unordered`, `isnan`, `select`, `both`, `either`, and `wide`,
`extend`, `narrow` to compute in f64 (`fmt` names the format of the arguments).
"""

from __future__ import annotations

from collections.abc import Callable

from .mathlib_elementary import exp_core
from .mathlib_emitter import Emitter, Value


def _erf(e: Emitter, x: Value) -> Value:
    """x + x E(x^2) near 0; 1 - e**(-x^2) G(|x|) (G: erfc scaled, two pieces) further out."""
    fmt = e.fmt
    z = e.mul(x, x)
    small = e.fma(x, e.poly(z, fmt.erf_small_poly), x)
    ax = e.clamp(e.fabs(x), 0.0, fmt.erf_max)
    upper = e.cmp(">=", ax, 2.0)
    lower_poly, upper_poly = fmt.erfcx_polys
    coeffs = [e.select(upper, hi, lo) for lo, hi in zip(lower_poly, upper_poly, strict=True)]
    centre = e.select(upper, fmt.erfcx_centres[1], fmt.erfcx_centres[0])
    erfcx = e.poly(e.sub(ax, centre), coeffs)
    erfc = e.mul(exp_core(e, e.neg(e.mul(ax, ax))), erfcx)
    large = e.copysign(e.sub(1.0, erfc), x)
    result = e.select(e.cmp("<", e.fabs(x), 0.84375), small, large)
    return e.select(e.isnan(x), x, result)


BODIES: dict[str, Callable[..., Value]] = {
    "erf": _erf,
}
# the bodies written against the operations `Emitter` shares with `MlirArith` alone
NEUTRAL: dict[str, Callable[..., Value]] = {}
