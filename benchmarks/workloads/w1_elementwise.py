"""W1: an elementwise loss over 10M f32, `sum(tanh(x) * sin(x) + exp(-x*x))`, grad wrt x."""

from __future__ import annotations

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

SOURCE = """
fn w1(x: f32[N]) -> f32 { return sum(tanh(x) * sin(x) + exp(-x * x)); }
"""


def loss(xp: object, x: object) -> object:
    """The loss in any array namespace with tanh/sin/exp (torch, jax.numpy)."""
    return (xp.tanh(x) * xp.sin(x) + xp.exp(-x * x)).sum()


def numpy_grad(x: np.ndarray) -> np.ndarray:
    """d/dx of the loss, by hand: (1 - tanh²) sin + tanh cos - 2x exp(-x²)."""
    t = np.tanh(x)
    return (1 - t * t) * np.sin(x) + t * np.cos(x) - 2 * x * np.exp(-x * x)


def inputs(tiny: bool = False) -> np.ndarray:
    """x (f32) at the reference size (10M) or a tiny one for tests."""
    return random_generator("W1").standard_normal(1000 if tiny else 10_000_000).astype(
        np.float32)


def make(tiny: bool = False) -> Workload:
    """W1 at the reference size (10M) or a tiny one for tests."""
    x = inputs(tiny)

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w1.grad("x")
        return lambda: grad(x)

    forward = reverie_forward(SOURCE, "w1", x)

    def numpy() -> Thunk:
        return lambda: numpy_grad(x)

    def jax() -> Thunk:
        jnp = import_jax().numpy
        return jax_grad(lambda a: loss(jnp, a), [x], [0])

    return Workload("W1", "elementwise loss, x: f32[10M]", "ms", 1e-5, forward, [
        Variant("reverie", "reverie", reverie),
        Variant("numpy", "numpy (hand-written)", numpy),
        *torch_variants(lambda torch: lambda t: loss(torch, t), [x], [0]),
        Variant("jax", "jax jit", jax),
    ])
