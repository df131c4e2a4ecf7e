"""W7: the 1-D explicit heat equation, u: f64[100_000], 200 steps of
`u = u + 0.1 * (roll(u, 1) - 2u + roll(u, -1))`, loss `sum(u_T**2)`, grad wrt u_0."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .core import (
    Thunk,
    Variant,
    Workload,
    import_jax,
    jax_grad,
    random_generator,
    reverie_forward,
    reverie_module,
    torch_variants,
)

ALPHA = 0.1

SOURCE = """
fn w7(u0: f64[N], steps: i64) -> f64 {
    var u = u0;
    for t in 0..steps {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1));
    }
    return sum(u ** 2);
}
"""

LITERAL_SOURCE = """
fn w7(u0: f64[N]) -> f64 {
    var u = u0;
    for t in 0..STEPS {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1));
    }
    return sum(u ** 2);
}
"""


def step(xp: object, u: object) -> object:
    """One explicit Euler step in any namespace with `roll` (numpy, torch, jax.numpy)."""
    return u + ALPHA * (xp.roll(u, 1) - 2 * u + xp.roll(u, -1))


def numpy_grad(u0: np.ndarray, steps: int) -> np.ndarray:
    """d sum(u_T²) / d u_0 by hand: the step is linear and symmetric (roll(·, 1) and
    roll(·, -1) are each other's transpose), so the adjoint runs the same step backwards."""
    u = u0
    for _ in range(steps):
        u = step(np, u)
    adjoint = 2 * u
    for _ in range(steps):
        adjoint = step(np, adjoint)
    return adjoint


def make(tiny: bool = False) -> Workload:
    """W7 at the reference size (100k points, 200 steps) or a tiny one (64, 20) for tests."""
    n, steps = (64, 20) if tiny else (100_000, 200)
    u0 = random_generator("W7").standard_normal(n)
    literal_source = LITERAL_SOURCE.replace("STEPS", str(steps))

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w7.grad("u0")
        return lambda: grad(u0, steps)

    def reverie_literal() -> Thunk:
        grad = reverie_module(literal_source).w7.grad("u0")
        return lambda: grad(u0)

    forward = reverie_forward(SOURCE, "w7", u0, steps)

    def numpy() -> Thunk:
        return lambda: numpy_grad(u0, steps)

    def torch_loss(torch: object) -> Callable[[object], object]:
        def loss(u: object) -> object:
            for _ in range(steps):
                u = step(torch, u)
            return (u**2).sum()

        return loss

    def jax() -> Thunk:
        jax = import_jax()

        def loss(u: object) -> object:
            u = jax.lax.fori_loop(0, steps, lambda _, u: step(jax.numpy, u), u)
            return (u**2).sum()

        return jax_grad(loss, [u0], [0])

    return Workload("W7", "heat equation, u: f64[100k], 200 steps", "ms", 1e-10, forward, [
        Variant("reverie", "reverie (steps: i64)", reverie),
        Variant("reverie", "reverie (literal 200)", reverie_literal),
        Variant("numpy", "numpy (hand-written)", numpy),
        *torch_variants(torch_loss, [u0], [0]),
        Variant("jax", "jax jit (fori_loop)", jax),
    ])
