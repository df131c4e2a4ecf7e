"""Derivatives of NumPy's elementwise functions (sinh … rad2deg, arctan2, hypot, logaddexp,
logaddexp2) to second order, at every level (interpreter, native, MLIR), in f64.

For `f = sum(fn(x))` (or `sum(fn(a, b))`): the gradient, reverse-over-reverse second
derivatives (`f.grad(w).vjp(...)` with a cotangent of ones) and forward-over-reverse ones
(`f.hvp`) against torch's double backward, and against central differences of the compiled
function and of its gradient. Then the values at the points where a derivative is infinite
or undefined: arcsin'(±1) = inf like torch; arctan2'(0, 0) = 0 like torch; hypot'(0, 0) = 0
(torch: NaN; the subgradient abs takes, |a| = hypot(a, 0)); sinc'(0) = 0 and
sinc''(0) = −π²/3 (torch: NaN, from 0/0).
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
import torch

import reverie as rv
from reverie.runtime.native.mlir_to_llvm import mlir_tools

LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
N = 7
RNG = np.random.default_rng(36)


def _spread(lo: float, hi: float) -> np.ndarray:
    return RNG.uniform(lo, hi, N)


# name -> points inside the domain, away from the points where derivatives blow up
UNARY = {
    "sinh": _spread(-3, 3), "cosh": _spread(-3, 3), "arcsin": _spread(-0.9, 0.9),
    "arccos": _spread(-0.9, 0.9), "arctan": _spread(-4, 4), "arcsinh": _spread(-4, 4),
    "arccosh": _spread(1.1, 5), "arctanh": _spread(-0.9, 0.9), "exp2": _spread(-3, 3),
    "log2": _spread(0.2, 5), "log10": _spread(0.2, 5),
    "sinc": np.array([-2.7, -1.3, -0.45, -0.1, 0.03, 0.3, 0.49, 0.51, 2.2]),
    "deg2rad": _spread(-200, 200), "rad2deg": _spread(-4, 4),
}
BINARY = {
    "arctan2": (_spread(-2, 2), _spread(-2, 2)), "hypot": (_spread(-2, 2), _spread(-2, 2)),
    "logaddexp": (_spread(-3, 3), _spread(-3, 3)),
    "logaddexp2": (_spread(-3, 3), _spread(-3, 3)),
}
TORCH = {"sinc": torch.sinc}


def torch_fn(name: str):
    return TORCH.get(name) or getattr(torch, name)


@functools.cache
def module(name: str, level: str) -> rv.Module:
    if name in UNARY:
        source = f"fn f(x: f64[N]) -> f64 {{ return sum({name}(x)); }}"
    else:
        source = f"fn f(a: f64[N], b: f64[N]) -> f64 {{ return sum({name}(a, b)); }}"
    return rv.compile(source, backend=level)


def points(name: str) -> tuple[np.ndarray, ...]:
    return (UNARY[name],) if name in UNARY else BINARY[name]


def params(name: str) -> tuple[str, ...]:
    return ("x",) if name in UNARY else ("a", "b")


def torch_derivatives(name: str, args: tuple[np.ndarray, ...]) -> tuple[list, list]:
    """(gradient, [∂/∂v of the gradient w.r.t. w, summed] for each w, v) by torch."""
    leaves = [torch.tensor(a, requires_grad=True) for a in args]
    first = torch.autograd.grad(torch_fn(name)(*leaves).sum(), leaves, create_graph=True)
    second = [[g.detach().numpy() for g in torch.autograd.grad(
        d.sum(), leaves, retain_graph=True, allow_unused=True, materialize_grads=True)]
        if d.requires_grad else [np.zeros_like(a) for a in args] for d in first]
    return [d.detach().numpy() for d in first], second


ALL = sorted(UNARY) + sorted(BINARY)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ALL)
def test_first_and_second_derivatives_match_torch(name: str, level: str) -> None:
    f, args, names = module(name, level).f, points(name), params(name)
    first, second = torch_derivatives(name, args)
    np.testing.assert_allclose(f.grad(names)(*args), first, rtol=1e-12, atol=1e-14)
    ones = np.ones(N if name in BINARY else args[0].size)
    for w, want in zip(names, second, strict=True):
        got = f.grad(w).vjp(names)(*args, ones)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"d/d{w}")
    for k, _ in enumerate(names):      # forward over reverse: H · e_k summed per point
        direction = tuple(np.ones_like(a) if j == k else np.zeros_like(a)
                          for j, a in enumerate(args))
        got = f.hvp(names)(*args, direction)
        want = [second[k][j] for j in range(len(names))]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"hvp {k}")


@pytest.mark.parametrize("name", ALL)
def test_derivatives_match_central_differences(name: str) -> None:
    f, args, names = module(name, "native").f, points(name), params(name)
    h = 1e-6
    gradient = f.grad(names)(*args)
    gradient = gradient if isinstance(gradient, tuple) else (gradient,)
    for k in range(len(args)):
        step = [np.zeros_like(a) for a in args]
        for i in range(args[k].size):
            step[k][i] = h
            plus = f(*(a + s for a, s in zip(args, step, strict=True)))
            minus = f(*(a - s for a, s in zip(args, step, strict=True)))
            step[k][i] = 0.0
            scale = max(1.0, abs(gradient[k][i]))
            assert abs((plus - minus) / (2 * h) - gradient[k][i]) <= 1e-6 * scale, (name, k, i)
    # the second derivative: differences of the compiled gradient
    g = f.grad(names[0])
    diagonal = f.grad(names[0]).vjp(names[0])(*args, np.ones_like(args[0]))
    shifted = [(a + h if k == 0 else a) for k, a in enumerate(args)]
    back = [(a - h if k == 0 else a) for k, a in enumerate(args)]
    differences = (g(*shifted) - g(*back)) / (2 * h)
    np.testing.assert_allclose(diagonal, differences, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", LEVELS)
def test_values_where_derivatives_are_infinite_or_undefined(level: str) -> None:
    arcsin = module("arcsin", level).f.grad("x")
    np.testing.assert_array_equal(arcsin(np.array([-1.0, 1.0, 0.0])), [np.inf, np.inf, 1.0])
    atan2, hypot = module("arctan2", level).f, module("hypot", level).f
    origin = (np.zeros(1), np.zeros(1))
    for f in (atan2, hypot):
        np.testing.assert_array_equal(np.ravel(f.grad(("a", "b"))(*origin)), [0.0, 0.0])
        second = f.grad("a").vjp(("a", "b"))(*origin, np.ones(1))
        assert np.all(np.isfinite(np.ravel(second)))
    # hypot(a, 0) = |a|: its derivative sign(a)
    np.testing.assert_array_equal(hypot.grad("a")(np.array([-2.0, 3.0]), np.zeros(2)),
                                  [-1.0, 1.0])
    sinc = module("sinc", level).f
    zero = np.zeros(1)
    assert sinc.grad("x")(zero)[0] == 0.0
    np.testing.assert_allclose(sinc.grad("x").vjp("x")(zero, np.ones(1)), [-math.pi ** 2 / 3],
                               rtol=1e-14)
    logaddexp = module("logaddexp", level).f
    np.testing.assert_array_equal(np.ravel(logaddexp.grad(("a", "b"))(zero, zero)), [0.5, 0.5])


def test_sinc_derivative_is_smooth_across_the_series_switch() -> None:
    """sinc' switches from its Taylor series to (cos πx − sinc x)/x at |x| = ½: both sides
    agree with the closed form evaluated by mpmath."""
    x = np.array([0.4999999, 0.5, 0.5000001, -0.5, 1e-9, 0.25, -0.3])
    got = module("sinc", "native").f.grad("x")(x)
    with mpmath.workdps(40):
        exact = [float((mpmath.cospi(v) - mpmath.sinpi(v) / (mpmath.pi * v)) / v)
                 for v in map(mpmath.mpf, x)]
    np.testing.assert_allclose(got, exact, rtol=1e-13)
