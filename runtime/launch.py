"""Launch records: a kernel specialisation's native call entry made from the disk cache
without its IR, so a warm start imports neither the front end, the IR, the passes nor LLVM.

Consumes the whole-pipeline cache key of a specialisation's tensor IR (`ir_key`: what
`Kernel.ir_for` keeps the IR under, `runtime/artifacts.py`); produces the Python callable
that runs its native entry (`runtime/fastcall.py`), or None when the cache cannot give
everything the entry needs. The launch record is plain data — the entry's symbol and name,
its call signature (the parameters' and outputs' dtypes and ranks, ...: what the process's
one native call entry needs to know of it, `codegen/fastcall_descriptor.py`), the run-time
helpers it calls, the key of its object code — written by `remember` once a
specialisation's native entry was made the usual way (`NativeKernel.launch_record`). A
later process reads the record, opens the object code's shared object
(`runtime/remembered.py`: verified by the disk cache's MAC before `dlopen`, never LLVM when
it is there), fills the helper table (`runtime/helpers.py`) and builds the entry;
everything it reads came through `runtime/cache.py`, so only bytes this user's processes
wrote for these keys.

The entry takes the calls it can take natively and hands every other one (Tensors, a
conversion, a bad argument) to its fallback, the Python call path, which then builds the
IR and explains: errors are those of the slow path, by construction.

    entry = native_entry(ir_key, fallback, tuple_result=False, make_ir=build_llvm_ir)
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.compiler.codegen.abi import HELPERS
from reverie.compiler.codegen.fastcall_descriptor import BIND_SUFFIX, CallSignature

from . import artifacts, fastcall
from .helpers import load_helpers
from .remembered import host_description, remembered_module

RECORD_FIELDS = 6  # symbol, name, call signature, helpers, own kernel?, object key


def launch_key(ir_key: str) -> str:
    """The cache key of the launch record of the specialisation whose IR is under `ir_key`."""
    return artifacts.artifact_key("launch", ir_key, host_description())


def remember(ir_key: str, record: tuple | None) -> None:
    """Keep `record` (`NativeKernel.launch_record`; None: nothing) for a later process."""
    if record is not None and artifacts.in_use():
        artifacts.store(launch_key(ir_key), record)


def _well_formed(record: object) -> bool:
    """Whether `record` has the shape `remember` writes (a defence in depth: it was
    authenticated as this user's own, but may come from a different version's writer)."""
    if not isinstance(record, tuple) or len(record) != RECORD_FIELDS:
        return False
    symbol, name, signature, helpers, own_kernel, object_key = record
    return (all(isinstance(text, str) for text in (symbol, name, object_key))
            and isinstance(own_kernel, bool)
            and isinstance(signature, CallSignature) and signature.well_formed()
            and isinstance(helpers, tuple) and all(helper in HELPERS for helper in helpers))


def native_entry(ir_key: str, fallback: Callable[..., object], tuple_result: bool,
                 make_ir: Callable[[], str]) -> Callable[..., object] | None:
    """The native entry of the specialisation whose IR is under `ir_key`, passing the calls
    it does not take to `fallback` (as `NativeKernel.native_entry` does); None when there
    is no launch record or the layouts the entry reads are not this interpreter's.
    `make_ir` gives the specialisation's LLVM IR should its object code be missing."""
    if not fastcall.LAYOUT_OK:
        return None
    record = artifacts.load(launch_key(ir_key))
    if not _well_formed(record):
        return None
    symbol, name, signature, helpers, own_kernel, object_key = record
    module = remembered_module(object_key, make_ir, name=symbol)
    table = load_helpers(frozenset(helpers), own_kernel=own_kernel)
    return fastcall.native_entry(module.address(symbol), module.address(symbol + BIND_SUFFIX),
                                 name, fallback, signature, tuple_result, table,
                                 keep_alive=module)
