"""W2: softmax cross-entropy of a linear classifier, X: f32[4096, 512], W: f32[512, 10],
b: f32[10], integer labels; grads wrt W and b."""

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

SOURCE = """
fn w2(X: f32[N, D], W: f32[D, C], b: f32[C], labels: i64[N]) -> f32 {
    let lp = log_softmax(X @ W + b, axis=1);
    let picked[n] = lp[n, labels[n]];
    return -mean(picked);
}
"""


def numpy_grad(X: np.ndarray, W: np.ndarray, b: np.ndarray,
               labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dW, db) by hand: (softmax - onehot) / N, then X^T times it and its column sums."""
    logits = X @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(labels)), labels] -= 1
    p /= len(labels)
    return X.T @ p, p.sum(axis=0)


def arguments(tiny: bool = False) -> list[np.ndarray]:
    """[X, W, b, labels] at the reference size or a tiny one (N=64, D=16, C=5), the same
    values on every call."""
    n, d, c = (64, 16, 5) if tiny else (4096, 512, 10)
    rng = random_generator("W2")
    X = rng.standard_normal((n, d)).astype(np.float32)
    W = (rng.standard_normal((d, c)) / np.sqrt(d)).astype(np.float32)
    b = (0.1 * rng.standard_normal(c)).astype(np.float32)
    return [X, W, b, rng.integers(0, c, n)]


def make(tiny: bool = False) -> Workload:
    """W2 at the reference size or a tiny one (N=64, D=16, C=5) for tests."""
    args = arguments(tiny)

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w2.grad(("W", "b"))
        return lambda: grad(*args)

    forward = reverie_forward(SOURCE, "w2", *args)

    def numpy() -> Thunk:
        return lambda: numpy_grad(*args)

    def torch_loss(torch: object) -> Callable[..., object]:
        return lambda X, W, b, labels: torch.nn.functional.cross_entropy(X @ W + b, labels)

    def jax() -> Thunk:
        jax = import_jax()

        def loss(X: object, W: object, b: object, labels: object) -> object:
            lp = jax.nn.log_softmax(X @ W + b, axis=1)
            return -jax.numpy.take_along_axis(lp, labels[:, None], axis=1).mean()

        return jax_grad(loss, args, [1, 2])

    return Workload("W2", "softmax cross-entropy, X: f32[4096, 512], 10 classes", "ms", 1e-4,
                    forward, [
                        Variant("reverie", "reverie", reverie),
                        Variant("numpy", "numpy (hand-written)", numpy),
                        *torch_variants(torch_loss, args, [1, 2]),
                        Variant("jax", "jax jit", jax),
                    ])
