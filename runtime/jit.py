"""JIT compilation of LLVM IR text to native code for the host CPU, with an object cache.

Consumes LLVM IR text (as printed by `llvmlite.ir.Module`); produces a `JitModule` whose
`address(symbol)` is a callable native function pointer for each externally visible
function defined in the IR.

Pipeline of `compile_module`:
  1. key = sha256(IR text, llvmlite/LLVM version, triple, host CPU name and features)
  2. cache hit: load the stored object code straight into the JIT (no optimisation, no
     code generation);
  3. miss: parse + verify, optimise at O3 with the loop and SLP vectorisers on, emit an
     object file for the host CPU, store it, load it into the JIT.

One ORC LLJIT instance serves the whole process; each module becomes its own JIT library,
unloaded when its `JitModule` is garbage-collected. A process-wide lock serialises all
LLVM work (compiling from several threads is safe, not faster). Each optimisation leaks
about 84 KB inside LLVM, so put many kernels in one module rather than one module each.
Setting up the host target also turns off LLVM's epilogue vectorisation process-wide (about
20 % less compile time, no measured slowdown).

Assumes generated IR holds no process-specific addresses (pass pointers as arguments), so
the cached object code is valid in any process on the same CPU.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import threading
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

from . import cache

_PIPELINE_VERSION = "reverie-jit-1"
_LLVM_LOCK = threading.RLock()
_library_numbers = itertools.count()
_EXTERNAL_DEFINE = re.compile(r'^define\s+([^@\n]*)@("?)([^"(\s]+)\2\(', re.MULTILINE)
_LOCAL_LINKAGES = frozenset({"internal", "private", "available_externally"})


@dataclass(frozen=True)
class HostTarget:
    """The host CPU as LLVM sees it, and a target machine generating code for it."""

    target_machine: llvm.TargetMachine
    triple: str
    cpu_name: str
    features: str


@functools.cache
def host_target() -> HostTarget:
    """Initialise LLVM's native target once and describe the host CPU."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("", "-enable-epilogue-vectorization=false")
    triple = llvm.get_process_triple()
    cpu_name = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    target_machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu_name, features=features, opt=3, reloc="pic", codemodel="default"
    )
    return HostTarget(target_machine, triple, cpu_name, features)


@functools.cache
def _process_jit() -> llvm.LLJIT:
    """The process-wide ORC JIT; it is never disposed, so libraries can outlive it safely."""
    jit = llvm.create_lljit_compiler(host_target().target_machine)
    jit._owned = True
    return jit


def _optimize_module(module: llvm.ModuleRef) -> None:
    """Run the O3 pipeline with loop and SLP vectorisation on `module`, in place."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_interleaving = True
    tuning.loop_unrolling = True
    pass_builder = llvm.create_pass_builder(host_target().target_machine, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)


def _parse(llvm_ir: str, name: str) -> llvm.ModuleRef:
    """Parse and verify IR text, tagging the module with the host triple and data layout."""
    module = llvm.parse_assembly(llvm_ir)
    module.name = name
    module.triple = host_target().triple
    module.data_layout = str(host_target().target_machine.target_data)
    module.verify()
    return module


def optimize(llvm_ir: str, *, name: str = "module") -> str:
    """Return the O3-optimised, vectorised form of `llvm_ir` as text."""
    with _LLVM_LOCK:
        module = _parse(llvm_ir, name)
        _optimize_module(module)
        return str(module)


def exported_symbols(llvm_ir: str) -> tuple[str, ...]:
    """Names of the functions that `llvm_ir` defines with external linkage."""
    return tuple(
        match.group(3)
        for match in _EXTERNAL_DEFINE.finditer(llvm_ir)
        if not _LOCAL_LINKAGES & set(match.group(1).split())
    )


def object_cache_key(llvm_ir: str) -> str:
    """Hash of everything that determines the object code generated for `llvm_ir`."""
    host = host_target()
    parts = (
        _PIPELINE_VERSION,
        llvmlite.__version__,
        ".".join(map(str, llvm.llvm_version_info)),
        host.triple,
        host.cpu_name,
        host.features,
        llvm_ir,
    )
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


class JitModule:
    """Native code for one LLVM module, loaded into the process-wide JIT."""

    def __init__(
        self,
        name: str,
        source_ir: str,
        object_code: bytes,
        *,
        optimized_ir: str | None,
        from_cache: bool,
    ) -> None:
        self.name = name
        self.source_ir = source_ir
        self.from_cache = from_cache
        self.symbols = exported_symbols(source_ir)
        self._optimized_ir = optimized_ir
        self._asm: str | None = None
        self._library = _link(name, object_code, self.symbols)

    def address(self, symbol: str) -> int:
        """The native address of the exported function `symbol`."""
        if symbol not in self.symbols:
            raise KeyError(f"module {self.name!r} exports no function {symbol!r}")
        return self._library[symbol]

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR (recomputed on first use for modules loaded from cache)."""
        if self._optimized_ir is None:
            self._optimized_ir = optimize(self.source_ir, name=self.name)
        return self._optimized_ir

    @property
    def asm(self) -> str:
        """The host assembly for the optimised IR, generated on first use."""
        if self._asm is None:
            with _LLVM_LOCK:
                module = _parse(self.llvm_ir, self.name)
                self._asm = host_target().target_machine.emit_assembly(module)
        return self._asm


def _link(name: str, object_code: bytes, symbols: tuple[str, ...]) -> llvm.ResourceTracker:
    """Load object code as a fresh JIT library and resolve the exported symbols."""
    builder = llvm.JITLibraryBuilder().add_object_img(object_code).add_current_process()
    for symbol in symbols:
        builder.export_symbol(symbol)
    with _LLVM_LOCK:
        return builder.link(_process_jit(), f"{name}#{next(_library_numbers)}")


def compile_module(llvm_ir: str, *, name: str, optimize_ir: bool = True) -> JitModule:
    """Compile LLVM IR text for the host CPU (or reuse cached object code) and load it.

    `optimize_ir=False` skips the O3 pipeline (for IR that is only cross-checked, such as
    the MLIR backend's, where compile time matters more than speed)."""
    key = object_cache_key(llvm_ir + ("" if optimize_ir else "\0unoptimized"))
    cached = cache.load(key)
    if cached is not None:
        try:
            return JitModule(name, llvm_ir, cached, optimized_ir=None, from_cache=True)
        except RuntimeError:
            pass
    with _LLVM_LOCK:
        module = _parse(llvm_ir, name)
        if optimize_ir:
            _optimize_module(module)
        optimized_ir = str(module)
        object_code = host_target().target_machine.emit_object(module)
    module_handle = JitModule(
        name, llvm_ir, object_code, optimized_ir=optimized_ir, from_cache=False
    )
    cache.store(key, object_code)
    return module_handle
