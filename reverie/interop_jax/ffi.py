"""Running one kernel specialisation inside a JAX computation: an XLA FFI custom call.

`run(kernel, known, args)` returns the kernel's results as JAX values, with their shapes
and dtypes computed at trace time (`result_specs`). Where it can, the call is an XLA CPU
custom call to the kernel's native code: the handler `compiler/call_boundary/xla_ffi.py`
generates for the specialisation, compiled once and registered with
`jax.ffi.register_ffi_target` under a name of its own, so no Python runs inside `jit`.
Each argument is converted (`astype`) to the kernel's dtype as JAX holds it: without
`jax_enable_x64` f64 and i64 values live in f32 and i32 buffers, and the handler made for
that call widens and narrows them around the kernel. Kernels with no native call
boundary, or on another backend, run on the host through `jax.pure_callback` (the
kernel's Python call path, which converts as NumPy does).

    outputs = run(kernel, known, [x, w])   # a tuple, one JAX value per result
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from reverie.compiler.call_boundary.xla_ffi import handler_module, handler_symbol
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import evaluate_shape
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.kernel import Kernel
from reverie.runtime.native.call import (
    ArgumentTypeError,
    agreed_float,
    bind_arguments,
    check_arity,
    float_element,
)
from reverie.runtime.native.jit import JitModule, compile_module
from reverie.runtime.native.native_kernel import NativeKernel

KnownIntegers = tuple[tuple[int, int], ...]
HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)  # XLA_FFI_Handler


@dataclass(frozen=True)
class FfiTarget:
    """A registered custom-call target: its name, the `[entry, helper table]` attribute
    the handler reads, and what must stay alive while XLA may call it."""

    name: str
    addresses: np.ndarray
    keep_alive: tuple[object, ...]


_TARGETS: weakref.WeakKeyDictionary[Function, dict[tuple[bool, ...], FfiTarget | None]] = \
    weakref.WeakKeyDictionary()
_REGISTERED: list[FfiTarget] = []  # XLA keeps a target's name for the process: so do we
_NUMBERS = itertools.count()


def run(kernel: Kernel, known: KnownIntegers, args: Sequence[jax.Array]) -> tuple:
    """`kernel`'s results on `args` (one JAX value per parameter), as a tuple."""
    fn = kernel.ir_for(float_dtype(kernel, args))
    specs = result_specs(fn, known, args)
    dtypes = [*(p.type.dtype for p in fn.params), *(t.dtype for t in fn.result_types)]
    target = ffi_target(kernel, fn, tuple(not jax_holds(d) for d in dtypes))
    if target is None:
        return host_call(kernel, fn, specs, args)
    converted = [jnp.asarray(a).astype(jax_dtype(p.type.dtype))
                 for a, p in zip(args, fn.params, strict=True)]
    call = jax.ffi.ffi_call(target.name, specs, vmap_method="sequential")
    return tuple(call(*converted, reverie=target.addresses))


def ffi_target(kernel: Kernel, fn: Function, narrowed: tuple[bool, ...]) -> FfiTarget | None:
    """The custom-call target of specialisation `fn` for buffers held narrower than the
    kernel's dtypes where `narrowed` says (made and registered once), or None when `fn`
    has no native code with a call boundary."""
    targets = _TARGETS.setdefault(fn, {})
    if narrowed in targets:
        return targets[narrowed]
    executable = kernel.module.executable(fn)
    target = None
    if isinstance(executable, NativeKernel) and executable.program.boundary is not None:
        program = executable.program
        symbol = handler_symbol(program)
        module: JitModule = compile_module(
            handler_module(program, program.boundary, narrowed), name=symbol)
        handler = HANDLER(module.address(symbol))
        entry, helpers = executable.c_entry
        name = f"reverie.{next(_NUMBERS)}.{program.name}"
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform="cpu")
        addresses = np.array([entry, helpers.ctypes.data], dtype=np.int64)
        target = FfiTarget(name, addresses, (module, handler, executable, helpers))
        _REGISTERED.append(target)
    targets[narrowed] = target
    return target


def aval(value: object) -> jax.core.ShapedArray:
    """The abstract value of an array, tracer or abstract value."""
    return value if isinstance(value, jax.core.ShapedArray) else jax.typeof(value)


def jax_holds(dtype: str) -> bool:
    """Whether JAX arrays can have IR dtype `dtype` (64-bit ones need `jax_enable_x64`)."""
    return jax_dtype(dtype) == NUMPY_DTYPES[dtype]


def jax_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype JAX uses for IR dtype `dtype` (64-bit types narrowed without x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(NUMPY_DTYPES[dtype]))


def float_dtype(kernel: Kernel, args: Sequence[jax.Array]) -> str:
    """What `float` means for a call: from the float arrays given for `float` parameters,
    ignoring weakly typed ones (Python numbers); f64 when there are none."""
    check_arity(kernel.name, kernel.param_names, args)
    seen: dict[str, str] = {}
    for a, declared, name in zip(args, kernel.declared_dtypes, kernel.param_names, strict=True):
        element = float_element(np.dtype(a.dtype))
        if declared == "float" and element is not None and not aval(a).weak_type:
            seen.setdefault(element, name)  # bf16, f16, f32 or f64 (64-bit ones without x64)
    return agreed_float(seen, kernel.name)


def result_specs(fn: Function, known: KnownIntegers, args: Sequence[jax.Array]
                 ) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Shape and (JAX) dtype of each result of `fn` on `args`."""
    dims = bound_dims(fn, dict(known), args)
    return tuple(jax.ShapeDtypeStruct(evaluate_shape(t.shape, dims), jax_dtype(t.dtype))
                 for t in fn.result_types)


def host_call(kernel: Kernel, fn: Function, specs: Sequence[jax.ShapeDtypeStruct],
              args: Sequence[jax.Array]) -> tuple:
    """The kernel's results, computed on the host by `jax.pure_callback`."""
    def run_on_host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        results = kernel.execute(fn, arrays)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(np.asarray(r, dtype=s.dtype) for r, s in zip(results, specs, strict=True))

    return tuple(jax.pure_callback(run_on_host, tuple(specs), *args, vmap_method="sequential"))


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
