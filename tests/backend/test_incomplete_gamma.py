"""gammainc(a, x) and gammaincc(a, x), the regularised incomplete gamma functions P and Q,
and betainc(a, b, x), the regularised incomplete beta function: values against mpmath and
SciPy at every level (the NumPy reference interpreter, native code, the MLIR export) in f64
and f32, SciPy's special values, the derivative in x against JAX to second order (both
modes) and finite differences, and the CompileError for a derivative in a (and b)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import mpmath
import numpy as np
import pytest
import scipy.special as sp

import reverie as rv
from reverie.runtime.native.mlir_to_llvm import mlir_tools

jax.config.update("jax_enable_x64", True)

LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
EPS = np.finfo(np.float64).eps
# The error bound (docs/mathlib.md): |error| ≤ ε (RELATIVE (1 + |L|) |P| + ABSOLUTE), L the
# log of the prefactor xᵃ e⁻ˣ / Γ(a), whose rounding every method carries (the functions'
# condition number grows with it); ABSOLUTE covers Q = 1 − P below x = a + 1.
RELATIVE, ABSOLUTE = 32, 16

SOURCE = """
fn f(a: float[N], x: float[N]) -> (float[N], float[N]) {
    return (gammainc(a, x), gammaincc(a, x));
}
fn g(a: f64[N], x: f64[N]) -> f64 { return sum(gammainc(a, x) - 3.0 * gammaincc(a, x)); }
"""


@pytest.fixture(scope="module", params=LEVELS)
def module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


def _points(n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """a log-uniform in [0.01, 100], x from a/20 to 4.5a, and x in [0, 3] (small a's
    fraction near x = 1, where it converges slowest)."""
    rng = np.random.default_rng(seed)
    a = np.exp(rng.uniform(np.log(0.01), np.log(100.0), 2 * n))
    x = np.concatenate([a[:n] * np.exp(rng.uniform(-3, 1.5, n)), rng.uniform(0, 3, n)])
    return a, x


def _mpmath(a: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with mpmath.workdps(40):
        pairs = [(mpmath.gammainc(u, 0, v, regularized=True),
                  mpmath.gammainc(u, v, mpmath.inf, regularized=True))
                 for u, v in zip(a, x, strict=True)]
        return np.array([[float(p), float(q)] for p, q in pairs]).T


def test_values_against_mpmath_in_f64(module: rv.Module) -> None:
    a, x = _points(300)
    want_p, want_q = _mpmath(a, x)
    with np.errstate(divide="ignore"):
        log_prefactor = np.abs(a * np.log(x) - x - sp.gammaln(a))
    for got, want in zip(module.f(a, x), (want_p, want_q), strict=True):
        bound = EPS * (RELATIVE * (1 + log_prefactor) * np.abs(want) + ABSOLUTE)
        worst = np.argmax(np.abs(got - want) / bound)
        assert np.all(np.abs(got - want) <= bound), (a[worst], x[worst], got[worst],
                                                      want[worst])


def test_values_in_f32_are_the_f64_values_rounded(module: rv.Module) -> None:
    a, x = _points(200, seed=3)
    a32, x32 = a.astype(np.float32), x.astype(np.float32)
    exact = _mpmath(a32.astype(np.float64), x32.astype(np.float64))
    for got, want in zip(module.f(a32, x32), exact, strict=True):
        assert got.dtype == np.float32
        normal = want > 1e-30           # f32 keeps its relative precision
        np.testing.assert_allclose(got[normal], want[normal], rtol=1.2e-7)
        assert np.all(np.abs(got - want) <= 1e-45 + 1.2e-7 * want)   # subnormals too


def test_values_against_scipy(module: rv.Module) -> None:
    a, x = _points(200, seed=11)
    p, q = module.f(a, x)
    np.testing.assert_allclose(p, sp.gammainc(a, x), rtol=2e-12, atol=1e-300)
    np.testing.assert_allclose(q, sp.gammaincc(a, x), rtol=2e-12, atol=1e-300)


def test_special_values_are_scipys(module: rv.Module) -> None:
    inf, nan = np.inf, np.nan
    a = np.array([0.0, 0.0, 0.0, 1.0, 2.5, inf, inf, inf, -1.0, 1.0, nan, 1.0])
    x = np.array([0.0, 1.0, inf, 0.0, inf, 1.0, inf, 0.0, 1.0, -1.0, 1.0, nan])
    p, q = module.f(a, x)
    np.testing.assert_array_equal(p, sp.gammainc(a, x))
    np.testing.assert_array_equal(q, sp.gammaincc(a, x))
    # tiny arguments: P(1e-300, 1e-300) = 1 − 6.9e-298 and P(½, x) = erf √x (SciPy's are
    # 1 and 4 ulps off)
    p, q = module.f(np.array([1e-300, 0.5]), np.array([1e-300, 1e-300]))
    np.testing.assert_allclose(p, [1.0, 2 / np.sqrt(np.pi) * 1e-150], rtol=1e-14)
    # Q = 1 − P below x = a + 1 is accurate in absolute terms only (here 0 for 6.9e-298)
    np.testing.assert_allclose(q, [6.901983122333121e-298, 1.0], rtol=1e-14, atol=EPS)


def test_derivative_in_x_against_jax_to_second_order(module: rv.Module) -> None:
    """d/dx (P − 3Q) = 4 xᵃ⁻¹ e⁻ˣ / Γ(a), by reverse mode, forward mode and reverse over
    reverse, against JAX (whose gammainc is differentiable in x)."""
    a = np.array([0.3, 1.0, 2.5, 7.0, 30.0, 0.05, 80.0])
    x = np.array([0.7, 2.0, 1.1, 9.5, 27.0, 3.0, 85.0])

    def loss(v):
        return jnp.sum(jsp.gammainc(a, v) - 3.0 * jsp.gammaincc(a, v))

    first = jax.grad(loss)(x)
    np.testing.assert_allclose(module.g.grad("x")(a, x), first, rtol=1e-12)
    tangent = np.linspace(0.5, 1.5, len(x))
    value, dot = module.g.jvp("x")(a, x, tangent)
    np.testing.assert_allclose(value, loss(x), rtol=1e-12)
    np.testing.assert_allclose(dot, first @ tangent, rtol=1e-12)
    second = jax.grad(lambda v: jnp.sum(jax.grad(loss)(v)))(x)
    np.testing.assert_allclose(module.g.grad("x").vjp("x")(a, x, np.ones_like(x)), second,
                               rtol=1e-10)


def test_derivative_in_x_at_zero(module: rv.Module) -> None:
    """xᵃ⁻¹/Γ(a) at x = 0: inf below a = 1, 1 at a = 1, 0 above."""
    a = np.array([0.5, 1.0, 2.0, 3.5])
    np.testing.assert_array_equal(module.g.grad("x")(a, np.zeros(4)), [np.inf, 4.0, 0.0, 0.0])


def test_derivative_against_finite_differences() -> None:
    m = rv.compile("fn h(x: f64[N]) -> f64 { return sum(gammaincc(2.5, x * x) "
                   "* gammainc(0.7, x)); }", backend="native")
    x = np.array([0.4, 1.3, 2.2])

    def h(v):
        return np.sum(sp.gammaincc(2.5, v * v) * sp.gammainc(0.7, v))

    step = 1e-6
    numeric = [(h(x + step * e) - h(x - step * e)) / (2 * step) for e in np.eye(3)]
    np.testing.assert_allclose(m.h.grad("x")(x), numeric, rtol=1e-7)


@pytest.mark.parametrize("function", ["gammainc", "gammaincc"])
def test_no_derivative_in_a(function: str) -> None:
    """Asking for ∂/∂a, directly or through an a that depends on x, is a CompileError at
    the call that names the function and a; stop_gradient(a) makes the derivative in x
    alone."""
    m = rv.compile(f"""
        fn g(a: f64[N], x: f64[N]) -> f64 {{ return sum({function}(a, x)); }}
        fn h(x: f64[N]) -> f64 {{ return sum({function}(x + 1.0, x)); }}
        fn k(x: f64[N]) -> f64 {{ return sum({function}(stop_gradient(x) + 1.0, x)); }}
    """, backend="interp")
    message = rf"cannot differentiate {function}\(a, x\) with respect to a"
    x = np.array([0.5, 2.0])
    for derivative in (lambda: m.g.grad("a")(x, x), lambda: m.g.jvp("a")(x, x, x),
                       lambda: m.h.grad("x")(x)):
        with pytest.raises(rv.CompileError, match=message) as caught:
            derivative()
        assert caught.value.diagnostics[0].line in (2, 3)
    sign = 1.0 if function == "gammainc" else -1.0
    want = sign * np.exp(x * np.log(x) - x - sp.gammaln(x + 1.0))
    np.testing.assert_allclose(m.k.grad("x")(x), want, rtol=1e-13)


def test_arguments_must_be_floats_of_one_type() -> None:
    with pytest.raises(rv.CompileError):
        rv.compile("fn f(a: f64[N], x: f32[N]) -> f64[N] { return gammainc(a, x); }",
                   backend="interp")
    with pytest.raises(rv.CompileError):
        rv.compile("fn f(a: i64[N], x: i64[N]) -> i64[N] { return gammaincc(a, x); }",
                   backend="interp")


# ---------------------------------------------------------------- betainc(a, b, x)

BETA_SOURCE = """
fn f(a: float[N], b: float[N], x: float[N]) -> float[N] { return betainc(a, b, x); }
fn g(a: f64[N], b: f64[N], x: f64[N]) -> f64 { return sum(betainc(a, b, x)); }
fn h(x: f64[N]) -> f64 { return sum(betainc(x + 1.0, 2.0, x)); }
fn k(x: f64[N]) -> f64 { return sum(betainc(2.0, 0.5 * stop_gradient(x), x)); }
"""


@pytest.fixture(scope="module", params=LEVELS)
def beta_module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(BETA_SOURCE, backend=request.param)


def _beta_points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a, b log-uniform in [0.01, 100]; x uniform on [0, 1] and, for a third, near the mean
    a/(a + b), where the two sides of the method meet."""
    rng = np.random.default_rng(seed)
    a, b = np.exp(rng.uniform(np.log(0.01), np.log(100.0), (2, n)))
    x = rng.uniform(0, 1, n)
    third = n // 3
    x[:third] = np.clip(a[:third] / (a[:third] + b[:third])
                        * np.exp(rng.uniform(-0.2, 0.2, third)), 0, 1)
    return a, b, x


def test_betainc_against_mpmath_and_scipy(beta_module: rv.Module) -> None:
    """Bounds of docs/mathlib.md: 2e-12 relative (the prefactor and 1 − I for small a or
    b), 64 ulp absolute."""
    a, b, x = _beta_points(600, seed=5)
    got = beta_module.f(a, b, x)
    with mpmath.workdps(40):
        want = np.array([float(mpmath.betainc(u, v, 0, w, regularized=True))
                         for u, v, w in zip(a, b, x, strict=True)])
    np.testing.assert_allclose(got, want, rtol=4e-12, atol=80 * EPS)
    np.testing.assert_allclose(got, sp.betainc(a, b, x), rtol=4e-12, atol=80 * EPS)
    a32, b32, x32 = (v.astype(np.float32) for v in (a, b, x))
    got32 = beta_module.f(a32, b32, x32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, sp.betainc(*(v.astype(np.float64)
                                                   for v in (a32, b32, x32))),
                               rtol=1.2e-7, atol=1e-37)


def test_betainc_special_values_are_scipys(beta_module: rv.Module) -> None:
    inf, nan = np.inf, np.nan
    a = np.array([0, 1, 0, 1, 1, inf, 1, inf, -1, 1, 1, 2, 0, 1, 2.5, 2.5])
    b = np.array([1, 0, 0, 1, 1, 1, inf, inf, 1, 1, 1, 3, 1, 0, 1.5, 1.5])
    x = np.array([.5, .5, .5, 0, 1, .5, .5, .5, .5, -0.1, 1.1, nan, 0, 1, 0, 1])
    a, b, x = (np.asarray(v, np.float64) for v in (a, b, x))
    np.testing.assert_array_equal(beta_module.f(a, b, x), sp.betainc(a, b, x))


def test_betainc_derivative_in_x(beta_module: rv.Module) -> None:
    """x^(a−1) (1 − x)^(b−1) / B(a, b) against JAX, to second order, in both modes; at the
    ends the powers themselves."""
    a = np.array([0.5, 2.0, 30.0, 3.0, 1.0])
    b = np.array([0.7, 3.0, 40.0, 0.3, 1.0])
    x = np.array([0.3, 0.5, 0.45, 0.9, 0.2])

    def loss(v):
        return jnp.sum(jsp.betainc(a, b, v))

    first = jax.grad(loss)(x)
    np.testing.assert_allclose(beta_module.g.grad("x")(a, b, x), first, rtol=1e-12)
    _, dot = beta_module.g.jvp("x")(a, b, x, np.ones_like(x))
    np.testing.assert_allclose(dot, first.sum(), rtol=1e-12)
    second = jax.grad(lambda v: jnp.sum(jax.grad(loss)(v)))(x)
    np.testing.assert_allclose(beta_module.g.grad("x").vjp("x")(a, b, x, np.ones_like(x)),
                               second, rtol=1e-10)
    ends = beta_module.g.grad("x")(np.array([1.0, 2.0, 1.0]), np.array([2.0, 1.0, 1.0]),
                                   np.array([0.0, 1.0, 1.0]))
    np.testing.assert_allclose(ends, [2.0, 2.0, 1.0], rtol=1e-15)


def test_betainc_derivative_against_finite_differences(beta_module: rv.Module) -> None:
    x = np.array([0.2, 0.55, 0.8])
    step = 1e-6
    numeric = [(np.sum(sp.betainc(2.0, 0.5 * x, x + step * e))
                - np.sum(sp.betainc(2.0, 0.5 * x, x - step * e))) / (2 * step)
               for e in np.eye(3)]
    np.testing.assert_allclose(beta_module.k.grad("x")(x), numeric, rtol=1e-7)


def test_betainc_no_derivative_in_a_or_b(beta_module: rv.Module) -> None:
    x = np.array([0.3, 0.6])
    for derivative, which in ((lambda: beta_module.g.grad("a")(x, x, x), "a"),
                              (lambda: beta_module.g.grad("b")(x, x, x), "b"),
                              (lambda: beta_module.g.grad(("a", "b"))(x, x, x), "a and b"),
                              (lambda: beta_module.g.jvp("b")(x, x, x, x), "b"),
                              (lambda: beta_module.h.grad("x")(x), "a")):
        with pytest.raises(rv.CompileError, match=rf"cannot differentiate betainc\(a, b, x\) "
                                                  rf"with respect to {which}:"):
            derivative()


def test_betainc_takes_three_arguments() -> None:
    with pytest.raises(rv.CompileError):
        rv.compile("fn f(x: f64[N]) -> f64[N] { return betainc(x, x); }", backend="interp")
