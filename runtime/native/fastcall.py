"""Native call entries as Python callables (the other half of
`call_boundary/fastcall_entry.py`), and launch records: a kernel specialisation's entry made
from the disk cache without its IR, so a warm start imports neither the front end, the IR,
the passes nor LLVM. (One module: every module a warm start imports costs it time, however
small.)

`native_entry` wraps the one native call entry of the process (`rv_vectorcall`, loaded by
`helpers.call_entry`) in a CPython builtin function object per kernel (`PyCFunction_NewEx`
with METH_FASTCALL | METH_KEYWORDS), whose `self` is the tuple that tells the entry which
kernel it calls and how: the fallback (the Python call path), `numpy.ndarray`, `float`,
`int`, `numpy.empty`, the output pool's `empty` (for outputs of `abi.POOLED_OUTPUT_BYTES`
or more, `output_pool.py`), the helper table, the cell holding the kernel's spare workspace
block (`runtime_library/workspace_cache.py`; freed when the callable goes), the call descriptor
(`call_boundary/fastcall_descriptor.py`: the signature, the kernel's and its `bind` function's
addresses, whether one result comes back as a 1-tuple), then the dtypes of the parameters
and outputs and the scalar types of the outputs. The tuple also keeps the method
definition and the kernel's JIT module alive as long as the callable is.

`LAYOUT_OK` says whether this interpreter's objects have the layout the entry reads
(checked once on real objects); where they do not, no entry is made and kernels keep the
Python path.

`launch_entry` consumes the whole-pipeline cache key of a specialisation's tensor IR
(`ir_key`: what `Kernel.ir_for` keeps the IR under, `runtime/native/artifacts.py`) and produces
its entry, or None when the cache cannot give everything the entry needs. The launch
record is plain data — the entry's symbol and name, its call signature (the parameters'
and outputs' dtypes and ranks, ...: what the process's one native call entry needs to know
of it, `call_boundary/fastcall_descriptor.py`), the run-time helpers it calls, the key of its
object code — written by `remember_launch` once a specialisation's native entry was made
the usual way (`NativeKernel.launch_record`). A later process reads the record, opens the
object code's shared object (`runtime/native/remembered.py`: verified by the disk cache's MAC
before `dlopen`, never LLVM when it is there), fills the helper table
(`runtime/native/helpers.py`) and builds the entry; everything it reads came through
`runtime/native/cache.py`, so only bytes this user's processes wrote for these keys.

The entry takes the calls it can take natively and hands every other one (Tensors, a
conversion, a bad argument) to its fallback, the Python call path, which then builds the
IR and explains: errors are those of the slow path, by construction.

    entry = launch_entry(ir_key, fallback, tuple_result=False, make_ir=build_llvm_ir)
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable

import numpy as np

from reverie.compiler.call_boundary.abi import (
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_FLAGS,
    ARRAY_NDIM,
    ARRAY_SHAPE,
    C_CONTIGUOUS,
    CALL_DESCRIPTOR,
    FIRST_DTYPE,
    FLOAT_VALUE,
    HELPERS,
    OB_TYPE,
    POOLED_EMPTY,
    SPARE_WORKSPACE,
    TUPLE_ITEMS,
)
from reverie.compiler.call_boundary.fastcall_descriptor import (
    BIND_SUFFIX,
    CallSignature,
    descriptor,
)
from reverie.compiler.ir.dtypes import NUMPY_DTYPES
from reverie.runtime.native import artifacts, output_pool
from reverie.runtime.native.helpers import call_entry, load_helpers
from reverie.runtime.native.remembered import host_description, remembered_module

METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002


class MethodDef(ctypes.Structure):
    """CPython's PyMethodDef."""

    _fields_ = [("name", ctypes.c_char_p), ("method", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
_free_block = ctypes.pythonapi.PyMem_RawFree
_free_block.restype = None
_free_block.argtypes = [ctypes.c_void_p]


def _word(address: int, offset: int, kind: type = ctypes.c_void_p) -> int | None:
    return kind.from_address(address + offset).value


def _layout_ok() -> bool:
    """Whether floats, tuples and ndarrays are laid out as `call_boundary/fastcall_entry.py`
    reads."""
    probe = np.empty((3, 5))
    items = (probe, 2.5)
    address = id(probe)
    return (
        _word(address, OB_TYPE) == id(np.ndarray)
        and _word(address, ARRAY_DATA) == probe.ctypes.data
        and _word(address, ARRAY_NDIM, ctypes.c_int32) == 2
        and ctypes.c_int64.from_address(_word(address, ARRAY_SHAPE) + 8).value == 5
        and _word(address, ARRAY_DESCR) == id(probe.dtype)
        and bool(_word(address, ARRAY_FLAGS, ctypes.c_int32) & C_CONTIGUOUS)
        and not _word(id(probe.T), ARRAY_FLAGS, ctypes.c_int32) & C_CONTIGUOUS
        and ctypes.c_double.from_address(id(items[1]) + FLOAT_VALUE).value == 2.5
        and _word(id(items), TUPLE_ITEMS + 8) == id(items[1])
        and np.dtype("f8") is np.empty(1).dtype is np.arange(2.0).dtype  # (no numpy.random)
    )


LAYOUT_OK = _layout_ok()


def native_entry(kernel: int, bind: int, name: str, fallback: Callable[..., object],
                 signature: CallSignature, tuple_result: bool, helpers: np.ndarray,
                 keep_alive: object) -> Callable[..., object]:
    """A Python callable named `name` running the native call entry on the kernel at
    address `kernel`, whose `bind` function is at `bind`; arguments it does not take
    natively go to `fallback` unchanged."""
    definition = MethodDef(name.encode(), call_entry(), METH_FASTCALL_KEYWORDS, None)
    spare_workspace = np.zeros(1, np.int64)
    words = np.array(descriptor(signature, kernel, bind, tuple_result), np.int64)
    slots = [fallback, np.ndarray, float, int, np.empty, output_pool.empty, helpers,
             spare_workspace, words]
    assert len(slots) == FIRST_DTYPE and slots[SPARE_WORKSPACE] is spare_workspace
    assert slots[POOLED_EMPTY] is output_pool.empty and slots[CALL_DESCRIPTOR] is words
    dtypes = [np.dtype(NUMPY_DTYPES[d]) for d, _ in (*signature.params, *signature.outputs)]
    slots += dtypes + [dtype.type for dtype in dtypes[len(signature.params):]]
    slots += [definition, keep_alive]
    function = _new_function(ctypes.addressof(definition), tuple(slots), None)
    weakref.finalize(function, free_spare_workspace, spare_workspace)
    return function


def free_spare_workspace(cell: np.ndarray) -> None:
    """Free the spare workspace block an entry left in `cell` (when the entry goes)."""
    block, cell[0] = int(cell[0]), 0
    if block:
        _free_block(block)


RECORD_FIELDS = 6  # symbol, name, call signature, helpers, own kernel?, object key


def launch_key(ir_key: str) -> str:
    """The cache key of the launch record of the specialisation whose IR is under `ir_key`."""
    return artifacts.artifact_key("launch", ir_key, host_description())


def remember_launch(ir_key: str, record: tuple | None) -> None:
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


def launch_entry(ir_key: str, fallback: Callable[..., object], tuple_result: bool,
                 make_ir: Callable[[], str]) -> Callable[..., object] | None:
    """The native entry of the specialisation whose IR is under `ir_key`, passing the calls
    it does not take to `fallback` (as `NativeKernel.native_entry` does); None when there
    is no launch record or the layouts the entry reads are not this interpreter's.
    `make_ir` gives the specialisation's LLVM IR should its object code be missing."""
    if not LAYOUT_OK:
        return None
    record = artifacts.load(launch_key(ir_key))
    if not _well_formed(record):
        return None
    symbol, name, signature, helpers, own_kernel, object_key = record
    module = remembered_module(object_key, make_ir, name=symbol)
    table = load_helpers(frozenset(helpers), own_kernel=own_kernel)
    return native_entry(module.address(symbol), module.address(symbol + BIND_SUFFIX), name,
                        fallback, signature, tuple_result, table, keep_alive=module)
