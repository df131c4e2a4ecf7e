"""Linear algebra through the interop layers: a kernel with cholesky, triangular_solve and
eigvalsh as a torch custom operator (gradients to second order, torch.vmap) and as a JAX
primitive (jit of grad, hessian, vmap), against torch.linalg and jax.numpy.linalg."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn f(a: f64[N, N], y: f64[N]) -> f64 {
    let l = cholesky(a @ a.T);
    return sum(triangular_solve(l, y) ** 2) + sum(log(abs(eigvalsh(a + a.T))));
}
"""


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, (4, 4)) + 2 * np.eye(4)
    return a, rng.uniform(0, 1, 4), a + 0.1 * rng.uniform(0, 1, (3, 4, 4))


def _torch_reference(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    low = torch.linalg.cholesky(a @ a.T)
    solved = torch.linalg.solve_triangular(low, y[:, None], upper=False)
    return (solved ** 2).sum() + torch.log(torch.linalg.eigvalsh(a + a.T).abs()).sum()


def test_torch_operator_to_second_order_and_vmap() -> None:
    kernel = rv.torch.function(rv.compile(SOURCE).f)
    a_np, y_np, stack = _inputs()
    a, y = torch.tensor(a_np, requires_grad=True), torch.tensor(y_np)
    (got,) = torch.autograd.grad(kernel(a, y), a, create_graph=True)
    (want,) = torch.autograd.grad(_torch_reference(a, y), a, create_graph=True)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), a)[0],
                               torch.autograd.grad(want.sum(), a)[0], rtol=1e-9, atol=1e-11)
    batch = torch.tensor(stack)
    torch.testing.assert_close(torch.vmap(kernel, in_dims=(0, None))(batch, y),
                               torch.vmap(_torch_reference, in_dims=(0, None))(batch, y))


def test_jax_primitive_grad_hessian_vmap() -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def reference(a, y):  # noqa: ANN001, ANN202
        low = jnp.linalg.cholesky(a @ a.T)
        solved = jax.scipy.linalg.solve_triangular(low, y, lower=True)
        return (solved ** 2).sum() + jnp.log(jnp.abs(jnp.linalg.eigvalsh(a + a.T))).sum()

    kernel = rv.jax.function(rv.compile(SOURCE).f)
    a, y, stack = _inputs()
    np.testing.assert_allclose(jax.jit(jax.grad(kernel))(a, y), jax.grad(reference)(a, y),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(kernel)(a, y), jax.hessian(reference)(a, y),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(jax.vmap(kernel, in_axes=(0, None))(stack, y),
                               jax.vmap(reference, in_axes=(0, None))(stack, y), rtol=1e-12)
