"""W4: call overhead, the gradient of `sum(x*x)` for x: f64[16], in microseconds."""

from __future__ import annotations

from .core import (
    Thunk,
    Variant,
    Workload,
    jax_grad,
    random_generator,
    reverie_forward,
    reverie_module,
    torch_variants,
)

SOURCE = """
fn w4(x: f64[N]) -> f64 { return sum(x * x); }
"""


def make(tiny: bool = False) -> Workload:
    """W4 (already tiny: 16 elements, whatever `tiny` says)."""
    x = random_generator("W4").standard_normal(16)

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w4.grad("x")
        return lambda: grad(x)

    forward = reverie_forward(SOURCE, "w4", x)

    def numpy() -> Thunk:
        return lambda: 2 * x

    def jax() -> Thunk:
        return jax_grad(lambda a: (a * a).sum(), [x], [0])

    return Workload("W4", "call overhead, sum(x*x), x: f64[16]", "us", 1e-12, forward, [
        Variant("reverie", "reverie", reverie),
        Variant("numpy", "numpy (hand-written)", numpy),
        *torch_variants(lambda torch: lambda t: (t * t).sum(), [x], [0]),
        Variant("jax", "jax jit", jax),
    ])
