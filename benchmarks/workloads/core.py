"""What a benchmark workload is, and the helpers its peers share.

A `Workload` holds one benchmark problem: a Reverie forward pass and a list of `Variant`s,
each a way of computing the same gradient (Reverie, a hand-written NumPy gradient, torch
eager, torch.compile, JAX jit). A variant's `build()` does the setup (compiles a Reverie
module, wraps a function in torch.compile or jax.jit, converts the inputs) and returns a
zero-argument callable that computes the gradient and waits for it; the harness times that
callable and compares its result, through `as_numpy`, with the NumPy variant's.
torch and JAX are imported lazily, so a missing one only makes its variants fail to build.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import reverie as rv

PEERS = ("reverie", "numpy", "torch", "torch.compile", "jax")

Thunk = Callable[[], object]


@dataclass(frozen=True)
class Variant:
    """One way of computing a workload's gradient; `build()` returns the timed callable."""

    peer: str
    label: str
    build: Callable[[], Thunk]


@dataclass
class Workload:
    """A benchmark problem: Reverie's forward pass and the gradient variants to compare."""

    key: str
    title: str
    unit: str
    rtol: float
    forward: Callable[[], Thunk]
    variants: list[Variant] = field(default_factory=list)

    def of_peer(self, peer: str) -> list[Variant]:
        """The variants of one peer, in the order they were listed."""
        return [v for v in self.variants if v.peer == peer]


@functools.cache
def reverie_module(source: str) -> rv.Module:
    """The Reverie module compiled from `source` (parsed once per process)."""
    return rv.compile(source)


def reverie_forward(source: str, name: str, *args: object) -> Callable[[], Thunk]:
    """A workload's `forward`: function `name` of `source` called on `args` (the module is
    compiled when the benchmark first asks for the thunk)."""
    def forward() -> Thunk:
        kernel = reverie_module(source)[name]
        return lambda: kernel(*args)

    return forward


def import_torch() -> object:
    """The torch module (ImportError when it is not installed)."""
    import torch

    return torch


def import_jax() -> object:
    """The jax module, with 64-bit floats enabled so f64 workloads stay f64."""
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def torch_grad(loss: Callable[..., object], args: Sequence[np.ndarray], wrt: Sequence[int],
               compiled: bool = False) -> Thunk:
    """`torch.autograd.grad` of `loss(*args)` with respect to the arguments at `wrt`;
    `compiled` wraps the loss in `torch.compile` (AOT autograd compiles its backward)."""
    torch = import_torch()
    tensors = [torch.from_numpy(a) for a in args]
    params = [tensors[i].requires_grad_() for i in wrt]
    fn = torch.compile(loss) if compiled else loss
    return lambda: torch.autograd.grad(fn(*tensors), params)


def torch_variants(make_loss: Callable[[object], Callable[..., object]],
                   args: Sequence[np.ndarray], wrt: Sequence[int]) -> list[Variant]:
    """torch's variants of a scalar loss's gradient: eager, `torch.compile` of the loss then
    `torch.autograd.grad`, and `torch.compile(torch.func.grad(loss))`. `make_loss(torch)`
    returns the loss written with torch."""

    def build(mode: str) -> Thunk:
        torch = import_torch()
        loss = make_loss(torch)
        if mode != "func.grad":
            return torch_grad(loss, args, wrt, compiled=mode == "compile")
        tensors = [torch.from_numpy(a) for a in args]
        grad = torch.compile(torch.func.grad(loss, argnums=tuple(wrt)))
        return lambda: grad(*tensors)

    return [Variant("torch", "torch eager", lambda: build("eager")),
            Variant("torch.compile", "torch.compile + autograd.grad", lambda: build("compile")),
            Variant("torch.compile", "torch.compile(torch.func.grad)",
                    lambda: build("func.grad"))]


BF16_RTOL = 0.05  # bf16 keeps 8 significant bits: a gradient's rounding over a few ops


def bf16(array: np.ndarray) -> np.ndarray:
    """`array` rounded to bf16 (an ml_dtypes array, as JAX's bf16 arrays are in NumPy)."""
    import ml_dtypes

    return array.astype(ml_dtypes.bfloat16)


def torch_bf16_grad(loss: Callable[..., object], args: Sequence[np.ndarray],
                    wrt: Sequence[int]) -> Thunk:
    """torch eager's gradient of `loss(torch, *args)` with every argument a bf16 tensor."""
    torch = import_torch()
    tensors = [torch.from_numpy(a).to(torch.bfloat16) for a in args]
    params = [tensors[i].requires_grad_() for i in wrt]
    return lambda: torch.autograd.grad(loss(torch, *tensors), params)


def jax_call(fn: Callable[..., object], args: Sequence[np.ndarray]) -> Thunk:
    """`jax.jit(fn)` applied to `args` (already on the device), waiting for the result."""
    jax = import_jax()
    jitted = jax.jit(fn)
    arrays = [jax.device_put(a) for a in args]
    return lambda: jax.block_until_ready(jitted(*arrays))


def jax_grad(loss: Callable[..., object], args: Sequence[np.ndarray],
             wrt: Sequence[int]) -> Thunk:
    """`jax.jit(jax.grad(loss))` with respect to the arguments at `wrt`."""
    jax = import_jax()
    return jax_call(jax.grad(loss, argnums=tuple(wrt)), args)


def as_numpy(value: object) -> tuple[np.ndarray, ...]:
    """Any peer's result (arrays, tensors, nested tuples) as a flat tuple of NumPy arrays."""
    if isinstance(value, tuple | list):
        return tuple(array for item in value for array in as_numpy(item))
    if hasattr(value, "detach"):
        value = value.detach()
        value = value.float() if value.dtype.itemsize == 2 else value  # NumPy has no bf16
    if hasattr(value, "numpy"):
        value = value.numpy()
    return (np.asarray(value),)


def relative_error(result: object, reference: object) -> float:
    """Largest |result - reference| over the largest |reference|, across all arrays."""
    got, want = as_numpy(result), as_numpy(reference)
    if len(got) != len(want):
        raise ValueError(f"{len(got)} gradients where {len(want)} were expected")
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        if a.shape != b.shape:
            raise ValueError(f"gradient of shape {a.shape} where {b.shape} was expected")
        scale = max(float(np.max(np.abs(b), initial=0.0)), 1e-30)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        worst = max(worst, float(np.max(diff, initial=0.0)) / scale)
    return worst


def random_generator(key: str) -> np.random.Generator:
    """A generator seeded from the workload key, so every run sees the same inputs."""
    return np.random.default_rng(sum(map(ord, key)))
