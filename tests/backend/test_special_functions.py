"""lgamma, digamma and the internal polygamma {order = n}: values at every level.

One IR function computes all of them; it runs in the reference interpreter, as native code
and through MLIR, in f32 and f64, on arguments spread over the whole range: positive and
negative, near the poles (0 and the negative integers), near the zeros, tiny and huge.
The exact values come from mpmath (25 digits); the bounds are the measured maxima with
headroom. f64 errors are relative, plus a term for the cancellation that every method
suffers near a zero of the function (the size of the terms that cancel: about
1 + log(1 + |x|) for lgamma and digamma, |ψ⁽ⁿ⁾(1 − x)| below ½ for polygamma of even
order); results below the smallest normal float are compared absolutely. f32 results,
computed in f64 and rounded once, must be within 0.51 ulp. SciPy agrees where SciPy itself
is accurate (not next to a negative pole). Special values (poles, ±inf, NaN, ±0,
subnormals, overflow) must match exactly.
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
import scipy.special as sp

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES, TensorType
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.mlir_backend import MlirKernel
from reverie.runtime.native.mlir_to_llvm import mlir_tools
from reverie.runtime.native.native_kernel import native_kernel

ORDERS = (1, 2, 3, 4)
NAMES = ("lgamma", "digamma", *(f"polygamma{n}" for n in ORDERS))
LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
# f64 bounds: relative error, and the error per unit of the cancelling terms' size
F64_BOUNDS = {"interp": (1e-13, 1e-15), "native": (4e-15, 5e-16), "mlir": (4e-15, 5e-16)}
F32_ULPS = 0.51                       # computed in f64, rounded once
TINY = np.finfo(np.float64).tiny       # results below it are compared absolutely


@functools.cache
def table_function(dtype: str) -> Function:
    """f(x) = (lgamma(x), digamma(x), polygamma_1(x), ..., polygamma_4(x))."""
    x = Value(TensorType(dtype, (Dim.sym("N"),)), name="x")
    s = Scope(Block(params=[x]))
    s.block.results = [s.op("lgamma", [x]), s.op("digamma", [x]),
                       *(s.op("polygamma", [x], {"order": n}) for n in ORDERS)]
    return Function("special", s.block, ["x"])


def evaluate(level: str, dtype: str, x: np.ndarray) -> list[np.ndarray]:
    fn = table_function(dtype)
    bound = bind_arguments(fn, [x])
    if level == "interp":
        return [np.asarray(r) for r in interpret(fn, bound.arrays, bound.dims)]
    kernel = native_kernel(fn) if level == "native" else MlirKernel(fn)
    return kernel(bound)


def _spread(rng: np.random.Generator, dtype: type) -> np.ndarray:
    """Arguments over the whole range, exactly representable in `dtype`; no poles."""
    poles = -rng.integers(0, 40, 300).astype(float)
    tiny, huge = (-300, 300) if dtype is np.float64 else (-37, 38)
    nearest = -12 if dtype is np.float64 else -5      # a float next to a pole, a zero
    parts = [
        rng.uniform(-30, 30, 500), rng.uniform(0.5, 3, 200),
        10.0 ** rng.uniform(tiny, huge, 150),
        -(10.0 ** rng.uniform(0, 3, 150)) + rng.uniform(0.01, 0.99, 150),
        poles + 10.0 ** rng.uniform(nearest, -1, 300) * rng.choice([-1, 1], 300),
        1.4616321449683622 + 10.0 ** rng.uniform(nearest, -1, 100) * rng.choice([-1, 1], 100),
        np.repeat([1.0, 2.0], 50) + 10.0 ** rng.uniform(nearest, -1, 100)
        * rng.choice([-1, 1], 100),
    ]
    x = np.concatenate(parts).astype(dtype)
    return x[(x > 0) | (x != np.round(x))].astype(np.float64)


# f32 arguments (used at both widths), then f64 ones nearer poles and zeros, and wider
ARGUMENTS = np.concatenate([_spread(np.random.default_rng(11), np.float32),
                            _spread(np.random.default_rng(12), np.float64)])
IN_F32 = np.arange(ARGUMENTS.size) < _spread(np.random.default_rng(11), np.float32).size
mpmath.mp.dps = 25


def exact(name: str, x: float) -> float:
    """mpmath's value, rounded to f64 (±inf where that overflows)."""
    v = mpmath.mpf(float(x))
    if name == "lgamma":
        return float(mpmath.loggamma(v).real)
    return float(mpmath.digamma(v) if name == "digamma" else mpmath.polygamma(int(name[-1]), v))


@functools.cache
def exact_values() -> dict[str, np.ndarray]:
    """Every function's exact value at ARGUMENTS."""
    return {name: np.array([exact(name, v) for v in ARGUMENTS]) for name in NAMES}


def cancellation_scale(name: str, x: np.ndarray) -> np.ndarray:
    """The size of the terms that cancel near a zero of the function: the reflection's
    and the recurrence's (about 1 + log(1 + |x|) for lgamma and digamma), |ψ⁽ⁿ⁾(1 − x)|
    below ½ for polygamma of even order, none for odd orders (no zeros)."""
    if name in ("lgamma", "digamma"):
        return 1 + np.log1p(np.abs(x))
    order, scale = int(name[-1]), np.zeros_like(x)
    reflected = x < 0.5                        # no zeros on the positive side
    if order % 2 == 0:
        scale[reflected] = np.abs(sp.polygamma(order, 1 - x[reflected]))
    return scale


@pytest.mark.parametrize("level", LEVELS)
def test_f64_values_match_mpmath(level: str) -> None:
    rtol, per_term = F64_BOUNDS[level]
    for name, got in zip(NAMES, evaluate(level, "f64", ARGUMENTS), strict=True):
        want = exact_values()[name]
        finite = np.isfinite(want)
        error = np.abs(got - want)
        allowed = rtol * np.abs(want) + per_term * cancellation_scale(name, ARGUMENTS) + TINY
        worst = int(np.argmax(np.where(finite, error / allowed, 0)))
        assert not (finite & ~(error <= allowed)).any(), (
            f"{name} at {ARGUMENTS[worst]!r}: {got[worst]!r}, exact {want[worst]!r}")
        np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=name)


@pytest.mark.parametrize("level", LEVELS)
def test_f32_values_are_correctly_rounded(level: str) -> None:
    x = ARGUMENTS[IN_F32]
    for name, got in zip(NAMES, evaluate(level, "f32", x.astype(np.float32)), strict=True):
        assert got.dtype == np.float32
        want = exact_values()[name][IN_F32]
        rounded = want.astype(np.float32)
        normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
        ulps = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(rounded[normal]))
        worst = int(np.argmax(ulps))
        assert ulps[worst] <= F32_ULPS, f"{name}: {ulps[worst]:.2f} ulp at {x[normal][worst]!r}"


@pytest.mark.parametrize("level", LEVELS)
def test_large_negative_arguments(level: str) -> None:
    """lgamma and digamma down to −1e15 (mpmath is slow there for polygamma)."""
    rng = np.random.default_rng(13)
    x = -(10.0 ** rng.uniform(3, 15, 200)) + rng.uniform(0.01, 0.99, 200)
    x = x[x != np.round(x)]
    rtol, per_term = F64_BOUNDS[level]
    for name, got in zip(NAMES[:2], evaluate(level, "f64", x)[:2], strict=True):
        want = np.array([exact(name, v) for v in x])
        allowed = rtol * np.abs(want) + per_term * cancellation_scale(name, x) + TINY
        assert np.all(np.abs(got - want) <= allowed), name


def test_native_values_agree_with_scipy() -> None:
    """Where SciPy is accurate (not next to a pole, not far out on the negative axis, where
    its polygamma loses digits), SciPy and Reverie agree."""
    away = np.abs(ARGUMENTS - np.round(ARGUMENTS)) > 1e-3
    x = ARGUMENTS[(ARGUMENTS > 0) | (away & (ARGUMENTS > -20))]
    x = x[x < 1e15]
    references = {"lgamma": sp.gammaln(x), "digamma": sp.digamma(x),
                  **{f"polygamma{n}": sp.polygamma(n, x) for n in ORDERS}}
    for name, got in zip(NAMES, evaluate("native", "f64", x), strict=True):
        want = references[name]
        finite = np.isfinite(want) & (x > 1e-300)      # SciPy's gammaln is inf below
        allowed = 1e-13 * (np.abs(want) + cancellation_scale(name, x)) + TINY
        assert np.all(np.abs(got - want)[finite] <= allowed[finite]), name


# ---------------------------------------------------------------- special values

SPECIAL = np.array([0.0, -0.0, -1.0, -2.0, -7.0, -1e20, np.inf, -np.inf, np.nan, 1.0, 2.0,
                    5e-324, 1e-310, -1e-310, 3e305, 1e308, -0.5, 0.5])


def expected_special(name: str, x: float) -> float:
    """math.lgamma (+inf at its poles and on overflow); scipy.special for the others."""
    if name == "lgamma":
        try:
            return math.lgamma(x)
        except (ValueError, OverflowError):
            return math.inf
    return float(sp.digamma(x) if name == "digamma" else sp.polygamma(int(name[-1]), x))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("level", LEVELS)
def test_special_values(level: str, dtype: str) -> None:
    with np.errstate(all="ignore"):
        x = SPECIAL.astype(NUMPY_DTYPES[dtype])
    results = evaluate(level, dtype, x)
    for name, got in zip(NAMES, results, strict=True):
        want = np.array([expected_special(name, float(v)) for v in x]).astype(x.dtype)
        special = ~np.isfinite(want) | (want == 0)
        np.testing.assert_array_equal(got[special], want[special], err_msg=name)
        infinite = np.isinf(want)
        np.testing.assert_array_equal(np.signbit(got[infinite]), np.signbit(want[infinite]))
        rtol = 1e-6 if dtype == "f32" else F64_BOUNDS[level][0]
        np.testing.assert_allclose(got[~special], want[~special], rtol=rtol, err_msg=name)


def test_lgamma_at_minus_infinity_follows_math_lgamma_and_torch() -> None:
    """scipy.special.gammaln(-inf) is -inf; Reverie gives +inf, as math.lgamma and torch."""
    (lgamma, *_) = evaluate("native", "f64", np.array([-np.inf]))
    assert lgamma[0] == math.lgamma(-math.inf) == math.inf
