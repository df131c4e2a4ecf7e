"""`grad` of a function whose one float result has one element (issue 36 item 5).

A result of literal size 1 (`f64[1]`, `f64[1, 1]`) is differentiated like a scalar by
`f.grad()`, `f.value_and_grad()`, `f.hessian()` and `f.hvp()`, as torch's
`autograd.grad` and HIPS autograd accept it: at every stage (the NumPy reference
interpreter, native code, the MLIR backend), against torch's gradients. `rv.grad` on a
Tensor of one element needs no `grad_outputs`, as in torch. A symbolic size (`f64[N]`,
whatever N binds to) is still refused, with a message that points to `vjp`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn row(x: f64[N], w: f64[N]) -> f64[1] { return reshape(sum(tanh(x * w)), (1,)); }
fn cell(x: f64[N], w: f64[N]) -> f64[1, 1] { return reshape(sum(x * x * w), (1, 1)); }
fn vector(x: f64[N], w: f64[N]) -> f64[N] { return x * w; }
"""
X = np.array([0.3, -1.2, 2.0])
W = np.array([1.5, 0.4, -0.7])


def torch_reference(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The value, gradient with respect to x and Hessian with respect to x, by torch."""
    def f(x: torch.Tensor) -> torch.Tensor:
        w = torch.tensor(W)
        if name == "row":
            return torch.tanh(x * w).sum().reshape(1)
        return (x * x * w).sum().reshape(1, 1)

    x = torch.tensor(X, requires_grad=True)
    value = f(x)
    (gradient,) = torch.autograd.grad(value, x)  # a size-1 output needs no grad_outputs
    hessian = torch.autograd.functional.hessian(lambda t: f(t).reshape(()), torch.tensor(X))
    return value.detach().numpy(), gradient.numpy(), hessian.numpy()


@pytest.mark.parametrize("backend", ["interp", "native", "mlir"])
@pytest.mark.parametrize("name", ["row", "cell"])
def test_transforms_of_a_size_one_result(backend: str, name: str) -> None:
    kernel = rv.compile(SOURCE, backend=backend)[name]
    value, gradient, hessian = torch_reference(name)
    np.testing.assert_allclose(kernel.grad("x")(X, W), gradient, rtol=1e-12)
    grads = kernel.grad()(X, W)
    assert isinstance(grads, tuple) and len(grads) == 2
    np.testing.assert_allclose(grads[0], gradient, rtol=1e-12)
    got_value, got_gradient = kernel.value_and_grad("x")(X, W)
    assert np.shape(got_value) == value.shape
    np.testing.assert_allclose(got_value, value, rtol=1e-12)
    np.testing.assert_allclose(got_gradient, gradient, rtol=1e-12)
    np.testing.assert_allclose(kernel.hessian("x")(X, W), hessian, rtol=1e-10, atol=1e-14)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(kernel.hvp("x")(X, W, v), hessian @ v, rtol=1e-10, atol=1e-14)


def test_size_one_gradient_matches_finite_differences() -> None:
    kernel = rv.compile(SOURCE)["row"]
    eps = 1e-6
    fd = [(kernel(X + eps * e, W)[0] - kernel(X - eps * e, W)[0]) / (2 * eps)
          for e in np.eye(3)]
    np.testing.assert_allclose(kernel.grad("x")(X, W), fd, rtol=1e-7)


def test_gradient_of_the_gradient() -> None:
    kernel = rv.compile(SOURCE)["cell"]
    # d/dx of sum(x * x * w) is 2 x w; d/dw of sum(2 x w) is 2 x
    second = kernel.grad("x").vjp("w")(X, W, np.ones(3))
    np.testing.assert_allclose(second, 2 * X, rtol=1e-12)


def test_symbolic_sizes_are_still_refused() -> None:
    kernel = rv.compile(SOURCE)["vector"]
    with pytest.raises(ValueError, match=r"vector\.grad\(\) needs .*scalar.*returns f64\[N\]"
                                         r".*vector\.vjp\(\)"):
        kernel.grad()
    with pytest.raises(ValueError, match=r"value_and_grad\(\)"):
        kernel.value_and_grad()


@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1)])
def test_rv_grad_of_a_size_one_tensor_as_torch(shape: tuple[int, ...]) -> None:
    kernel = rv.compile(SOURCE)["row"]
    x = rv.tensor(X, requires_grad=True)
    y = kernel(x, W).reshape(shape)
    (gradient,) = rv.grad(y, x)
    tx = torch.tensor(X, requires_grad=True)
    (expected,) = torch.autograd.grad(torch.tanh(tx * torch.tensor(W)).sum().reshape(shape), tx)
    np.testing.assert_allclose(gradient.numpy(), expected.numpy(), rtol=1e-12)
    kernel(x, W).reshape(shape).backward()  # implicit gradient of one, as torch
    np.testing.assert_allclose(x.grad.numpy(), expected.numpy(), rtol=1e-12)


def test_rv_grad_of_several_elements_needs_grad_outputs_as_torch() -> None:
    x = rv.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="one-element outputs; pass grad_outputs"):
        rv.grad(x * 2.0, x)
    tx = torch.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        torch.autograd.grad(tx * 2.0, tx)


def test_a_traced_function_of_a_size_one_result() -> None:
    module = rv.trace(lambda x: (x * x).sum().reshape(1, 1), X)
    (kernel,) = module.kernels.values()
    np.testing.assert_allclose(kernel.grad(0)(X), 2 * X, rtol=1e-15)
