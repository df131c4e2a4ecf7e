"""iv(v, x), ive(v, x), jv(v, x): Bessel functions of real order (SciPy's iv, ive, jv) at
every level against mpmath and SciPy, their special values, integral and negative orders,
derivatives to second order against mpmath and central differences, the refusals and
rv.trace of SciPy's.

Iᵥ and e^(−|x|) Iᵥ are measured in ulps of the value (for negative non-integral v, of
|I₋ᵥ| + |(2/π) sin(vπ) K₋ᵥ|, the parts whose difference has zeros); Jᵥ in ulps of max(|J|,
A) where A = √(2/(πx)) is its amplitude where it oscillates (x > |v|): it is only absolutely
accurate next to its zeros, as jn (docs/mathlib.md).
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
import pytest
import scipy.special as sp

import reverie as rv
from reverie.compiler.ir.bessel_real_constants import gamma_exact, series_end
from reverie.compiler.ir.bessel_real_order import miller_end
from reverie.runtime.native.mlir_to_llvm import mlir_tools

LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
ORDERS = (-9.5, -2.7, -0.5, 0.3, 2.5, 10.25, 33.3, 49.5)
KINDS = ("iv", "ive", "jv")
I_ULPS = 16          # measured: 11 (iv of order -9.5 near x = 6, where its terms alternate)
F32_ULPS = 0.6
SCIPY = {"iv": sp.iv, "ive": sp.ive, "jv": sp.jv}


def j_ulps(v: float) -> float:
    """Jᵥ's bound: Miller's and the forward recurrence's roundings add up with |v|
    (measured 14 for |v| <= 10, 39 for v = 49.99; docs/mathlib.md)."""
    return 16 + abs(v)


def name_of(kind: str, v: float) -> str:
    return f"{kind}_{str(v).replace('-', 'm').replace('.', 'p')}"


SOURCE = "\n".join(f"fn {name_of(kind, v)}(x: float[N]) -> float[N] {{ return {kind}({v}, x); }}"
                   for kind in KINDS for v in ORDERS)


@functools.cache
def compiled(level: str) -> rv.Module:
    return rv.compile(SOURCE, backend=level)


def points(kind: str, v: float) -> np.ndarray:
    """x in [0, 1000] (iv: [0, 700], below its overflow), dense near the regions' ends."""
    rng = np.random.default_rng(int(abs(v) * 100) + ord(kind[-1]))
    top = 700 if kind == "iv" else 1000
    x = np.concatenate([rng.uniform(0, 3, 20), rng.uniform(0, 60, 50), rng.uniform(60, top, 30),
                        np.exp(rng.uniform(-8, np.log(top), 20)),
                        rng.uniform(max(0, abs(v) - 5), abs(v) + 5, 15)])
    ends = (series_end(v), 25.0, miller_end(v)) if kind != "jv" else (25.0, miller_end(v))
    return np.concatenate([x, *[[e * (1 - 1e-12), e * (1 + 1e-12)] for e in ends]])


def exact(kind: str, v: float, x: np.ndarray, parts: bool = False) -> np.ndarray:
    """The function at x (mpmath, 40 digits); with `parts`, for I₋ᵥ = Iᵥ + (2/π) sin(vπ) Kᵥ
    (v > 0) the sum of the two parts' magnitudes, the size that its zeros make the error
    relative to."""
    def i_part(t: mpmath.mpf) -> mpmath.mpf:
        if not parts or v >= 0:
            return abs(mpmath.besseli(v, t))
        reflected = 2 / mpmath.pi * mpmath.sin(-v * mpmath.pi) * mpmath.besselk(-v, t)
        return abs(mpmath.besseli(-v, t)) + abs(reflected)

    with mpmath.workdps(40):
        if kind == "jv":
            return np.array([float(mpmath.besselj(v, mpmath.mpf(t))) for t in x])
        scale = (lambda t: mpmath.exp(-abs(t))) if kind == "ive" else (lambda t: 1)
        value = i_part if parts else (lambda t: mpmath.besseli(v, t))
        return np.array([float(value(mpmath.mpf(t)) * scale(mpmath.mpf(t))) for t in x])


@functools.cache
def reference(kind: str, v: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, the function there, and the size errors are measured in (`size`)."""
    x = points(kind, v)
    want = exact(kind, v, x)
    return x, want, size(kind, v, x, want)


def size(kind: str, v: float, x: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|value|; for I₋ᵥ, which has zeros, |Iᵥ| + |(2/π) sin(vπ) Kᵥ|; for J, max(|J|,
    √(2/(πx)) where x > |v|)."""
    if kind != "jv":
        return exact(kind, v, x, parts=True) if v < 0 else np.abs(want)
    amplitude = np.where(x > abs(v), np.sqrt(2 / (np.pi * np.maximum(x, 1e-300))), 0.0)
    return np.maximum(np.abs(want), amplitude)


def ulps(got: np.ndarray, want: np.ndarray, scale: np.ndarray,
         dtype: type = np.float64) -> np.ndarray:
    """|got − want| in ulps of `scale` (where it is a finite normal number)."""
    scale = scale.astype(dtype)
    ok = np.isfinite(want) & np.isfinite(scale) & (scale >= np.finfo(dtype).tiny)
    return np.abs(got[ok] - want[ok]) / np.spacing(scale[ok])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("v", ORDERS)
def test_f64_values_match_mpmath(v: float, kind: str, level: str) -> None:
    x, want, scale = reference(kind, v)
    error = ulps(getattr(compiled(level), name_of(kind, v))(x), want, scale)
    bound = j_ulps(v) if kind == "jv" else I_ULPS
    assert error.max() <= bound, f"{kind}({v}): {error.max():.1f} ulp"


@pytest.mark.parametrize("level", ["native", pytest.param("mlir", marks=LEVELS[2].marks)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("v", ORDERS)
def test_f32_values_are_rounded_once(v: float, kind: str, level: str) -> None:
    x32 = reference(kind, v)[0][::3].astype(np.float32)
    x32 = x32[x32 < (88 if kind == "iv" else 1000)]               # below f32's overflow
    want = exact(kind, v, x32.astype(np.float64))
    got = getattr(compiled(level), name_of(kind, v))(x32)
    assert got.dtype == np.float32
    scale = size(kind, v, x32.astype(np.float64), want)
    error = ulps(got, want, scale, np.float32)
    assert error.max() <= F32_ULPS, f"{kind}({v}): {error.max():.2f} ulp"


@pytest.mark.parametrize("kind", KINDS)
def test_native_values_agree_with_scipy(kind: str) -> None:
    m = compiled("native")
    for v in ORDERS:
        x, _, scale = reference(kind, v)
        got = getattr(m, name_of(kind, v))(x)
        # SciPy's jv is off by up to 4000 ulps of the amplitude, its ive by 500 (ours: 39, 7)
        tolerance = 1e-13 if kind == "iv" else 1e-12
        difference = np.abs(got - SCIPY[kind](v, x)) / scale
        assert difference.max() <= tolerance, f"{kind}({v}): {difference.max():.2g}"


def test_large_arguments() -> None:
    """Iᵥ overflows where it exceeds the largest float (713.98 for v = 2.5; SciPy: 709.78),
    e^(−x) Iᵥ(x) → 1/√(2πx) without overflow, Jᵥ keeps its phase (exact reduction)."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N]) {
            return (iv(2.5, x), ive(-7.5, x), jv(3.25, x));
        }""", backend="native")
    x = np.array([700.0, 713.0, 714.0, 1e4, 1e8, 1e15])
    iv, ive, jv = m.f(x)
    np.testing.assert_allclose(iv[:2], exact("iv", 2.5, x[:2]), rtol=1e-14)
    assert np.all(np.isinf(iv[2:]))
    np.testing.assert_allclose(ive, exact("ive", -7.5, x), rtol=1e-14)
    np.testing.assert_allclose(jv, exact("jv", 3.25, x), rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("v", [-20.5, -30.5, -50.5])
def test_large_negative_orders(v: float) -> None:
    """I₋ᵥ = Iᵥ + (2/π) sin(vπ) Kᵥ from x = 0.35 v on (K by Debye's expansion), where the
    series' first terms cancel: within 2|v| ulps of the two parts' magnitudes."""
    m = rv.compile(f"fn f(x: f64[N]) -> (f64[N], f64[N]) {{ return (iv({v}, x), ive({v}, x)); }}",
                   backend="native")
    x = np.linspace(0.05, 3 * abs(v), 90)
    iv, ive = m.f(x)
    scale = exact("iv", v, x, parts=True)
    for got, want, size_ in ((iv, exact("iv", v, x), scale),
                             (ive, exact("ive", v, x), scale * np.exp(-x))):
        assert ulps(got, want, size_).max() <= 2 * abs(v)


@pytest.mark.parametrize("level", LEVELS)
def test_special_values(level: str) -> None:
    """At 0: 0 for v > 0, ±inf for v < 0 (the sign of 1/Γ(v + 1), the limit from the right;
    SciPy's iv: +inf); NaN below 0 for non-integral v; I(inf) = inf, ive(±inf) = 0,
    J(inf) = 0 (SciPy: NaN); NaN for NaN."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N], f64[N], f64[N], f64[N]) {
            return (iv(0.5, x), iv(-1.5, x), ive(-0.5, x), jv(2.5, x), jv(-1.5, x),
                    jv(-2.5, x));
        }""", backend=level)
    x = np.array([0.0, -1.0, np.inf, np.nan])
    want = ([0.0, np.nan, np.inf, np.nan], [-np.inf, np.nan, np.inf, np.nan],
            [np.inf, np.nan, 0.0, np.nan], [0.0, np.nan, 0.0, np.nan],
            [-np.inf, np.nan, 0.0, np.nan], [np.inf, np.nan, 0.0, np.nan])
    for got, expected in zip(m.f(x), want, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("level", LEVELS)
def test_integral_orders(level: str) -> None:
    """Iₙ = I₋ₙ, Iₙ(−x) = (−1)ⁿ Iₙ(x), ive too; jv of an integral v is jn (the same ops)."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N], f64[N], f64[N]) {
            return (iv(3, x), iv(-2.0, x), ive(-1, x), jv(2.0, x) - jn(2, x), jv(-3, x));
        }""", backend=level)
    x = np.array([-40.0, -2.5, -0.1, 0.0, 0.7, 3.0, 30.0, 300.0])
    iv3, iv2, ive1, difference, jv3 = m.f(x)
    np.testing.assert_allclose(iv3, sp.iv(3, x), rtol=4e-15)
    np.testing.assert_allclose(iv2, sp.iv(2, x), rtol=4e-15)
    np.testing.assert_allclose(ive1, sp.ive(1, x), rtol=4e-15)
    np.testing.assert_array_equal(difference, 0.0)
    np.testing.assert_allclose(jv3, sp.jv(-3, x), rtol=1e-13, atol=1e-16)
    assert m.f(np.array([0.0]))[1][0] == 0.0 and \
        rv.compile("fn g(x: f64[N]) -> f64[N] { return iv(0, x); }").g(np.zeros(1))[0] == 1.0


GRADIENT_SOURCE = """
fn i_(x: f64[N]) -> f64 { return sum(iv(2.5, x)); }
fn im_(x: f64[N]) -> f64 { return sum(iv(-1.3, x)); }
fn e_(x: f64[N]) -> f64 { return sum(ive(0.5, x)); }
fn e2_(x: f64[N]) -> f64 { return sum(ive(2, x)); }
fn j_(x: f64[N]) -> f64 { return sum(jv(1.5, x)); }
fn jm_(x: f64[N]) -> f64 { return sum(jv(-2.7, x)); }
"""
GRADIENT_CASES = [("i_", "iv", 2.5), ("im_", "iv", -1.3), ("e_", "ive", 0.5), ("e2_", "ive", 2),
                  ("j_", "jv", 1.5), ("jm_", "jv", -2.7)]


def mpmath_function(kind: str, v: float):
    if kind == "jv":
        return lambda t: mpmath.besselj(v, t)
    if kind == "iv":
        return lambda t: mpmath.besseli(v, t)
    return lambda t: mpmath.besseli(v, t) * mpmath.exp(-abs(t))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("name", "kind", "v"), GRADIENT_CASES)
def test_derivatives_to_second_order_match_mpmath(name: str, kind: str, v: float,
                                                  level: str) -> None:
    """Iᵥ' = (Iᵥ₋₁ + Iᵥ₊₁)/2, ive' = (ive_v−1 + ive_v+1)/2 − sign(x) ive_v, Jᵥ' = (Jᵥ₋₁ −
    Jᵥ₊₁)/2 and their own derivatives, against mpmath's (30 digits)."""
    f = getattr(rv.compile(GRADIENT_SOURCE, backend=level), name)
    x = np.array([0.3, 1.7, 4.2, 8.3, 15.5, 40.0, 180.0])
    if float(v).is_integer():
        x = np.concatenate([x, -x[:4]])
    with mpmath.workdps(30):
        want = [[float(mpmath.diff(mpmath_function(kind, v), mpmath.mpf(t), k)) for t in x]
                for k in (1, 2)]
    np.testing.assert_allclose(f.grad("x")(x), want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(f.grad("x").vjp("x")(x, np.ones_like(x)), want[1], rtol=1e-11,
                               atol=1e-13)


@pytest.mark.parametrize(("name", "kind", "v"), GRADIENT_CASES)
def test_gradients_match_central_differences(name: str, kind: str, v: float) -> None:
    f = getattr(rv.compile(GRADIENT_SOURCE, backend="native"), name)
    x = np.array([0.7, 2.2, 5.1, 9.8, 23.0, 160.0])
    h = 1e-6
    difference = (SCIPY[kind](v, x + h) - SCIPY[kind](v, x - h)) / (2 * h)
    np.testing.assert_allclose(f.grad("x")(x), difference, rtol=1e-7, atol=1e-9)


def test_forward_mode_matches_scipy_derivatives() -> None:
    m = rv.compile("fn f(x: f64[N]) -> f64[N] { return iv(0.75, x) * jv(-1.25, x); }",
                   backend="native")
    x = np.array([0.9, 3.3, 7.0, 12.0])
    want = sp.ivp(0.75, x) * sp.jv(-1.25, x) + sp.iv(0.75, x) * sp.jvp(-1.25, x)
    value, tangent = m.f.jvp("x")(x, np.ones_like(x))
    np.testing.assert_allclose(value, sp.iv(0.75, x) * sp.jv(-1.25, x), rtol=1e-12)
    np.testing.assert_allclose(tangent, want, rtol=1e-12)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("argument", ["k", "x", "v * 2.0", "N"])
def test_order_must_be_a_constant(argument: str, name: str) -> None:
    source = (f"fn f(x: f64[N], k: i64, v: f64) -> f64[N] "
              f"{{ return {name}({argument}, x); }}")
    with pytest.raises(rv.CompileError, match=rf"order v of '{name}\(v, x\)' must be a "
                                              r"constant.*not in v") as caught:
        rv.compile(source, backend="interp")
    assert "^" in str(caught.value)


def test_constant_orders_of_every_spelling_and_the_largest() -> None:
    m = rv.compile("""
        fn f(x: f64[5]) -> f64[5] { return iv(-0.5, x) + jv(2 * 3 - 1, x) + ive(5 - 7, x); }
        fn g(x: f64[N]) -> f64[N] { return iv(150.0, x); }""", backend="native")
    x = np.linspace(0.5, 9, 5)
    np.testing.assert_allclose(m.f(x), sp.iv(-0.5, x) + sp.jv(5, x) + sp.ive(-2, x),
                               rtol=1e-13)
    np.testing.assert_allclose(m.g(np.array([100.0, 300.0])), sp.iv(150, [100.0, 300.0]),
                               rtol=1e-12)
    with pytest.raises(rv.CompileError, match=r"at most 150 in magnitude, got -150.5"):
        rv.compile("fn f(x: f64[N]) -> f64[N] { return jv(-150.5, x); }", backend="interp")


def test_gamma_of_the_constants_is_correctly_rounded() -> None:
    from fractions import Fraction
    for z in (0.3, 1.5, -2.7, 51.25, 150.5):
        with mpmath.workdps(40):
            assert float(gamma_exact(Fraction(z))) == float(mpmath.gamma(z))


def test_traced_scipy_iv_ive_jv_and_their_gradients() -> None:
    """scipy.special.iv, ive, jv (and jn, SciPy's jv) with a constant order trace to the
    built-ins."""
    def f(x):
        return (sp.iv(2.5, x) + sp.ive(-0.5, x) + sp.jv(1.5, x) + sp.jn(2, x)).sum()

    x = np.linspace(0.5, 9, 6)
    module = rv.trace(f, x)
    np.testing.assert_allclose(module.kernel(x), f(x), rtol=1e-13)
    slope = sp.ivp(2.5, x) + sp.jvp(1.5, x) + sp.jvp(2, x) + \
        (sp.ivp(-0.5, x) - sp.iv(-0.5, x)) * np.exp(-x)
    np.testing.assert_allclose(module.kernel.grad("x")(x), slope, rtol=1e-11)
