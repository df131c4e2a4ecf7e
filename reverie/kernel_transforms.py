"""Every transform of a kernel (docs/api.md §3): `grad`, `value_and_grad`, `vjp` (reverse mode),
`jvp`, `hvp` (forward mode), `jacobian`, `hessian`, and `batched_vjp` for
`rv.grad(..., is_grads_batched=True)`; and the kernels they return.

Consumes a `Kernel` (its typed IR per dtype); produces new Kernels whose IR is built by the
ladder's transform stages (`reverse`, `forward`, `batch`: `compiler/pipeline.py`'s
`transform`), a Jacobian by its `jacobian` stage, and the results a kernel keeps and the
two halves of a VJP by its `select` stage, so every result is one compiled call and can be
transformed again. This module only climbs the ladder, through the gate of a warm start
(`runtime/native/compiler_gate.py`). The calling conventions follow torch.func:

    f.grad("w")(x, w)                        # dL/dw (a tuple for several wrt)
    f.value_and_grad("w")(x, w)              # (value, dL/dw)
    f.vjp("x")(x, w, cotangent)              # cotangent · d out / d x
    f.jvp("x")(x, w, x_dot)                  # (value, tangent_out)
    f.jvp(("x", "w"))(x, w, (x_dot, w_dot))  # tangents as a tuple in parameter order
    f.jacobian("x")(x, w)                    # shape out.shape + x.shape
    f.hessian("x")(x, w)                     # shape x.shape + x.shape (scalar f)
    f.hvp("x")(x, w, v)                      # H v, forward-over-reverse

The functions here take the kernel as their first argument; `Kernel` exposes them as
methods (`f.jvp(wrt)` is `jvp(f, wrt)`; the kernel's module hands this module over).
Building a transform's IR imports the ladder, which a process finding that IR in the disk
cache never does. Each result is kept in
the kernel's transform cache (`Kernel.cached_transform`), so asking again returns the same
compiled kernel. A reverse-mode transform's `checkpoint=True` keeps O(sqrt(T)) loop states
and recomputes (docs/language.md §11); its default is the module's `checkpoint` setting. `rebuild`
turns a cache key back into its transform (how a pickled derived kernel is unpickled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from reverie.compiler.ir.dtypes import NUMPY_DTYPES
from reverie.kernel import Kernel, Wrt
from reverie.runtime.native import compiler_gate as compiler
from reverie.runtime.native.call import ArgumentTypeError, bind_arguments, float_dtype_of

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Function

Results = Sequence[int] | None  # the positions of the results a derived function keeps


def reverse(fn: Function, wrt: Sequence[int], checkpoint: bool = False, vjp: bool = False,
            keep: Results = None, name: str | None = None) -> Function:
    """The ladder's reverse stage on `fn`: its gradient for one scalar float result (unless
    `vjp`), else its VJP, with respect to the parameters at `wrt`; then its select stage
    when `keep` names the results kept (the function named `name`)."""
    return compiler.transform(fn, compiler.Request(
        transform="reverse", wrt=wrt, checkpoint=checkpoint, vjp=vjp, results=keep,
        name=name))


def forward(fn: Function, wrt: Sequence[int], keep: Results = None,
            name: str | None = None) -> Function:
    """The ladder's forward stage on `fn`: its results and their tangents (JVP); then its
    select stage when `keep` names the results kept (the function named `name`)."""
    return compiler.transform(fn, compiler.Request(transform="forward", wrt=wrt,
                                                   results=keep, name=name))


def batch_function(fn: Function, batched: Sequence[int]) -> Function:
    """The ladder's batch stage on `fn`: over a leading batch axis of the parameters at
    `batched` (every result batched), named `<fn>_batched`."""
    return compiler.transform(fn, compiler.Request(transform="batch", wrt=batched))


def derived_kernel(kernel: Kernel, suffix: str, build: Callable[[str], Function],
                   single: bool, extra_params: Sequence[str] = (),
                   extra_dtypes: Sequence[str] = ()) -> Kernel:
    """A kernel `<name>_<suffix>` with IR `build(dtype)`, taking `kernel`'s parameters
    followed by `extra_params`."""
    return Kernel(kernel.module, f"{kernel.name}_{suffix}",
                  kernel.param_names + list(extra_params),
                  kernel.declared_dtypes + list(extra_dtypes), build, single)


class GroupedKernel(Kernel):
    """A kernel whose trailing `grouped` parameters are passed as one tuple (None: passed
    one by one) and whose flat results are handed back through `regroup`.

    Its IR and parameters are the flat ones, so transforming it again works as usual.
    """

    def __init__(self, flat: Kernel, grouped: int | None,
                 regroup: Callable[[tuple], object]) -> None:
        super().__init__(flat.module, flat.name, flat.param_names, flat.declared_dtypes,
                         flat._build, single=False)
        self.grouped = grouped
        self.regroup = regroup

    def __call__(self, *args: object, **keywords: object) -> object:
        """Run on the arguments, the grouped ones as one tuple after the others (or each
        by its own name, as a keyword)."""
        if self.grouped is not None and len(args) > len(self.param_names) - self.grouped:
            *head, group = args
            if not isinstance(group, tuple | list) or len(group) != self.grouped:
                raise ArgumentTypeError(f"{self.name}() takes its last {self.grouped} "
                                        f"arguments as one tuple, got {group!r}")
            args = (*head, *group)
        return self.regroup(super().__call__(*args, **keywords))


def _result_count(kernel: Kernel) -> int:
    return len(kernel.ir_for("f32").result_types)


def _one_or_tuple(values: Sequence[object], single: bool) -> object:
    return values[0] if single else tuple(values)


def _require_scalar(kernel: Kernel, what: str) -> None:
    """ValueError unless `kernel` returns one float scalar or size-1 tensor (what `what`
    needs)."""
    if not kernel.returns_float_scalar():
        shown = ", ".join(map(str, kernel.ir_for("f32").result_types))
        raise ValueError(f"{kernel.name}.{what}() needs a function returning one float "
                         f"scalar, but it returns {shown}; use {kernel.name}.vjp() for "
                         "non-scalar outputs")


def _checkpoint(kernel: Kernel, checkpoint: bool | None) -> bool:
    """The `checkpoint` option of a reverse-mode transform (None: the module's)."""
    return kernel.module.checkpoint if checkpoint is None else bool(checkpoint)


# ---------------------------------------------------------------- reverse mode


def grad(kernel: Kernel, wrt: Wrt = None, checkpoint: bool | None = None) -> Kernel:
    """The gradient of a scalar function: one array for a single `wrt`, else a tuple."""
    _require_scalar(kernel, "grad")
    chosen, single = kernel.wrt_indices(wrt)
    checkpoint = _checkpoint(kernel, checkpoint)
    return kernel.cached_transform(("grad", tuple(chosen), single, checkpoint),
                                   lambda: _grad(kernel, chosen, single, checkpoint))


def _grad(kernel: Kernel, chosen: list[int], single: bool, checkpoint: bool) -> Kernel:
    """The gradient kernel of `kernel` for resolved `wrt` positions `chosen`."""
    def build(dtype: str) -> Function:
        return reverse(kernel.ir_for(dtype), chosen, checkpoint,
                       keep=range(1, 1 + len(chosen)), name=f"{kernel.name}_grad")

    return derived_kernel(kernel, "grad", build, single)


def value_and_grad(kernel: Kernel, wrt: Wrt = None,
                   checkpoint: bool | None = None) -> Kernel:
    """`(value, grads)` of a scalar function in one compiled call."""
    _require_scalar(kernel, "value_and_grad")
    chosen, single = kernel.wrt_indices(wrt)
    checkpoint = _checkpoint(kernel, checkpoint)
    return kernel.cached_transform(("value_and_grad", tuple(chosen), single, checkpoint),
                                   lambda: _value_and_grad(kernel, chosen, single, checkpoint))


def _value_and_grad(kernel: Kernel, chosen: list[int], single: bool,
                    checkpoint: bool) -> Kernel:
    """The value-and-gradient kernel of `kernel` for resolved `wrt` positions `chosen`."""
    flat = derived_kernel(kernel, "value_and_grad", lambda dtype: reverse(
        kernel.ir_for(dtype), chosen, checkpoint), False)
    return GroupedKernel(flat, None,
                         lambda results: (results[0], results[1] if single else results[1:]))


def vjp(kernel: Kernel, wrt: Wrt = None, checkpoint: bool | None = None) -> Kernel:
    """A kernel `(*args, cotangent)` returning the vector-Jacobian product(s); for a tuple
    return, the cotangent is a tuple with one entry per result."""
    chosen, single = kernel.wrt_indices(wrt)
    checkpoint = _checkpoint(kernel, checkpoint)
    return kernel.cached_transform(("vjp", tuple(chosen), single, checkpoint),
                                   lambda: _vjp(kernel, chosen, single, checkpoint))


def _vjp(kernel: Kernel, chosen: list[int], single: bool, checkpoint: bool) -> Kernel:
    """The VJP kernel of `kernel` for resolved `wrt` positions `chosen`."""
    result_types = kernel.ir_for("f32").result_types
    outputs = len(result_types)

    def build(dtype: str) -> Function:
        return reverse(kernel.ir_for(dtype), chosen, checkpoint, vjp=True,
                       keep=range(outputs, outputs + len(chosen)), name=f"{kernel.name}_vjp")

    flat = derived_kernel(kernel, "vjp", build, False, _cotangent_names(outputs),
                          _cotangent_dtypes(kernel))
    return GroupedKernel(flat, outputs if outputs > 1 else None,
                         lambda results: results[0] if single else results)


def vjp_forward(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """The forward half of `kernel`'s VJP for `wrt`: `(*args)` returning the results, then
    the residuals its backward half reads (`compiler/transforms/residuals.py`)."""
    chosen, _ = kernel.wrt_indices(wrt)
    return kernel.cached_transform(("vjp_forward", tuple(chosen), False),
                                   lambda: _vjp_half(kernel, chosen, "forward"))


def vjp_backward(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """The backward half of `kernel`'s VJP for `wrt`: `(*args, *residuals, *cotangents)`
    returning one adjoint per `wrt` position, without recomputing the forward."""
    chosen, _ = kernel.wrt_indices(wrt)
    return kernel.cached_transform(("vjp_backward", tuple(chosen), False),
                                   lambda: _vjp_half(kernel, chosen, "backward"))


def _vjp_half(kernel: Kernel, chosen: list[int], half: str) -> Kernel:
    """One half of the split VJP, built per dtype by the ladder's select stage from the one
    VJP both halves share (which it splits once)."""
    outputs = _result_count(kernel)

    def build(dtype: str) -> Function:
        key = ("vjp", tuple(chosen), dtype)  # the reverse pass runs once for both halves
        vjp = kernel.autograd_cache.get(key)
        if vjp is None:
            vjp = kernel.autograd_cache[key] = reverse(kernel.ir_for(dtype), chosen, vjp=True)
        request = compiler.Request(wrt=chosen, vjp_half=half)
        return compiler.climb(vjp, request, start="select", stop="select")["select"]

    if half == "forward":
        return derived_kernel(kernel, "vjp_forward", build, False)
    residuals = _residual_dtypes(kernel, vjp_forward(kernel, chosen), outputs)
    names = [f"residual{i}" for i in range(len(residuals))] + _cotangent_names(outputs)
    return derived_kernel(kernel, "vjp_backward", build, False, names,
                          residuals + _cotangent_dtypes(kernel))


def _residual_dtypes(kernel: Kernel, forward: Kernel, outputs: int) -> list[str]:
    """The declared dtype of each residual: `float` where it follows the specialisation."""
    f32 = forward.ir_for("f32").result_types[outputs:]
    if "float" not in kernel.declared_dtypes:
        return [t.dtype for t in f32]
    f64 = forward.ir_for("f64").result_types[outputs:]
    return ["float" if a.dtype != b.dtype else a.dtype for a, b in zip(f32, f64, strict=True)]


def _cotangent_names(outputs: int) -> list[str]:
    """The VJP's cotangent parameters: `cotangent`, or one per result."""
    return ["cotangent"] if outputs == 1 else [f"cotangent{i}" for i in range(outputs)]


def _cotangent_dtypes(kernel: Kernel) -> list[str]:
    """A cotangent follows the `float` specialisation only if the kernel has `float`
    parameters; else its type is fixed (the cotangent of `f32(x)` for an f64 `x` is f32)."""
    generic = "float" in kernel.declared_dtypes
    return ["float" if t.is_float and generic else t.dtype
            for t in kernel.ir_for("f32").result_types]


def batched_vjp(kernel: Kernel, wrt: Sequence[int], args: Sequence[object],
                batched_cotangents: Sequence[object | None], recorded: bool = False
                ) -> tuple[object, ...]:
    """All vector-Jacobian products of `kernel` at `args` in ONE batched compiled call.

    `wrt`: parameter positions (float parameters). `batched_cotangents`: one entry per
    result of `kernel`, each an array of shape `(B, *result.shape)` with the same B, or
    None for a result that gets no cotangent (zeros, not batched). Returns one array of
    shape `(B, *param.shape)` per `wrt` position, in order. The batched IR is
    the ladder's batch stage over the cotangents of its reverse stage (a VJP), compiled once
    per (wrt, which cotangents are given, dtype). Shape errors (disagreeing batch sizes,
    a missing batch axis) raise `ShapeMismatchError` / `ArgumentTypeError`. `recorded`
    (`create_graph=True`): `args` and cotangents may be Tensors, and the call is recorded
    on the tape like any kernel call, so the products differentiate again.
    """
    wrt = tuple(wrt)
    given = tuple(c is not None for c in batched_cotangents)
    if not any(given):
        raise ValueError("batched_vjp needs at least one batched cotangent")
    dtype = float_dtype_of(kernel.declared_dtypes, args, kernel.name, kernel.param_names)
    primal = kernel.ir_for(dtype)
    if len(given) != len(primal.result_types):
        raise ValueError(f"{kernel.name} has {len(primal.result_types)} result(s); got "
                         f"{len(given)} cotangent(s)")
    batched = kernel.cached_transform(
        ("batched_vjp", wrt, given, dtype),
        lambda: _batched_vjp_kernel(kernel, wrt, given, [t.dtype for t in primal.result_types]))
    dims = bind_arguments(primal, [getattr(a, "_data", a) for a in args]).dims
    cotangents = [c if c is not None else
                  np.zeros(compiler.evaluate_shape(t.shape, dims), dtype=NUMPY_DTYPES[t.dtype])
                  for c, t in zip(batched_cotangents, primal.result_types, strict=True)]
    results = batched(*args, *cotangents) if recorded else batched.run(*args, *cotangents)
    return results if isinstance(results, tuple) else (results,)


def _batched_vjp_kernel(kernel: Kernel, wrt: tuple[int, ...], given: tuple[bool, ...],
                        result_dtypes: list[str]) -> Kernel:
    """The kernel of all VJPs of `kernel` for parameters `wrt`, batched over the cotangents
    that are `given` (cotangent dtypes `result_dtypes`)."""
    count, outputs = len(kernel.param_names), len(given)

    def build(float_dtype: str) -> Function:
        grads = reverse(kernel.ir_for(float_dtype), list(wrt), vjp=True,
                        keep=range(outputs, outputs + len(wrt)), name=f"{kernel.name}_vjp")
        positions = [count + j for j, g in enumerate(given) if g]
        return batch_function(grads, positions)

    return derived_kernel(kernel, "vjp_batched", build, False,
                          [f"cotangent{j}" for j in range(outputs)], result_dtypes)


# ---------------------------------------------------------------- forward mode


def jvp(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """A kernel `(*args, tangent)` giving `(value, tangent_out)` (forward mode).

    For several `wrt` parameters the tangent is a tuple in parameter order; for a tuple
    return, value and tangent_out are tuples. Integer and bool results get zero tangents.
    """
    chosen, single = kernel.wrt_indices(wrt)
    return kernel.cached_transform(("jvp", tuple(chosen), single),
                                   lambda: _jvp(kernel, chosen, single))


def _jvp(kernel: Kernel, chosen: list[int], single: bool) -> Kernel:
    """The JVP kernel of `kernel` for resolved `wrt` positions `chosen`."""
    outputs = _result_count(kernel)
    flat = derived_kernel(
        kernel, "jvp", lambda dtype: forward(kernel.ir_for(dtype), chosen), False,
        [f"{kernel.param_names[i]}_dot" for i in chosen],
        [kernel.declared_dtypes[i] for i in chosen])

    def regroup(results: tuple) -> object:
        values, tangents = results[:outputs], results[outputs:]
        return _one_or_tuple(values, outputs == 1), _one_or_tuple(tangents, outputs == 1)

    return GroupedKernel(flat, None if single else len(chosen), regroup)


def hvp(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """A kernel `(*args, v)` giving the Hessian-vector product H·v of a scalar function
    (forward-over-reverse: the JVP of the gradient); tuples in parameter order for
    several `wrt`."""
    _require_scalar(kernel, "hvp")
    chosen, single = kernel.wrt_indices(wrt)
    return kernel.cached_transform(("hvp", tuple(chosen), single),
                                   lambda: _hvp(kernel, chosen, single))


def _hvp(kernel: Kernel, chosen: list[int], single: bool) -> Kernel:
    """The Hessian-vector-product kernel of `kernel` for resolved `wrt` positions `chosen`."""
    count = len(chosen)

    def build(dtype: str) -> Function:
        grads = reverse(kernel.ir_for(dtype), chosen, keep=range(1, 1 + count),
                        name=f"{kernel.name}_grad")
        return forward(grads, chosen, keep=range(count, 2 * count), name=f"{kernel.name}_hvp")

    names = ["v"] if single else [f"v_{kernel.param_names[i]}" for i in chosen]
    flat = derived_kernel(kernel, "hvp", build, False, names,
                          [kernel.declared_dtypes[i] for i in chosen])
    return GroupedKernel(flat, None if single else count,
                         lambda results: _one_or_tuple(results, single))


# ---------------------------------------------------------------- jacobian and hessian


class JacobianKernel(Kernel):
    """The Jacobian of `source`'s results with respect to its parameters at `chosen`.

    Each call runs one batched JVP or one batched VJP (the ladder's jacobian stage), whichever has
    the smaller batch for the argument sizes of that call: the number of input elements
    (forward) or of output elements (reverse). Its IR, used when it is transformed again,
    is the forward-mode one. Results are blocks of shape `out.shape + param.shape`: one
    array (`single`), a tuple over `chosen` for several, nested in a tuple over outputs for
    a tuple return (like torch.func.jacrev).
    """

    def __init__(self, source: Kernel, chosen: list[int], single: bool, name: str) -> None:
        def build(mode: str) -> Callable[[str], Function]:
            request = compiler.Request(transform="jacobian", wrt=chosen, mode=mode, name=name)
            return lambda dtype: compiler.transform(source.ir_for(dtype), request)

        super().__init__(source.module, name, source.param_names, source.declared_dtypes,
                         build("forward"), single=False)
        self._build_reverse = build("reverse")
        self._reverse_ir: dict[str, Function] = {}
        self.source, self.chosen, self.single = source, chosen, single
        self.outputs = _result_count(source)

    def reverse_ir_for(self, float_dtype: str) -> Function:
        """The reverse-mode (batched VJP) Jacobian IR for `float_dtype`, built once."""
        float_dtype = self.dtype_key(float_dtype)
        if float_dtype not in self._reverse_ir:
            self._reverse_ir[float_dtype] = self._build_reverse(float_dtype)
        return self._reverse_ir[float_dtype]

    def run(self, *args: object) -> object:
        """Evaluate the Jacobian, forward or reverse by the sizes of this call."""
        dtype = self.float_dtype_for(args)
        source = self.source.ir_for(dtype)
        dims = bind_arguments(source, args).dims
        inputs = sum(compiler.num_elements(source.params[i].type.shape).evaluate(dims)
                     for i in self.chosen)
        outputs = sum(compiler.num_elements(t.shape).evaluate(dims)
                      for t in source.result_types)
        fn = self.reverse_ir_for(dtype) if outputs < inputs else self.ir_for(dtype)
        return self.execute(fn, args)

    def __call__(self, *args: object, **keywords: object) -> object:
        blocks = list(super().__call__(*args, **keywords))
        per_output = [_one_or_tuple(blocks[j * len(self.chosen):(j + 1) * len(self.chosen)],
                                    self.single) for j in range(self.outputs)]
        return _one_or_tuple(per_output, self.outputs == 1)


def jacobian(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """A kernel giving the Jacobian blocks `out.shape + param.shape` (see JacobianKernel)."""
    chosen, single = kernel.wrt_indices(wrt)
    return kernel.cached_transform(
        ("jacobian", tuple(chosen), single),
        lambda: JacobianKernel(kernel, chosen, single, f"{kernel.name}_jacobian"))


def hessian(kernel: Kernel, wrt: Wrt = None) -> Kernel:
    """A kernel giving the Hessian of a scalar function, shape `param.shape + param.shape`:
    the Jacobian of its (cached) gradient kernel, nested tuples over `wrt` pairs for
    several."""
    _require_scalar(kernel, "hessian")
    chosen, single = kernel.wrt_indices(wrt)
    return kernel.cached_transform(
        ("hessian", tuple(chosen), single),
        lambda: JacobianKernel(grad(kernel, chosen, checkpoint=False), chosen, single,
                               f"{kernel.name}_hessian"))


# ---------------------------------------------------------------- rebuilding (unpickling)


def rebuild(kernel: Kernel, key: tuple) -> Kernel:
    """The transform of `kernel` whose transform-cache key is `key` (made by the functions
    above: name, resolved `wrt`, then `single` and options), asked for again the way the
    user first did, so it is found in the kernel's cache or rebuilt from the disk cache."""
    name, chosen, *options = key
    if name == "batched_vjp":
        given, dtype = options
        result_dtypes = [t.dtype for t in kernel.ir_for(dtype).result_types]
        return kernel.cached_transform(
            key, lambda: _batched_vjp_kernel(kernel, chosen, given, result_dtypes))
    single, *settings = options
    wrt = chosen[0] if single else list(chosen)
    return TRANSFORMS[name](kernel, wrt, *settings)


TRANSFORMS: dict[str, Callable[..., Kernel]] = {
    "grad": grad, "value_and_grad": value_and_grad, "vjp": vjp, "jvp": jvp, "hvp": hvp,
    "jacobian": jacobian, "hessian": hessian, "vjp_forward": vjp_forward,
    "vjp_backward": vjp_backward,
}
