"""Chapter 10: the gradient conventions of the orderings and of indexed updates.

Exercise 1: sort(x) = x[p] with p = argsort(x), so sum(sort(x) * w) = Σ_r x[p[r]] w[r] and
its derivative with respect to x[p[r]] is w[r]: x̄[p] = w, a scatter through p. With ties
the stable order fixes p, and torch.sort(stable=True) gives the same p, so the same x̄.
argsort(argsort(x)) is the rank: p sends position r to element p[r], so its inverse q
(q[p[r]] = r) sends each element to its position in the sorted order; and the inverse of
a permutation is its argsort (sorting p puts the r with p[r] = 0 first, ...).

Exercise 2: with `h[t] = x * total; h[t, 0] = largest;` the second update overwrites the
first one's entry h[t, 0], so x₀ · total no longer reaches the result: with ȳ = 1 and
x = (1, 2, 3), x̄ⱼ = Σ_{i ≥ 1} xᵢ + total·[j ≥ 1] + [j is the largest] = (5, 11, 12). The
loop `total = total + x[t]; h[t] = total;` stores the running sum of the rows: its value
is cumsum(x, axis=0), and its gradient the reverse cumulative sum of the seed.
"""

from __future__ import annotations

import numpy as np
import torch

import reverie as rv

ORDERINGS = """
fn weighted(x: f64[N], w: f64[N]) -> f64 { return sum(sort(x) * w); }
fn ranks(x: f64[N]) -> i64[N] { return argsort(argsort(x)); }
"""

OVERWRITTEN = """
fn rows(x: f64[N], t: i64) -> f64[2, N] {
    let zero[i in 0..2, j in 0..N] = 0.0;
    var h = zero;
    h[t] = x * sum(x);
    h[t, 0] = max(x);
    return h;
}
"""

RUNNING = """
fn running(x: f64[T, D]) -> f64[T, D] {
    let zero[t in 0..T, d in 0..D] = 0.0;
    var h = zero;
    var total = x[0] * 0.0;
    for t in 0..T {
        total = total + x[t];
        h[t] = total;
    }
    return h;
}
"""


def sort_gradient_is_a_scatter(x: np.ndarray, w: np.ndarray) -> bool:
    """Whether the gradient of sum(sort(x) * w) is w scattered through argsort(x) and
    torch's, and argsort(argsort(x)) is each element's rank in the stable order."""
    module = rv.compile(ORDERINGS)
    gradient = module.weighted.grad("x")(x, w)
    scattered = np.empty_like(w)
    scattered[np.argsort(x, kind="stable")] = w
    xt = torch.tensor(x, requires_grad=True)
    (torch_gradient,) = torch.autograd.grad(
        (torch.sort(xt, stable=True).values * torch.tensor(w)).sum(), xt)
    order = list(np.argsort(x, kind="stable"))
    ranks = np.array([order.index(i) for i in range(len(x))])
    return bool(np.array_equal(gradient, scattered) and
                np.allclose(gradient, torch_gradient.numpy()) and
                np.array_equal(module.ranks(x), ranks))


def overwritten_entry(x: np.ndarray) -> np.ndarray:
    """The vjp (seed of ones) of the rows whose entry h[0, 0] is written twice; checked
    against central differences."""
    rows = rv.compile(OVERWRITTEN).rows
    gradient = rows.vjp("x")(x, 0, np.ones((2, len(x))))
    step = 1e-6
    for j in range(len(x)):
        e = np.zeros_like(x)
        e[j] = step
        central = (rows(x + e, 0).sum() - rows(x - e, 0).sum()) / (2 * step)
        assert np.isclose(gradient[j], central, atol=1e-6)
    return gradient


def running_rows(x: np.ndarray, seed: np.ndarray) -> bool:
    """Whether the loop of indexed updates is cumsum(x, axis=0), and its vjp the reverse
    cumulative sum of the seed."""
    running = rv.compile(RUNNING).running
    reverse_cumsum = np.flip(np.cumsum(np.flip(seed, 0), 0), 0)
    return bool(np.allclose(running(x), np.cumsum(x, axis=0)) and
                np.allclose(running.vjp("x")(x, seed), reverse_cumsum))
