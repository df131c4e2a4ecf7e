"""jn(n, x), yn(n, x): Bessel functions of integer order (SciPy's jn and yn) at every level
against mpmath and SciPy, their special values, negative orders, derivatives to second order
against mpmath and central differences, the refusals and rv.trace of SciPy's.

Errors are measured in ulps of max(|Z|, A) where A = √(2/(πx)) is the amplitude where Z
oscillates (|x| > n; J and Y are only absolutely accurate next to their zeros, as j0's) and
0 below, where J decays and Y grows: there both are relatively accurate (docs/mathlib.md).
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
import pytest
import scipy.special as sp

import reverie as rv
from reverie.compiler.ir.bessel_integer_order import miller_start
from reverie.runtime.native.mlir_to_llvm import mlir_tools

LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
ORDERS = (2, 3, 5, 10, 40, 100)
F32_ULPS = 0.6


def f64_ulps(n: int) -> int:
    """The f64 bound: the recurrences' rounding errors add up over n steps (measured: 6 ulp
    for n = 2 to 72 for n = 100; docs/mathlib.md)."""
    return 8 + n


SOURCE = "\n".join(f"fn {kind}{n}_(x: float[N]) -> float[N] {{ return {kind}n({n}, x); }}"
                   for kind in "jy" for n in ORDERS)
GRADIENT_SOURCE = """
fn j2_(x: f64[N]) -> f64 { return sum(jn(2, x)); }
fn j7_(x: f64[N]) -> f64 { return sum(jn(7, x)); }
fn jm3_(x: f64[N]) -> f64 { return sum(jn(-3, x)); }
fn y2_(x: f64[N]) -> f64 { return sum(yn(2, x)); }
fn ym5_(x: f64[N]) -> f64 { return sum(yn(-5, x)); }
"""


@functools.cache
def compiled(level: str) -> rv.Module:
    return rv.compile(SOURCE, backend=level)


def points(kind: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n + ord(kind))
    x = np.concatenate([rng.uniform(0, 2 * n + 20, 120), rng.uniform(0.8 * n, 1.2 * n, 40),
                        np.exp(rng.uniform(-8, 8, 40))])
    return x if kind == "y" else np.concatenate([x, -x[:20], [1e-12, 3e-9]])


def exact(kind: str, n: int, x: np.ndarray) -> np.ndarray:
    bessel = mpmath.besselj if kind == "j" else mpmath.bessely
    with mpmath.workdps(40):
        return np.array([float(bessel(n, mpmath.mpf(v))) for v in x])


@functools.cache
def reference(kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = points(kind, n)
    return x, exact(kind, n, x)


def scale(x: np.ndarray, want: np.ndarray, n: int) -> np.ndarray:
    """max(|Z|, √(2/(π|x|)) where |x| > n)."""
    amplitude = np.where(np.abs(x) > n, np.sqrt(2 / (np.pi * np.maximum(np.abs(x), 1e-300))),
                         0.0)
    return np.maximum(np.abs(want), amplitude)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", "jy")
@pytest.mark.parametrize("n", ORDERS)
def test_f64_values_match_mpmath(n: int, kind: str, level: str) -> None:
    x, want = reference(kind, n)
    got = getattr(compiled(level), f"{kind}{n}_")(x)
    size = scale(x, want, n)
    finite = np.isfinite(want) & (size > np.finfo(np.float64).tiny)
    error = np.abs(got[finite] - want[finite]) / np.spacing(size[finite])
    assert error.max() <= f64_ulps(n), f"{kind}n({n}): {error.max():.1f} ulp"


@pytest.mark.parametrize("level", ["native", pytest.param("mlir", marks=LEVELS[2].marks)])
@pytest.mark.parametrize("kind", "jy")
@pytest.mark.parametrize("n", ORDERS)
def test_f32_values_are_rounded_once(n: int, kind: str, level: str) -> None:
    x, want = reference(kind, n)
    x32 = x.astype(np.float32)
    want = exact(kind, n, x32.astype(np.float64)[::3])
    got = getattr(compiled(level), f"{kind}{n}_")(x32[::3])
    assert got.dtype == np.float32
    size = scale(x32[::3].astype(np.float64), want, n).astype(np.float32)
    normal = np.isfinite(size) & (size >= np.finfo(np.float32).tiny)
    error = np.abs(got[normal] - want[normal]) / np.spacing(size[normal])
    assert error.max() <= F32_ULPS, f"{kind}n({n}): {error.max():.2f} ulp"


def test_native_values_agree_with_scipy() -> None:
    m = compiled("native")
    for kind, scipy_fn in (("j", sp.jn), ("y", sp.yn)):
        for n in ORDERS:
            x = points(kind, n)
            want = scipy_fn(n, x)
            got = getattr(m, f"{kind}{n}_")(x)
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13 * scale(x, want, n).max(),
                                       err_msg=f"{kind}n({n})")


@pytest.mark.parametrize("n", [2, 7, 50, 200])
def test_miller_start_suffices_where_convergence_is_slowest(n: int) -> None:
    """|x| = n and just below it are the hardest points for the backward recurrence."""
    m = rv.compile(f"fn f(x: f64[N]) -> f64[N] {{ return jn({n}, x); }}", backend="native")
    x = np.array([n, n * (1 - 1e-9), 0.9 * n, 0.5 * n, 1e-3 * n])
    np.testing.assert_allclose(m.f(x), exact("j", n, x), rtol=5e-14)
    assert miller_start(n) % 2 == 0 and miller_start(n) > n


@pytest.mark.parametrize("level", LEVELS)
def test_negative_orders_and_arguments_and_special_values(level: str) -> None:
    """J₋ₙ = (−1)ⁿ Jₙ, Y₋ₙ = (−1)ⁿ Yₙ (SciPy's); Jₙ(−x) = (−1)ⁿ Jₙ(x); Jₙ(0) = 0 (n ≠ 0),
    Yₙ(0) = −inf, Y NaN below 0, −inf where it overflows; 0 at ±inf (SciPy: NaN at −inf for
    J, as j0's), NaN for NaN."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N], f64[N], f64[N], f64[N]) {
            return (jn(-3, x), jn(-4, x), yn(-3, x), yn(-2, x), jn(0, x), yn(1, x));
        }""", backend=level)
    x = np.array([-7.5, -0.4, 0.0, 1e-300, 0.4, 2.5, 9.0, 1e4, np.inf, np.nan])
    wants = (sp.jn(-3, x), sp.jn(-4, x), sp.yn(-3, x), sp.yn(-2, x), sp.j0(x), sp.y1(x))
    for i, (got, want) in enumerate(zip(m.f(x), wants, strict=True)):
        want = np.where(np.isinf(x), 0.0, want)
        # atol: SciPy's yn(2, 1e4) is off by 4e-15 (ours agrees with mpmath's to 1 ulp)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14, err_msg=str(i))
    assert m.f(np.array([0.0]))[0][0] == 0.0 and m.f(np.array([0.0]))[2][0] == np.inf


GRADIENT_CASES = [("j2_", "j", 2), ("j7_", "j", 7), ("jm3_", "j", -3), ("y2_", "y", 2),
                  ("ym5_", "y", -5)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("name", "kind", "n"), GRADIENT_CASES)
def test_derivatives_to_second_order_match_mpmath(name: str, kind: str, n: int,
                                                  level: str) -> None:
    """Zₙ' = (Zₙ₋₁ − Zₙ₊₁)/2 and its own derivative, against mpmath's (30 digits)."""
    f = getattr(rv.compile(GRADIENT_SOURCE, backend=level), name)
    x = np.array([0.3, 1.7, 4.2, 6.9, 8.3, 15.5, 40.0])
    if kind == "j":
        x = np.concatenate([x, -x[:3], [0.0]])
    bessel = mpmath.besselj if kind == "j" else mpmath.bessely
    with mpmath.workdps(30):
        want = [[float(mpmath.diff(lambda t: bessel(n, t), mpmath.mpf(v), k)) for v in x]
                for k in (1, 2)]
    np.testing.assert_allclose(f.grad("x")(x), want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(f.grad("x").vjp("x")(x, np.ones_like(x)), want[1], rtol=1e-11,
                               atol=1e-13)


@pytest.mark.parametrize(("name", "kind", "n"), GRADIENT_CASES)
def test_gradients_match_central_differences(name: str, kind: str, n: int) -> None:
    f = getattr(rv.compile(GRADIENT_SOURCE, backend="native"), name)
    x = np.array([0.7, 2.2, 5.1, 9.8, 23.0])
    h = 1e-6
    scipy_fn = sp.jn if kind == "j" else sp.yn
    difference = (scipy_fn(n, x + h) - scipy_fn(n, x - h)) / (2 * h)
    np.testing.assert_allclose(f.grad("x")(x), difference, rtol=1e-7, atol=1e-9)


def test_forward_mode_matches_scipy_derivatives() -> None:
    m = rv.compile("fn f(x: f64[N]) -> f64[N] { return jn(4, x) * yn(3, x); }",
                   backend="native")
    x = np.array([0.9, 3.3, 7.0, 12.0])
    want = (sp.jvp(4, x) * sp.yn(3, x) + sp.jn(4, x) * sp.yvp(3, x))
    value, tangent = m.f.jvp("x")(x, np.ones_like(x))
    np.testing.assert_allclose(value, sp.jn(4, x) * sp.yn(3, x), rtol=1e-12)
    np.testing.assert_allclose(tangent, want, rtol=1e-12)


@pytest.mark.parametrize(("argument", "name"), [("k", "jn"), ("1.5", "jn"), ("x", "yn"),
                                                ("-2.5", "yn")])
def test_order_must_be_an_integer_constant(argument: str, name: str) -> None:
    source = f"fn f(x: f64[N], k: i64) -> f64[N] {{ return {name}({argument}, x); }}"
    with pytest.raises(rv.CompileError, match=rf"order n of '{name}\(n, x\)'") as caught:
        rv.compile(source, backend="interp")
    assert "^" in str(caught.value)


def test_integral_float_orders_are_accepted() -> None:
    m = rv.compile("fn f(x: f64[N]) -> f64[N] { return jn(2.0, x) + yn(-3.0, x); }",
                   backend="native")
    x = np.array([0.5, 4.0])
    np.testing.assert_allclose(m.f(x), sp.jn(2, x) + sp.yn(-3, x), rtol=1e-13)


def test_traced_scipy_jn_yn_and_their_gradients() -> None:
    x = np.linspace(0.5, 9, 6)
    module = rv.trace(lambda x: (sp.jn(3, x) + sp.yn(2, x)).sum(), x)
    np.testing.assert_allclose(module.kernel(x), (sp.jn(3, x) + sp.yn(2, x)).sum(), rtol=1e-13)
    np.testing.assert_allclose(module.kernel.grad("x")(x), sp.jvp(3, x) + sp.yvp(2, x),
                               rtol=1e-11)
