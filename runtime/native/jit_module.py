"""Loaded native code and the LLVM pipeline that made it, without LLVM or dataclasses.

Consumes a loaded library — a JIT library (`jit.py`) or a shared object opened with
`dlopen` (`shared_objects.SharedLibrary`): anything whose `library[symbol]` is the native
address of an exported function — and produces the `JitModule` callers take addresses
from. `Pipeline` says how LLVM optimises a module (part of every object-code cache key,
by its repr). `LIVE_MODULES` holds the modules still loaded, so that identical IR, or a
key `remembered.py` loads, is handed out again instead of loaded twice.

This module is what a warm start needs of the JIT (`runtime/native/remembered.py`,
`runtime/native/helpers.py`); it imports neither `jit.py` (its LLVM wrappers, its regular
expressions) nor `dataclasses` — both cost milliseconds a warm start does not pay. What
LLVM computes of a module, its optimised IR and its assembly, comes on request from the
`llvm` its loader hands in: a function returning `jit.py`, which `remembered.py` imports
only then.

    module = JitModule("affine", llvm_ir, library, optimized_ir=None, from_cache=True,
                       symbols=("affine",), llvm=jit.this_module)
    module.address("affine")
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (not a Protocol class, which every warm start would create)
    from llvmlite.binding import ResourceTracker

    from reverie.runtime.native.shared_objects import SharedLibrary

    Library = ResourceTracker | SharedLibrary  # `library[symbol]`: an exported address


class Pipeline:
    """An LLVM optimisation pipeline: the speed level (O1-O3), which optional transforms
    run (the loop vectoriser, with interleaving, always does), and whether the code
    generator runs loop strength reduction. Immutable; equal, with equal hashes and
    reprs, when the settings are."""

    __slots__ = ("speed_level", "slp_vectorization", "loop_unrolling", "strength_reduction")
    speed_level: int
    slp_vectorization: bool
    loop_unrolling: bool
    strength_reduction: bool

    def __init__(self, speed_level: int = 3, slp_vectorization: bool = True,
                 loop_unrolling: bool = False, strength_reduction: bool = True) -> None:
        object.__setattr__(self, "speed_level", speed_level)
        object.__setattr__(self, "slp_vectorization", slp_vectorization)
        object.__setattr__(self, "loop_unrolling", loop_unrolling)
        object.__setattr__(self, "strength_reduction", strength_reduction)

    def settings(self) -> tuple[int, bool, bool, bool]:
        """The four settings, in the order of `__slots__`."""
        return (self.speed_level, self.slp_vectorization, self.loop_unrolling,
                self.strength_reduction)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Pipeline is immutable: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pipeline) and self.settings() == other.settings()

    def __hash__(self) -> int:
        return hash(self.settings())

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value
                             in zip(self.__slots__, self.settings(), strict=True))
        return f"Pipeline({settings})"


# Kernels: O2 with both vectorisers (the loop vectoriser with interleaving, and SLP).
# O3 adds non-trivial loop unswitching and argument promotion, which cost compile time and
# made the workloads' kernels no faster. Runtime unrolling is off: it multiplies
# machine-code generation time and the interleaved vector loops gain nothing measurable
# from it. Loop strength reduction is off too: it takes most of machine-code generation,
# and x86's addressing modes do most of what it would (all measured in benchmarks/README.md,
# "Latency").
KERNEL_PIPELINE = Pipeline(speed_level=2, strength_reduction=False)


class JitModule:
    """Native code for one LLVM module, loaded into this process.

    `source_ir` is the IR it was compiled from, or (for object code loaded by
    `remembered_module`) a function that regenerates it when it is first asked for.
    `library` is the loaded code: a JIT library, unloaded when the module is
    garbage-collected, or a shared object, loaded for the life of the process. `llvm()`
    returns `jit.py`, which computes the optimised IR and the assembly when asked for."""

    def __init__(
        self,
        name: str,
        source_ir: str | Callable[[], str],
        library: Library,
        *,
        optimized_ir: str | None,
        from_cache: bool,
        symbols: tuple[str, ...],
        llvm: Callable[[], ModuleType],
        pipeline: Pipeline | None = KERNEL_PIPELINE,
    ) -> None:
        self.name = name
        self._source_ir = source_ir
        self._library = library
        self.from_cache = from_cache
        self.pipeline = pipeline
        self.symbols = symbols
        self._optimized_ir = optimized_ir
        self._asm: str | None = None
        self._llvm = llvm

    @property
    def source_ir(self) -> str:
        """The LLVM IR as generated (regenerated on first use when loaded by key)."""
        if callable(self._source_ir):
            self._source_ir = self._source_ir()
        return self._source_ir

    def address(self, symbol: str) -> int:
        """The native address of the exported function `symbol`."""
        if symbol not in self.symbols:
            raise KeyError(f"module {self.name!r} exports no function {symbol!r}")
        return self._library[symbol]

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR (recomputed on first use for modules loaded from cache)."""
        if self._optimized_ir is None:
            self._optimized_ir = (self.source_ir if self.pipeline is None else
                                  self._llvm().optimize(self.source_ir, name=self.name,
                                                        pipeline=self.pipeline))
        return self._optimized_ir

    @property
    def asm(self) -> str:
        """The host assembly for the optimised IR, generated on first use."""
        if self._asm is None:
            self._asm = self._llvm().assembly(self.llvm_ir, self.name, self.pipeline)
        return self._asm


# loaded modules by (pipeline, IR text) or, for `remembered_module`, (pipeline, its key)
LIVE_MODULES: weakref.WeakValueDictionary[tuple[Pipeline | None, str], JitModule] = \
    weakref.WeakValueDictionary()
