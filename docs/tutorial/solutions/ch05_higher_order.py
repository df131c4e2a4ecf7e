"""Chapter 5: Hessian-vector products and per-row gradients.

Exercise 1: `hvp` is forward mode over reverse mode: one JVP of the gradient, never the
whole Hessian; it must equal `hessian(x) @ v`.

Exercise 2: the rows of `rosenbrock_batch` are independent, so the VJP of the batch with a
cotangent of ones (the gradient of Σ_p f(row_p)) has, in row p, the gradient of f at row p:
all P gradients in one compiled call.
"""

from __future__ import annotations

import numpy as np

import reverie as rv

ROSENBROCK = "examples/rosenbrock.rv"


def hvp_matches_hessian(n: int = 5, seed: int = 0) -> bool:
    """Whether H v from `hvp` equals `hessian @ v` at a random point of R^n."""
    f = rv.load(ROSENBROCK).rosenbrock
    rng = np.random.default_rng(seed)
    x, v = rng.normal(size=n), rng.normal(size=n)
    return bool(np.allclose(f.hvp("x")(x, v), f.hessian("x")(x) @ v))


def row_gradients(points: np.ndarray) -> np.ndarray:
    """The gradient of the Rosenbrock function at each row of `points` (P, N)."""
    batch = rv.load(ROSENBROCK).rosenbrock_batch
    return batch.vjp("xs")(points, np.ones(len(points)))


def central_differences(points: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """The same gradients by central finite differences of `rosenbrock`, row by row."""
    f = rv.load(ROSENBROCK).rosenbrock
    grads = np.zeros_like(points)
    for p, row in enumerate(points):
        for i in range(len(row)):
            up, down = row.copy(), row.copy()
            up[i] += step
            down[i] -= step
            grads[p, i] = (f(up) - f(down)) / (2 * step)
    return grads
