"""`rv.compile` and `Module`: the user's handle on a compiled `.rv` source.

A `Module` parses and type-checks every function at construction (so errors surface at
compile time), then specialises each function per float dtype on first call. Functions are
reached as attributes (`module.loss`) or by name (`module["loss"]`) and are `Kernel`s:
callables that bind arguments at the call boundary and run the chosen backend. A module
reaches the compiler (the ladder, the printers) through the gate of a warm start,
`runtime/native/compiler_gate.py`: one whose function table and kernels come from the disk
cache imports none of it.

A module keeps the executables (native code) of its `EXECUTABLE_CACHE_SIZE` most recently
run specialisations; one dropped from that cache is rebuilt on its next call (from the disk
cache: no LLVM optimisation), and its JIT code is unloaded once nothing refers to it.

A module pickles as its source, name and options. Unpickling gives the process's module
for those (`unpickled_module`: the `UNPICKLED_MODULES` most recently received are kept),
built through the disk cache the first time, so the tasks a worker runs share its
compiled kernels and a worker compiles a module once per machine, not once per task.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import reverie.kernel_transforms as kernel_transforms
from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.compiler.ir.iteration_limit import max_iterations as resolve_max_iterations
from reverie.kernel import Kernel
from reverie.runtime.native import artifacts
from reverie.runtime.native import compiler_gate as compiler
from reverie.runtime.native.lru import LruCache

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np

    from reverie.compiler.ir.core import Function
    from reverie.compiler.lower import ModuleLowering
    from reverie.compiler.pipeline import IrView
    from reverie.dsl import ast
    from reverie.runtime.native.call import BoundCall

    Executable = Callable[[BoundCall], list[np.ndarray]]

BACKENDS = ("native", "interp", "mlir")
EXECUTABLE_CACHE_SIZE = 256
UNPICKLED_MODULES = 16
FORMATS = ("text", "dot")  # dot: a dataflow graph (compiler/ir/dot.py), of DOT_STAGES only
DOT_STAGES = ("tensor", "grad")


class Module:
    """A compiled Reverie source: its functions, and its IR at every stage."""

    def __init__(self, source: str, name: str | None = None, backend: str = "native",
                 checkpoint: bool = False, max_iterations: int | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.source = source
        self.name = name or "<source>"
        self.backend = backend
        self.checkpoint = checkpoint
        self.max_iterations = resolve_max_iterations(max_iterations)
        self.key = artifacts.artifact_key("module", source, self.name, backend, checkpoint,
                                          self.max_iterations)
        table = artifacts.load(self.key)
        if not isinstance(table, list):
            if backend == "native":  # a cold compile is likely: LLVM set up, the entry begun
                from reverie.runtime.native.compile_queue import prepare_native_code

                prepare_native_code()
            table = self._check()
            artifacts.store(self.key, table)
        self.kernels = {name: self._kernel(name, *entry) for name, *entry in table}
        self._executables: LruCache[Function, Executable] = LruCache(EXECUTABLE_CACHE_SIZE)

    def _check(self) -> list[tuple[str, list[str], list[str], bool]]:
        """Parse and type-check every function (raising all their errors at once); its
        function table: names, parameter names, declared dtypes and whether the function
        returns one float scalar (so `grad` needs no IR to check that)."""
        self.lowering.check_all("f32")
        table = []
        for name in (f.name for f in self.ast.functions):
            params = self.lowering.functions[name].params
            types = self._specialise(name, "f32").result_types  # (checked above)
            table.append((name, [p.name for p in params], [p.type.dtype for p in params],
                          compiler.one_float_element(types)))
        return table

    @functools.cached_property
    def ast(self) -> ast.Module:
        """The parsed source (parsed when first needed: a module whose function table came
        from the disk cache is not parsed to be called)."""
        return compiler.compile_source(self.source, "parse", compiler.Request(filename=self.name))

    @functools.cached_property
    def lowering(self) -> ModuleLowering:
        """The module's lowering, which keeps its functions' typed IR per dtype (made when
        first needed: a module whose IR all comes from the disk cache never lowers)."""
        request = compiler.Request(max_iterations=self.max_iterations)
        return compiler.module_lowering(self.ast, request)

    def _specialise(self, name: str, dtype: str) -> Function:
        """The typed IR of function `name` with `float` meaning `dtype`: the ladder's
        `lower` stage on the module's lowering (built once per dtype)."""
        return self._tensor_ir(self.lowering, name, dtype)

    def _tensor_ir(self, source: ModuleLowering | ast.Module, name: str, dtype: str,
                   wrt: object = None, adjoint: bool = False) -> Function:
        """Function `name` at `dtype`, or its adjoint (the ladder's reverse stage), climbed
        from `source`: the module's lowering, or its syntax tree (lowered afresh, so that
        every pass runs and prints)."""
        request = {"function": name, "dtype": dtype, "filename": self.name,
                   "max_iterations": self.max_iterations}
        if not adjoint:
            lower = compiler.Request(**request)
            return compiler.climb(source, lower, start="lower", stop="lower")["lower"]
        chosen, _ = self[name].wrt_indices(wrt)
        reverse = compiler.Request(**request, transform="reverse", wrt=chosen,
                                   checkpoint=self.checkpoint)
        return compiler.climb(source, reverse, start="lower", stop="reverse")["reverse"]

    def _kernel(self, name: str, param_names: list[str], dtypes: list[str],
                float_scalar_result: bool) -> Kernel:
        kernel = Kernel(self, name, list(param_names), list(dtypes),
                        lambda dtype: self._specialise(name, dtype))
        kernel.identity = (self.key, name)
        kernel.float_scalar_result = float_scalar_result
        return kernel

    def executable(self, fn: Function) -> Executable:
        """How IR function `fn` runs on this module's backend (compiled once per function
        while it stays among the recently used ones)."""
        run = self._executables.get(fn)
        if run is None:
            run = self._executables.setdefault(fn, self._build_executable(fn))
        return run

    def _build_executable(self, fn: Function) -> Executable:
        """Compile `fn` for this module's backend (the native and MLIR kernels climb the
        ladder of compiler/pipeline.py; their modules load LLVM, so only when used)."""
        if self.backend == "interp":  # what the native and MLIR ladders run, hoisting too
            hoisted = compiler.climb(fn, start="hoist", stop="hoist")["hoist"]  # that pass alone
            return lambda bound: compiler.interpret(hoisted, bound.arrays, bound.dims)
        if self.backend == "mlir":
            from reverie.runtime.native.mlir_backend import MlirKernel

            return MlirKernel(fn)
        from reverie.runtime.native.native_kernel import NativeKernel

        return NativeKernel(fn)

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"module {self.name!r} has no function '{name}'"
                             + compiler.did_you_mean(name, kernels))

    def __getitem__(self, name: str) -> Kernel:
        if name not in self.kernels:
            raise KeyError(f"no function '{name}'" + compiler.did_you_mean(name, self.kernels))
        return self.kernels[name]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.kernels))

    def __repr__(self) -> str:
        return f"<reverie module {self.name} with {', '.join(self.kernels) or 'no functions'}>"

    def __reduce__(self) -> tuple[Callable[..., Module], tuple[str, str, str, bool]]:
        """Pickle as source, name and options (no native code; see `unpickled_module`)."""
        return unpickled_module, (self.source, self.name, self.backend, self.checkpoint)

    def adjoint(self, name: str, dtype: str = "f32", wrt: object = None) -> Function:
        """The adjoint IR of function `name`: its gradient for a scalar float result,
        otherwise its vector-Jacobian product (the ladder's reverse stage; stage "grad")."""
        return self._tensor_ir(self.lowering, name, dtype, wrt, adjoint=True)

    @property
    def transforms(self) -> ModuleType:
        """`reverie/kernel_transforms.py`, which builds every transform of this module's
        kernels. The kernels reach it here: it subclasses Kernel, so `reverie/kernel.py`
        cannot import it."""
        return kernel_transforms

    def _differentiable(self, name: str) -> bool:
        dtypes = self[name].declared_dtypes
        return any(d in FLOAT_DTYPES or d == "float" for d in dtypes)

    def ir(self, stage: str, fn: str | None = None, wrt: object = None,
           dtype: str = "f32", format: str = "text") -> str:
        """The program at one stage of the pipeline (docs/pipeline.md), for one function or
        all. `stage` names a view or a pass (`compiler/pipeline.py`'s `IR_NAMES`).

        "ast" and "tensor" show the program; "grad" its adjoint and "grad-raw" the adjoint
        before simplification (`wrt` picks parameters; default: every float parameter);
        "loops", "llvm-raw" (before LLVM's optimiser), "llvm" and "asm" show the program,
        or its adjoint when `wrt` is given; "mlir" shows the program followed by its
        adjoint. A pass's name shows what REVERIE_PRINT_IR prints after that pass
        ("interchange": the loop program after it). `dtype` says what `float` means in the
        printed specialisation. Nothing is compiled further than the stage asks: "loops"
        runs no LLVM, "llvm" loads nothing. `format="dot"` draws stage "tensor" or "grad"
        as Graphviz dataflow graphs, the adjoint's primal and adjoint halves in two colours
        (compiler/ir/dot.py).
        """
        view = compiler.ir_view(stage)
        if format not in FORMATS or (format == "dot" and stage not in DOT_STAGES):
            raise ValueError(f"format must be one of {', '.join(FORMATS)} (dot: stages "
                             f"{' and '.join(DOT_STAGES)}), got {format!r} for {stage!r}")
        names = [fn] if fn is not None else list(self.kernels)
        for name in names:
            self[name]
        if view.shows_source:
            if fn is None:
                return compiler.format_ast(self.ast)
            return compiler.format_ast_function(self.lowering.functions[fn]) + "\n"
        adjoint = view.shows_adjoint(wrt is not None)
        if adjoint:  # all functions: those that have one
            names = [n for n in names if fn is not None or self._differentiable(n)]
        if view.captured is not None:
            with compiler.capture(view.captured) as texts:
                self._climb(view, self._functions(view, names, dtype, wrt, adjoint, fresh=True))
            return _joined(texts)
        functions = self._functions(view, names, dtype, wrt, adjoint)
        if format == "dot":
            programs = [self._specialise(n, dtype) if adjoint else None for n in names]
            return _joined(map(compiler.format_dot, functions, programs))
        if view.stop is None:
            return _joined(map(compiler.format_function, functions))
        text = view.text or compiler.ladder_stage(view.stop, view.backend).text
        return _joined(map(text, self._climb(view, functions)))

    def _functions(self, view: IrView, names: list[str], dtype: str, wrt: object,
                   adjoint: bool, fresh: bool = False) -> list[Function]:
        """The tensor functions `view` shows: each function named or its adjoint, then
        (`BOTH`, no adjoint asked for) the adjoints; `fresh`: lowered afresh."""
        source = self.ast if fresh else self.lowering
        functions = [self._tensor_ir(source, n, dtype, wrt, adjoint) for n in names]
        if view.in_one_module and not adjoint:
            functions += [self._tensor_ir(source, n, dtype, adjoint=True) for n in names
                          if self._differentiable(n)]
        return functions

    def _climb(self, view: IrView, functions: list[Function]) -> list[object]:
        """The result of `view`'s stop for each function (`BOTH`: for all in one module)."""
        if view.stop is None:
            return functions
        request = compiler.Request(filename=self.name, backend=view.backend)
        climbs = [functions] if view.in_one_module else functions
        return [compiler.climb(value, request, start=compiler.back_end_start(view.backend),
                      stop=view.stop)[view.stop] for value in climbs]


_unpickled: LruCache[tuple[str, str, str, bool], Module] = LruCache(UNPICKLED_MODULES)


def unpickled_module(source: str, name: str, backend: str, checkpoint: bool) -> Module:
    """This process's module for a pickled (source, name, backend, checkpoint): one per
    process while among the recently received, made through the disk cache."""
    key = (source, name, backend, checkpoint)
    module = _unpickled.get(key)
    if module is None:
        module = _unpickled.setdefault(key, Module(source, name, backend, checkpoint))
    return module


def _joined(texts: Iterable[str]) -> str:
    """Texts separated by blank lines, ending in one newline."""
    return "\n\n".join(text.rstrip() for text in texts) + "\n"


def compile(source: str, *, name: str | None = None, backend: str = "native",
            checkpoint: bool = False, max_iterations: int | None = None) -> Module:
    """Parse, type-check and compile Reverie source text.

    `checkpoint=True` makes gradients through loops keep O(sqrt(T)) states (docs/language.md §11);
    a `while` running more than `max_iterations` iterations (default
    REVERIE_MAX_ITERATIONS, else 10^9) raises RuntimeError (docs/language.md §11.1).
    """
    return Module(source, name=name, backend=backend, checkpoint=checkpoint,
                  max_iterations=max_iterations)


def load(path: str | Path, *, backend: str = "native", checkpoint: bool = False,
         max_iterations: int | None = None) -> Module:
    """Compile a `.rv` file."""
    path = Path(path)
    return Module(path.read_text(), name=str(path), backend=backend, checkpoint=checkpoint,
                  max_iterations=max_iterations)


__all__ = ["Kernel", "Module", "compile", "load"]
