"""The whole-pipeline cache: what compiling produced, kept on disk so that a new process
skips the front end, the passes and LLVM: a warm start (docs/api.md §1–2 cache).

The object cache (`jit.py`) is keyed on LLVM IR, so using it still needs the parse, the
lowering, the passes and the code generator to run. The artifacts here are keyed on what
*determines* those results instead: the source and options, the function, the chain of
transforms and the dtype, plus the code fingerprint — every source file of Reverie (path,
size, modification time in ns), so editing the compiler invalidates everything it wrote. Kinds:

- "module": a source's function table (names, parameter names, declared dtypes), written
  once the whole source compiled without error (`reverie/module.py`);
- "ir": one kernel specialisation's tensor IR, a pickled `Function` (`reverie/kernel.py`);
- "native": the loop program the native backend made of that IR (call layout, error
  sites, call boundary) and, in `remembered.remembered_module`, the key of its object code
  (`runtime/native/native_kernel.py`);
- "launch": what making that specialisation's native entry needs, in plain data, so a
  warm start makes it without the IR (`runtime/native/fastcall.py`).

`REVERIE_PIPELINE_CACHE=0` makes every stage run again (the tests that replace a rule of
the compiler use it).

Entries are stored through `runtime/native/cache.py`, which authenticates every entry with the
user's secret: only bytes that this user's processes wrote are ever unpickled. Anything
that does not unpickle, or does not pickle (IR nested too deep for pickle's recursion),
is simply not cached.

    key = artifact_key("ir", kernel_identity, "f64")
    fn = load(key)              # None on a miss
    store(key, fn)
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pickle
import struct
import sys

from reverie.runtime.native import cache
from reverie.runtime.native.compiler_gate import observing

SOURCE_SUFFIXES = (".py", ".lark")
# what `in_use` asks of the pass printer (compiler/print_ir.py), imported only when a
# capture or REVERIE_PRINT_IR may be on: a warm start never imports it
_PRINT_IR_MODULE, _PRINT_IR_VARIABLE = "reverie.compiler.print_ir", "REVERIE_PRINT_IR"


@functools.cache
def code_fingerprint() -> str:
    """A hash of the path, size and modification time (ns) of every source file of Reverie
    (the public package, the front end, the compiler and the run time): what CPython's own
    bytecode invalidation trusts, here for every module, the ones a warm start never
    imports included, since they made what the cache holds.

    Hashed as the sorted paths joined by NULs, then the sizes and times as 64-bit integers
    (`struct`), not as the `repr` of the (path, size, time) list, which costs a warm start
    far more."""
    roots = _source_roots()
    signature: list[tuple[str, int, int]] = []
    for root in roots:
        _add_source_files(root, roots, signature)
    signature.sort()
    paths = "\0".join([path for path, _, _ in signature])
    numbers = struct.pack(f"<{2 * len(signature)}q",
                          *[number for _, size, time in signature for number in (size, time)])
    return cache.digest_bytes(paths.encode("utf-8", "surrogateescape") + numbers)


def _source_roots() -> frozenset[str]:
    """The directories of Reverie's packages (found without importing them; the wheel nests
    `reverie.compiler` and `reverie.dsl` in `reverie`'s, the source tree does not)."""
    runtime_root = os.path.dirname(os.path.dirname(__file__))  # runtime/, above native/
    # the run time's packages: siblings in the source tree, `reverie`'s children in a wheel
    packages = [path for name in ("reverie", "reverie.compiler", "reverie.dsl")
                for path in package_directories(name)]
    return frozenset(os.path.abspath(path) for path in (runtime_root, *packages)
                     if os.path.isdir(path))


def package_directories(name: str) -> list[str]:
    """The directories of package `name`, found without importing it."""
    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations or ()) if spec else []


def _add_source_files(directory: str, roots: frozenset[str],
                      signature: list[tuple[str, int, int]]) -> None:
    """Append (path, size, mtime_ns) of every SOURCE_SUFFIXES file under `directory`, not
    descending into `__pycache__` nor into another root (walked on its own). One `stat`
    per file and no more (os.scandir's entries know which are directories): the
    fingerprint runs on every warm start."""
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(SOURCE_SUFFIXES):
                info = entry.stat(follow_symlinks=False)
                signature.append((entry.path, info.st_size, info.st_mtime_ns))
            elif (name != "__pycache__" and entry.is_dir(follow_symlinks=False)
                  and entry.path not in roots):
                _add_source_files(entry.path, roots, signature)


def artifact_key(kind: str, *parts: object) -> str:
    """The cache key of an artifact of `kind` determined by `parts` (reprs of plain data)."""
    return cache.digest("\0".join(["reverie-artifact-1", kind, code_fingerprint(),
                                    *map(repr, parts)]))


def in_use() -> bool:
    """Whether stages may be skipped for cached results: not with REVERIE_PIPELINE_CACHE=0
    (every stage runs; the object cache still serves LLVM), nor while REVERIE_PRINT_IR or
    a capture wants to see passes run."""
    if os.environ.get("REVERIE_PIPELINE_CACHE", "1").strip() == "0":
        return False
    if (_PRINT_IR_MODULE not in sys.modules
            and os.environ.get(_PRINT_IR_VARIABLE, "").strip() in ("", "0")):
        return True  # no capture before print_ir is imported, nothing printed: a warm start
    return not observing()


def load(key: str) -> object | None:
    """The artifact stored under `key`, or None (missing, written by other code, or the
    cache not `in_use`)."""
    if not in_use():
        return None
    data = cache.load(key)
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception:  # written by another version of a class: rebuild it
        cache.discard(key)
        return None


def store(key: str, artifact: object) -> None:
    """Keep `artifact` under `key` (nothing when it does not pickle)."""
    if not cache.cache_enabled():
        return
    try:
        data = pickle.dumps(artifact, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, RecursionError, TypeError, AttributeError):
        return
    cache.store(key, data)
