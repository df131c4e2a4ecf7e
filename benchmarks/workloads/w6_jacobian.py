"""W6: the full Jacobian of `tanh(A @ x)`, A: f32[256, 256], through 256 batched VJPs."""

from __future__ import annotations

import numpy as np

import reverie as rv

from .core import (
    Thunk,
    Variant,
    Workload,
    import_jax,
    import_torch,
    jax_call,
    random_generator,
    reverie_forward,
    reverie_module,
)

SOURCE = """
fn w6(A: f32[M, N], x: f32[N]) -> f32[M] { return tanh(A @ x); }
"""


def numpy_jacobian(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d tanh(A x) / dx by hand: row i of A scaled by 1 - tanh²((A x)_i)."""
    t = np.tanh(A @ x)
    return (1 - t * t)[:, None] * A


def make(tiny: bool = False) -> Workload:
    """W6 at the reference size (256) or a tiny one (16) for tests."""
    n = 16 if tiny else 256
    rng = random_generator("W6")
    A = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    eye = np.eye(n, dtype=np.float32)

    def reverie() -> Thunk:
        jacobian = reverie_module(SOURCE).w6.jacobian("x")
        return lambda: jacobian(A, x)

    def reverie_batched() -> Thunk:
        kernel = reverie_module(SOURCE).w6

        def jacobian() -> object:
            xt = rv.tensor(x, requires_grad=True)
            return rv.grad(kernel(A, xt), xt, grad_outputs=eye, is_grads_batched=True)

        return jacobian

    forward = reverie_forward(SOURCE, "w6", A, x)

    def numpy() -> Thunk:
        return lambda: numpy_jacobian(A, x)

    def torch_eager(batched: bool) -> Thunk:
        torch = import_torch()
        At, xt = torch.from_numpy(A), torch.from_numpy(x).requires_grad_()
        eye_t = torch.from_numpy(eye)
        if batched:
            return lambda: torch.autograd.grad(torch.tanh(At @ xt), xt, eye_t,
                                               is_grads_batched=True)

        def rows() -> object:
            y = torch.tanh(At @ xt)
            return torch.stack([torch.autograd.grad(y, xt, e, retain_graph=True)[0]
                                for e in eye_t])

        return rows

    def torch_compiled() -> Thunk:
        torch = import_torch()
        At, xt = torch.from_numpy(A), torch.from_numpy(x)
        jacobian = torch.compile(torch.func.jacrev(lambda A, x: torch.tanh(A @ x), argnums=1))
        return lambda: jacobian(At, xt)

    def jax() -> Thunk:
        jax = import_jax()
        return jax_call(jax.jacrev(lambda A, x: jax.numpy.tanh(A @ x), argnums=1), [A, x])

    return Workload("W6", "Jacobian of tanh(A @ x), A: f32[256, 256]", "ms", 1e-5, forward, [
        Variant("reverie", "reverie f.jacobian", reverie),
        Variant("reverie", "reverie rv.grad(is_grads_batched)", reverie_batched),
        Variant("numpy", "numpy (hand-written)", numpy),
        Variant("torch", "torch eager (is_grads_batched)", lambda: torch_eager(True)),
        Variant("torch", "torch eager (loop of 256 autograd.grad)", lambda: torch_eager(False)),
        Variant("torch.compile", "torch.compile (torch.func.jacrev)", torch_compiled),
        Variant("jax", "jax jit (jacrev)", jax),
    ])
