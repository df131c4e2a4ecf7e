"""Native kernels: a specialised tensor-IR `Function` compiled to machine code and called.

Compiling climbs the ladder of `compiler/pipeline.py` from the function: fuse → to_loops →
codegen → llvm-opt → jit (LLVM O3 with the vectorisers, disk object cache; see
`runtime/jit.py`). A kernel that multiplies matrices first compiles the
run-time helper it calls (`gemm.helper_module`, once per process per element type, at
HELPER_PIPELINE) and enters its address in the helper table every kernel receives; the
helper calls the OpenBLAS NumPy uses where the operands' layout allows (`runtime/blas.py`;
`REVERIE_BLAS=0` or `use_blas(False)`: Reverie's own kernel only).

Calling a `NativeKernel` on a `BoundCall` (the checked, converted arguments and dimension
sizes from `runtime/call.py`):

1. evaluates output shapes and the workspace size from the dimension sizes (a small
   Python function generated once from the symbolic shapes);
2. allocates the outputs with `np.empty` and reuses a spare workspace when one is free;
3. calls the kernel through ctypes with one frame: the ids of the arrays (the `_objects`
   entry reads their data pointers) then the sizes (see the ABI in
   `compiler/codegen/llvm.py`); other Python implementations get data pointers instead;
4. raises `IndexError` (the interpreter's message) when a bounds check failed; the partly
   written outputs are dropped.

    kernel = native_kernel(fn)           # cached per Function object
    outputs = kernel(bind_arguments(fn, args))
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import weakref
from collections.abc import Callable

import numpy as np

from reverie.compiler.codegen.abi import (
    ARRAY_DATA_OFFSET,
    HELPERS,
    ITEMSIZE,
    KEEP_WORKSPACE_BYTES,
    POOL_SLOT,
    entry_symbol,
    helpers_called,
)
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import python_expr
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.loops.ir import Program, workspace_offsets
from reverie.compiler.loops.printer import format_program
from reverie.compiler.pipeline import back_end_start, climb

from . import artifacts
from .artifacts import artifact_key
from .blas import blas_requested, find_blas
from .call import BoundCall
from .fastcall import LAYOUT_OK, native_entry
from .jit import JitModule, Pipeline
from .pool import pool_entry, pool_threads
from .remembered import host_description, remembered_module

_KERNELS: weakref.WeakKeyDictionary[Function, NativeKernel] = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
OBJECT_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
_NO_WORKSPACE = np.empty(1, np.uint8)


def _object_layout_ok() -> bool:
    """Whether an ndarray's data pointer sits ARRAY_DATA_OFFSET bytes into the object whose
    address is its id() (true for CPython with NumPy's PyArrayObject), as the `_objects`
    entry assumes."""
    probe = np.empty(3)
    stored = ctypes.c_void_p.from_address(id(probe) + ARRAY_DATA_OFFSET).value
    return stored == probe.ctypes.data


OBJECT_LAYOUT_OK = _object_layout_ok()
ERROR_SLOTS = 3


def layout_function(program: Program) -> Callable[..., tuple]:
    """`f(*sizes) -> (output shapes, workspace bytes)`, generated from the symbolic shapes."""
    names = {s: f"d{k}" for k, s in enumerate(program.symbols)}
    spell = names.__getitem__
    shapes = ", ".join("(" + "".join(python_expr(d, spell) + ", " for d in b.shape) + ")"
                       for b in program.outputs)
    workspace = python_expr(workspace_offsets(program.temps, ITEMSIZE)[-1], spell)
    source = (f"def layout({', '.join(names.values())}):\n"
              f"    return ({shapes}{',' if len(program.outputs) == 1 else ''}), {workspace}\n")
    scope: dict = {}
    exec(compile(source, f"<layout of {program.name}>", "exec"), scope)
    return scope["layout"]


def _pop_or(spares: list, make: Callable[[], object]) -> object:
    """A spare object from `spares`, or a new one (safe when threads share the list)."""
    try:
        return spares.pop()
    except IndexError:
        return make()


# The helpers' inner loops are written with explicit vector FMAs: O2 without the SLP
# vectoriser and unrolling runs them as fast as O3 (256^3 and matrix-vector products,
# measured) and compiles in about half the time (0.4 s -> 0.2 s per helper).
HELPER_PIPELINE = Pipeline(speed_level=2, slp_vectorization=False)


@functools.cache
def _helper(name: str) -> JitModule:
    """The compiled module of the run-time helper `name` (once per process; a process that
    finds it in the disk cache loads it without generating its IR)."""
    def make_ir() -> str:
        # the generator, and llvmlite.ir with it, is imported only when the IR is made
        from reverie.compiler.codegen.gemm import helper_module

        return helper_module(name)

    key = artifact_key("helper", name, HELPER_PIPELINE, host_description())
    return remembered_module(key, make_ir, name=name, pipeline=HELPER_PIPELINE)


@functools.cache
def helper_table() -> np.ndarray:
    """The table passed to every kernel: addresses of the run-time helpers in `gemm.HELPERS`
    order (0 until a kernel calling that helper is compiled), then the thread count and the
    worker pool's entry (`runtime/pool.py`; see `codegen/abi.py`). A child process made by
    `fork` runs its kernels on one thread: the pool's threads were not copied into it, and
    libgomp would wait for them for ever."""
    table = np.array([0] * len(HELPERS) + [pool_threads(), pool_entry()], dtype=np.int64)
    os.register_at_fork(after_in_child=lambda: table.__setitem__(POOL_SLOT, 0))
    return table


def load_helpers(names: frozenset[str]) -> np.ndarray:
    """Compile the helpers `names` not yet loaded, hand each the BLAS it may call, and enter
    them in the helper table."""
    table = helper_table()
    with _LOCK:
        for name in names:
            slot = HELPERS.index(name)
            if not table[slot]:
                _give_blas(name, _blas_wanted[0])
                table[slot] = _helper(name).address(name)
    return table


# Matrix products call OpenBLAS (the one NumPy uses, `runtime/blas.py`) where the layout
# allows, and the own kernel (`gemm.py`) otherwise. Measured on the 2-core AVX2 machine,
# one thread each (`OPENBLAS_NUM_THREADS=1 REVERIE_NUM_THREADS=1`), own kernel ÷ OpenBLAS:
# W2's 4096x512 @ 512x10 1.07 (f32) / 1.02 (f64), its X^T @ G 1.46 / 1.97, W3's
# x^T @ d_pre 1.22 / 1.40, h^T @ d_out 1.60 / 1.76, 256^3 1.06 / 1.07: OpenBLAS's
# edge kernels for narrow N and its vectorised packing of transposed operands are what
# the own kernel lacks. Through BLAS the same kernels take 1.01-1.06x NumPy's `@` (the
# difference is Reverie's call path) and give NumPy's bits (see benchmarks/README.md).
_blas_wanted = [blas_requested()]  # REVERIE_BLAS=0: own kernel only; `use_blas` changes it
_SET_BLAS = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _give_blas(name: str, enabled: bool) -> None:
    """Tell the helper `name` which BLAS `?gemm` to call (none: its own kernel)."""
    library = find_blas() if enabled else None
    address = library.gemm[name.removeprefix("rv_gemm_")] if library else None
    _SET_BLAS(_helper(name).address(name + "_use_blas"))(address)


def use_blas(enabled: bool) -> bool:
    """Let matrix products call BLAS (when one was found) or only the own kernel, from now
    on, in this process; returns the previous setting. (Tests compare the two paths.)"""
    with _LOCK:
        previous, _blas_wanted[0] = _blas_wanted[0], enabled
        table = helper_table()
        for slot, name in enumerate(HELPERS):
            if table[slot]:
                _give_blas(name, enabled)
    return previous


class NativeKernel:
    """One specialised function as native code; call it with a `BoundCall`.

    `NativeKernel(fn)` compiles on first use and returns the same kernel for the same
    Function object afterwards."""

    def __new__(cls, fn: Function) -> NativeKernel:
        kernel = _KERNELS.get(fn)
        if kernel is None:
            with _LOCK:
                kernel = _KERNELS.get(fn)
                if kernel is None:
                    kernel = super().__new__(cls)
                    kernel._compile(fn)
                    _KERNELS[fn] = kernel
        return kernel

    def _compile(self, fn: Function) -> None:
        """Climb the ladder from `fn` to native code (keeping no reference to `fn`, so the
        cache entry goes when the Function does). A function with a `cache_key` (a kernel
        specialisation, see `Kernel.ir_for`) takes its loop program and object code from
        the whole-pipeline cache when they are there (`runtime/artifacts.py`)."""
        key = fn.cache_key and artifact_key("native", fn.cache_key, host_description())
        program = artifacts.load(key) if key else None
        if not isinstance(program, Program):
            program = climb(fn, start=back_end_start("native"), stop="to_loops")["to_loops"]
            if key:
                artifacts.store(key, program)
        self.program = program
        symbol = entry_symbol(program)

        def make_ir() -> str:
            return climb(program, start="codegen", stop="codegen")["codegen"]

        if key:
            object_key = artifact_key("native object", fn.cache_key, host_description())
            self._jit = remembered_module(object_key, make_ir, name=symbol)
        else:
            self._jit = climb(program, start="codegen", stop="jit")["jit"]
        self._vectorcall = (self._jit.address(symbol + "_vectorcall")
                            if self.program.boundary is not None and LAYOUT_OK else None)
        self._entry = ENTRY(self._jit.address(symbol))
        self._object_entry = OBJECT_ENTRY(self._jit.address(symbol + "_objects"))
        self._layout = layout_function(self.program)
        self._dtypes = [NUMPY_DTYPES[b.dtype] for b in self.program.outputs]
        self._symbols = self.program.symbols
        buffers = len(self.program.inputs) + len(self.program.outputs) + 2
        self._filled = buffers + len(self._symbols)
        self._frame = ctypes.c_int64 * (self._filled + ERROR_SLOTS)
        self._frames: list[ctypes.Array] = []  # spare frames (one per concurrent call)
        self._spare: list[np.ndarray] = []
        self._helpers = load_helpers(helpers_called(self.program))

    def native_entry(self, fallback: Callable[..., object],
                     tuple_result: bool) -> Callable[..., object] | None:
        """A Python callable doing the whole call natively (`codegen/fastcall.py`) and
        passing every argument list it does not take to `fallback`; None for a function
        whose boundary needs the Python path."""
        if self._vectorcall is None:
            return None
        return native_entry(self._vectorcall, self.program.name, fallback,
                            self.program.boundary.dtypes, [b.dtype for b in self.program.outputs],
                            tuple_result, self._helpers, keep_alive=self)

    @property
    def c_entry(self) -> tuple[int, np.ndarray]:
        """The address of the kernel's C entry (ABI in `codegen/llvm.py`) and the helper
        table it is passed (for callers generating their own entry, such as XLA's FFI)."""
        return self._jit.address(entry_symbol(self.program)), self._helpers

    def workspace_bytes(self, dims: dict[str, int]) -> int:
        """Scratch memory of one call with these dimension sizes: every temporary (loop
        state histories included) lives in this one workspace, so it is the peak."""
        return self._layout(*(dims[s] for s in self._symbols))[1]

    @property
    def loop_ir(self) -> str:
        """The loop IR, as text."""
        return format_program(self.program)

    @property
    def source_ir(self) -> str:
        """The LLVM IR as generated (made again on first use when loaded from the cache)."""
        return self._jit.source_ir

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR."""
        return self._jit.llvm_ir

    @property
    def asm(self) -> str:
        """The host assembly."""
        return self._jit.asm

    def __call__(self, bound: BoundCall) -> list[np.ndarray]:
        """Run on converted arguments; fresh output arrays in result order."""
        sizes = [bound.dims[s] for s in self._symbols]
        shapes, workspace_bytes = self._layout(*sizes)
        outputs = [np.empty(shape, dtype) for shape, dtype in zip(shapes, self._dtypes,
                                                                   strict=True)]
        workspace = self._take_workspace(workspace_bytes)
        arrays = [*bound.arrays, *outputs, workspace, self._helpers]
        frame = _pop_or(self._frames, self._frame)
        if OBJECT_LAYOUT_OK:
            frame[:self._filled] = (*map(id, arrays), *sizes)
            status = self._object_entry(frame)
        else:
            frame[:self._filled] = (*(a.ctypes.data for a in arrays), *sizes)
            status = self._entry(frame, ctypes.byref(frame, 8 * len(arrays)))
        if workspace_bytes:
            self._give_back_workspace(workspace)
        if status:
            site, index, size = frame[self._filled:]
            raise self.program.sites[site].error(index, size)
        self._frames.append(frame)
        return outputs

    def _take_workspace(self, size: int) -> np.ndarray:
        """A workspace of at least `size` bytes (a spare one when free)."""
        if not size:
            return _NO_WORKSPACE
        workspace = _pop_or(self._spare, lambda: _NO_WORKSPACE)
        return workspace if workspace.nbytes >= size else np.empty(size, np.uint8)

    def _give_back_workspace(self, workspace: np.ndarray) -> None:
        if workspace.nbytes <= KEEP_WORKSPACE_BYTES and not self._spare:
            self._spare.append(workspace)


def native_kernel(fn: Function) -> NativeKernel:
    """The compiled kernel of `fn` (the same as `NativeKernel(fn)`)."""
    return NativeKernel(fn)
