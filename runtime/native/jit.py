"""JIT compilation of LLVM IR text to native code for the host CPU, with an object cache.

Consumes LLVM IR text (as printed by `llvmlite.ir.Module`); produces a `JitModule`
(`runtime/native/jit_module.py`, with `Pipeline`: what a warm start needs without this module)
whose `address(symbol)` is a callable native function pointer for each externally visible
function defined in the IR. The last two stages of the ladder (`compiler/pipeline.py`) are
here: `llvm-opt` makes an `LlvmModule` (IR with its optimisation pipeline, optimised text
and assembly on request, no JIT), `jit` loads it (`LlvmModule.load`, `shared_module`).

Pipeline of `compile_module`:
  1. key = BLAKE2b-256 (`cache.digest`) of the IR text, optimisation pipeline, Reverie
     and llvmlite/LLVM versions, triple, host CPU name and features;
  2. cache hit (an entry this user wrote for this key, see runtime/native/cache.py): if its ELF
     header (class, byte order, type ET_REL, machine, flags) is the one this process emits,
     load the object code straight into the JIT (no optimisation, no code generation);
     otherwise, or if linking fails, delete the entry and go on as for a miss;
  3. miss: parse + verify, optimise with the module's `Pipeline` (kernels: O2 with the
     loop and SLP vectorisers, see `KERNEL_PIPELINE`; then the always-inliner, for calls
     the vectoriser made to `alwaysinline` vector versions), emit an object file for the host CPU
     (at codegen level 3, or 0 for a module with a basic block over HUGE_BLOCK
     instructions: see `_code_generator`; loop strength reduction only where the pipeline
     asks for it, not for kernels), store it, load it. The optimised IR goes to the
     printing hook as pass `llvm-opt` (REVERIE_PRINT_IR; on a hit it is recomputed for
     printing only).

Modules the whole-pipeline cache knows by key load through `runtime/native/remembered.py`,
from shared objects without LLVM where it can; so `llvmlite.binding` is imported on first
use only (`llvm` below).

One ORC LLJIT instance serves the whole process; each module becomes its own JIT library,
unloaded when its `JitModule` is garbage-collected (`live_library_count()` says how many
are loaded). `shared_module` hands out the loaded module for IR text that is already
loaded instead of compiling it again. A process-wide lock serialises all LLVM work
(compiling from several threads is safe, not faster); but LLVM runs without the GIL, so
`runtime/native/compile_queue.py` compiles the per-process modules (the call entry, the
helpers) on one background thread while the main thread runs Python.

Memory per compiled module: each is parsed into its own LLVM context, freed with the
module once the object code is emitted (the global context would keep every type and
constant forever), and the pass manager is freed explicitly (llvmlite 0.50's
`ModulePassManager.close()` frees nothing). What stays (LLVM 22, llvmlite 0.50): per JIT
library ever linked, its JITDylib, symbol tables and process-symbol generator (llvmlite
names a new JITDylib per link and cannot remove one), and per optimisation, the
PassInstrumentationCallbacks that llvmlite's `create_pass_builder` allocates and never
deletes; so each distinct compile-and-call cycle grows the process by a few kilobytes.
Setting up the host target also turns off LLVM's epilogue vectorisation process-wide (less
compile time, no measured slowdown).

Assumes generated IR holds no process-specific addresses (pass pointers as arguments), so
the cached object code is valid in any process on the same CPU.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
import struct
import sys
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType

import llvmlite

from reverie.compiler.backend.matrix_tiles import matrix_tiles
from reverie.compiler.backend.storage_hardware import requested_conversion
from reverie.compiler.backend.vector_width import target_features
from reverie.compiler.print_ir import show
from reverie.runtime.native import cache
from reverie.runtime.native.jit_module import (
    KERNEL_PIPELINE,
    LIVE_MODULES,
    JitModule,
    Pipeline,
)
from reverie.runtime.native.libcalls import LIBCALL_IR, LIBCALLS, called_libcalls
from reverie.runtime.native.locks import runtime_lock
from reverie.runtime.native.version import VERSION


class _LazyBinding:
    """`llvmlite.binding`, imported on first use: importing it loads LLVM, which a warm
    start whose modules come from shared objects never needs."""

    def __getattr__(self, name: str) -> object:
        import llvmlite.binding

        return getattr(llvmlite.binding, name)


llvm = _LazyBinding()
# Part of every object-cache key: changed whenever the same IR text and `Pipeline` would
# give different object code (how modules are optimised or emitted, the native entry's ABI).
_PIPELINE_VERSION = "reverie-jit-8"
HUGE_BLOCK = 2000
_LLVM_LOCK = runtime_lock(reentrant=True)
_library_numbers = itertools.count()
_EXTERNAL_DEFINE = re.compile(r'^define\s+([^@\n]*)@("?)([^"(\s]+)\2\(', re.MULTILINE)
_LOCAL_LINKAGES = frozenset({"internal", "private", "available_externally"})
_LIBRARIES: weakref.WeakSet[llvm.ResourceTracker] = weakref.WeakSet()


class InternalCompilerError(RuntimeError):
    """LLVM refused the code Reverie generated (a bug in Reverie, never in the user's
    program). The message is Reverie's own; LLVM's text is kept in `llvm_message`."""

    def __init__(self, module: str, llvm_message: str) -> None:
        self.llvm_message = llvm_message
        super().__init__(f"internal compiler error: LLVM could not compile the code Reverie "
                         f"generated for '{module}'. This is a bug in Reverie, not in your "
                         "program; please report it with the source that triggered it.")


class LlvmModule:
    """LLVM IR on its way to the JIT (what the ladder's `llvm-opt` stage returns): the IR
    as generated, its name, and the pipeline that optimises it (None: none).

    The disk cache is keyed on the unoptimised IR, so the optimiser runs when the module is
    compiled (`load`: skipped on a cache hit), or when `optimized_ir` or `asm` is first
    asked for (printing, `module.ir("llvm")`), which compiles nothing."""

    def __init__(self, source_ir: str, *, name: str,
                 pipeline: Pipeline | None = KERNEL_PIPELINE) -> None:
        self.source_ir = source_ir
        self.name = name
        self.pipeline = pipeline
        self._optimized_ir: str | None = None

    @property
    def optimized_ir(self) -> str:
        """The IR after the optimiser (computed on first use)."""
        if self._optimized_ir is None and self.pipeline is None:
            self._optimized_ir = self.source_ir
        elif self._optimized_ir is None:
            text = optimize(self.source_ir, name=self.name, pipeline=self.pipeline)
            show("llvm-opt", self.name, lambda: text)
            self._optimized_ir = text
        return self._optimized_ir

    @property
    def asm(self) -> str:
        """The host assembly of the optimised IR."""
        return assembly(self.optimized_ir, self.name, self.pipeline)

    def load(self) -> JitModule:
        """The module compiled and loaded into the JIT (`shared_module`)."""
        return shared_module(self.source_ir, name=self.name, pipeline=self.pipeline)


class HostTarget:
    """The host CPU as LLVM sees it, a target machine generating code for it, how the
    code converts bf16/f16 (`conversions`: REVERIE_STORAGE_CONVERSION's choice) and whether
    bf16 products run on AMX tiles (`tiles`: `backend/matrix_tiles.py`)."""

    __slots__ = ("target_machine", "triple", "cpu_name", "features", "conversions", "tiles")

    def __init__(self, target_machine: llvm.TargetMachine, triple: str, cpu_name: str,
                 features: str, tiles: str) -> None:
        self.target_machine = target_machine
        self.triple = triple
        self.cpu_name = cpu_name
        self.features = features
        self.conversions = requested_conversion()
        self.tiles = tiles


@functools.cache
def host_target() -> HostTarget:
    """Initialise LLVM's native target once and describe the host CPU."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("", "-enable-epilogue-vectorization=false")
    # LLVM's scalar lowering of AMX tile instructions in `optnone` functions: only the
    # emulated tile kernel has such functions (`runtime_library/gemm_amx.py`)
    llvm.set_option("", "-enable-x86-scalar-amx")
    triple = llvm.get_process_triple()
    cpu_name = llvm.get_host_cpu_name()
    host_features = llvm.get_host_cpu_features()
    features = target_features(host_features, host_features.flatten())
    return HostTarget(_target_machine(triple, cpu_name, features, 3), triple, cpu_name,
                      features, matrix_tiles(host_features))


def _target_machine(triple: str, cpu_name: str, features: str, opt: int) -> llvm.TargetMachine:
    """A target machine for the host CPU generating code at optimisation level `opt`.

    The large code model: LLVM's JIT linker (RuntimeDyld, behind llvmlite's LLJIT) maps a
    module's code, constants and data in separate blocks, which in a process with large
    mappings (workspaces, JAX, torch) can lie more than 2 GB apart, out of reach of the
    small model's 32-bit PC-relative references (an assertion in LLVM, silent corruption
    without one). With the large model every reference is 64-bit; run times are unchanged
    within noise (W1, W3, W5, W7, W8, one thread, alternating processes)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu_name, features=features, opt=opt, reloc="pic", codemodel="large"
    )


@functools.cache
def _straight_line_target() -> llvm.TargetMachine:
    """A target machine for the host CPU generating code without optimisation, for
    functions with a huge basic block (see `_code_generator`)."""
    host = host_target()
    return _target_machine(host.triple, host.cpu_name, host.features, 0)


def _largest_block(llvm_ir: str) -> int:
    """The number of instructions in the longest basic block of (printed) `llvm_ir`."""
    longest = current = 0
    for line in llvm_ir.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            current += 1
            longest = max(longest, current)
        else:
            current = 0
    return longest


def _code_generator(optimized_ir: str) -> llvm.TargetMachine:
    """The target machine that emits `optimized_ir`: the level-3 one, unless a basic block
    holds more than HUGE_BLOCK instructions. At levels 1 to 3 LLVM's instruction schedulers
    take time quadratic in a block's length; level 0 emits such a block quickly. Such blocks
    are nearly always straight-line code that runs once per call (wide tuples, unrolled
    scalar code); the choice depends on the IR alone, so the cache key stays the IR's."""
    if _largest_block(optimized_ir) > HUGE_BLOCK:
        return _straight_line_target()
    return host_target().target_machine


def _set_strength_reduction(pipeline: Pipeline | None) -> None:
    """Turn LLVM's loop strength reduction on or off for the next code generation, as
    `pipeline` says (a process-wide LLVM option, read when a code generator sets up its
    passes; callers hold the lock)."""
    enabled = pipeline is None or pipeline.strength_reduction
    llvm.set_option("", f"-disable-lsr={'false' if enabled else 'true'}")


@functools.cache
def _process_jit() -> llvm.LLJIT:
    """The process-wide ORC JIT; it is never disposed, so libraries can outlive it safely."""
    jit = llvm.create_lljit_compiler(host_target().target_machine)
    jit._owned = True
    return jit


def _optimize_module(module: llvm.ModuleRef, pipeline: Pipeline) -> None:
    """Run `pipeline` on `module`, in place."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=pipeline.speed_level)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = pipeline.slp_vectorization
    tuning.loop_interleaving = True
    tuning.loop_unrolling = pipeline.loop_unrolling
    pass_builder = llvm.create_pass_builder(host_target().target_machine, tuning)
    pass_manager = pass_builder.getModulePassManager()
    try:
        pass_manager.run(module, pass_builder)
        # the vectoriser's calls to `alwaysinline` vector versions (sin and cos: trig.py)
        inline_after_vectorising = llvm.create_new_module_pass_manager()
        inline_after_vectorising.add_always_inliner_pass()
        inline_after_vectorising.run(module, pass_builder)
    finally:
        from llvmlite.binding.newpassmanagers import NewPassManager

        # llvmlite 0.50's ModulePassManager.close() frees nothing (its MRO picks
        # ObjectRef's empty _dispose), which would keep the whole pipeline: free it here.
        NewPassManager._dispose(pass_manager)
        pass_manager.detach()
        pass_builder.close()
        tuning.close()


@contextlib.contextmanager
def parsed_in_context(llvm_ir: str, name: str) -> Iterator[tuple[llvm.ModuleRef, llvm.ContextRef]]:
    """IR text parsed and verified into a fresh LLVM context (LLVM's global one would keep
    every type and constant it ever saw), tagged with the host triple and data layout: the
    module and its context (to parse more IR into, `first_tier.py`), both freed on exit.
    The caller holds `_LLVM_LOCK` while entering."""
    context = llvm.create_context()
    try:
        module = llvm.parse_assembly(llvm_ir, context)
        try:
            module.name = name
            module.triple = host_target().triple
            module.data_layout = str(host_target().target_machine.target_data)
            module.verify()
            yield module, context
        finally:
            module.close()
    finally:
        context.close()


@contextlib.contextmanager
def _parsed(llvm_ir: str, name: str) -> Iterator[llvm.ModuleRef]:
    """`parsed_in_context`'s module alone."""
    with parsed_in_context(llvm_ir, name) as (module, _):
        yield module


def optimize(llvm_ir: str, *, name: str = "module",
             pipeline: Pipeline = KERNEL_PIPELINE) -> str:
    """Return `llvm_ir` optimised by `pipeline` (default: the kernels'), as text."""
    with _LLVM_LOCK, _parsed(llvm_ir, name) as module:
        _optimize_module(module, pipeline)
        return str(module)


def this_module() -> ModuleType:
    """This module: the `llvm` of the JitModules it makes (their optimised IR, assembly)."""
    return sys.modules[__name__]


def assembly(optimized_ir: str, name: str = "module",
             pipeline: Pipeline | None = KERNEL_PIPELINE) -> str:
    """The host assembly for IR text already optimised by `pipeline`."""
    with _LLVM_LOCK, _parsed(optimized_ir, name) as module:
        _set_strength_reduction(pipeline)
        return _code_generator(optimized_ir).emit_assembly(module)


def _exported(llvm_ir: str) -> Iterator[str]:
    """Names of the functions that `llvm_ir` defines with external linkage, in order."""
    for match in _EXTERNAL_DEFINE.finditer(llvm_ir):
        if not _LOCAL_LINKAGES & set(match.group(1).split()):
            yield match.group(3)


def exported_symbols(llvm_ir: str) -> tuple[str, ...]:
    """Names of the functions that `llvm_ir` defines with external linkage."""
    return tuple(_exported(llvm_ir))


def first_exported_symbol(llvm_ir: str) -> str:
    """The first function `llvm_ir` defines with external linkage ("module" if none): the
    name of a module (a kernel's entry function comes first; found without reading on)."""
    return next(_exported(llvm_ir), "module")


def reverie_version() -> str:
    """The version of this Reverie (`runtime/native/version.py`, pyproject.toml's)."""
    return VERSION


def object_cache_key(llvm_ir: str, pipeline: Pipeline | None = KERNEL_PIPELINE) -> str:
    """Hash of everything that determines the object code generated for `llvm_ir` optimised
    by `pipeline` (None: not optimised)."""
    host = host_target()
    parts = (
        _PIPELINE_VERSION,
        repr(pipeline),
        reverie_version(),
        llvmlite.__version__,
        ".".join(map(str, llvm.llvm_version_info)),
        host.triple,
        host.cpu_name,
        host.features,
        llvm_ir,
    )
    return cache.digest("\0".join(parts))


def _link(name: str, object_code: bytes, symbols: tuple[str, ...]) -> llvm.ResourceTracker:
    """Load object code as a fresh JIT library and resolve the exported symbols (the
    routines of `libcalls.py` it calls resolved to their definitions)."""
    builder = llvm.JITLibraryBuilder().add_object_img(object_code).add_current_process()
    for symbol in symbols:
        builder.export_symbol(symbol)
    for symbol in called_libcalls(object_code):
        builder.import_symbol(symbol, _libcalls().address(LIBCALLS[symbol]))
    with _LLVM_LOCK:
        library = builder.link(_process_jit(), f"{name}#{next(_library_numbers)}")
    _LIBRARIES.add(library)
    return library


@functools.cache
def _libcalls() -> JitModule:
    """The definitions of `libcalls.py`, compiled once per process."""
    return compile_module(LIBCALL_IR, name="libcalls", pipeline=None)


def live_library_count() -> int:
    """How many JIT libraries are loaded now (each is unloaded with its last `JitModule`)."""
    return len(_LIBRARIES)


def shared_module(llvm_ir: str, *, name: str,
                  pipeline: Pipeline | None = KERNEL_PIPELINE) -> JitModule:
    """`compile_module`, except that IR identical to a module still loaded (with the same
    pipeline) reuses that module (no compilation, no new JIT library)."""
    key = (pipeline, llvm_ir)
    module = LIVE_MODULES.get(key)
    if module is None:
        module = compile_module(llvm_ir, name=name, pipeline=pipeline)
        module = LIVE_MODULES.setdefault(key, module)
    return module


def _elf_identity(object_code: bytes) -> tuple[int, ...] | None:
    """Class, byte order, version, file type, machine and flags of an ELF file, else None."""
    if len(object_code) < 64 or object_code[:4] != b"\x7fELF" or object_code[5] not in (1, 2):
        return None
    elf_class, byte_order, version = object_code[4:7]
    endian = "<" if byte_order == 1 else ">"
    file_type, machine = struct.unpack_from(endian + "HH", object_code, 16)
    (flags,) = struct.unpack_from(endian + "I", object_code, 36 if elf_class == 1 else 48)
    return elf_class, byte_order, version, file_type, machine, flags


@functools.cache
def _host_object_identity() -> tuple[int, ...] | None:
    """The ELF identity of the relocatable objects (ET_REL) this process emits for its CPU."""
    with _LLVM_LOCK, _parsed("", "reference") as module:
        reference = host_target().target_machine.emit_object(module)
    return _elf_identity(reference)


def _jit_cached(name: str, llvm_ir: str | Callable[[], str], object_code: bytes,
                pipeline: Pipeline | None,
                symbols: tuple[str, ...] | None = None) -> JitModule | None:
    """The module for cached object code, or None if it is not for this host or fails to link."""
    identity = _elf_identity(object_code)
    if identity is None or identity != _host_object_identity():
        return None
    if symbols is None:
        llvm_ir = llvm_ir if isinstance(llvm_ir, str) else llvm_ir()
        symbols = exported_symbols(llvm_ir)
    try:
        library = _link(name, object_code, symbols)
    except RuntimeError:
        return None
    return JitModule(name, llvm_ir, library, optimized_ir=None, from_cache=True, llvm=this_module,
                     pipeline=pipeline, symbols=symbols)


def compile_module(llvm_ir: str, *, name: str,
                   pipeline: Pipeline | None = KERNEL_PIPELINE) -> JitModule:
    """Compile LLVM IR text for the host CPU (or reuse cached object code) and load it.

    `pipeline=None` skips optimisation (for IR that is only cross-checked, such as the
    MLIR backend's, where compile time matters more than speed)."""
    key = object_cache_key(llvm_ir, pipeline)
    cached = cache.load(key)
    if cached is not None:
        module_handle = _jit_cached(name, llvm_ir, cached, pipeline)
        if module_handle is not None:
            if pipeline is not None:
                show("llvm-opt", f"{name} (object code from the disk cache)",
                     lambda: module_handle.llvm_ir)
            return module_handle
        cache.discard(key)
    try:
        with _LLVM_LOCK, _parsed(llvm_ir, name) as module:
            if pipeline is not None:
                _optimize_module(module, pipeline)
            optimized_ir = str(module)
            if pipeline is not None:
                show("llvm-opt", name, lambda: optimized_ir)
            _set_strength_reduction(pipeline)
            object_code = _code_generator(optimized_ir).emit_object(module)
        symbols = exported_symbols(llvm_ir)
        module_handle = JitModule(name, llvm_ir, _link(name, object_code, symbols),
                                  optimized_ir=optimized_ir, from_cache=False, llvm=this_module,
                                  pipeline=pipeline, symbols=symbols)
    except RuntimeError as error:  # LLVM rejected what codegen produced: Reverie's bug
        raise InternalCompilerError(name, str(error)) from None
    cache.store(key, object_code)
    return module_handle
