"""Gradients of the linear-algebra built-ins against torch.linalg, to second order.

Each case is a scalar loss of one function (cholesky, triangular_solve, solve, inv, det,
slogdet, eigh, svd, qr, pinv, norm) written in the language and in torch; the compiled
gradient, its Hessian (forward over reverse) and its JVP must give torch's values, on
batched stacks of matrices, at the interpreter and in native code; and central finite
differences in f64 (`rv.gradcheck`, `rv.gradgradcheck`: reverse over reverse) agree.
Symmetric inputs (cholesky, eigh) are built inside the loss, so the finite differences see
the symmetric convention of torch's gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn chol(x: f64[B, N, N], w: f64[B, N, N]) -> f64 {
    return sum(cholesky(x @ transpose(x, (0, 2, 1)) + 4.0 * inv(inv(x)) @ inv(x)) * w);
}
fn tri(a: f64[B, N, N], b: f64[B, N, K], w: f64[B, N, K]) -> f64 {
    return sum(triangular_solve(a, b, lower=false, transpose=true) * w)
         + sum(triangular_solve(a, b, unit_diagonal=true) * w);
}
fn lin(a: f64[B, N, N], b: f64[B, N, K], w: f64[B, N, K]) -> f64 {
    return sum(solve(a, b) * w) + sum(inv(a) * inv(a));
}
fn dets(a: f64[B, N, N], w: f64[B]) -> f64 {
    let (s, l) = slogdet(a);
    return sum(det(a) * w) + sum(s * l);
}
fn det_only(a: f64[B, N, N], w: f64[B]) -> f64 { return sum(det(a) * w); }
fn eig(x: f64[B, N, N], w: f64[B, N, N]) -> f64 {
    let (e, v) = eigh(x + transpose(x, (0, 2, 1)));
    return sum(e * e * e) + sum(v * v * w);
}
fn sing(a: f64[B, 5, 3], w: f64[B, 5, 3], z: f64[B, 3, 3]) -> f64 {
    let (u, s, vh) = svd(a, full_matrices=false);
    return sum(s * s * s) + sum(u * u * w) + sum(vh * vh * z);
}
fn wide(a: f64[B, 3, 5], w: f64[B, 3, 3], z: f64[B, 3, 5]) -> f64 {
    let (u, s, vh) = svd(a, full_matrices=false);
    return sum(sqrt(s)) + sum(u * u * w) + sum(vh * vh * z);
}
fn house(a: f64[B, 5, 3], w: f64[B, 5, 3], z: f64[B, 3, 3]) -> f64 {
    let (q, r) = qr(a);
    return sum(q * w) + sum(r * r * z);
}
fn two_norms(a: f64[B, 5, 3]) -> f64 {
    return norm(a) + sum(norm(a, axis=1)) + sum(norm(a, ord=fro, axis=(1, 2)));
}
fn flat(a: f64[B, 3, 5], w: f64[B, 3, 3], z: f64[B, 3, 5]) -> f64 {
    let (q, r) = qr(a);
    return sum(q * w) + sum(r * r * z);
}
fn pseudo(a: f64[B, 5, 3], w: f64[B, 3, 5]) -> f64 { return sum(pinv(a) * w); }
fn norms(a: f64[B, 5, 3]) -> f64 {
    return norm(a) + sum(norm(a, ord=nuc, axis=(1, 2))) + sum(norm(a, ord=2, axis=(1, 2)))
         + sum(norm(a, ord=-1, axis=(1, 2))) + sum(norm(a, ord=inf, axis=(2, 1)))
         + sum(norm(a, ord=3, axis=1)) + sum(norm(a, ord=1, axis=-1));
}
"""

tl = torch.linalg


def _t(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(-1, -2)


TORCH: dict[str, Callable[..., torch.Tensor]] = {
    "chol": lambda x, w: (tl.cholesky(x @ _t(x) + 4 * tl.inv(tl.inv(x)) @ tl.inv(x)) * w).sum(),
    "tri": lambda a, b, w: (tl.solve_triangular(_t(a.triu()), b, upper=False) * w).sum()
    + (tl.solve_triangular(a, b, upper=False, unitriangular=True) * w).sum(),
    "lin": lambda a, b, w: (tl.solve(a, b) * w).sum() + (tl.inv(a) ** 2).sum(),
    "dets": lambda a, w: (tl.det(a) * w).sum() + (tl.slogdet(a)[0] * tl.slogdet(a)[1]).sum(),
    "eig": lambda x, w: (lambda e, v: (e ** 3).sum() + (v * v * w).sum())(*tl.eigh(x + _t(x))),
    "sing": lambda a, w, z: (lambda u, s, vh: (s ** 3).sum() + (u * u * w).sum()
                             + (vh * vh * z).sum())(*tl.svd(a, full_matrices=False)),
    "wide": lambda a, w, z: (lambda u, s, vh: s.sqrt().sum() + (u * u * w).sum()
                             + (vh * vh * z).sum())(*tl.svd(a, full_matrices=False)),
    "house": lambda a, w, z: (lambda q, r: (q * w).sum() + (r * r * z).sum())(*tl.qr(a)),
    "flat": lambda a, w, z: (lambda q, r: (q * w).sum() + (r * r * z).sum())(*tl.qr(a)),
    "pseudo": lambda a, w: (tl.pinv(a) * w).sum(),
    "norms": lambda a: tl.norm(a) + tl.matrix_norm(a, "nuc").sum() + tl.matrix_norm(a, 2).sum()
    + tl.matrix_norm(a, -1).sum() + tl.matrix_norm(a, float("inf"), dim=(2, 1)).sum()
    + tl.vector_norm(a, 3, dim=1).sum() + tl.vector_norm(a, 1, dim=-1).sum(),
}

B, N, K = 2, 4, 3


def _args(name: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    well = rng.standard_normal((B, N, N)) + 3 * np.eye(N)
    shapes = {
        "chol": [well, (B, N, N)], "tri": [well, (B, N, K), (B, N, K)],
        "lin": [well, (B, N, K), (B, N, K)], "dets": [(B, N, N), (B,)],
        "eig": [(B, N, N), (B, N, N)], "sing": [(B, 5, 3), (B, 5, 3), (B, 3, 3)],
        "wide": [(B, 3, 5), (B, 3, 3), (B, 3, 5)], "house": [(B, 5, 3), (B, 5, 3), (B, 3, 3)],
        "flat": [(B, 3, 5), (B, 3, 3), (B, 3, 5)],
        "pseudo": [(B, 5, 3), (B, 3, 5)], "norms": [(B, 5, 3)],
    }[name]
    return [s if isinstance(s, np.ndarray) else rng.standard_normal(s) for s in shapes]


def _torch_grad(name: str, args: list[np.ndarray]) -> np.ndarray:
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    (g,) = torch.autograd.grad(TORCH[name](*ts), ts[0])
    return g.numpy()


@pytest.fixture(scope="module", params=["interp", "native"])
def module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_value_and_gradient_match_torch(module: rv.Module, name: str) -> None:
    args = _args(name)
    want = TORCH[name](*map(torch.tensor, args)).item()
    np.testing.assert_allclose(module[name](*args), want, rtol=1e-10)
    np.testing.assert_allclose(module[name].grad(wrt=0)(*args), _torch_grad(name, args),
                               rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_hessian_and_jvp_match_torch(module: rv.Module, name: str) -> None:
    args = _args(name, seed=1)
    ts = [torch.tensor(a) for a in args]

    def loss(x: torch.Tensor) -> torch.Tensor:
        return TORCH[name](x, *ts[1:])

    want = torch.autograd.functional.hessian(loss, ts[0]).numpy()
    np.testing.assert_allclose(module[name].hessian(wrt=0)(*args), want, rtol=1e-7, atol=1e-9)
    tangent = np.random.default_rng(2).standard_normal(args[0].shape)
    _, want_dot = torch.autograd.functional.jvp(loss, ts[0], torch.tensor(tangent))
    got = module[name].jvp(wrt=0)(*args, tangent)
    np.testing.assert_allclose(got[1], want_dot.numpy(), rtol=1e-8, atol=1e-10)


def test_two_norms_have_gradient_zero_at_zero(module: rv.Module) -> None:
    a = np.zeros((B, 5, 3))
    a[1] = np.random.default_rng(7).standard_normal((5, 3))
    a[1, :, 2] = 0.0
    at = torch.tensor(a, requires_grad=True)
    loss = tl.norm(at) + tl.vector_norm(at, dim=1).sum() + tl.matrix_norm(at).sum()
    (want,) = torch.autograd.grad(loss, at)
    np.testing.assert_allclose(module.two_norms.grad(wrt=0)(a), want.numpy(), rtol=1e-12)


F32_SOURCE = """
fn loss(x: float[N, N], b: float[N]) -> float {
    let l = cholesky(x @ x.T + 4.0 * inv(inv(x)) @ inv(x));
    let (w, v) = eigh(x + x.T);
    return sum(triangular_solve(l, b) ** 2) + det(x) + sum(w * w) + norm(pinv(x), ord=nuc);
}
"""


@pytest.mark.parametrize("backend", ["interp", "native"])
def test_f32_gradient_matches_torch(backend: str) -> None:
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((4, 4)) + 3 * np.eye(4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    got = rv.compile(F32_SOURCE, backend=backend).loss.grad(wrt=0)(x, b)
    assert got.dtype == np.float32
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    eye = torch.eye(4, dtype=torch.float64)
    low = tl.cholesky(xt @ xt.T + 4 * eye)
    z = tl.solve_triangular(low, torch.tensor(b, dtype=torch.float64)[:, None], upper=False)
    loss = (z ** 2).sum() + tl.det(xt) + (tl.eigvalsh(xt + xt.T) ** 2).sum() \
        + tl.matrix_norm(tl.pinv(xt), "nuc")
    (want,) = torch.autograd.grad(loss, xt)
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-3, atol=2e-3)


def _cofactors(a: np.ndarray) -> np.ndarray:
    """The cofactor matrix of each matrix, from its minors."""
    out = np.empty_like(a)
    for index in np.ndindex(*a.shape):
        *batch, i, j = index
        minor = np.delete(np.delete(a[tuple(batch)], i, 0), j, 1)
        out[index] = (-1) ** (i + j) * np.linalg.det(minor)
    return out


def test_det_gradient_at_singular_matrices_is_the_adjugate(module: rv.Module) -> None:
    """Where det(A) = 0 exactly, the cofactor matrix (from the SVD, as torch computes it;
    torch 2.13 gives 0 for this zero-column matrix, whose cofactors are not all 0)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((B, N, N))
    a[0] = np.ones((N, N))                      # rank 1: the adjugate is 0
    a[0, 0, 0] = 2.0                            # rank 2
    a[1, :, 0] = 0.0                            # a zero column: rank N - 1
    w = rng.standard_normal(B)
    assert not np.linalg.det(a).any()
    got = module.det_only.grad(wrt=0)(a, w)
    np.testing.assert_allclose(got, _cofactors(a) * w[:, None, None], rtol=1e-9, atol=1e-12)
    assert np.abs(got[1]).max() > 0.1


@pytest.mark.parametrize("name", ["chol", "tri", "lin", "dets", "eig", "sing", "house", "flat",
                                  "pseudo", "norms"])
def test_finite_differences_to_second_order(name: str) -> None:
    module = rv.compile(SOURCE, backend="interp")
    args = [rv.tensor(a, requires_grad=True) for a in _args(name, seed=3)]
    assert rv.gradcheck(module[name], args)
    assert rv.gradgradcheck(module[name], args)
