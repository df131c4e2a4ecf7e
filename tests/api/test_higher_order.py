"""Higher derivatives with `create_graph=True`, against torch and closed forms.

Every backward step of a pass with create_graph=True is a call of a compiled VJP kernel on
Tensors, so it is recorded and differentiated again by that kernel's own compiled VJP.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")

SOURCE = """
fn sin_(x: float[N]) -> float[N] { return sin(x); }
fn tanh_(x: float[B, H]) -> float[B, H] { return tanh(x); }
fn mlp(x: f64[B, D], w1: f64[D, H], w2: f64[H], y: f64[B]) -> f64 {
    return mean((tanh(x @ w1) @ w2 - y) ** 2);
}
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def test_sin_derivatives_to_fourth_order(m: rv.Module) -> None:
    values = np.array([-1.3, 0.2, 0.9, 2.5])
    x = rv.tensor(values, requires_grad=True)
    derivative = m.sin_(x)
    expected = [np.cos(values), -np.sin(values), -np.cos(values), np.sin(values)]
    for order, closed_form in enumerate(expected, start=1):
        (derivative,) = rv.grad(derivative.sum(), x, create_graph=True)
        assert derivative.requires_grad
        np.testing.assert_allclose(derivative.detach().numpy(), closed_form, rtol=1e-12,
                                   err_msg=f"order {order}")


def test_adjoint_steps_are_recorded_compiled_vjps(m: rv.Module) -> None:
    x = rv.tensor([0.3, 0.7], requires_grad=True)
    (first,) = rv.grad(m.sin_(x).sum(), x, create_graph=True)
    (second,) = rv.grad(first.sum(), x, create_graph=True)
    assert first.grad_fn.kernel.name.startswith("sin__vjp")
    assert "vjp_vjp" in second.grad_fn.kernel.name


def test_third_derivative_matches_torch_through_operators_and_kernels(m: rv.Module) -> None:
    values = np.array([0.4, -0.8, 1.1])

    def third(x: object, sin: object, grad: object) -> object:
        y = (sin(x) * x ** 3 / (x * x + 1.0)).sum()
        for _ in range(3):
            (derivative,) = grad(y, x, create_graph=True)
            y = derivative.sum()
        return y

    ours = third(rv.tensor(values, requires_grad=True), m.sin_, rv.grad)
    theirs = third(torch.tensor(values, requires_grad=True), torch.sin, torch.autograd.grad)
    np.testing.assert_allclose(float(ours.item()), theirs.item(), rtol=1e-10)


def test_cubic_third_derivative_is_constant() -> None:
    x = rv.tensor([1.5, -2.0], requires_grad=True)
    (g,) = rv.grad((x ** 3).sum(), x, create_graph=True)
    (h,) = rv.grad(g.sum(), x, create_graph=True)
    (t,) = rv.grad(h.sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 2)
    np.testing.assert_allclose(h.detach().numpy(), 6 * x.detach().numpy())
    np.testing.assert_allclose(t.detach().numpy(), [6.0, 6.0])


def _mlp_problem(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.normal(size=(5, 3)), "w1": rng.normal(size=(3, 4)),
            "w2": rng.normal(size=4), "y": rng.normal(size=5),
            "v1": rng.normal(size=(3, 4)), "v2": rng.normal(size=4)}


def test_tanh_mlp_hessian_vector_product_matches_torch(m: rv.Module) -> None:
    data = _mlp_problem(np.random.default_rng(0))
    x, y = rv.tensor(data["x"]), rv.tensor(data["y"])
    w1 = rv.tensor(data["w1"], requires_grad=True)
    w2 = rv.tensor(data["w2"], requires_grad=True)
    g1, g2 = rv.grad(m.mlp(x, w1, w2, y), [w1, w2], create_graph=True)
    dot = (g1 * rv.tensor(data["v1"])).sum() + (g2 * rv.tensor(data["v2"])).sum()
    hv1, hv2 = rv.grad(dot, [w1, w2])

    tw1 = torch.tensor(data["w1"], requires_grad=True)
    tw2 = torch.tensor(data["w2"], requires_grad=True)
    tx, ty = torch.tensor(data["x"]), torch.tensor(data["y"])
    loss = ((torch.tanh(tx @ tw1) @ tw2 - ty) ** 2).mean()
    t1, t2 = torch.autograd.grad(loss, [tw1, tw2], create_graph=True)
    tdot = (t1 * torch.tensor(data["v1"])).sum() + (t2 * torch.tensor(data["v2"])).sum()
    th1, th2 = torch.autograd.grad(tdot, [tw1, tw2])
    np.testing.assert_allclose(g1.detach().numpy(), t1.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hv1.detach().numpy(), th1.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hv2.detach().numpy(), th2.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_mlp_from_operators_and_an_elementwise_kernel(m: rv.Module) -> None:
    data = _mlp_problem(np.random.default_rng(1))
    w1 = rv.tensor(data["w1"], requires_grad=True)
    loss = ((m.tanh_(rv.tensor(data["x"]) @ w1) @ rv.tensor(data["w2"])
             - rv.tensor(data["y"])) ** 2).mean()
    (g,) = rv.grad(loss, w1, create_graph=True)
    (hv,) = rv.grad((g * rv.tensor(data["v1"])).sum(), w1)

    tw1 = torch.tensor(data["w1"], requires_grad=True)
    tloss = ((torch.tanh(torch.tensor(data["x"]) @ tw1) @ torch.tensor(data["w2"])
              - torch.tensor(data["y"])) ** 2).mean()
    (tg,) = torch.autograd.grad(tloss, tw1, create_graph=True)
    (thv,) = torch.autograd.grad((tg * torch.tensor(data["v1"])).sum(), tw1)
    np.testing.assert_allclose(hv.detach().numpy(), thv.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_backward_with_create_graph_gives_differentiable_grad(m: rv.Module) -> None:
    x = rv.tensor([0.1, 0.6], requires_grad=True)
    (m.sin_(x) * x).sum().backward(create_graph=True)
    first = x.grad
    assert first.requires_grad
    (second,) = rv.grad(first.sum(), x)
    values = x.detach().numpy()
    np.testing.assert_allclose(second.detach().numpy(),
                               2 * np.cos(values) - values * np.sin(values))
