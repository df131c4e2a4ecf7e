"""W10: W3's MLP gradient in bf16 (issue 37): Reverie's bf16 kernel beside its f32 one,
torch's autocast step (f32 parameters, the region under `torch.autocast("cpu",
torch.bfloat16)`), torch eager and JAX with bf16 arrays; the reference is W3's hand-written
f32 gradient (the tolerance is bf16's)."""

from __future__ import annotations

from . import w3_mlp as w3
from .core import (
    BF16_RTOL,
    Thunk,
    Variant,
    Workload,
    bf16,
    import_jax,
    import_torch,
    jax_grad,
    reverie_forward,
    reverie_module,
    torch_bf16_grad,
)

SOURCE = w3.SOURCE.replace("f32", "bf16")
WRT = [1, 2, 3, 4]


def make(tiny: bool = False) -> Workload:
    """W10 at W3's reference size or its tiny one."""
    args32 = w3.inputs(tiny)
    args = [bf16(a) for a in args32]

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w3.grad(w3.PARAMETERS)
        return lambda: grad(*args)

    def reverie_f32() -> Thunk:
        grad = reverie_module(w3.SOURCE).w3.grad(w3.PARAMETERS)
        return lambda: grad(*args32)

    def autocast() -> Thunk:
        torch = import_torch()
        tensors = [torch.from_numpy(a) for a in args32]
        params = [tensors[i].requires_grad_() for i in WRT]

        def step() -> object:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = w3.loss(torch, *tensors)
            return torch.autograd.grad(loss, params)
        return step

    def jax() -> Thunk:
        jnp = import_jax().numpy
        return jax_grad(lambda *a: w3.loss(jnp, *a), args, WRT)

    return Workload("W10", "W3 in bf16, x: bf16[1024, 256], hidden 512", "ms", BF16_RTOL,
                    reverie_forward(SOURCE, "w3", *args), [
                        Variant("reverie", "reverie", reverie),
                        Variant("reverie", "reverie f32", reverie_f32),
                        Variant("numpy", "numpy f32 (hand-written)",
                                lambda: lambda: w3.numpy_grad(*args32)),
                        Variant("torch", "torch autocast bf16", autocast),
                        Variant("torch", "torch eager bf16",
                                lambda: torch_bf16_grad(lambda t, *a: w3.loss(t, *a), args32,
                                                        WRT)),
                        Variant("jax", "jax jit bf16", jax),
                    ])
