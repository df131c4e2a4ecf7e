"""Second and third derivatives of `a ** b` where torch's pow masks its first derivatives
(issue 30): ∂/∂a is 0 where b = 0, ∂/∂b is 0 where a = 0 and b ≥ 0.

The masked branches used to compute 0 · 0⁻¹ and 0ᵇ · log 0, discarded by the mask at first
order, but differentiated again their adjoints multiply a 0 cotangent by inf: the second
derivative of `x ** y` at x = 0, y = 0 by reverse-over-reverse was NaN where the Hessian
(forward-over-reverse) gives 0, the derivative of the constant x⁰ = 1. Every mode is
compared with the same mode in torch (double and triple backward of torch.autograd;
torch.func.hessian for forward-over-reverse) on a grid of bases 0, > 0, < 0 and exponents
0, 1, 2, 0.5, 3, −1: equal wherever torch's value is finite.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")

BASES, EXPONENTS = (0.0, 1.5, -1.5), (0.0, 1.0, 2.0, 0.5, 3.0, -1.0)
GRID = np.array(list(itertools.product(BASES, EXPONENTS))).T  # rows: a, b
SOURCE = "fn f(a: f64[N], b: f64[N]) -> f64 { return sum(a ** b); }"


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def assert_matches_where_finite(ours: np.ndarray, theirs: np.ndarray) -> None:
    """`ours` equals `theirs` at every entry where `theirs` is finite."""
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(np.asarray(ours)[finite], theirs[finite], rtol=1e-12, atol=0)


def torch_derivatives(path: tuple[int, ...]) -> np.ndarray:
    """Per grid point, ∂/∂v_k of the derivative of aᵇ along `path` (0: a, 1: b), for k =
    a, b (rows), by repeated torch.autograd.grad with create_graph."""
    a, b = (torch.tensor(v, requires_grad=True) for v in GRID)
    out = (a ** b).sum()
    for k in path:
        (out,) = torch.autograd.grad(out, (a, b)[k], create_graph=True)
        out = out.sum()
    return np.stack([g.detach().numpy() for g in torch.autograd.grad(out, (a, b))])


def torch_func_hessian() -> np.ndarray:
    """Per grid point, the 2×2 Hessian of aᵇ in (a, b) by torch.func (forward over
    reverse), as [[∂aa, ∂ab], [∂ba, ∂bb]] rows of grid-length arrays."""
    points = torch.tensor(GRID.T)
    hessians = torch.func.vmap(torch.func.hessian(lambda v: v[0] ** v[1]))(points)
    return hessians.permute(1, 2, 0).numpy()


@pytest.mark.parametrize("first", [0, 1])
def test_reverse_over_reverse_matches_torch(m: rv.Module, first: int) -> None:
    """Equal to torch's double backward where that is finite, and to torch.func's
    Hessian where that is finite (at x = 0 torch's double backward is NaN for every
    exponent), but for ∂²/∂a∂b at a = 0, 0 < b < 1: b·aᵇ⁻¹·log a + aᵇ⁻¹ is −inf there,
    which torch.func's forward mode masks to 0 and reverse mode, like torch's, gives as
    a 0 cotangent times ∂aᵇ/∂a = inf: NaN."""
    ones = np.ones(GRID.shape[1])
    ours = np.stack(m.f.grad(("a", "b")[first]).vjp(("a", "b"))(*GRID, ones))
    assert_matches_where_finite(ours, torch_derivatives((first,)))
    theirs = torch_func_hessian()[first]
    a, b = GRID
    theirs[1 - first, (a == 0) & (0 < b) & (b < 1)] = np.nan  # −inf: not compared
    assert_matches_where_finite(ours, theirs)


@pytest.mark.parametrize("path", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_third_order_matches_torch(m: rv.Module, path: tuple[int, int]) -> None:
    ones = np.ones(GRID.shape[1])
    names = [("a", "b")[k] for k in path]
    kernel = m.f.grad(names[0]).vjp(names[1]).vjp(("a", "b"))
    ours = np.stack(kernel(*GRID, ones, ones))
    assert_matches_where_finite(ours, torch_derivatives(path))


def test_hessian_and_forward_over_reverse_match_torch_func(m: rv.Module) -> None:
    n = GRID.shape[1]
    blocks = m.f.hessian(("a", "b"))(*GRID)
    ours = np.array([[np.diagonal(block) for block in row] for row in blocks])
    theirs = torch_func_hessian()
    assert_matches_where_finite(ours, theirs)
    for k, tangent in enumerate([(np.ones(n), np.zeros(n)), (np.zeros(n), np.ones(n))]):
        product = np.stack(m.f.hvp(("a", "b"))(*GRID, tangent))  # H's column k
        assert_matches_where_finite(product, theirs[:, k])


def test_every_order_is_zero_at_zero_to_the_zero(m: rv.Module) -> None:
    """x⁰ = 1 for every x, 0 included: all its derivatives in x are 0, in every mode (the
    masks make the mixed ones 0 too, as torch.func.hessian has them)."""
    a, b, one = np.zeros(1), np.zeros(1), np.ones(1)
    modes = {
        "reverse over reverse": np.stack(m.f.grad("a").vjp(("a", "b"))(a, b, one)),
        "reverse over reverse, b": np.stack(m.f.grad("b").vjp(("a", "b"))(a, b, one)),
        "third order": np.stack(m.f.grad("a").vjp("a").vjp(("a", "b"))(a, b, one, one)),
        "forward over reverse": np.stack(m.f.hvp(("a", "b"))(a, b, (one, one))),
        "hessian": np.array(m.f.hessian(("a", "b"))(a, b)),
    }
    for mode, values in modes.items():
        assert np.all(values == 0), f"{mode}: {values.ravel()}"
