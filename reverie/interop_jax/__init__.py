"""JAX interop (SPEC §3.5): compiled kernels as `jax.custom_vjp` functions.

Consumes a reverie `Kernel`; produces a function on JAX arrays that works under `jax.jit`,
`jax.grad` and `jax.vmap`. The compiled code runs on the host through `jax.pure_callback`,
whose result shapes and dtypes come from the kernel's IR with its symbolic dimensions
bound from the argument shapes at trace time. The backward rule calls the kernel's
compiled VJP through the same machinery, so it is itself differentiable and
`jax.grad(jax.grad(f))` runs the VJP of the VJP:

    f = rv.jax.function(m.mlp_loss)
    jax.jit(jax.grad(f, argnums=2))(x, y, w1, b1, w2, b2)

Results have the kernel's dtypes, made canonical for JAX: without `jax_enable_x64`, f64 and
i64 results come back as float32 and int32 (the kernel itself still computes in its own
dtypes). An i64 scalar parameter that sizes a result must be concrete (a Python int or a
static argument of `jax.jit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import evaluate_shape
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.kernel import Kernel
from reverie.runtime.call import ArgumentTypeError, bind_arguments, check_arity
from reverie.runtime.tape import DIFFERENTIABLE, vjp_plan
from reverie.transforms import GroupedKernel

__all__ = ["function"]

KnownIntegers = tuple[tuple[int, int], ...]
CACHE_KEY = "jax.custom_vjp"  # where a kernel keeps its JAX function (Kernel.autograd_cache)


def function(kernel: Kernel) -> Callable[..., Any]:
    """A JAX function running `kernel`, differentiable by `jax.grad` through its VJP."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"rv.jax.function expects a compiled kernel such as module.f, "
                        f"got {type(kernel).__name__}")
    flat_call = differentiable_call(kernel)
    grouped = kernel.grouped if isinstance(kernel, GroupedKernel) else None

    def call(*args: Any) -> Any:
        if grouped is not None and args:
            *head, group = args
            if not isinstance(group, tuple | list) or len(group) != grouped:
                raise TypeError(f"{kernel.name}() takes its last {grouped} arguments as one "
                                f"tuple, got {group!r}")
            args = (*head, *group)
        outputs = flat_call(known_integers(args), *(jnp.asarray(a) for a in args))
        if isinstance(kernel, GroupedKernel):
            return kernel.regroup(outputs)
        return outputs if len(outputs) > 1 else outputs[0]

    call.__name__ = call.__qualname__ = kernel.name
    call.__doc__ = f"reverie kernel {kernel.name}({', '.join(kernel.param_names)}) for JAX"
    return call


def differentiable_call(kernel: Kernel) -> Callable[..., tuple]:
    """`kernel` on JAX arrays, one per parameter, returning a tuple; its custom VJP runs
    the compiled VJP kernel (made once per kernel). The first argument holds the integer
    scalars known at trace time (see `known_integers`)."""
    cached = kernel.autograd_cache.get(CACHE_KEY)
    if cached is not None:
        return cached

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def call(known: KnownIntegers, *args: jax.Array) -> tuple:
        return host_call(kernel, known, args)

    def forward(known: KnownIntegers, *args: jax.Array) -> tuple[tuple, tuple]:
        return call(known, *args), args  # `call`, not `host_call`: an outer grad differentiates it

    def backward(known: KnownIntegers, args: tuple, cotangents: tuple) -> tuple:
        wrt = tuple(i for i, a in enumerate(args) if kernel.declared_dtypes[i] in DIFFERENTIABLE
                    and jnp.issubdtype(a.dtype, jnp.floating))
        grads: list[jax.Array | None] = [None] * len(args)
        if not wrt:
            return tuple(grads)
        dtype = float_dtype(kernel, args)
        plan = vjp_plan(kernel, wrt, dtype)
        cotangents = [c if t.is_float else jnp.zeros(c.shape, jax_dtype(t.dtype))
                      for c, t in zip(cotangents, kernel.ir_for(dtype).result_types, strict=True)]
        results = differentiable_call(plan.kernel)(known, *args, *cotangents)
        for i, g, zero in zip(wrt, results, plan.zero, strict=True):
            grads[i] = jnp.zeros_like(args[i]) if zero else g.astype(args[i].dtype)
        return tuple(grads)

    call.defvjp(forward, backward)
    kernel.autograd_cache[CACHE_KEY] = call
    return call


def known_integers(args: Sequence[Any]) -> KnownIntegers:
    """(position, value) of each integer scalar argument whose value is known while tracing
    (a Python int, a static argument of `jax.jit`, a concrete array): an i64 scalar may size
    a result, and inside the custom VJP every argument is traced."""
    known = []
    for index, arg in enumerate(args):
        if isinstance(arg, bool):
            continue
        if isinstance(arg, int):
            known.append((index, arg))
        elif getattr(arg, "shape", None) == () and jnp.issubdtype(arg.dtype, jnp.integer):
            try:
                known.append((index, int(arg)))
            except jax.errors.JAXTypeError:
                continue
    return tuple(known)


def jax_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype JAX uses for IR dtype `dtype` (64-bit types narrowed without x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(NUMPY_DTYPES[dtype]))


def float_dtype(kernel: Kernel, args: Sequence[jax.Array]) -> str:
    """What `float` means for a call: from the float arrays given for `float` parameters,
    ignoring weakly typed ones (Python numbers); f64 when there are none."""
    check_arity(kernel.name, kernel.param_names, args)
    seen = {("f32" if a.dtype.itemsize <= 4 else "f64"): name
            for a, declared, name in zip(args, kernel.declared_dtypes, kernel.param_names,
                                         strict=True)
            if declared == "float" and jnp.issubdtype(a.dtype, jnp.floating)
            and not jax.typeof(a).weak_type}
    if len(seen) > 1:
        raise ArgumentTypeError(
            f"{kernel.name}(): 'float' parameters got float32 ('{seen['f32']}') and float64 "
            f"('{seen['f64']}') arrays; convert one so they agree")
    return next(iter(seen), "f64")


def host_call(kernel: Kernel, known: KnownIntegers, args: Sequence[jax.Array]) -> tuple:
    """The kernel's results, computed on the host by `jax.pure_callback`."""
    fn = kernel.ir_for(float_dtype(kernel, args))
    dims = bound_dims(fn, dict(known), args)
    specs = tuple(jax.ShapeDtypeStruct(evaluate_shape(t.shape, dims), jax_dtype(t.dtype))
                  for t in fn.result_types)

    def run_on_host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        results = kernel.execute(fn, arrays)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(np.asarray(r, dtype=s.dtype) for r, s in zip(results, specs, strict=True))

    return jax.pure_callback(run_on_host, specs, *args, vmap_method="sequential")


def bound_dims(fn: Function, known: dict[int, int], args: Sequence[jax.Array]
               ) -> dict[str, int]:
    """Every dimension of `fn` bound from the arguments' shapes (checked at trace time).

    Unallocated stand-ins of the declared dtypes take the place of the arrays. An i64 scalar
    that binds a dimension by its value is taken from `known`; when it is traced, it may
    only size loops, and 0 stands in for it.
    """
    value_params = {index: symbol for symbol, index in fn.value_dims}
    result_symbols = {s for t in fn.result_types for d in t.shape for s in d.symbols()}
    stand_ins: list[object] = []
    for index, (param, arg) in enumerate(zip(fn.params, args, strict=True)):
        declared = NUMPY_DTYPES[param.type.dtype]
        name = fn.param_names[index]
        if not np.can_cast(np.dtype(arg.dtype), declared, casting="same_kind"):
            raise ArgumentTypeError(
                f"{fn.name}(): argument '{name}' has dtype {arg.dtype}, which cannot be "
                f"converted to {declared} (NumPy same_kind casting)")
        if index not in value_params:
            stand_ins.append(np.empty(arg.shape, declared))
        elif index in known:
            stand_ins.append(known[index])
        elif value_params[index] in result_symbols:
            raise ValueError(f"{fn.name}(): argument '{name}' sizes a result, so its value "
                             "must be known under jax.jit: mark it static (static_argnums)")
        else:
            stand_ins.append(0)
    return bind_arguments(fn, stand_ins).dims
