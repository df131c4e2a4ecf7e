"""W5: the Hessian-vector product of the Rosenbrock function, x, v: f64[1_000_000]."""

from __future__ import annotations

import numpy as np

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
fn w5(x: f64[N]) -> f64 {
    let head = x[:N - 1];
    let tail = x[1:];
    return sum(100.0 * (tail - head ** 2) ** 2 + (1.0 - head) ** 2);
}
"""


def rosenbrock(x: object) -> object:
    """sum 100 (x[i+1] - x[i]²)² + (1 - x[i])² for torch or jax arrays."""
    head, tail = x[:-1], x[1:]
    return (100 * (tail - head**2) ** 2 + (1 - head) ** 2).sum()


def numpy_hvp(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """H v by hand: the Hessian is tridiagonal, diagonal 1200 x_i² - 400 x_{i+1} + 2 (+200
    from the previous term), off-diagonal -400 x_i."""
    head, tail = x[:-1], x[1:]
    hv = np.zeros_like(x)
    hv[:-1] = (1200 * head * head - 400 * tail + 2) * v[:-1] - 400 * head * v[1:]
    hv[1:] += 200 * v[1:] - 400 * head * v[:-1]
    return hv


def make(tiny: bool = False) -> Workload:
    """W5 at the reference size (1M) or a tiny one (1000) for tests."""
    n = 1000 if tiny else 1_000_000
    rng = random_generator("W5")
    x, v = rng.standard_normal(n), rng.standard_normal(n)

    def reverie() -> Thunk:
        hvp = reverie_module(SOURCE).w5.hvp("x")
        return lambda: hvp(x, v)

    forward = reverie_forward(SOURCE, "w5", x)

    def numpy() -> Thunk:
        return lambda: numpy_hvp(x, v)

    def torch_eager() -> Thunk:
        torch = import_torch()
        xt = torch.from_numpy(x).requires_grad_()
        vt = torch.from_numpy(v)

        def hvp() -> object:
            (grad,) = torch.autograd.grad(rosenbrock(xt), xt, create_graph=True)
            return torch.autograd.grad(grad, xt, vt)

        return hvp

    def torch_compiled() -> Thunk:
        torch = import_torch()
        xt, vt = torch.from_numpy(x), torch.from_numpy(v)
        func = torch.func
        hvp = torch.compile(lambda x, v: func.jvp(func.grad(rosenbrock), (x,), (v,))[1])
        return lambda: hvp(xt, vt)

    def jax() -> Thunk:
        jax = import_jax()
        return jax_call(lambda x, v: jax.jvp(jax.grad(rosenbrock), (x,), (v,))[1], [x, v])

    return Workload("W5", "Rosenbrock Hessian-vector product, x, v: f64[1M]", "ms", 1e-10,
                    forward, [
                        Variant("reverie", "reverie f.hvp", reverie),
                        Variant("numpy", "numpy (hand-written)", numpy),
                        Variant("torch", "torch eager (double backward)", torch_eager),
                        Variant("torch.compile", "torch.compile (torch.func jvp of grad)",
                                torch_compiled),
                        Variant("jax", "jax jit (jvp of grad)", jax),
                    ])
