"""Reverie kernels as JAX primitives, with differentiation and batching rules of their own.

Two primitives carry every call, each parameterised by the (flat) kernel it runs and the
integer arguments known at trace time (`known`, see `interop_jax.known_integers`):

- `reverie_call(*args)`: the kernel's results. Lowered to the kernel's XLA custom call
  (`ffi.run`).
- `reverie_jvp(*args, *dots; wrt)`: the tangents of the kernel's float results,
  J(args)·dots = Σ_i ∂f/∂args[i] · dots[i] over the parameter positions `wrt`, computed by
  the kernel's compiled forward-mode transform (`kernel.jvp(wrt)`). It is linear in `dots`.

Rules, each built from Reverie's compiled kernels:

- JVP of `reverie_call`: d f(x) = J(x)·dx — the call again plus a `reverie_jvp` of the
  differentiable (float) arguments with nonzero tangents. Integer results get zero tangents.
- transpose of `reverie_jvp` in `dots`: (J(x)·)ᵀ c = cᵀ·J(x), a `reverie_call` of the
  kernel's VJP (`kernel.vjp(wrt)`), so `jax.grad` runs the compiled reverse mode.
- JVP of `reverie_jvp`: the JVP of `reverie_call` of the JVP kernel (d(J(x)·t) =
  (∂J(x)/∂x · dx)·t + J(x)·dt), so every order reduces to calls of compiled transforms.
- batching: `reverie_call` over a batch runs the kernel batched by Reverie
  (`batch_function` over the batched parameters, moved to axis 0; a batched loop count
  included), one call for the whole batch; `reverie_jvp` batches as the `reverie_call`
  of the JVP kernel it is made of.

Because the JVP is a primitive linear in its tangents, `jax.jvp`, `jacfwd`, `jacrev`,
`hessian`, `grad` (of any order) and `vmap` all compose with `jit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from reverie.interop_jax import ffi
from reverie.interop_jax.ffi import KnownIntegers, aval
from reverie.kernel import Kernel
from reverie.kernel_transforms import batch_function, derived_kernel
from reverie.runtime.tensors.tape import DIFFERENTIABLE

call_p = Primitive("reverie_call")
call_p.multiple_results = True
jvp_p = Primitive("reverie_jvp")
jvp_p.multiple_results = True


def call(kernel: Kernel, known: KnownIntegers, args: Sequence[jax.Array]) -> list:
    """`kernel`'s results on `args` (one per parameter), through `reverie_call`."""
    return call_p.bind(*args, kernel=kernel, known=known)


def result_avals(kernel: Kernel, known: KnownIntegers, args: Sequence[object]
                 ) -> list[jax.core.ShapedArray]:
    """Shape and dtype of each of `kernel`'s results for arguments like `args`."""
    avals = [aval(a) for a in args]
    fn = kernel.ir_for(ffi.float_dtype(kernel, avals))
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in ffi.result_specs(fn, known, avals)]


def float_results(kernel: Kernel, args: Sequence[object]) -> list[int]:
    """Positions of `kernel`'s float results (the differentiable ones)."""
    fn = kernel.ir_for(ffi.float_dtype(kernel, [aval(a) for a in args]))
    return [j for j, t in enumerate(fn.result_types) if t.is_float]


# ---------------------------------------------------------------- reverie_call


def _call_impl(*args: jax.Array, kernel: Kernel, known: KnownIntegers) -> tuple:
    return ffi.run(kernel, known, args)


def _call_jvp(primals: Sequence[jax.Array], tangents: Sequence[object], *, kernel: Kernel,
              known: KnownIntegers) -> tuple[list, list]:
    outputs = call(kernel, known, primals)
    wrt = tuple(i for i, (x, t) in enumerate(zip(primals, tangents, strict=True))
                if type(t) is not ad.Zero and kernel.declared_dtypes[i] in DIFFERENTIABLE
                and jnp.issubdtype(aval(x).dtype, jnp.floating))
    zeros = [ad.Zero(aval(o).to_tangent_aval()) for o in outputs]
    if not wrt:
        return outputs, zeros
    dots = iter(jvp_p.bind(*primals, *(tangents[i] for i in wrt), kernel=kernel, known=known,
                           wrt=wrt))
    floats = set(float_results(kernel, primals))
    return outputs, [next(dots) if j in floats else zero for j, zero in enumerate(zeros)]


def _call_batch(args: Sequence[jax.Array], dims: Sequence[int | None], *, kernel: Kernel,
                known: KnownIntegers) -> tuple[list, list[int]]:
    """Over a batch: the kernel batched by Reverie over the batched parameters (their batch
    axes moved to the front); every result gets the batch axis in front."""
    moved = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
    outputs = call(batched_kernel(kernel, tuple(i for i, d in enumerate(dims) if d is not None)),
                   known, moved)
    return list(outputs), [0] * len(outputs)


def batched_kernel(kernel: Kernel, batched: tuple[int, ...]) -> Kernel:
    """`kernel` batched by Reverie (`batch_function`) over a new leading axis of the
    parameters at `batched`, made once per kernel and positions."""
    return kernel.cached_transform(("jax.batched", batched), lambda: derived_kernel(
        kernel, "batched", lambda dtype: batch_function(kernel.ir_for(dtype), batched),
        False))


call_p.def_impl(_call_impl)
call_p.def_abstract_eval(lambda *args, kernel, known: result_avals(kernel, known, args))
mlir.register_lowering(call_p, mlir.lower_fun(_call_impl, multiple_results=True))
ad.primitive_jvps[call_p] = _call_jvp
batching.primitive_batchers[call_p] = _call_batch


# ---------------------------------------------------------------- reverie_jvp


def _jvp_impl(*operands: jax.Array, kernel: Kernel, known: KnownIntegers,
              wrt: tuple[int, ...]) -> list:
    """The float results' tangents, from the kernel's compiled JVP (values, then tangents)."""
    args = operands[:len(kernel.param_names)]
    results = call(kernel.jvp(list(wrt)), known, operands)
    tangents = results[len(results) // 2:]
    return [tangents[j] for j in float_results(kernel, args)]


def _jvp_abstract(*operands: object, kernel: Kernel, known: KnownIntegers,
                  wrt: tuple[int, ...]) -> list:
    args = operands[:len(kernel.param_names)]
    avals = result_avals(kernel, known, args)
    return [avals[j] for j in float_results(kernel, args)]


def _jvp_transpose(cotangents: Sequence[object], *operands: object, kernel: Kernel,
                   known: KnownIntegers, wrt: tuple[int, ...]) -> list:
    """cᵀ·J(x): the kernel's VJP at the primal arguments, zero cotangents for integer
    results."""
    count = len(kernel.param_names)
    args, dots = operands[:count], operands[count:]
    if any(ad.is_undefined_primal(a) for a in args):
        raise TypeError(f"{kernel.name}: reverie_jvp is linear in its tangents only")
    given = iter(cotangents)
    floats = set(float_results(kernel, args))
    full = [ad.instantiate_zeros(next(given)) if j in floats else jnp.zeros(a.shape, a.dtype)
            for j, a in enumerate(result_avals(kernel, known, args))]
    grads = call(kernel.vjp(list(wrt)), known, [*args, *full])
    return [None] * count + [g.astype(d.aval.dtype) for g, d in zip(grads, dots, strict=True)]


def _jvp_jvp(primals: Sequence[jax.Array], tangents: Sequence[object], **params: object
             ) -> tuple[list, list]:
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    outputs, dots = jax.jvp(partial(_jvp_impl, **params), list(primals), tangents)
    return list(outputs), list(dots)


def _jvp_batch(args: Sequence[jax.Array], dims: Sequence[int | None], **params: object
               ) -> tuple[list, list[int]]:
    outputs = jax.vmap(partial(_jvp_impl, **params), in_axes=list(dims))(*args)
    return list(outputs), [0] * len(outputs)


jvp_p.def_impl(_jvp_impl)
jvp_p.def_abstract_eval(_jvp_abstract)
mlir.register_lowering(jvp_p, mlir.lower_fun(_jvp_impl, multiple_results=True))
ad.primitive_jvps[jvp_p] = _jvp_jvp
ad.primitive_transposes[jvp_p] = _jvp_transpose
batching.primitive_batchers[jvp_p] = _jvp_batch
