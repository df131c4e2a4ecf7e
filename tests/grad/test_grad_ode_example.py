"""`examples/ode_adaptive.rv` (issue 12 item 7): an adaptive-step integrator written with
`while` and `if`, whose gradient flows to the initial state and the parameters.

The compiled gradient is checked against torch eager running the same control flow
(Python `while`/`if` on the same arithmetic: the same accepted and rejected steps), against
central finite differences, and the solution against a fine fixed-step reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import reverie as rv

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ode_adaptive.rv"
U0, K, C = np.array([1.0, -0.5]), 2.0, 0.3


@pytest.fixture(scope="module")
def module() -> rv.Module:
    return rv.load(EXAMPLE)


def torch_loss(u0, k, c, t_end: float = 1.0, tolerance: float = 1e-3):
    torch = pytest.importorskip("torch")

    def rate(u, t):
        return torch.stack([u[1], -k * u[0] - c * u[1] + torch.sin(t)])

    u, t, h = u0, torch.zeros((), dtype=torch.float64), torch.tensor(0.01, dtype=torch.float64)
    while t < t_end:
        euler = u + h * rate(u, t)
        heun = u + 0.5 * h * (rate(u, t) + rate(euler, t + h))
        err = (heun - euler).abs().max() + 1e-300
        if err <= tolerance:
            u, t = heun, t + h
        h = torch.minimum(h * torch.clamp(0.9 * torch.sqrt(tolerance / err), 0.2, 5.0),
                          t_end - t)
    return (u * u).sum()


def test_gradient_matches_torch_running_the_same_control_flow(module: rv.Module) -> None:
    torch = pytest.importorskip("torch")
    params = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (U0, K, C)]
    expected = torch_loss(*params)
    grads = torch.autograd.grad(expected, params)
    value, ours = module.oscillator_loss.value_and_grad()(U0, K, C)
    np.testing.assert_allclose(value, expected.item(), rtol=1e-12)
    for a, b in zip(ours, grads, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-12)


def test_gradient_matches_finite_differences(module: rv.Module) -> None:
    f = module.oscillator_loss
    gu0, gk, gc = f.grad()(U0, K, C)
    eps = 1e-7
    for index, analytic in ((0, gu0[0]), (1, gu0[1])):
        step = np.eye(2)[index] * eps
        numeric = (f(U0 + step, K, C) - f(U0 - step, K, C)) / (2 * eps)
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    assert gk == pytest.approx((f(U0, K + eps, C) - f(U0, K - eps, C)) / (2 * eps), rel=1e-5)
    assert gc == pytest.approx((f(U0, K, C + eps) - f(U0, K, C - eps)) / (2 * eps), rel=1e-5)


def test_solution_is_accurate(module: rv.Module) -> None:
    """Against classical RK4 with 20,000 fixed steps (error ~1e-15)."""
    def rate(u, t):
        return np.array([u[1], -K * u[0] - C * u[1] + np.sin(t)])

    u, h = U0.copy(), 2.0 / 20_000
    for i in range(20_000):
        t = i * h
        k1 = rate(u, t)
        k2 = rate(u + h / 2 * k1, t + h / 2)
        k3 = rate(u + h / 2 * k2, t + h / 2)
        k4 = rate(u + h * k3, t + h)
        u = u + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(module.oscillator(U0, K, C, 2.0, 1e-7), u, atol=1e-5)
