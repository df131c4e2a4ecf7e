"""NumPy's elementwise functions sinh … rad2deg, arctan2, hypot, logaddexp, logaddexp2:
the math library's bodies (`mathlib_inverse.py`, `mathlib_exponential.py`) and the built-ins
at every level.

- Accuracy of the native bodies in ulps, f32 and f64, over each function's whole domain
  (the kernels of `test_mathlib.py`), against long double (x87, 64-bit mantissa) for f64 and
  f64 for f32; the long double references themselves checked against mpmath on a sample.
  The bounds are the maxima measured over 1M inputs (docs/mathlib.md) with headroom.
  logaddexp cancels where its result is near 0 (a + log1p(e^(b−a)) with a ≈ −log1p(...)),
  as NumPy's does: there the error is measured in ulps of the larger of the two terms.
- Special values (±0, ±inf, NaN, the domain ends, overflow) equal NumPy's, sign of zero
  included; sinc is exact at the integers (0) where NumPy's sin(π·x) is not.
- The built-ins in the language at every level (reference interpreter, native, MLIR), f32
  and f64, against NumPy, and their errors: integer operands, wrong arity.
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
import pytest

import reverie as rv
from reverie.compiler.backend import mathlib_exponential, mathlib_inverse
from reverie.compiler.backend.mathlib import BINARY
from reverie.runtime.native.mlir_to_llvm import mlir_tools
from tests.backend.test_mathlib import F64_REFERENCE_SLACK, SPECIAL, run, ulp_errors

# (logit, SciPy's, is checked with gamma, erfc, beta in test_special_numpy.py)
NAMES = sorted((set(mathlib_exponential.BODIES) | set(mathlib_inverse.BODIES)) - {"logit"})
DTYPES = {"f32": np.float32, "f64": np.float64}
LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
L = np.longdouble
PI = L("3.141592653589793238462643383279502884")
# f64 bounds in ulps (f32: 0.51, every body computes in f64 and rounds once)
F64_ULPS = {"sinh": 3, "cosh": 2, "arcsin": 2.5, "arccos": 1.5, "arctan": 2, "arcsinh": 2,
            "arccosh": 2.5, "arctanh": 2, "exp2": 1.5, "log2": 1, "log10": 1, "sinc": 3.5,
            "deg2rad": 1, "rad2deg": 1, "arctan2": 2.5, "hypot": 2.5, "logaddexp": 3,
            "logaddexp2": 3.5}
F32_ULPS = 0.51


def _sinc(x: np.ndarray) -> np.ndarray:
    """sin(πx)/(πx) with sin(πx) = ±sin(πr), r = x − rint(x), in x's (wide) type."""
    n = np.rint(x)
    with np.errstate(all="ignore"):
        value = np.where(np.fmod(n, 2) == 0, 1, -1) * np.sin(PI * (x - n)) / (PI * x)
    return np.where(x == 0, 1, value)


REFERENCES = {
    "sinh": np.sinh, "cosh": np.cosh, "arcsin": np.arcsin, "arccos": np.arccos,
    "arctan": np.arctan, "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh,
    "exp2": np.exp2, "log2": np.log2, "log10": np.log10, "sinc": _sinc,
    "deg2rad": lambda x: x * (PI / 180), "rad2deg": lambda x: x * (180 / PI),
    "arctan2": np.arctan2, "hypot": np.hypot, "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2,
}
MPMATH = {
    "sinh": mpmath.sinh, "cosh": mpmath.cosh, "arcsin": mpmath.asin, "arccos": mpmath.acos,
    "arctan": mpmath.atan, "arcsinh": mpmath.asinh, "arccosh": mpmath.acosh,
    "arctanh": mpmath.atanh, "exp2": lambda x: mpmath.mpf(2) ** x, "log2": lambda x:
    mpmath.log(x, 2), "log10": mpmath.log10, "sinc": lambda x: mpmath.sinpi(x) / (mpmath.pi * x),
    "deg2rad": lambda x: x * mpmath.pi / 180, "rad2deg": lambda x: x * 180 / mpmath.pi,
    "arctan2": mpmath.atan2, "hypot": mpmath.hypot,
    "logaddexp": lambda a, b: mpmath.log(mpmath.exp(a) + mpmath.exp(b)),
    "logaddexp2": lambda a, b: mpmath.log(mpmath.mpf(2) ** a + mpmath.mpf(2) ** b, 2),
}


def domain(name: str, dtype: str, n: int) -> tuple[np.ndarray, ...]:
    """Random inputs over the function's domain in `dtype`, with its hard regions: the
    ends of the domain, tiny and huge magnitudes, overflow, the integers for sinc."""
    rng = np.random.default_rng(sum(map(ord, name + dtype)))
    f32 = dtype == "f32"
    top = 38 if f32 else 307

    def magnitudes(lo: float, hi: float, k: int = n) -> np.ndarray:
        return 10.0 ** rng.uniform(lo, hi, k)

    def signs(k: int = n) -> np.ndarray:
        return rng.choice([-1.0, 1.0], k)

    tiny = magnitudes(-44 if f32 else -320, -3) * signs()
    if name in BINARY:
        if name.startswith("logaddexp"):
            a = rng.uniform(-100, 100, n)
            b = a + rng.uniform(-40, 40, n)
            a, b = np.concatenate([a, rng.uniform(-3, 3, n)]), np.concatenate([b, -a[:n] / 50])
        else:
            a = np.concatenate([magnitudes(-30, 30) * signs(), rng.standard_normal(n),
                                magnitudes(-37 if f32 else -300, top) * signs()])
            b = np.concatenate([magnitudes(-30, 30) * signs(), rng.standard_normal(n),
                                a[2 * n:] * rng.uniform(0.5, 2, n) * signs()])
        return a.astype(DTYPES[dtype]), b.astype(DTYPES[dtype])
    if name in ("arcsin", "arccos", "arctanh"):
        near_ends = (1 - magnitudes(-16, 0)) * signs()
        parts = [rng.uniform(-1, 1, n), near_ends, tiny]
    elif name == "arccosh":
        parts = [1 + magnitudes(-16, 1), magnitudes(0, top)]
    elif name in ("log2", "log10"):
        parts = [magnitudes(-45 if f32 else -323, top), 1 + rng.uniform(-0.3, 0.3, n),
                 np.abs(tiny)]
    elif name in ("sinh", "cosh", "exp2"):
        limit = {"exp2": 129 if f32 else 1025}.get(name, 89.5 if f32 else 710.5)
        low = {"exp2": -150 if f32 else -1075}.get(name, -limit)
        parts = [rng.uniform(low, limit, n), rng.uniform(-3, 3, n), tiny]
    elif name == "sinc":
        parts = [rng.uniform(-30, 30, n), rng.integers(-1000, 1000, n) + magnitudes(-12, -1)
                 * signs(), tiny, magnitudes(0, top) * signs()]
    else:
        parts = [magnitudes(-44 if f32 else -300, top) * signs(), rng.uniform(-3, 3, n),
                 rng.uniform(-100, 100, n)]
    return (np.concatenate(parts).astype(DTYPES[dtype]),)


def errors(name: str, dtype: str, inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    """The native body's error in ulps at `inputs` (logaddexp's in ulps of the larger of its
    terms max(a, b) and log1p(e^−|a−b|) where its result is smaller)."""
    wide = np.float64 if dtype == "f32" else L
    with np.errstate(all="ignore"):
        exact = REFERENCES[name](*[a.astype(wide) for a in inputs])
        got = run(name, *inputs)
        ulps = ulp_errors(got, exact)
        if name.startswith("logaddexp"):
            larger = np.maximum(*inputs).astype(wide)     # the terms: larger + tail
            terms = np.maximum(np.abs(larger), np.abs(exact - larger))
            scale = np.maximum(np.abs(exact), terms).astype(got.dtype)
            ulps = np.fmin(ulps, np.abs(got - exact) / np.spacing(scale))
    return ulps


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
def test_native_accuracy(name: str, dtype: str) -> None:
    inputs = domain(name, dtype, 20_000)
    ulps = errors(name, dtype, inputs)
    bound = F32_ULPS if dtype == "f32" else F64_ULPS[name] + F64_REFERENCE_SLACK
    worst = int(np.argmax(ulps))
    assert ulps[worst] <= bound, (
        f"{name} {dtype}: {ulps[worst]:.2f} ulp at {[a[worst] for a in inputs]}")


@pytest.mark.parametrize("name", NAMES)
def test_native_f64_values_match_mpmath(name: str) -> None:
    """A sample of f64 inputs against mpmath (30 digits): the long double references above
    are right, and so is the body, within its bound plus the reference's rounding."""
    inputs = tuple(a[::400][:150] for a in domain(name, "f64", 20_000))
    got = run(name, *inputs)
    with mpmath.workdps(30):
        exact = []
        for args in zip(*inputs, strict=True):
            try:
                exact.append(float(MPMATH[name](*map(mpmath.mpf, map(float, args)))))
            except (OverflowError, ZeroDivisionError, ValueError):
                exact.append(np.nan)
    exact = np.array(exact)
    usable = np.isfinite(exact) & (np.abs(exact) < np.finfo(np.float64).max)
    if name.startswith("logaddexp"):
        usable &= np.abs(exact) > 2 * np.abs(np.maximum(*inputs))     # no cancellation
    ulps = np.abs(got[usable] - exact[usable]) / np.spacing(np.abs(exact[usable]))
    assert ulps.max(initial=0) <= F64_ULPS[name] + 0.5, name


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values_match_numpy(name: str, dtype: str) -> None:
    with np.errstate(all="ignore"):
        values = np.array(SPECIAL, dtype=DTYPES[dtype])
        inputs = tuple(a.ravel() for a in np.meshgrid(values, values)) if name in BINARY \
            else (values,)
        want = REFERENCES[name](*[a.astype(np.float64) for a in inputs]).astype(DTYPES[dtype])
        got = run(name, *inputs)
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special], err_msg=name)
    signed = special & ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


def test_exact_values() -> None:
    """log2 and log10 of exact powers, exp2 of integers, sinc at the integers."""
    x = np.array([1.0, 2.0, 8.0, 1024.0, 2.0**-1074, 0.5])
    np.testing.assert_array_equal(run("log2", x), [0, 1, 3, 10, -1074, -1])
    tens = 10.0 ** np.arange(0, 23)
    np.testing.assert_array_equal(run("log10", tens), np.arange(0, 23))
    k = np.arange(-1074, 1024).astype(np.float64)
    np.testing.assert_array_equal(run("exp2", k), np.exp2(k))
    integers = np.arange(-50, 51).astype(np.float64)
    np.testing.assert_array_equal(run("sinc", integers), np.where(integers == 0, 1.0, 0.0))


# ---------------------------------------------------------------- the built-ins at every level

SOURCE = """
fn unary(x: float[N], p: float[N]) -> (float[N], float[N], float[N]) {
    let u = 0.9 * tanh(x);
    return (sinh(x) + cosh(x) * 0.5 + arctan(x) + arcsinh(x) + exp2(x) + sinc(x) * 3.0
                + deg2rad(x) + rad2deg(x) * 0.01,
            arcsin(u) + arccos(u) * 0.5 + arctanh(u) + arccosh(p + 1.0) + log2(p) + log10(p),
            rad2deg(deg2rad(x)));
}
fn binary(x: float[N], y: float[N]) -> (float[N], float[N], float[N], float[N]) {
    return (arctan2(y, x), hypot(x, y), logaddexp(x, y), logaddexp2(x, 2.0 * y));
}
"""


@functools.cache
def compiled(level: str) -> rv.Module:
    return rv.compile(SOURCE, backend=level)


def expected_unary(x: np.ndarray, p: np.ndarray) -> list[np.ndarray]:
    u = 0.9 * np.tanh(x)
    return [np.sinh(x) + np.cosh(x) * 0.5 + np.arctan(x) + np.arcsinh(x) + np.exp2(x)
            + np.sinc(x) * 3.0 + np.deg2rad(x) + np.rad2deg(x) * 0.01,
            np.arcsin(u) + np.arccos(u) * 0.5 + np.arctanh(u) + np.arccosh(p + 1.0)
            + np.log2(p) + np.log10(p), x]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("level", LEVELS)
def test_builtins_match_numpy_at_every_level(level: str, dtype: str) -> None:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(40) * 2, rng.standard_normal(40)
    p = rng.uniform(0.1, 4.0, 40)
    m, cast = compiled(level), DTYPES[dtype]
    rtol = 1e-5 if dtype == "f32" else 1e-13
    for got, want in zip(m.unary(x.astype(cast), p.astype(cast)), expected_unary(x, p),
                         strict=True):
        assert got.dtype == cast
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    expected = [np.arctan2(y, x), np.hypot(x, y), np.logaddexp(x, y), np.logaddexp2(x, 2 * y)]
    for got, want in zip(m.binary(x.astype(cast), y.astype(cast)), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("source, message", [
    ("fn f(x: i64[N]) -> i64[N] { return arctan2(x, x); }", "arctan2"),
    ("fn f(x: f64[N]) -> f64[N] { return hypot(x); }", "hypot"),
    ("fn f(x: f64[N]) -> f64[N] { return sinh(x, x); }", "sinh"),
])
def test_misuse_is_a_compile_error(source: str, message: str) -> None:
    with pytest.raises(rv.CompileError, match=message):
        rv.compile(source, backend="interp")
