"""Kernels: compiled functions and their transforms (SPEC §3.1–3.2).

A `Kernel` knows how to build its typed IR for each float dtype and runs it on NumPy
arrays through the module's backend. Transforms return new Kernels whose IR is derived
from the parent's, so they can be transformed again:

    loss.grad("w")                 # IR: grad_function(loss) restricted to the gradient
    loss.grad("w").vjp()           # IR: vjp_function of that — a second derivative

Each kernel keeps the transforms asked of it, keyed by what they are (transform, resolved
`wrt`, options such as `checkpoint`), so `loss.grad("w")` in a loop returns the same
compiled kernel every time at the cost of a dictionary look-up. The cache holds the
`TRANSFORM_CACHE_SIZE` most recently used transforms of each kernel; a transform dropped
from it is compiled again when asked for, and its native code is released once nothing
refers to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Block, Function
from reverie.compiler.ir.types import FLOAT_DTYPES
from reverie.compiler.transforms.simplify import simplify
from reverie.runtime.call import (
    ArgumentTypeError,
    bind_arguments,
    check_arity,
    finish_results,
    float_dtype_of,
)
from reverie.runtime.lru import LruCache
from reverie.runtime.tape import record_call, records_call

if TYPE_CHECKING:
    from .module import Module

Wrt = str | int | Sequence[str | int] | None
TRANSFORM_CACHE_SIZE = 64


def select_results(fn: Function, keep: Sequence[int], name: str) -> Function:
    """A copy of `fn` that returns only the results at positions `keep` (dead code removed)."""
    body = Block(fn.body.params, list(fn.body.ops), [fn.body.results[i] for i in keep])
    return simplify(fn.derive(name, body))


class Kernel:
    """A callable compiled function: `kernel(*arrays)` returns NumPy results; given Tensors
    that require grad it returns Tensors recording the call (`runtime/tape.py`)."""

    def __init__(self, module: Module, name: str, param_names: list[str],
                 declared_dtypes: list[str], build: Callable[[str], Function],
                 single: bool = True) -> None:
        self.module = module
        self.name = name
        self.param_names = param_names
        self.declared_dtypes = declared_dtypes
        self._build = build
        self._single = single
        self._ir: dict[str, Function] = {}
        self._transforms: LruCache[tuple, Kernel] = LruCache(TRANSFORM_CACHE_SIZE)
        # what the tape and the interop layers derive from this kernel (VJP plans, ...)
        self.autograd_cache: LruCache[object, object] = LruCache(TRANSFORM_CACHE_SIZE)
        # what a call runs: the Python path, until native entries (one per compiled
        # specialisation, each falling back to the one before) take the common calls
        self._call: Callable[..., object] = self._call_python
        self._native: set[Function] = set()

    def ir_for(self, float_dtype: str = "f32") -> Function:
        """The typed IR with `float` meaning `float_dtype` (built once per dtype; a kernel
        without `float` parameters has one IR whatever the dtype asked for)."""
        float_dtype = self.dtype_key(float_dtype)
        if float_dtype not in self._ir:
            self._ir[float_dtype] = self._build(float_dtype)
        return self._ir[float_dtype]

    def dtype_key(self, float_dtype: str) -> str:
        """`float_dtype`, or "f32" for a kernel whose IR does not depend on it."""
        return float_dtype if "float" in self.declared_dtypes else "f32"

    def float_dtype_for(self, args: Sequence[object]) -> str:
        """What `float` means for one call ("f32" or "f64"), after checking the arity."""
        check_arity(self.name, self.param_names, args)
        if "float" not in self.declared_dtypes:
            return "f32"  # nothing to specialise: see `ir_for`
        return float_dtype_of(self.declared_dtypes, args, self.name, self.param_names)

    def specialisation_for(self, args: Sequence[object]) -> Function:
        """The IR matching the arguments of one call."""
        return self.ir_for(self.float_dtype_for(args))

    def __call__(self, *args: object) -> object:
        return self._call(*args)

    def _call_python(self, *args: object) -> object:
        """A call on the Python path: Tensors are recorded, anything else is run."""
        if records_call(args):
            return record_call(self, args)
        return self.run(*args)

    def enter_native(self, fn: Function) -> None:
        """Put the native entry of specialisation `fn` in front of the call path (once;
        nothing for a backend or a boundary without one). Calls do this themselves."""
        self._native.add(fn)
        make = getattr(self.module.executable(fn), "native_entry", None)
        entry = make(self._call, not self._single) if make is not None else None
        if entry is not None:
            self._call = entry

    def run(self, *args: object) -> object:
        """Run on the arguments' arrays and return NumPy results (never recorded); from
        then on the specialisation's native entry serves the calls it can take."""
        fn = self.specialisation_for(args)
        result = self.execute(fn, args)
        if fn not in self._native:
            self.enter_native(fn)
        return result

    def execute(self, fn: Function, args: Sequence[object]) -> object:
        """Run specialisation `fn` of this kernel on `args` (arrays, not Tensors)."""
        bound = bind_arguments(fn, args)
        results = self.module.executable(fn)(bound)
        out = finish_results(fn, results, bound.arrays)
        return out if self._single or isinstance(out, tuple) else (out,)

    def __repr__(self) -> str:
        return f"<reverie kernel {self.name}({', '.join(self.param_names)})>"

    # ------------------------------------------------------------ transforms

    def wrt_indices(self, wrt: Wrt) -> tuple[list[int], bool]:
        """Parameter positions for `wrt` (a sequence is taken in parameter order, once
        each), and whether a single one was named."""
        if wrt is None:
            chosen = [i for i, d in enumerate(self.declared_dtypes)
                      if d in FLOAT_DTYPES or d == "float"]
            single = False
        elif isinstance(wrt, str | int):
            chosen, single = [self._param_index(wrt)], True
        else:
            chosen = sorted({self._param_index(w) for w in wrt})  # SPEC: parameter order
            single = False
        for i in chosen:
            dtype = self.declared_dtypes[i]
            if dtype not in FLOAT_DTYPES and dtype != "float":
                raise ValueError(f"{self.name}: parameter '{self.param_names[i]}' is {dtype}; "
                                 "only float parameters can be differentiated")
        if not chosen:
            raise ValueError(f"{self.name} has no float parameter to differentiate")
        return chosen, single

    def _param_index(self, key: str | int) -> int:
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise TypeError(f"wrt entries are parameter names or indices, got {key!r}")
        if isinstance(key, int):
            if not -len(self.param_names) <= key < len(self.param_names):
                raise ValueError(f"{self.name} has {len(self.param_names)} parameters; "
                                 f"wrt index {key} is out of range")
            return key % len(self.param_names)
        if key not in self.param_names:
            raise ValueError(f"{self.name} has no parameter '{key}' "
                             f"(parameters: {', '.join(self.param_names)})")
        return self.param_names.index(key)

    def _require_scalar(self, what: str) -> None:
        types = self.ir_for("f32").result_types
        if len(types) != 1 or types[0].rank != 0 or not types[0].is_float:
            shown = ", ".join(map(str, types))
            raise ValueError(f"{self.name}.{what}() needs a function returning one float "
                             f"scalar, but it returns {shown}; use {self.name}.vjp() for "
                             "non-scalar outputs")

    def derived_kernel(self, suffix: str, build: Callable[[str], Function], single: bool,
                       extra_params: Sequence[str] = (),
                       extra_dtypes: Sequence[str] = ()) -> Kernel:
        """A kernel `<name>_<suffix>` with IR `build(dtype)`, taking this kernel's
        parameters followed by `extra_params`."""
        return Kernel(self.module, f"{self.name}_{suffix}",
                      self.param_names + list(extra_params),
                      self.declared_dtypes + list(extra_dtypes), build, single)

    def cached_transform(self, key: tuple, make: Callable[[], Kernel]) -> Kernel:
        """The transform of this kernel that `key` describes (hashable: transform name,
        resolved parameter positions, options), made by `make()` the first time."""
        kernel = self._transforms.get(key)
        if kernel is None:
            kernel = self._transforms.setdefault(key, make())
        return kernel

    def _checkpoint(self, checkpoint: bool | None) -> bool:
        """The `checkpoint` option of a reverse-mode transform (None: the module's)."""
        return self.module.checkpoint if checkpoint is None else bool(checkpoint)

    def grad(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """The gradient of a scalar function: one array for a single `wrt`, else a tuple.

        `checkpoint=True` keeps O(sqrt(T)) loop states and recomputes (SPEC §2.6); the
        default is the module's `checkpoint` setting.
        """
        self._require_scalar("grad")
        chosen, single = self.wrt_indices(wrt)
        checkpoint = self._checkpoint(checkpoint)
        return self.cached_transform(("grad", tuple(chosen), single, checkpoint),
                                     lambda: self._grad(chosen, single, checkpoint))

    def _grad(self, chosen: list[int], single: bool, checkpoint: bool) -> Kernel:
        """The gradient kernel for resolved `wrt` positions `chosen`."""
        from reverie.compiler.transforms.reverse import grad_function

        def build(dtype: str) -> Function:
            full = grad_function(self.ir_for(dtype), chosen, checkpoint=checkpoint)
            return select_results(full, range(1, 1 + len(chosen)), f"{self.name}_grad")

        return self.derived_kernel("grad", build, single)

    def value_and_grad(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """`(value, grads)` of a scalar function in one compiled call."""
        self._require_scalar("value_and_grad")
        chosen, single = self.wrt_indices(wrt)
        checkpoint = self._checkpoint(checkpoint)
        return self.cached_transform(("value_and_grad", tuple(chosen), single, checkpoint),
                                     lambda: self._value_and_grad(chosen, single, checkpoint))

    def _value_and_grad(self, chosen: list[int], single: bool, checkpoint: bool) -> Kernel:
        """The value-and-gradient kernel for resolved `wrt` positions `chosen`."""
        from reverie.compiler.transforms.reverse import grad_function

        flat = self.derived_kernel("value_and_grad", lambda dtype: grad_function(
            self.ir_for(dtype), chosen, checkpoint=checkpoint), False)
        return GroupedKernel(flat, None,
                             lambda results: (results[0], results[1] if single else results[1:]))

    def vjp(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """A kernel `(*args, cotangent)` returning the vector-Jacobian product(s); for a tuple
        return, the cotangent is a tuple with one entry per result."""
        chosen, single = self.wrt_indices(wrt)
        checkpoint = self._checkpoint(checkpoint)
        return self.cached_transform(("vjp", tuple(chosen), single, checkpoint),
                                     lambda: self._vjp(chosen, single, checkpoint))

    def _vjp(self, chosen: list[int], single: bool, checkpoint: bool) -> Kernel:
        """The VJP kernel for resolved `wrt` positions `chosen`."""
        from reverie.compiler.transforms.reverse import vjp_function

        outputs = len(self.ir_for("f32").result_types)

        def build(dtype: str) -> Function:
            full = vjp_function(self.ir_for(dtype), chosen, checkpoint=checkpoint)
            return select_results(full, range(outputs, outputs + len(chosen)),
                                  f"{self.name}_vjp")

        names = ["cotangent"] if outputs == 1 else [f"cotangent{i}" for i in range(outputs)]
        dtypes = ["float" if t.is_float else t.dtype for t in self.ir_for("f32").result_types]
        flat = self.derived_kernel("vjp", build, False, names, dtypes)
        return GroupedKernel(flat, outputs if outputs > 1 else None,
                             lambda results: results[0] if single else results)

    def jvp(self, wrt: Wrt = None) -> Kernel:
        """Forward mode: a kernel `(*args, tangent)` giving `(value, tangent_out)`."""
        from .transforms_forward import jvp

        return jvp(self, wrt)

    def jacobian(self, wrt: Wrt = None) -> Kernel:
        """A kernel giving d out / d param with shape out.shape + param.shape (one call)."""
        from .transforms_forward import jacobian

        return jacobian(self, wrt)

    def hessian(self, wrt: Wrt = None) -> Kernel:
        """For a scalar function: second derivatives, shape param.shape + param.shape."""
        from .transforms_forward import hessian

        return hessian(self, wrt)

    def hvp(self, wrt: Wrt = None) -> Kernel:
        """Hessian-vector products `(*args, v)`, forward over reverse."""
        from .transforms_forward import hvp

        return hvp(self, wrt)



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

    def __call__(self, *args: object) -> object:
        if self.grouped is not None and args:
            *head, group = args
            if not isinstance(group, tuple | list) or len(group) != self.grouped:
                raise ArgumentTypeError(f"{self.name}() takes its last {self.grouped} "
                                        f"arguments as one tuple, got {group!r}")
            args = (*head, *group)
        return self.regroup(super().__call__(*args))
