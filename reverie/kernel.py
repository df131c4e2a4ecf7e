"""Kernels: compiled functions you can call and transform (docs/api.md §1–3).

A `Kernel` knows how to build its typed IR for each float dtype and runs it on NumPy
arrays through the module's backend; given Tensors that require grad, it hands the call to
the tape (`runtime/tensors/tape.py`), which sees it as a `runtime.kernel_protocol.CompiledKernel`.
Transforms return new Kernels whose IR is derived from the parent's, so they can be
transformed again:

    loss.grad("w")                 # IR: grad_function(loss) restricted to the gradient
    loss.grad("w").vjp()           # IR: vjp_function of that — a second derivative

The transform methods (`grad`, `value_and_grad`, `vjp`, `jvp`, `hvp`, `jacobian`,
`hessian`, and `batched_vjp` for the tape) are one-line entries into
`reverie/kernel_transforms.py`, where every transform lives. That module builds Kernels (it
subclasses this one's), so it imports this module and this one cannot import it: the
kernel's module hands it over (`Module.transforms`).

Each kernel keeps the transforms asked of it, keyed by what they are (transform, resolved
`wrt`, options such as `checkpoint`), so `loss.grad("w")` in a loop returns the same
compiled kernel every time at the cost of a dictionary look-up. The cache holds the
`TRANSFORM_CACHE_SIZE` most recently used transforms of each kernel; a transform dropped
from it is compiled again when asked for, and its native code is released once nothing
refers to it.

A kernel's `identity` says what it is: its module's key and function name, then each
transform that derived it. Its IR per dtype, and what the native backend makes of it, are
kept under that identity in the whole-pipeline cache (`runtime/native/artifacts.py`), so a new
process with a populated cache reaches native code without parsing or transforming; and a
specialisation's first call makes its native entry from the cache's launch record
(`runtime/native/fastcall.py`) without building its IR at all (`run`). On that warm path this
module imports neither the IR's classes (it reaches them through the gate of a warm start,
`runtime/native/compiler_gate.py`), nor the tape until Tensors exist, nor the native back
end (`native_kernel.py`): those two imports sit in the functions that need them.

Kernels pickle as what they are, never as native code: a module's function as its module
(source, name, options) and its name; a transform as the kernel it was derived from and
its transform key (`derivation`). Unpickling rebuilds them through the usual cached path,
so a process that receives a kernel (a Dask worker) compiles it once, or finds it in the
disk cache, whatever number of tasks carry it:

    pickle.loads(pickle.dumps(loss.grad("w")))    # module, "loss", ("grad", (1,), ...)
"""

from __future__ import annotations

import inspect
import pickle
import sys
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.runtime.native import artifacts, fastcall
from reverie.runtime.native import compiler_gate as compiler
from reverie.runtime.native.call import (
    ArgumentTypeError,
    bind_arguments,
    check_arity,
    finish_results,
    float_dtype_of,
)
from reverie.runtime.native.lru import LruCache

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Function
    from reverie.module import Module

Wrt = str | int | Sequence[str | int] | None
TRANSFORM_CACHE_SIZE = 64


def untaped_call_path(kernel: Kernel) -> Callable[..., object]:
    """`kernel`'s Python call path until `runtime/tensors/tensor.py` is imported: no argument can
    be a Tensor yet, so every call runs (without importing the tape: a warm start need
    not). The first call after that import puts the tape's path in its place
    (`tape.python_call_path`: Tensors that require grad are recorded, other calls run)."""

    def call(*args: object) -> object:
        if "reverie.runtime.tensors.tensor" not in sys.modules:
            return kernel.run(*args)
        from reverie.runtime.tensors.tape import python_call_path as tape_call_path

        kernel._call_python = tape_call_path(kernel, kernel.run)
        return kernel._call_python(*args)

    return call


def by_position(fn_name: str, param_names: Sequence[str], args: Sequence[object],
                keywords: dict[str, object]) -> tuple[object, ...]:
    """The arguments of a call with `keywords`, one per parameter in order, bound as
    Python binds them: positional first, then each keyword to the parameter it names;
    ArgumentTypeError (a TypeError naming the function) for too many positional
    arguments, an unknown or repeated name, or a parameter left without a value."""
    if len(args) > len(param_names):
        check_arity(fn_name, param_names, args)
    bound = dict(zip(param_names, args, strict=False))  # (fewer arguments than names)
    for name, value in keywords.items():
        if name not in param_names:
            raise ArgumentTypeError(f"{fn_name}() got an unexpected keyword argument '{name}'")
        if name in bound:
            raise ArgumentTypeError(f"{fn_name}() got multiple values for argument '{name}'")
        bound[name] = value
    missing = [f"'{name}'" for name in param_names if name not in bound]
    if missing:
        raise ArgumentTypeError(f"{fn_name}() missing {len(missing)} required argument(s): "
                                f"{', '.join(missing)}")
    return tuple(bound[name] for name in param_names)


def is_plain(value: object) -> bool:
    """Whether `value` is plain data (strings, numbers, None, tuples of them), whose repr
    says what it is in every process."""
    if isinstance(value, tuple):
        return all(is_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


class Kernel:
    """A callable compiled function: `kernel(*arrays)` returns NumPy results; given Tensors
    that require grad it returns Tensors recording the call (`runtime/tensors/tape.py`)."""

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
        # what a call runs: the Python path (recording calls on Tensors that require grad,
        # running any other), until native entries (one per compiled specialisation, each
        # falling back to the one before, the first to the Python path) take the common
        # calls
        self._call_python: Callable[..., object] = untaped_call_path(self)
        self._call: Callable[..., object] = self._python_path
        self._entered: set[str] = set()  # dtypes whose native entry is in the call path
        self.identity: tuple | None = None  # what the kernel is, for the disk cache
        # whether it returns one float scalar, when known without the IR (a module's
        # function: from its function table), else found in the IR when first asked
        self.float_scalar_result: bool | None = None
        # the kernel this one was derived from, and the key of that transform (pickling)
        self.derivation: tuple[Kernel, tuple] | None = None

    def ir_for(self, float_dtype: str = "f32") -> Function:
        """The typed IR with `float` meaning `float_dtype` (built once per dtype; a kernel
        without `float` parameters has one IR whatever the dtype asked for)."""
        float_dtype = self.dtype_key(float_dtype)
        fn = self._ir.get(float_dtype)
        if fn is None:
            fn = self._ir[float_dtype] = self._specialise(float_dtype)
        return fn

    def _specialise(self, float_dtype: str) -> Function:
        """The IR for `float_dtype`: from the whole-pipeline cache when this kernel has an
        identity and the IR is there, else built (and kept there)."""
        if self.identity is None:
            return self._build(float_dtype)
        key = artifacts.artifact_key("ir", *self.identity, float_dtype)
        fn = artifacts.load(key)
        if not isinstance(fn, compiler.tensor_function.resolve()):
            fn = self._build(float_dtype)
            fn.cache_key = key
            artifacts.store(key, fn)
        return fn

    def returns_float_scalar(self) -> bool:
        """Whether the kernel returns one float scalar, or one float tensor of size 1
        (`f32[1]`, `f32[1, 1]`: differentiated like a scalar, as torch and HIPS autograd
        do): what `grad` needs."""
        if self.float_scalar_result is None:
            types = self.ir_for("f32").result_types
            self.float_scalar_result = compiler.one_float_element(types)
        return self.float_scalar_result

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

    # `kernel(*args)` calls the current call path (`_call`) itself: a property, not a
    # method, so no Python frame lies between the caller and the native entry (valgrind,
    # benchmarks/instructions.py, 1 parameter: a forward call 2.4k instructions against
    # 2.9k through a method; the recorded path, which also calls `array_call` twice,
    # 50.7k against 53.2k)
    __call__ = property(attrgetter("_call"), doc="Run on arrays (NumPy results), or record "
                        "the call when a Tensor argument requires grad.")
    # the same for arrays (one per parameter, never recorded), whatever `__call__` a
    # subclass defines (`transforms.GroupedKernel` regroups arguments and results)
    array_call = property(attrgetter("_call"), doc="Run on arrays (one per parameter, "
                          "ungrouped, never recorded) through the call path.")

    def _python_path(self, *args: object, **keywords: object) -> object:
        """What the native entries fall back to (and what a kernel without one calls):
        the current Python call path, looked up at each call, so that the tape's path
        takes over once Tensors exist. Keyword arguments are bound to the parameters they
        name here (`by_position`; the native entries pass every call with them here)."""
        if keywords:
            args = by_position(self.name, self.param_names, args, keywords)
        return self._call_python(*args)

    @property
    def __signature__(self) -> inspect.Signature:
        """`(*args)`, what `inspect.signature(kernel)` gave while `__call__` was a method."""
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])

    def enter_native(self, fn: Function) -> None:
        """Put the native entry of specialisation `fn` in front of the call path (nothing
        for a backend or a boundary without one, or a specialisation whose entry could take
        a call meant for another: `_entry_keeps_the_rule`), and remember how to make it
        without the IR (`runtime/native/fastcall.py`: no launch record, no entry from one either).
        Calls do this themselves, once per specialisation."""
        if not self._entry_keeps_the_rule(fn):
            return
        executable = self.module.executable(fn)
        make = getattr(executable, "native_entry", None)
        entry = make(self._call, not self._single) if make is not None else None
        if entry is not None:
            self._call = entry
            if fn.cache_key:
                fastcall.remember_launch(fn.cache_key, executable.launch_record())

    def _entry_keeps_the_rule(self, fn: Function) -> bool:
        """Whether a native entry of specialisation `fn` takes only calls that the precision
        rule (`float_dtype_of`) gives `fn`. An entry takes, for a parameter declared
        `float`, an array of exactly `fn`'s dtype or a Python number. So the f64 entry
        keeps the rule (an f32 array is never its dtype), and so does an f32 entry with a
        `float` array parameter (only an f32 array passes it); but with `float` scalars
        only, the f32 entry would take Python numbers alone, which the rule gives f64:
        those calls, and 0-d float32 arrays with them, take the Python path."""
        floats = [param.type for param, declared
                  in zip(fn.params, self.declared_dtypes, strict=True) if declared == "float"]
        if not floats or floats[0].dtype != "f32":
            return True
        return any(type_.rank for type_ in floats)

    def _launch(self, float_dtype: str) -> Callable[..., object] | None:
        """The native entry of the `float_dtype` specialisation made from its launch record
        in the disk cache, without building its IR (None when there is none)."""
        if self.identity is None or self.module.backend != "native":
            return None
        ir_key = artifacts.artifact_key("ir", *self.identity, float_dtype)

        def make_ir() -> str:  # only if the object code itself is missing: the back end
            from reverie.runtime.native.native_kernel import source_ir_of

            return source_ir_of(self.ir_for(float_dtype))

        return fastcall.launch_entry(ir_key, self._call, not self._single, make_ir)

    def run(self, *args: object) -> object:
        """Run on the arguments' arrays and return NumPy results (never recorded); from
        then on the specialisation's native entry serves the calls it can take: made from
        the disk cache's launch record when there is one (no IR), else from the IR."""
        float_dtype = self.float_dtype_for(args)
        if float_dtype not in self._entered:
            entry = self._launch(float_dtype)
            if entry is not None:
                self._entered.add(float_dtype)
                self._call = entry
                return entry(*args)  # calls it does not take come back here, entered
        fn = self.ir_for(float_dtype)
        result = self.execute(fn, args)
        if float_dtype not in self._entered:
            self._entered.add(float_dtype)
            self.enter_native(fn)
        return result

    def has_run(self) -> bool:
        """Whether a specialisation of this kernel has run (its native code is loaded)."""
        return bool(self._entered)

    def run_arrays(self, args: Sequence[object]) -> object:
        """Run on `args` (arrays, never recorded; one per parameter, ungrouped) through
        the call path: the native entry where there is one (`array_call(*args)`)."""
        return self._call(*args)

    def execute(self, fn: Function, args: Sequence[object]) -> object:
        """Run specialisation `fn` of this kernel on `args` (arrays, not Tensors)."""
        bound = bind_arguments(fn, args)
        results = self.module.executable(fn)(bound)
        out = finish_results(fn, results, bound.arrays)
        return out if self._single or isinstance(out, tuple) else (out,)

    def __repr__(self) -> str:
        return f"<reverie kernel {self.name}({', '.join(self.param_names)})>"

    def __reduce__(self) -> tuple[Callable[..., Kernel], tuple]:
        """Pickle as a recipe (see the module docstring): nothing native travels."""
        if self.derivation is not None:
            return transform_of, self.derivation
        if self.module.kernels.get(self.name) is self:
            return function_of, (self.module, self.name)
        raise pickle.PicklingError(f"kernel {self.name} is neither a module's function nor "
                                   "one of its transforms, so it cannot be rebuilt elsewhere")

    # ------------------------------------------------------------ transforms
    # (each calls `reverie/kernel_transforms.py` through `self.module.transforms`: see the
    # module docstring)

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
            chosen = sorted({self._param_index(w) for w in wrt})  # in parameter order
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

    def cached_transform(self, key: tuple, make: Callable[[], Kernel]) -> Kernel:
        """The transform of this kernel that `key` describes (hashable: transform name,
        resolved parameter positions, options), made by `make()` the first time."""
        kernel = self._transforms.get(key)
        if kernel is None:
            made = make()
            made.derivation = (self, key)
            if self.identity is not None and is_plain(key):
                made.identity = (*self.identity, key)
            kernel = self._transforms.setdefault(key, made)
        return kernel

    def grad(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """The gradient of a scalar function: one array for a single `wrt`, else a tuple.

        `checkpoint=True` keeps O(sqrt(T)) loop states and recomputes (docs/language.md §11); the
        default is the module's `checkpoint` setting.
        """
        return self.module.transforms.grad(self, wrt, checkpoint)

    def value_and_grad(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """`(value, grads)` of a scalar function in one compiled call."""
        return self.module.transforms.value_and_grad(self, wrt, checkpoint)

    def vjp(self, wrt: Wrt = None, *, checkpoint: bool | None = None) -> Kernel:
        """A kernel `(*args, cotangent)` returning the vector-Jacobian product(s); for a tuple
        return, the cotangent is a tuple with one entry per result."""
        return self.module.transforms.vjp(self, wrt, checkpoint)

    def batched_vjp(self, wrt: Sequence[int], args: Sequence[object],
                    batched_cotangents: Sequence[object | None], recorded: bool = False
                    ) -> tuple[object, ...]:
        """All VJPs at `args` for cotangents with a leading batch axis, in one compiled
        call (`rv.grad(..., is_grads_batched=True)`; see `transforms.batched_vjp`)."""
        return self.module.transforms.batched_vjp(self, wrt, args, batched_cotangents, recorded)

    def jvp(self, wrt: Wrt = None) -> Kernel:
        """Forward mode: a kernel `(*args, tangent)` giving `(value, tangent_out)`."""
        return self.module.transforms.jvp(self, wrt)

    def hvp(self, wrt: Wrt = None) -> Kernel:
        """Hessian-vector products `(*args, v)`, forward over reverse."""
        return self.module.transforms.hvp(self, wrt)

    def jacobian(self, wrt: Wrt = None) -> Kernel:
        """A kernel giving d out / d param with shape out.shape + param.shape (one call)."""
        return self.module.transforms.jacobian(self, wrt)

    def hessian(self, wrt: Wrt = None) -> Kernel:
        """For a scalar function: second derivatives, shape param.shape + param.shape."""
        return self.module.transforms.hessian(self, wrt)


def function_of(module: Module, name: str) -> Kernel:
    """Function `name` of `module` (how a pickled module function is rebuilt)."""
    return module[name]


def transform_of(kernel: Kernel, key: tuple) -> Kernel:
    """The transform of `kernel` that transform key `key` names (how a pickled derived
    kernel is rebuilt; see `reverie.kernel_transforms.rebuild`)."""
    return kernel.module.transforms.rebuild(kernel, key)
