"""The run-time helpers native kernels call, the helper table every kernel receives, and
the native call entry every kernel's Python callable runs.

Consumes helper names (`call_boundary/abi.py` HELPERS: the matrix-product kernels of
`runtime_library/gemm.py`, then the stable sort of `runtime_library/sort.py`, then the
linear-algebra helpers of `runtime_library/lapack.py`); produces the
process's helper table, an int64 array holding each loaded helper's address (in HELPERS
order), then the thread count and the worker pool's entry (`runtime/native/pool.py`). A
helper is compiled once per process at HELPER_PIPELINE, or loaded from the disk cache
without generating its IR (from a shared object, without LLVM, where there is one:
`runtime/native/remembered.py`); a matrix helper is told which BLAS `?gemm` to call: the
OpenBLAS NumPy uses where the operands' layout allows (`runtime/native/blas.py`;
`REVERIE_BLAS=0` or `use_blas(False)`: Reverie's own kernel only), and a linear-algebra
helper the LAPACK functions of the same library (`blas.find_lapack`).

The native call entry (`call_boundary/fastcall_entry.py`: one CPython vectorcall function,
table-driven, for every kernel) is a module of the same kind: compiled once per process, or
loaded from the disk cache (`call_entry`).

This module imports neither the IR nor the code generators (their generators are handles
of the gate, `runtime/native/compiler_gate.py`), so a warm start
(`runtime/native/fastcall.py`) fills the table without them;
`runtime/native/native_kernel.py` uses it too.

    table = load_helpers(frozenset({"rv_gemm_f64"}))    # what a kernel is passed
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np

from reverie.compiler.call_boundary.abi import (
    BF16_GEMM_HELPER,
    CALL_ENTRY,
    GEMM_HELPERS,
    HELPERS,
    LAPACK_FUNCTIONS,
    LINALG_HELPERS,
    POOL_SLOT,
    SORT_HELPERS,
)
from reverie.runtime.native.artifacts import artifact_key
from reverie.runtime.native.blas import blas_requested, find_blas, find_lapack
from reverie.runtime.native.compiler_gate import (
    bf16_gemm_helper_module,
    call_entry_module,
    gemm_helper_module,
    linalg_helper_module,
    sort_helper_module,
)
from reverie.runtime.native.jit_module import JitModule, Pipeline
from reverie.runtime.native.locks import runtime_lock
from reverie.runtime.native.pool import fill_table
from reverie.runtime.native.remembered import host_description, remembered_module

LOCK = runtime_lock(reentrant=True)  # loading helpers, and everything native_kernel.py compiles
_COMPILE_QUEUE = __package__ + ".compile_queue"  # the LLVM thread (cold compiles only)
CALL_ENTRY_AHEAD = ("call entry",)  # the call entry's module, on the LLVM thread
POOL_AHEAD = ("pool",)  # the worker pool's and signal handler's module (`runtime/native/pool.py`)


def helper_ahead(name: str) -> tuple[str, str]:
    """The key of the helper `name`'s module on the LLVM thread (`compile_queue.py`)."""
    return ("helper", name)

# The helpers' inner loops are written with explicit vector FMAs, so O2 without the SLP
# vectoriser and unrolling runs them as fast as O3 and compiles in less time.
HELPER_PIPELINE = Pipeline(speed_level=2, slp_vectorization=False)
# The native call entry is compiled without LLVM's optimiser: optimising it costs compile
# time and saves its calls nothing, since a call's work is CPython's and NumPy's functions.
ENTRY_PIPELINE = None


@functools.cache
def _helper(name: str) -> JitModule:
    """The compiled module of the run-time helper `name` (once per process; a process that
    finds it in the disk cache loads it without generating its IR)."""
    def make_ir() -> str:  # (the generator, and llvmlite.ir with it: only when made)
        generate = sort_helper_module if name in SORT_HELPERS else \
            linalg_helper_module if name in LINALG_HELPERS else \
            bf16_gemm_helper_module if name == BF16_GEMM_HELPER else gemm_helper_module
        return generate(name)

    key = artifact_key("helper", name, HELPER_PIPELINE, host_description())
    return remembered_module(key, make_ir, name=name, pipeline=HELPER_PIPELINE)


@functools.cache
def _call_entry_module() -> JitModule:
    """The module of the native call entry (`call_boundary/fastcall_entry.py`), compiled once per
    process (a process that finds it in the disk cache loads it without generating its
    IR); kept here, so its code stays loaded for the life of the process."""
    key = artifact_key("helper", CALL_ENTRY, ENTRY_PIPELINE, host_description())
    return remembered_module(key, call_entry_module, name=CALL_ENTRY, pipeline=ENTRY_PIPELINE)


def _finish_ahead(key: tuple) -> None:
    """Wait for the work under `key` started ahead on the LLVM thread, if any
    (`compile_queue.wait`; nothing in a process that never imported that module, such as
    a warm start)."""
    queue = sys.modules.get(_COMPILE_QUEUE)
    if queue is not None:
        queue.wait(key)


def call_entry() -> int:
    """The address of the native call entry `rv_vectorcall` every kernel's callable runs."""
    _finish_ahead(CALL_ENTRY_AHEAD)
    return _call_entry_module().address(CALL_ENTRY)


@functools.cache
def helper_table() -> np.ndarray:
    """The table passed to every kernel: addresses of the run-time helpers in `abi.HELPERS`
    order (0 until a kernel calling that helper is compiled), then the slots of the native
    run time: the signal count and re-arming, the thread count and the worker pool's entry
    (`runtime/native/pool.py`; see `call_boundary/abi.py`). A child process made by `fork` runs its
    kernels on one thread: the pool's threads were not copied into it."""
    table = np.zeros(POOL_SLOT + 1, dtype=np.int64)
    _finish_ahead(POOL_AHEAD)
    fill_table(table)
    os.register_at_fork(after_in_child=lambda: table.__setitem__(POOL_SLOT, 0))
    return table


def load_helpers(names: frozenset[str], *, own_kernel: bool = True) -> np.ndarray:
    """Compile the helpers `names` not yet loaded, hand each matrix helper the BLAS it may
    call, and enter them in the helper table; hand each matrix helper its own kernel too
    when `own_kernel` asks for it or no BLAS is in use (otherwise a kernel whose products
    BLAS always serves compiles no own kernel: `abi.needs_own_kernel`)."""
    table = helper_table()
    with LOCK:
        for name in names:
            slot = HELPERS.index(name)
            if not table[slot]:
                _finish_ahead(helper_ahead(name))
                if name in GEMM_HELPERS:
                    _give_blas(name, _blas_wanted[0])
                if name in LINALG_HELPERS:
                    _give_lapack(name)
                address = _helper(name).address(name)
                if name == BF16_GEMM_HELPER:
                    check_bf16_products(address)
                table[slot] = address
            if name in GEMM_HELPERS and (own_kernel or not _blas_in_use()):
                _give_own_kernel(name)
    return table


BF16_CHECK_SHAPE = (40, 70, 50)  # M, K, N: past the edges of every kernel's tiles
BF16_CHECK_SCRATCH = 1 << 20  # bytes, one task's packing scratch at least
# (runtime_library/gemm_bf16_blocking.py's PACK_PER_TASK: tests/native/test_amx_gemm.py)
_OPERAND = [ctypes.c_void_p] + [ctypes.c_int64] * 3  # base, batch, row and column strides
# `gemm.GEMM_TYPE`: batch, M, N, K, the operands A, B and C, then pack, threads, pool
_GEMM_ARGUMENTS = [ctypes.c_int64] * 4 + _OPERAND * 3 + [ctypes.c_void_p] + [ctypes.c_int64] * 2


def check_bf16_products(address: int) -> None:
    """Refuse a bf16 product kernel (`rv_gemm_bf16` at `address`) that gets one small
    product wrong: entries k/4 with |k| <= 3 make every sum exact in f32, whatever the
    order of its additions, so the kernel must give NumPy's f32 product bit for bit. The
    kernel chosen for the host (AMX tiles, `vdpbf16ps`) may be one no test ran on this
    CPU: better a clear error than wrong products."""
    m, k, n = BF16_CHECK_SHAPE
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-3, 4, shape).astype(np.float32) / 4 for shape in ((m, k), (k, n)))
    a_bits, b_bits = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in (a, b))
    product = np.full((m, n), np.nan, np.float32)
    scratch = np.empty(BF16_CHECK_SCRATCH, np.uint8)
    pointers = [x.ctypes.data for x in (a_bits, b_bits, product, scratch)]
    kernel = ctypes.CFUNCTYPE(None, *_GEMM_ARGUMENTS)(address)
    kernel(1, m, n, k, pointers[0], 0, k, 1, pointers[1], 0, n, 1, pointers[2], 0, n, 1,
           pointers[3], 1, 0)
    if not np.array_equal(product, a @ b):
        raise RuntimeError(
            f"{BF16_GEMM_HELPER}, the bf16 matrix product kernel chosen for this host (on AMX "
            "tiles or by vdpbf16ps: compiler/backend/matrix_tiles.py), gets a small product "
            "with exact sums wrong; REVERIE_AMX=off turns the tiles off")


# Matrix products call OpenBLAS (the one NumPy uses, `runtime/native/blas.py`) where the layout
# allows, and the own kernel (`gemm.py`) otherwise: OpenBLAS's edge kernels for narrow N
# and its vectorised packing of transposed operands make it faster than the own kernel,
# and through it kernels give NumPy's bits (measured in benchmarks/README.md, "Matrix
# products through OpenBLAS").
_blas_wanted = [blas_requested()]  # REVERIE_BLAS=0: own kernel only; `use_blas` changes it
_SET_POINTER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _blas_in_use() -> bool:
    """Whether matrix products may call BLAS now (wanted, and a library was found)."""
    return _blas_wanted[0] and find_blas() is not None


def _give_blas(name: str, enabled: bool) -> None:
    """Tell the helper `name` which BLAS `?gemm` and `?gemm_batch` to call (none: its own
    kernel, one product at a time)."""
    library = find_blas() if enabled else None
    dtype = name.removeprefix("rv_gemm_")
    gemm, gemm_batch = (library.gemm[dtype], library.gemm_batch.get(dtype)) if library else \
        (None, None)
    _SET_POINTER(_helper(name).address(name + "_use_blas"))(gemm)
    _SET_POINTER(_helper(name).address(name + "_use_blas_batch"))(gemm_batch or None)


def _give_lapack(name: str) -> None:
    """Hand the linear-algebra helper `name` the LAPACK functions it calls (null where none
    was found: it runs its own loops, `runtime_library/lapack.py`)."""
    op, dtype = name.removeprefix("rv_linalg_").rsplit("_", 1)
    found = find_lapack(dtype)
    for function in LAPACK_FUNCTIONS[op]:
        _SET_POINTER(_helper(name).address(f"{name}_use_{function}"))(found.get(function))


@functools.cache
def _give_own_kernel(name: str) -> None:
    """Compile the own kernel of the helper `name` and hand it over (once per process)."""
    own = name.replace("rv_gemm_", "rv_gemm_own_", 1)
    _SET_POINTER(_helper(name).address(name + "_use_own"))(_helper(own).address(own))


def use_blas(enabled: bool) -> bool:
    """Let matrix products call BLAS (when one was found) or only the own kernel, from now
    on, in this process; returns the previous setting. (Tests compare the two paths.)"""
    with LOCK:
        previous, _blas_wanted[0] = _blas_wanted[0], enabled
        table = helper_table()
        for slot, name in enumerate(HELPERS):
            if table[slot] and name in GEMM_HELPERS:
                if not _blas_in_use():
                    _give_own_kernel(name)
                _give_blas(name, enabled)
    return previous
