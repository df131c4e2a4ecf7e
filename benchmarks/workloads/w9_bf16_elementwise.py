"""W9: W1's elementwise loss over 10M values stored in bf16 (issue 37): Reverie's bf16
kernel beside its f32 one, torch eager and JAX in bf16; the reference is W1's hand-written
f32 gradient (bf16 keeps 8 bits: the tolerance is bf16's)."""

from __future__ import annotations

from . import w1_elementwise as w1
from .core import (
    BF16_RTOL,
    Thunk,
    Variant,
    Workload,
    bf16,
    import_jax,
    jax_grad,
    reverie_forward,
    reverie_module,
    torch_bf16_grad,
)

SOURCE = w1.SOURCE.replace("f32", "bf16")


def make(tiny: bool = False) -> Workload:
    """W9 at W1's reference size (10M) or a tiny one for tests."""
    x32 = w1.inputs(tiny)
    x = bf16(x32)

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w1.grad("x")
        return lambda: grad(x)

    def reverie_f32() -> Thunk:
        grad = reverie_module(w1.SOURCE).w1.grad("x")
        return lambda: grad(x32)

    def jax() -> Thunk:
        jnp = import_jax().numpy
        return jax_grad(lambda a: w1.loss(jnp, a), [x], [0])

    return Workload("W9", "W1 in bf16, x: bf16[10M]", "ms", BF16_RTOL,
                    reverie_forward(SOURCE, "w1", x), [
                        Variant("reverie", "reverie", reverie),
                        Variant("reverie", "reverie f32", reverie_f32),
                        Variant("numpy", "numpy f32 (hand-written)",
                                lambda: lambda: w1.numpy_grad(x32)),
                        Variant("torch", "torch eager bf16",
                                lambda: torch_bf16_grad(lambda t, a: w1.loss(t, a), [x32],
                                                        [0])),
                        Variant("jax", "jax jit bf16", jax),
                    ])
