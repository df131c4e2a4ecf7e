"""SciPy's gamma, erfc, logit, erfinv, erfcinv, i0, i1, beta and betaln as built-ins: values
at every level against mpmath and SciPy, special values against SciPy, derivatives to second
order against JAX (torch has none of gamma, beta, betaln) and central differences.

Bounds (f64, in ulps of the exact value; f32: 0.51, computed in f64 and rounded once) are
the maxima measured over the domains below (docs/mathlib.md) with headroom. beta is
measured where a + b < 171 (beyond, exp(betaln) carries betaln's absolute error:
`test_beta_of_large_arguments`); betaln, which cancels where B(a, b) is near 1, in ulps of
its terms |lgamma(a)| + |lgamma(b)| where they are larger than it.
"""

from __future__ import annotations

import functools

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
UNARY, BINARY = ("gamma", "erfc", "logit", "erfinv", "erfcinv", "i0", "i1"), ("beta", "betaln")
JY = ("j0", "j1", "y0", "y1")            # values here, derivatives against mpmath below
# f64 bounds in ulps: native and MLIR (the same algorithm); the interpreter's (NumPy and
# math.gamma/math.erfc) in brackets
F64_ULPS = {"gamma": 8, "erfc": 5, "logit": 3, "beta": 12, "betaln": 8, "erfinv": 4,
            "erfcinv": 6, "i0": 6, "i1": 12, **dict.fromkeys(JY, 10)}
INTERP_ULPS = {"gamma": 8, "erfc": 3, "logit": 2, "beta": 12, "betaln": 24, "erfinv": 2,
               "erfcinv": 2, "i0": 6, "i1": 12, **dict.fromkeys(JY, 10)}
F32_ULPS = 0.51
def _erfcinv(q: mpmath.mpf) -> mpmath.mpf:
    """y with erfc(y) = q: Newton's steps on erfc from SciPy's value (a few ulps off), at
    the working precision (erfinv(1 − q) would need 1 − q exact: 300 more digits, slow)."""
    y = mpmath.mpf(sp.erfcinv(float(q)))
    for _ in range(4):  # each step squares the relative error
        if not mpmath.isfinite(y):
            return y
        y += (mpmath.erfc(y) - q) * mpmath.sqrt(mpmath.pi) / 2 * mpmath.exp(y * y)
    return y


MPMATH = {
    "gamma": mpmath.gamma, "erfc": mpmath.erfc, "erfinv": mpmath.erfinv, "erfcinv": _erfcinv,
    "i0": lambda x: mpmath.besseli(0, x), "i1": lambda x: mpmath.besseli(1, x),
    "j0": lambda x: mpmath.besselj(0, x), "j1": lambda x: mpmath.besselj(1, x),
    "y0": lambda x: mpmath.bessely(0, x), "y1": lambda x: mpmath.bessely(1, x),
    "logit": lambda p: mpmath.log(p / (1 - p)),
    "beta": mpmath.beta, "betaln": lambda a, b: mpmath.log(abs(mpmath.beta(a, b))),
}
SCIPY = {"gamma": sp.gamma, "erfc": sp.erfc, "logit": sp.logit, "beta": sp.beta,
         "betaln": sp.betaln, "erfinv": sp.erfinv, "erfcinv": sp.erfcinv, "i0": sp.i0,
         "i1": sp.i1, "j0": sp.j0, "j1": sp.j1, "y0": sp.y0, "y1": sp.y1}

SOURCE = """
fn gamma_(x: float[N]) -> float[N] { return gamma(x); }
fn erfc_(x: float[N]) -> float[N] { return erfc(x); }
fn logit_(x: float[N]) -> float[N] { return logit(x); }
fn erfinv_(x: float[N]) -> float[N] { return erfinv(x); }
fn erfcinv_(x: float[N]) -> float[N] { return erfcinv(x); }
fn i0_(x: float[N]) -> float[N] { return i0(x); }
fn i1_(x: float[N]) -> float[N] { return i1(x); }
fn j0_(x: float[N]) -> float[N] { return j0(x); }
fn j1_(x: float[N]) -> float[N] { return j1(x); }
fn y0_(x: float[N]) -> float[N] { return y0(x); }
fn y1_(x: float[N]) -> float[N] { return y1(x); }
fn beta_(a: float[N], b: float[N]) -> float[N] { return beta(a, b); }
fn betaln_(a: float[N], b: float[N]) -> float[N] { return betaln(a, b); }
"""


@functools.cache
def compiled(level: str) -> rv.Module:
    return rv.compile(SOURCE, backend=level)


def arguments(name: str, n: int = 1500) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "gamma":
        x = np.concatenate([rng.uniform(-30, 30, n), rng.uniform(0.5, 10, n),
                            rng.uniform(10, 171.6, n), -rng.uniform(0, 170, n),
                            10.0 ** rng.uniform(-300, -1, n // 4)])
        return (x[x != np.round(x)],)
    if name == "erfc":
        return (np.concatenate([rng.uniform(-6, 27.2, 2 * n), rng.uniform(-1, 1, n),
                                10.0 ** rng.uniform(-300, 0, n // 4)]),)
    if name in JY:
        x = np.concatenate([rng.uniform(0, 40, 2 * n), 10.0 ** rng.uniform(-300, 5, n // 4),
                            8 + rng.uniform(-1e-3, 1e-3, n // 4)])
        return (np.concatenate([x, -x[: n // 2]]) if name[0] == "j" else x,)
    if name in ("i0", "i1"):
        return (np.concatenate([rng.uniform(-30, 30, n), rng.uniform(-713, 713, n // 2),
                                10.0 ** rng.uniform(-300, 0, n // 4) * rng.choice([1, -1], n // 4),
                                8 + rng.uniform(-1e-3, 1e-3, n // 4)]),)
    if name == "erfinv":
        return (np.concatenate([rng.uniform(-1, 1, 2 * n), 10.0 ** rng.uniform(-300, 0, n // 4),
                                1 - 10.0 ** rng.uniform(-16, 0, n) * rng.choice([1, -1], n)]),)
    if name == "erfcinv":
        small = 10.0 ** rng.uniform(-250, 0, n)
        return (np.concatenate([rng.uniform(0, 2, 2 * n), small, 2 - small[: n // 2]]),)
    if name == "logit":
        return (np.concatenate([rng.uniform(0, 1, n), 10.0 ** rng.uniform(-300, -1, n),
                                1 - 10.0 ** rng.uniform(-16, -1, n)]),)
    a = np.concatenate([rng.uniform(0.01, 20, n), 10.0 ** rng.uniform(-3, 2, n),
                        10.0 ** rng.uniform(1, 6, n)])
    b = np.concatenate([rng.uniform(0.01, 20, n), 10.0 ** rng.uniform(-3, 2, n),
                        10.0 ** rng.uniform(-2, 1, n)])
    if name == "beta":
        keep = a + b < 171
        return a[keep], b[keep]
    return a, b


def evaluate(level: str, name: str, dtype: type, args: tuple[np.ndarray, ...]) -> np.ndarray:
    return np.asarray(getattr(compiled(level), name + "_")(*(a.astype(dtype) for a in args)))


def mpmath_value(name: str, point: tuple[float, ...]) -> float:
    """mpmath's value at `point` (40 digits), NaN at a pole (f32 rounding can reach one)."""
    with mpmath.workdps(40):
        try:
            return float(MPMATH[name](*map(mpmath.mpf, map(float, point))))
        except (ValueError, ZeroDivisionError):
            return np.nan


@functools.cache
def exact(name: str) -> np.ndarray:
    return np.array([mpmath_value(name, point) for point in zip(*arguments(name), strict=True)])


def ulps(got: np.ndarray, want: np.ndarray, scale: np.ndarray | float = 0.0) -> np.ndarray:
    """|got − want| in ulps of max(|want|, scale), where want is finite and normal."""
    finite = np.isfinite(want) & (np.abs(want) > np.finfo(np.float64).tiny)
    size = np.maximum(np.abs(want), scale)
    return np.abs(got[finite] - want[finite]) / np.spacing(size[finite])


def cancellation_scale(name: str, args: tuple[np.ndarray, ...]) -> np.ndarray | float:
    """betaln cancels where B(a, b) is near 1: the size of its terms lgamma(a), lgamma(b);
    J and Y are accurate to their amplitude min(1, 1/√|x|) next to their zeros."""
    if name in JY:
        with np.errstate(divide="ignore"):
            return np.minimum(1.0, 1 / np.sqrt(np.abs(args[0])))
    if name != "betaln":
        return 0.0
    return np.abs(sp.gammaln(args[0])) + np.abs(sp.gammaln(args[1]))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", UNARY + BINARY + JY)
def test_f64_values_match_mpmath(name: str, level: str) -> None:
    args = arguments(name)
    got, want = evaluate(level, name, np.float64, args), exact(name)
    error = ulps(got, want, cancellation_scale(name, args))
    bound = INTERP_ULPS[name] if level == "interp" else F64_ULPS[name]
    assert error.max() <= bound, f"{name}: {error.max():.1f} ulp"


@pytest.mark.parametrize("level", LEVELS[1:])  # the interpreter rounds NumPy's f64 semantics
@pytest.mark.parametrize("name", UNARY + BINARY + JY)
def test_f32_values_are_rounded_once(name: str, level: str) -> None:
    args = tuple(a.astype(np.float32) for a in arguments(name))
    want = np.array([mpmath_value(name, point) for point in zip(*(a[::5] for a in args),
                                                               strict=True)])
    got = evaluate(level, name, np.float32, tuple(a[::5] for a in args))
    rounded = want.astype(np.float32)
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    size = np.maximum(np.abs(rounded), cancellation_scale(name, tuple(a[::5] for a in args)))
    error = np.abs(got[normal] - want[normal]) / np.spacing(size[normal].astype(np.float32))
    assert error.max() <= F32_ULPS, f"{name}: {error.max():.2f} ulp"


def test_native_values_agree_with_scipy() -> None:
    """To 1e-12 where SciPy is finite, but betaln to 1e-7: SciPy's loses digits for large a
    (3.5e7 ulp at worst over `arguments("betaln")`, against mpmath; Reverie's: 4), and J, Y
    to 1e-11 of their amplitude (SciPy's j0(1e5) is off by 2e-13)."""
    for name in UNARY + BINARY + JY:
        args = arguments(name)
        got = evaluate("native", name, np.float64, args)
        rtol = {"betaln": 1e-7, **dict.fromkeys(JY, 1e-11)}.get(name, 1e-12)
        want = SCIPY[name](*args)
        finite = np.isfinite(want)      # SciPy's i0, i1 overflow from 709.8, I's only at 713.9
        # J and Y (SciPy's too) are accurate to their amplitude next to their zeros
        size = np.maximum(np.abs(want), cancellation_scale(name, args))[finite]
        assert np.all(np.abs(got[finite] - want[finite]) <= rtol * size + 1e-300), name


def test_beta_of_large_arguments() -> None:
    """exp(betaln) beyond a + b = 171: relative error about |betaln| · 2⁻⁵³."""
    a, b = np.array([100.0, 150.0, 300.0, 1e3]), np.array([80.0, 30.5, 0.5, 2.0])
    got = evaluate("native", "beta", np.float64, (a, b))
    want = np.array([float(mpmath.beta(*map(mpmath.mpf, p))) for p in zip(a, b, strict=True)])
    lnb = np.abs(np.log(want))
    assert np.all(np.abs(got - want) <= 4e-16 * (1 + lnb) * np.abs(want))


SPECIAL = np.array([0.0, -0.0, -1.0, -2.0, -7.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5, -0.5,
                    171.7, 200.0, 1e-310, -170.5, -185.5, 30.0, -30.0, 27.5])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", UNARY + JY)
def test_special_values_match_scipy(name: str, level: str) -> None:
    with np.errstate(all="ignore"):
        want = SCIPY[name](SPECIAL)
    if name in ("i0", "i1"):      # SciPy: NaN at ±inf (e^x/√x of inf); the limits are ±inf
        want[np.isinf(SPECIAL)] = np.inf if name == "i0" else SPECIAL[np.isinf(SPECIAL)]
    if name in JY:                # SciPy: NaN at ±inf; the limit is 0 (Y: NaN below 0)
        want[SPECIAL == np.inf] = 0.0
        if name[0] == "j":
            want[SPECIAL == -np.inf] = 0.0
    got = evaluate(level, name, np.float64, (SPECIAL,))
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])
    # the sign of a zero result as SciPy's, but erfinv(−0) = i1(−0) = −0 (odd, as torch;
    # SciPy: +0) and erfcinv(1) = +0 (SciPy: −0)
    odd = name in ("erfinv", "erfcinv", "i1", "j1")
    signed = special & ~np.isnan(want) & ((want != 0) | (not odd))
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
    np.testing.assert_allclose(got[~special], want[~special], rtol=1e-12, atol=1e-320)


# ---------------------------------------------------------------- derivatives

GRAD_SOURCE = """
fn gamma_(x: f64[N]) -> f64 { return sum(gamma(x)); }
fn erfc_(x: f64[N]) -> f64 { return sum(erfc(x)); }
fn logit_(x: f64[N]) -> f64 { return sum(logit(x)); }
fn erfinv_(x: f64[N]) -> f64 { return sum(erfinv(x)); }
fn erfcinv_(x: f64[N]) -> f64 { return sum(erfcinv(x)); }
fn i0_(x: f64[N]) -> f64 { return sum(i0(x)); }
fn i1_(x: f64[N]) -> f64 { return sum(i1(x)); }
fn beta_(a: f64[N], b: f64[N]) -> f64 { return sum(beta(a, b)); }
fn betaln_(a: f64[N], b: f64[N]) -> f64 { return sum(betaln(a, b)); }
"""
JAX = {"gamma": jsp.gamma, "erfc": jsp.erfc, "logit": jsp.logit, "beta": jsp.beta,
       "betaln": jsp.betaln, "erfinv": jsp.erfinv, "erfcinv": lambda q: -jsp.erfinv(q - 1),
       "i0": jsp.i0, "i1": jsp.i1}
POINTS = {"gamma": (np.array([-2.5, -0.3, 0.4, 1.7, 4.2, 11.5]),),
          "erfc": (np.array([-2.0, -0.3, 0.1, 1.5, 4.0, 7.0]),),
          "logit": (np.array([0.01, 0.2, 0.5, 0.7, 0.99]),),
          "erfinv": (np.array([-0.9, -0.3, 0.1, 0.6, 0.99]),),
          "erfcinv": (np.array([0.01, 0.4, 1.0, 1.3, 1.95]),),
          "i0": (np.array([-9.5, -2.0, 0.3, 4.0, 8.5, 30.0]),),
          "i1": (np.array([-9.5, -2.0, 0.3, 4.0, 8.5, 30.0]),),
          "beta": (np.array([0.5, 1.5, 3.0, 12.0]), np.array([2.0, 0.7, 4.5, 15.0])),
          "betaln": (np.array([0.5, 1.5, 3.0, 120.0]), np.array([2.0, 0.7, 4.5, 15.0]))}


@functools.cache
def grad_module(level: str) -> rv.Module:
    return rv.compile(GRAD_SOURCE, backend=level)


def jax_derivatives(name: str, args: tuple[np.ndarray, ...]) -> tuple[list, list]:
    """The gradient of sum(f) and, per parameter w, ∂/∂v of sum(∂f/∂w) for each v."""
    def total(*xs: jnp.ndarray) -> jnp.ndarray:
        return jnp.sum(JAX[name](*xs))

    positions = tuple(range(len(args)))
    first = jax.grad(total, positions)(*args)
    second = [jax.grad(lambda *xs, k=k: jnp.sum(jax.grad(total, k)(*xs)), positions)(*args)
              for k in positions]
    return [np.asarray(g) for g in first], [[np.asarray(g) for g in row] for row in second]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", UNARY + BINARY)
def test_derivatives_to_second_order_match_jax(name: str, level: str) -> None:
    args = POINTS[name]
    f = getattr(grad_module(level), name + "_")
    names = ("x",) if name in UNARY else ("a", "b")
    wrt = names if len(names) > 1 else names[0]
    first, second = jax_derivatives(name, args)
    got = f.grad(wrt)(*args)
    # JAX's digamma and polygamma are accurate to about 1e-10, its beta's derivatives (of
    # exp(betaln)) to 1e-7 where B is small (Reverie's: `test_beta_derivatives_are_exact`)
    rtol = 1e-6 if name == "beta" else 1e-9
    np.testing.assert_allclose(got, first if len(names) > 1 else first[0], rtol=rtol)
    for w, want in zip(names, second, strict=True):
        row = f.grad(w).vjp(wrt)(*args, np.ones_like(args[0]))
        np.testing.assert_allclose(row, want if len(names) > 1 else want[0], rtol=10 * rtol,
                                   atol=1e-12, err_msg=f"d/d{w}")


def test_beta_derivatives_are_exact() -> None:
    """∂B/∂a = B (ψ(a) − ψ(a + b)) against mpmath, also where B is small."""
    a, b = POINTS["beta"]
    got = grad_module("native").beta_.grad(("a", "b"))(a, b)
    with mpmath.workdps(30):
        want = [[float(mpmath.beta(p, q) * (mpmath.digamma(r) - mpmath.digamma(p + q)))
                 for p, q, r in zip(a, b, first, strict=True)] for first in (a, b)]
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_gradients_match_central_differences(name: str) -> None:
    args = POINTS[name]
    f = getattr(grad_module("native"), name + "_")
    wrt = "x" if name in UNARY else ("a", "b")
    gradient = f.grad(wrt)(*args)
    gradient = gradient if isinstance(gradient, tuple) else (gradient,)
    h = 1e-6
    for k, arg in enumerate(args):
        for i in range(arg.size):
            step = [np.zeros_like(a) for a in args]
            step[k][i] = h * max(1.0, abs(arg[i]))
            plus = f(*(a + s for a, s in zip(args, step, strict=True)))
            minus = f(*(a - s for a, s in zip(args, step, strict=True)))
            difference = (plus - minus) / (2 * step[k][i])
            rounding = 4e-16 * abs(plus) / step[k][i]      # of the sum over the points
            assert difference == pytest.approx(gradient[k][i], rel=1e-6, abs=1e-9 + rounding), \
                (name, k, i)


@pytest.mark.parametrize("source, message", [
    ("fn f(x: i64[N]) -> i64[N] { return beta(x, x); }", "beta"),
    ("fn f(x: f64[N]) -> f64[N] { return gamma(x, x); }", "gamma"),
])
def test_misuse_is_a_compile_error(source: str, message: str) -> None:
    with pytest.raises(rv.CompileError, match=message):
        rv.compile(source, backend="interp")


def test_variables_may_still_be_called_gamma_and_beta() -> None:
    m = rv.compile("fn f(gamma: f64, beta: f64) -> f64 { let x = gamma * beta; return x; }",
                   backend="interp")
    assert m.f(2.0, 3.0) == 6.0


# ---------------------------------------------------------------- multigammaln(x, d)


@pytest.mark.parametrize("level", LEVELS)
def test_multigammaln_matches_scipy_and_jax(level: str) -> None:
    """Values against SciPy (NaN where SciPy refuses x ≤ (d − 1)/2), the derivative
    Σ_{j<d} ψ(x − j/2) and the second derivative against JAX."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N]) {
            return (multigammaln(x, 1), multigammaln(x, 3), multigammaln(x, 5));
        }
        fn g(x: f64[N]) -> f64 { return sum(multigammaln(x, 4)); }""", backend=level)
    x = np.array([0.7, 1.2, 2.01, 2.5, 7.3, 40.0, 310.5])
    for d, got in zip((1, 3, 5), m.f(x), strict=True):
        inside = x > (d - 1) / 2
        want = np.array([sp.multigammaln(v, d) for v in x[inside]])
        np.testing.assert_allclose(got[inside], want, rtol=1e-14, atol=1e-14, err_msg=str(d))
        assert np.all(np.isnan(got[~inside]))
    points = x[x > 1.5]
    first = jax.grad(lambda v: jnp.sum(jsp.multigammaln(v, 4)))(points)
    np.testing.assert_allclose(m.g.grad("x")(points), first, rtol=1e-10)
    second = jax.grad(lambda v: jnp.sum(jax.grad(
        lambda u: jnp.sum(jsp.multigammaln(u, 4)))(v)))(points)
    np.testing.assert_allclose(m.g.grad("x").vjp("x")(points, np.ones_like(points)), second,
                               rtol=1e-8)


@pytest.mark.parametrize("argument", ["0", "k", "1.5", "-2"])
def test_multigammaln_needs_a_positive_integer_constant(argument: str) -> None:
    source = f"fn f(x: f64[N], k: i64) -> f64[N] {{ return multigammaln(x, {argument}); }}"
    with pytest.raises(rv.CompileError, match="positive integer constant"):
        rv.compile(source, backend="interp")


@pytest.mark.parametrize("level", LEVELS)
def test_bessel_derivatives_at_zero(level: str) -> None:
    """I₀' = I₁, I₁' = I₀ − I₁/x, ½ at 0 (the quotient's limit); I₀''(0) = ½, I₁''(0) = 0.
    (JAX's I₀' at 0 is 1.)"""
    m, zero, one = grad_module(level), np.zeros(1), np.ones(1)
    assert m.i0_.grad("x")(zero)[0] == 0.0 and m.i1_.grad("x")(zero)[0] == 0.5
    assert m.i0_.grad("x").vjp("x")(zero, one)[0] == 0.5
    assert m.i1_.grad("x").vjp("x")(zero, one)[0] == 0.0


JY_SOURCE = """
fn j0_(x: f64[N]) -> f64 { return sum(j0(x)); }
fn j1_(x: f64[N]) -> f64 { return sum(j1(x)); }
fn y0_(x: f64[N]) -> f64 { return sum(y0(x)); }
fn y1_(x: f64[N]) -> f64 { return sum(y1(x)); }
"""


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", JY)
def test_bessel_jy_derivatives_match_mpmath(name: str, level: str) -> None:
    """j0' = −j1, j1' = j0 − j1/x (½ at 0), y0' = −y1, y1' = y0 − y1/x, and their own
    derivatives, against mpmath's numerical derivatives (30 digits)."""
    f = getattr(rv.compile(JY_SOURCE, backend=level), name + "_")
    x = np.array([0.3, 1.7, 4.2, 7.9, 8.3, 15.5, 40.0])
    if name[0] == "j":
        x = np.concatenate([x, -x[:3], [0.0]])
    bessel = mpmath.besselj if name[0] == "j" else mpmath.bessely
    with mpmath.workdps(30):
        exact = [[float(mpmath.diff(lambda t: bessel(int(name[1]), t), mpmath.mpf(v), k))
                  for v in x] for k in (1, 2)]
    np.testing.assert_allclose(f.grad("x")(x), exact[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(f.grad("x").vjp("x")(x, np.ones_like(x)), exact[1], rtol=1e-11,
                               atol=1e-13)


# ---------------------------------------------------------------- polygamma(n, x)


@pytest.mark.parametrize("level", LEVELS)
def test_polygamma_matches_scipy(level: str) -> None:
    """polygamma(n, x) (SciPy's order of arguments): n = 0 is digamma; its derivative is
    polygamma(n + 1, x), its second polygamma(n + 2, x)."""
    m = rv.compile("""
        fn f(x: f64[N]) -> (f64[N], f64[N], f64[N]) {
            return (polygamma(0, x), polygamma(1, x), polygamma(3, x));
        }
        fn g(x: f64[N]) -> f64 { return sum(polygamma(2, x)); }""", backend=level)
    x = np.array([-2.5, -0.3, 0.5, 1.0, 2.7, 11.0, 150.0])
    for n, got in zip((0, 1, 3), m.f(x), strict=True):
        np.testing.assert_allclose(got, sp.polygamma(n, x), rtol=1e-13, err_msg=str(n))
    np.testing.assert_allclose(m.g(x), sp.polygamma(2, x).sum(), rtol=1e-13)
    np.testing.assert_allclose(m.g.grad("x")(x), sp.polygamma(3, x), rtol=1e-13)
    np.testing.assert_allclose(m.g.grad("x").vjp("x")(x, np.ones_like(x)), sp.polygamma(4, x),
                               rtol=1e-12)


@pytest.mark.parametrize("argument", ["-1", "k", "1.5", "2.0"])
def test_polygamma_needs_a_non_negative_integer_constant(argument: str) -> None:
    source = f"fn f(x: f64[N], k: i64) -> f64[N] {{ return polygamma({argument}, x); }}"
    with pytest.raises(rv.CompileError, match=r"order n of 'polygamma\(n, x\)'") as caught:
        rv.compile(source, backend="interp")
    assert "^" in str(caught.value)


def test_traced_scipy_polygamma_and_its_gradient() -> None:
    x = np.linspace(0.5, 3, 5)
    module = rv.trace(lambda x: sp.polygamma(2, x).sum(), x)
    np.testing.assert_allclose(module.kernel(x), sp.polygamma(2, x).sum(), rtol=1e-14)
    np.testing.assert_allclose(module.kernel.grad("x")(x), sp.polygamma(3, x), rtol=1e-14)
