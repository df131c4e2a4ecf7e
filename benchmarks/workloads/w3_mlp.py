"""W3: a two-layer tanh MLP with a mean squared error, x: f32[1024, 256], hidden 512,
10 outputs; grads of W1, b1, W2, b2."""

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
fn w3(x: f32[B, D], W1: f32[D, H], b1: f32[H], W2: f32[H, O], b2: f32[O],
      y: f32[B, O]) -> f32 {
    let hidden = tanh(x @ W1 + b1);
    let err = hidden @ W2 + b2 - y;
    return mean(err ** 2);
}
"""

PARAMETERS = ("W1", "b1", "W2", "b2")


def loss(xp: object, x: object, W1: object, b1: object, W2: object, b2: object,
         y: object) -> object:
    """The loss in any array namespace with tanh (torch, jax.numpy)."""
    err = xp.tanh(x @ W1 + b1) @ W2 + b2 - y
    return (err**2).mean()


def numpy_grad(x: np.ndarray, W1: np.ndarray, b1: np.ndarray, W2: np.ndarray,
               b2: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """(dW1, db1, dW2, db2) by hand: backpropagation through the two layers."""
    hidden = np.tanh(x @ W1 + b1)
    d_out = (hidden @ W2 + b2 - y) * np.float32(2 / y.size)
    d_pre = (d_out @ W2.T) * (1 - hidden * hidden)
    return x.T @ d_pre, d_pre.sum(axis=0), hidden.T @ d_out, d_out.sum(axis=0)


def inputs(tiny: bool = False) -> list[np.ndarray]:
    """x, W1, b1, W2, b2, y (f32) at the reference size or a tiny one (B=32, D=16, H=24,
    O=5) for tests."""
    batch, d, h, o = (32, 16, 24, 5) if tiny else (1024, 256, 512, 10)
    rng = random_generator("W3")
    x = rng.standard_normal((batch, d)).astype(np.float32)
    W1 = (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(h)).astype(np.float32)
    W2 = (rng.standard_normal((h, o)) / np.sqrt(h)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(o)).astype(np.float32)
    y = rng.standard_normal((batch, o)).astype(np.float32)
    return [x, W1, b1, W2, b2, y]


def make(tiny: bool = False) -> Workload:
    """W3 at the reference size or a tiny one for tests."""
    args = inputs(tiny)

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w3.grad(PARAMETERS)
        return lambda: grad(*args)

    forward = reverie_forward(SOURCE, "w3", *args)

    def numpy() -> Thunk:
        return lambda: numpy_grad(*args)

    def jax() -> Thunk:
        jnp = import_jax().numpy
        return jax_grad(lambda *a: loss(jnp, *a), args, [1, 2, 3, 4])

    return Workload("W3", "two-layer MLP, x: f32[1024, 256], hidden 512", "ms", 1e-4,
                    forward, [
                        Variant("reverie", "reverie", reverie),
                        Variant("numpy", "numpy (hand-written)", numpy),
                        *torch_variants(lambda torch: lambda *a: loss(torch, *a), args,
                                        [1, 2, 3, 4]),
                        Variant("jax", "jax jit", jax),
                    ])
