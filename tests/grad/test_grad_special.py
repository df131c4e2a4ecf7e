"""Derivatives of lgamma and digamma, to any order, against torch, mpmath and differences.

d lgamma = digamma, d digamma = polygamma {order = 1}, d polygamma {order = n} =
polygamma {order = n + 1}: repeated `rv.grad(..., create_graph=True)` on native kernels
must match torch.autograd on torch.lgamma / torch.digamma in float64 at points away from
the poles, on both sides of 0. torch's trigamma (torch.polygamma(1, x), the derivative of
its digamma) is accurate to about 1e-9 relative only, so against torch the tolerance is
1e-8; against mpmath's polygamma it is 1e-13.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch
from grad_helpers import assert_jacobians_match, grad, specialise

import reverie as rv

SOURCE = """
fn lgamma_(x: f64[N]) -> f64[N] { return lgamma(x); }
fn digamma_(x: f64[N]) -> f64[N] { return digamma(x); }
fn f(x: f64[N], y: f64[N]) -> f64 { return sum(lgamma(x * y) * digamma(y) - lgamma(x)); }
"""
POINTS = np.array([-4.7, -2.5, -1.3, -0.4, 0.3, 0.9, 1.4616, 2.0, 3.7, 12.5, 150.0])
TORCH = {"lgamma_": torch.lgamma, "digamma_": torch.digamma}


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_derivatives_to_fourth_order_match_torch(m: rv.Module, name: str) -> None:
    x = rv.tensor(POINTS, requires_grad=True)
    t = torch.tensor(POINTS, requires_grad=True)
    ours, theirs = m[name](x), TORCH[name](t)
    first = 0 if name == "lgamma_" else 1     # the polygamma order of the first derivative
    for order in range(1, 5):
        (ours,) = rv.grad(ours.sum(), x, create_graph=True)
        (theirs,) = torch.autograd.grad(theirs.sum(), t, create_graph=True)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-8,
                                   err_msg=f"{name}, order {order}")
        n = first + order - 1
        exact = [float(mpmath.digamma(v) if n == 0 else mpmath.polygamma(n, v)) for v in POINTS]
        np.testing.assert_allclose(ours.detach().numpy(), exact, rtol=1e-13,
                                   err_msg=f"{name}, order {order}")


def test_gradient_and_second_derivatives_of_a_program_match_torch(m: rv.Module) -> None:
    rng = np.random.default_rng(4)
    xs, ys = rng.uniform(0.2, 3.0, 6), rng.uniform(0.3, 2.0, 6)
    x, y = rv.tensor(xs, requires_grad=True), rv.tensor(ys, requires_grad=True)
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)
    theirs = (torch.lgamma(tx * ty) * torch.digamma(ty) - torch.lgamma(tx)).sum()
    first = rv.grad(m.f(x, y), (x, y), create_graph=True)
    first_torch = torch.autograd.grad(theirs, (tx, ty), create_graph=True)
    for a, b in zip(first, first_torch, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-8)
    second = rv.grad(first[1].sum(), (x, y))
    second_torch = torch.autograd.grad(first_torch[1].sum(), (tx, ty))
    for a, b in zip(second, second_torch, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-8)


def test_the_adjoint_of_digamma_is_polygamma_of_order_one() -> None:
    module = rv.compile(SOURCE, backend="interp")
    assert "polygamma %x {order = 1} : f64[N]" in module.ir("grad", "digamma_", dtype="f64")


def test_gradients_match_finite_differences() -> None:
    fn = specialise(SOURCE, "f")
    rng = np.random.default_rng(8)
    args = [rng.uniform(0.2, 0.8, 5) + rng.integers(-3, 3, 5), rng.uniform(0.6, 1.4, 5)]
    assert_jacobians_match(fn, args, {"N": 5}, rtol=1e-6, atol=1e-6)
    values = grad(fn, [0, 1], args, {"N": 5})
    assert all(np.all(np.isfinite(v)) for v in values)
