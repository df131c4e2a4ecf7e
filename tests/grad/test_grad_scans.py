"""Gradients of the scans and orderings (docs/language.md §8) and of triangular ranges
(docs/language.md §10).

Against torch: first and second order (gradient and Hessian-vector product) in reverse
mode, the JVP in forward mode and the Jacobian (which uses batching), with ties as
`torch.sort(stable=True)` and zeros in cumprod's input, on the interpreter and the native
backend. Against central finite differences in f64 (`rv.gradcheck`, `rv.gradgradcheck`)
at points without ties, where the functions are smooth.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn cs(x: f64[B, N], w: f64[B, N]) -> f64 { return sum(cumsum(x, axis=1) * w); }
fn cp(x: f64[B, N], w: f64[B, N]) -> f64 { return sum(cumprod(x, axis=1) * w); }
fn cp0(x: f64[B, N], w: f64[B, N]) -> f64 { return sum(cumprod(x, axis=0) * w * w); }
fn so(x: f64[B, N], w: f64[B, N]) -> f64 { return sum(sort(x) * sort(x) * w); }
fn sd(x: f64[B, N], w: f64[B, N]) -> f64 { return sum(sort(x, axis=0, descending=true) * w); }
fn tk(x: f64[B, N], w: f64[B, 2]) -> f64 { return sum(tanh(topk(x, 2)) * w); }
fn tri(x: f64[B, N], w: f64[B, N]) -> f64 {
    let c[b, i in 0..N] = sum[j in 0..i + 1](x[b, j] * x[b, j]);
    return sum(c * w);
}
"""


def _stable_top(x: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(x, descending=True, stable=True).values[:, :k]


TORCH: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cs": lambda x, w: (torch.cumsum(x, 1) * w).sum(),
    "cp": lambda x, w: (torch.cumprod(x, 1) * w).sum(),
    "cp0": lambda x, w: (torch.cumprod(x, 0) * w * w).sum(),
    "so": lambda x, w: (torch.sort(x, stable=True).values ** 2 * w).sum(),
    "sd": lambda x, w: (torch.sort(x, dim=0, descending=True, stable=True).values * w).sum(),
    "tk": lambda x, w: (torch.tanh(_stable_top(x, 2)) * w).sum(),
    "tri": lambda x, w: (torch.cumsum(x * x, 1) * w).sum(),
}

# ties in every row, a zero (two in one row) for cumprod
POINT = np.array([[3.0, 0.0, 2.0, 1.0, 0.0],
                  [0.5, -1.0, 5.0, 5.0, 2.0],
                  [1.0, 1.0, 0.0, -2.0, 1.0]])


def _weights(name: str, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((3, 2) if name == "tk" else POINT.shape)


def _torch_grad_and_hvp(name: str, x: np.ndarray, w: np.ndarray,
                        v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(TORCH[name](xt, torch.tensor(w)), xt, create_graph=True)
    if not g.requires_grad:   # linear in x: the Hessian is 0
        return g.detach().numpy(), np.zeros_like(x)
    (hv,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    return g.detach().numpy(), hv.numpy()


@pytest.fixture(scope="module", params=["interp", "native"])
def module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_gradient_and_hvp_match_torch_at_ties_and_zeros(module: rv.Module, name: str) -> None:
    rng = np.random.default_rng(1)
    w, v = _weights(name, rng), rng.standard_normal(POINT.shape)
    want_g, want_hv = _torch_grad_and_hvp(name, POINT, w, v)
    np.testing.assert_allclose(module[name].grad(wrt="x")(POINT, w), want_g, atol=1e-12)
    np.testing.assert_allclose(module[name].hvp(wrt="x")(POINT, w, v), want_hv, atol=1e-12)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_jvp_matches_torch(module: rv.Module, name: str) -> None:
    rng = np.random.default_rng(2)
    w, v = _weights(name, rng), rng.standard_normal(POINT.shape)
    want_g, _ = _torch_grad_and_hvp(name, POINT, w, v)
    value, tangent = module[name].jvp(wrt="x")(POINT, w, v)
    np.testing.assert_allclose(tangent, np.sum(want_g * v), atol=1e-12)
    np.testing.assert_allclose(value, TORCH[name](torch.tensor(POINT), torch.tensor(w)).item())


def test_jacobians_match_torch() -> None:
    source = """
    fn cumprod_of(x: f64[N]) -> f64[N] { return cumprod(x); }
    fn sorted(x: f64[N]) -> f64[N] { return sort(x, descending=true); }
    fn top(x: f64[N]) -> f64[2] { return topk(x, 2); }
    """
    compiled = rv.compile(source, backend="native")
    x = np.array([2.0, 0.0, -1.0, 2.0, 0.0, 3.0])
    cases = {"cumprod_of": lambda t: torch.cumprod(t, 0),
             "sorted": lambda t: torch.sort(t, descending=True, stable=True).values,
             "top": lambda t: torch.sort(t, descending=True, stable=True).values[:2]}
    for name, reference in cases.items():
        want = torch.autograd.functional.jacobian(reference, torch.tensor(x)).numpy()
        np.testing.assert_allclose(compiled[name].jacobian(wrt="x")(x), want, err_msg=name)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_finite_differences_in_f64(name: str) -> None:
    module = rv.compile(SOURCE, backend="native")
    rng = np.random.default_rng(3)
    x = rv.tensor(rng.standard_normal(POINT.shape), requires_grad=True)
    w = rv.tensor(_weights(name, rng), requires_grad=True)
    assert rv.gradcheck(module[name], (x, w))
    assert rv.gradgradcheck(module[name], (x, w))


def test_interpreter_and_native_agree_on_the_adjoint() -> None:
    interp, native = rv.compile(SOURCE, backend="interp"), rv.compile(SOURCE, backend="native")
    rng = np.random.default_rng(4)
    for name in TORCH:
        w = _weights(name, rng)
        np.testing.assert_allclose(native[name].grad(wrt="x")(POINT, w),
                                   interp[name].grad(wrt="x")(POINT, w),
                                   rtol=1e-12, atol=1e-12, err_msg=name)


def test_batched_vjps_match_one_at_a_time() -> None:
    module = rv.compile("fn f(x: f64[N]) -> f64[N] { return cumprod(sort(x)); }")
    x = rv.tensor(np.array([0.5, -2.0, 0.0, 1.5]), requires_grad=True)
    y = module.f(x)
    seeds = np.random.default_rng(5).standard_normal((3, 4))
    (batched,) = rv.grad(y, x, grad_outputs=seeds, is_grads_batched=True, retain_graph=True)
    for row, seed in zip(np.asarray(batched), seeds, strict=True):
        (one,) = rv.grad(y, x, grad_outputs=seed, retain_graph=True)
        np.testing.assert_allclose(row, np.asarray(one), atol=1e-12)
