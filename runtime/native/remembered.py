"""Modules remembered by key: loaded in a later process without making their IR, and from
shared objects without LLVM (the warm start: docs/pipeline.md, "The whole-pipeline cache").

Consumes a key of what determines a module's IR (such as `artifacts.artifact_key`, which
also covers the host) and a function making that IR; produces the loaded `JitModule`.
The first process compiles the IR (`jit.compile_module`), notes the object code's key and
symbols under the remembered key, and has the object code linked into a shared object on
the background thread (`runtime/native/shared_objects.py`), which adds it to the note (one cache
entry per module). A later process finds the note and opens its shared object with
`dlopen` once the disk cache verified the entry (no LLVM), else links the cached object
code into the JIT (and has the shared object linked for the next process). A note without
an image (no NUL in it) reads as one not linked yet. `host_description`,
which every such key includes, is itself remembered under the CPU's identity from
/proc/cpuinfo and llvmlite's installed files, so that a warm start never asks LLVM for it,
nor imports llvmlite.

    module = remembered_module(key, make_ir, name="rv_f")
    module.address("rv_f")
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from types import ModuleType

from reverie.compiler.backend.matrix_tiles import tile_setting
from reverie.runtime.native import artifacts, cache, shared_objects
from reverie.runtime.native.jit_module import (
    KERNEL_PIPELINE,
    LIVE_MODULES,
    JitModule,
    Pipeline,
)


def jit_on_demand() -> ModuleType:
    """`jit.py`, imported on first use: a warm start's one way to LLVM (and llvmlite), taken
    only when nothing loadable was remembered or a loaded module's LLVM IR is asked for."""
    from reverie.runtime.native import jit

    return jit


def remembered_module(key: str, make_ir: Callable[[], str], *, name: str,
                      pipeline: Pipeline | None = KERNEL_PIPELINE) -> JitModule:
    """`jit.compile_module(make_ir())`, remembered under `key` (a key of what determines
    the IR, such as `artifacts.artifact_key`, which must also cover the host): a later
    process finds the object code's key and symbols under `key` and loads the code without
    making the IR (`make_ir` runs only if the IR is asked for). Like `jit.shared_module`,
    a module still loaded under `key` is handed out again."""
    live = LIVE_MODULES.get((pipeline, key))
    if live is None:
        live = LIVE_MODULES.setdefault((pipeline, key), _remembered(key, make_ir, name, pipeline))
    return live


def _remembered(key: str, make_ir: Callable[[], str], name: str,
                pipeline: Pipeline | None) -> JitModule:
    """`remembered_module` without the sharing of loaded modules (and without the look-up
    under `key` when the whole-pipeline cache is not in use: `artifacts.in_use`)."""
    note = read_note(key) if artifacts.in_use() else None
    if note is not None:
        object_key, symbols, image = note
        module = _load_remembered(key, name, make_ir, object_key, symbols, image, pipeline)
        if module is not None:
            return module
        cache.discard(key)
    jit = jit_on_demand()
    llvm_ir = make_ir()
    module = jit.compile_module(llvm_ir, name=name, pipeline=pipeline)
    object_key = jit.object_cache_key(llvm_ir, pipeline)
    cache.store(key, _note(object_key, module.symbols))
    _link_later(key, object_key, module.symbols)
    return module


# A note: the object code's key and the module's symbols, one per line (ASCII), then, once
# the background thread linked it, a NUL and the shared object's image: one cache entry,
# so a warm start reads and authenticates one file per module, not two.
_IMAGE_SEPARATOR = b"\0"


def _note(object_key: str, symbols: tuple[str, ...], image: bytes = b"") -> bytes:
    """The note remembered for a module (see above)."""
    text = "\n".join([object_key, *symbols]).encode("ascii")
    return text + _IMAGE_SEPARATOR + image if image else text


def read_note(key: str) -> tuple[str, tuple[str, ...], bytes] | None:
    """The object code's key, the symbols and the shared object's image (empty: not linked
    yet) remembered under `key`, or None."""
    data = cache.load(key)
    if data is None:
        return None
    text, _, image = data.partition(_IMAGE_SEPARATOR)
    object_key, *symbols = text.decode("ascii", "replace").split("\n")
    return object_key, tuple(symbols), image


def _load_remembered(key: str, name: str, make_ir: Callable[[], str], object_key: str,
                     symbols: tuple[str, ...], image: bytes,
                     pipeline: Pipeline | None) -> JitModule | None:
    """The module for remembered object code: the note's shared object opened with
    `dlopen` when it has one (no LLVM), else the object code linked into the JIT (and a
    shared object linked for the next process); None when neither is usable."""
    if image and shared_objects.enabled():
        try:
            library = shared_objects.SharedLibrary(image)
            for symbol in symbols:  # every exported function resolves, or none is used
                library[symbol]
            return JitModule(name, make_ir, library, optimized_ir=None, from_cache=True,
                             pipeline=pipeline, symbols=symbols, llvm=jit_on_demand)
        except (OSError, AttributeError):  # the note without it, linked again below
            cache.store(key, _note(object_key, symbols))
    code = cache.load(object_key)
    if code is None:
        return None
    module = jit_on_demand()._jit_cached(name, make_ir, code, pipeline, symbols)
    if module is not None:
        _link_later(key, object_key, symbols)
    return module


def _link_later(key: str, object_key: str, symbols: tuple[str, ...]) -> None:
    """Link the cached object code under `object_key` into a shared object on the
    background thread and remember it with the note under `key` (in the cache in use now),
    unless that is off."""
    if not (shared_objects.enabled() and cache.cache_enabled()):
        return
    root = cache.cache_dir()

    def link_and_store() -> None:
        code = cache.load(object_key, root=root)
        image = None if code is None else shared_objects.link(code)
        if image is not None:
            cache.store(key, _note(object_key, symbols, image), root=root)

    shared_objects.link_later(link_and_store)


CPU_IDENTITY_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")


def _cpu_identity() -> str | None:
    """The first CPU's identity from /proc/cpuinfo (vendor, family, model, stepping, flags:
    what LLVM's host CPU name and features derive from), or None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            first_cpu = file.read().split("\n\n", 1)[0]
    except OSError:
        return None
    fields = [line for line in first_cpu.splitlines()
              if line.split(":", 1)[0].strip() in CPU_IDENTITY_FIELDS]
    return "\n".join(fields) if len(fields) == len(CPU_IDENTITY_FIELDS) else None


# llvmlite's files that change with its version and its LLVM (found without importing it)
LLVMLITE_FILES = ("_version.py", os.path.join("binding", "libllvmlite.so"))


def _llvmlite_identity() -> str | None:
    """Path, size and modification time (ns) of llvmlite's version file and LLVM library,
    or None where llvmlite is not installed (as there, per process, CPython trusts a
    source file's size and time): what changes when another llvmlite is installed."""
    directories = artifacts.package_directories("llvmlite")
    if not directories:
        return None
    package = directories[0]
    parts = []
    for name in LLVMLITE_FILES:
        path = os.path.join(package, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        parts.append(f"{path}\0{info.st_size}\0{info.st_mtime_ns}")
    return "\n".join(parts)


@functools.cache
def host_description() -> str:
    """The host CPU as code generation sees it (triple, CPU name and features) and the
    llvmlite and LLVM versions that generate it.

    Asking LLVM needs `llvmlite.binding`; so the answer is also kept in the disk cache
    under the CPU's identity from /proc/cpuinfo and llvmlite's installed files, and a
    later process on the same CPU with the same llvmlite reads it from there without
    importing llvmlite."""
    identity, llvmlite_identity = _cpu_identity(), _llvmlite_identity()
    # the vector width setting changes the features (compiler/backend/vector_width.py's),
    # the storage conversion and tile settings the code (compiler/backend/storage_hardware.py's
    # and matrix_tiles.py's; asking for the tiles here, so a warm start has asked before it
    # runs a kernel using them)
    width = os.environ.get("REVERIE_VECTOR_BITS", "").strip()
    conversion = os.environ.get("REVERIE_STORAGE_CONVERSION", "").strip()
    key = (identity and llvmlite_identity is not None
           and cache.digest(f"reverie-host-5\0{llvmlite_identity}\0{identity}\0{width}"
                            f"\0{conversion}\0{tile_setting()}"))
    remembered = cache.load(key) if key else None
    if remembered is not None:
        return remembered.decode("utf-8", "replace")
    import llvmlite  # (LLVM, and llvmlite with it: only when nothing was remembered)

    jit = jit_on_demand()
    host = jit.host_target()
    llvm_version = ".".join(map(str, jit.llvm.llvm_version_info))
    description = (f"{host.triple} {host.cpu_name} {host.features} "
                   f"llvmlite {llvmlite.__version__} LLVM {llvm_version} "
                   f"storage conversions {host.conversions} matrix tiles {host.tiles}")
    if key:
        cache.store(key, description.encode("utf-8"))
    return description
