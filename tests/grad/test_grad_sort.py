"""Gradients of sort and topk through the O(n log n) argsort, at lengths up to 10⁵.

The permutation carries no derivative; the gathers send each cotangent to the element it
came from, so x̄[p[r]] = ȳ[r] (ties go to the element torch.sort(stable=True) picked).
Against torch on the interpreter and the native backend, in f32 and f64, with ties and
±0.0 in long batched rows; against central finite differences (`rv.gradcheck`, second
order too) on lines longer than the merge sort's insertion runs, without ties.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.types import NUMPY_DTYPES

SOURCE = """
fn sorted_loss(x: float[B, N], w: float[B, N]) -> float { return sum(sort(x) * w); }
fn down_loss(x: float[B, N], w: float[B, N]) -> float {
    return sum(sort(x, axis=0, descending=true) * w);
}
fn top_loss(x: float[B, N], w: float[B, 7]) -> float { return sum(tanh(topk(x, 7)) * w); }
"""

TORCH = {
    "sorted_loss": lambda x, w: (torch.sort(x, stable=True).values * w).sum(),
    "down_loss": lambda x, w: (torch.sort(x, dim=0, descending=True, stable=True).values
                               * w).sum(),
    "top_loss": lambda x, w: (torch.tanh(torch.sort(x, descending=True,
                                                    stable=True).values[:, :7]) * w).sum(),
}


def _weights(name: str, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    shape = (x.shape[0], 7) if name == "top_loss" else x.shape
    return rng.standard_normal(shape).astype(x.dtype)


def _torch_grad(name: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(TORCH[name](xt, torch.tensor(w)), xt)
    return g.detach().numpy()


@pytest.mark.parametrize("backend", ["interp", "native"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", sorted(TORCH))
def test_long_rows_match_torch(backend: str, dtype: str, name: str) -> None:
    module = rv.compile(SOURCE, backend=backend)
    rng = np.random.default_rng(0)
    n = 10**5 if name != "down_loss" else 1000
    x = np.round(rng.standard_normal((3, n)), 2).astype(NUMPY_DTYPES[dtype])   # ties
    x[:, rng.integers(0, n, 50)] = -0.0
    w = _weights(name, x, rng)
    got = module[name].grad(wrt="x")(x, w)
    want = _torch_grad(name, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_finite_differences_in_f64(name: str) -> None:
    module = rv.compile(SOURCE, backend="native")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 40))
    x = rv.tensor(x, requires_grad=True)
    w = rv.tensor(_weights(name, x.detach().numpy(), rng), requires_grad=True)
    assert rv.gradcheck(module[name], (x, w))
    assert rv.gradgradcheck(module[name], (x, w))
