"""Native kernels: a specialised tensor-IR `Function` compiled to machine code and called.

Compiling climbs the ladder of `compiler/pipeline.py` from the function: fuse → to_loops →
codegen → llvm-opt → jit (LLVM O2 with the vectorisers, `KERNEL_PIPELINE`; disk object
cache; see `runtime/native/jit.py`). A kernel whose object code the disk cache lacks starts
in the first tier where its results are the optimised module's (`first_tier.exact`) and the
LLVM thread can optimise meanwhile: its IR compiled without the optimiser, which the
optimised module replaces behind the same addresses once made
(`runtime/native/first_tier.py`); a call on more than FIRST_TIER_MAX_BYTES of arguments
waits for it, and interpreter exit does too (the cache keeps only the optimised module). A
kernel that multiplies matrices or sorts first loads the run-time helper it calls and enters
its address in the helper table every kernel receives (`runtime/native/helpers.py`, whose
names are re-exported here; the helper starts compiling on the LLVM thread,
`runtime/native/compile_queue.py`, once the loop program is made, while the kernel's LLVM IR
is generated); the own matrix kernel is loaded only when no BLAS is used or a kernel has a
product whose layout BLAS may not express (`abi.needs_own_kernel`).

Calling a `NativeKernel` on a `BoundCall` (the checked, converted arguments and dimension
sizes from `runtime/native/call.py`):

1. evaluates output shapes and the workspace size from the dimension sizes (a small
   Python function generated once from the symbolic shapes);
2. allocates the outputs with `np.empty` (those of 32 MiB or more from the reuse pool of
   `output_pool.py`) and reuses the spare workspace when it is free and fits
   (`abi.workspace_fits`; the native entry keeps its own,
   `runtime_library/workspace_cache.py`);
3. calls the kernel through ctypes with one frame: the ids of the arrays (the `_objects`
   entry reads their data pointers) then the sizes (see the ABI in
   `compiler/backend/llvm.py`); other Python implementations get data pointers instead;
4. raises `IndexError` (the interpreter's message) when a bounds check failed; the partly
   written outputs are dropped.

    kernel = native_kernel(fn)           # cached per Function object
    outputs = kernel(bind_arguments(fn, args))
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Callable

import numpy as np

from reverie.compiler.backend.allocation import allocating
from reverie.compiler.call_boundary.abi import (
    ARRAY_DATA_OFFSET,
    INTERRUPTED,
    ITEMSIZE,
    KEEP_WORKSPACE_BYTES,
    entry_symbol,
    helpers_called,
    needs_own_kernel,
    workspace_fits,
)
from reverie.compiler.call_boundary.fastcall_descriptor import BIND_SUFFIX, signature_of
from reverie.compiler.ir.capacity import is_trip_symbol, run_with_capacity
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import python_expr
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.loops.ir import Program, workspace_offsets
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.pipeline import back_end_start, climb
from reverie.runtime.native import artifacts, compile_queue, first_tier, helpers, output_pool
from reverie.runtime.native.artifacts import artifact_key
from reverie.runtime.native.call import BoundCall
from reverie.runtime.native.fastcall import LAYOUT_OK, native_entry
from reverie.runtime.native.helpers import (
    HELPER_PIPELINE as HELPER_PIPELINE,  # re-exported, as are the helpers'
)
from reverie.runtime.native.helpers import (
    _helper as _helper,  # loading and BLAS switch (tests use them here)
)
from reverie.runtime.native.helpers import helper_table as helper_table
from reverie.runtime.native.helpers import load_helpers
from reverie.runtime.native.helpers import use_blas as use_blas
from reverie.runtime.native.jit_module import JitModule
from reverie.runtime.native.pool import check_signals
from reverie.runtime.native.remembered import host_description, read_note, remembered_module

_KERNELS: weakref.WeakKeyDictionary[Function, NativeKernel] = weakref.WeakKeyDictionary()
_LOCK = helpers.LOCK
# first tiers still loaded, by object key (kernels of the same IR share one)
_FIRST_TIERS: weakref.WeakValueDictionary[str, first_tier.FirstTier] = \
    weakref.WeakValueDictionary()
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
# A call on arguments larger than this waits for the optimised module rather than run in
# the first tier (the workspace is no measure: it holds the matrix products' packing).
FIRST_TIER_MAX_BYTES = 1 << 20


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


def loop_program(fn: Function) -> Program:
    """The loop program of `fn`: from the whole-pipeline cache when `fn` has a `cache_key`
    (a kernel specialisation, see `Kernel.ir_for`) and it is there, else made (and kept)."""
    key = fn.cache_key and artifact_key("native", fn.cache_key, host_description())
    program = artifacts.load(key) if key else None
    if not isinstance(program, Program):
        program = climb(fn, start=back_end_start("native"), stop="to_loops")["to_loops"]
        if key:
            artifacts.store(key, program)
    return program


def object_key(ir_key: str) -> str:
    """The key under which the object code of the kernel whose IR is cached under
    `ir_key` is remembered (`runtime/native/remembered.py`)."""
    return artifact_key("native object", ir_key, host_description())


def _codegen(program: Program) -> str:
    """The LLVM IR of a loop program, as generated."""
    return climb(program, start="codegen", stop="codegen")["codegen"]


def source_ir_of(fn: Function) -> str:
    """The LLVM IR generated for specialisation `fn` (what its remembered module holds)."""
    return _codegen(loop_program(fn))


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
        the whole-pipeline cache when they are there (`runtime/native/artifacts.py`);
        when its object code is not there, it starts in the first tier where that pays
        (`_first_tier_pays`, `first_tier.exact`)."""
        self.program = program = loop_program(fn)
        self._helper_names = helpers_called(program)
        compile_queue.prepare_helpers(self._helper_names)  # compiled while the IR is made
        symbol = entry_symbol(program)
        self._object_key = fn.cache_key and object_key(fn.cache_key)
        self._first_tier: first_tier.FirstTier | None = None
        if not self._object_key:
            self._jit = climb(program, start="codegen", stop="jit")["jit"]
        else:
            llvm_ir = _codegen(program) if _first_tier_pays(self._object_key) else None
            if llvm_ir is not None and first_tier.exact(llvm_ir):
                self._jit = self._first_tier = self._start_tiers(llvm_ir, symbol)
            else:
                self._jit = remembered_module(
                    self._object_key, lambda: llvm_ir or _codegen(program), name=symbol)
        self._bind = (self._jit.address(symbol + BIND_SUFFIX)
                      if self.program.boundary is not None and LAYOUT_OK else None)
        self._entry = ENTRY(self._jit.address(symbol))
        self._object_entry = OBJECT_ENTRY(self._jit.address(symbol + "_objects"))
        self._layout = layout_function(self.program)
        self._dtypes = [NUMPY_DTYPES[b.dtype] for b in self.program.outputs]
        self._symbols = self.program.symbols
        self._trips = [s for s in self._symbols if is_trip_symbol(s)]
        self._capacity: dict[str, int] = {}  # of each trip dimension (`ir/capacity.py`)
        buffers = len(self.program.inputs) + len(self.program.outputs) + 2
        self._filled = buffers + len(self._symbols)
        self._frame = ctypes.c_int64 * (self._filled + ERROR_SLOTS)
        self._frames: list[ctypes.Array] = []  # spare frames (one per concurrent call)
        self._spare: list[np.ndarray] = []
        self._own_kernel = needs_own_kernel(self.program)
        self._helpers = load_helpers(self._helper_names, own_kernel=self._own_kernel)

    def _start_tiers(self, llvm_ir: str, symbol: str) -> first_tier.FirstTier:
        """The first tier of `llvm_ir` (the one still loaded for the same object key, if
        any), with its optimised module (remembered under the object key, as without
        tiers) queued on the LLVM thread to be swapped in."""
        key = self._object_key
        tier = _FIRST_TIERS.get(key)
        if tier is None:
            def optimise() -> JitModule:
                first_tier.store_optimised(llvm_ir, symbol)
                return remembered_module(key, lambda: llvm_ir, name=symbol)

            tier = _FIRST_TIERS.setdefault(
                key, first_tier.FirstTier(llvm_ir, name=symbol, optimise=optimise))
            compile_queue.start(_tier_up_key(key), first_tier.tier_up_job(tier),
                                compile_queue.OPTIMISED)
        return tier

    def optimised(self) -> None:
        """Make sure the optimised module runs from now on: wait for it on the LLVM thread,
        or compile it here if it has not started (nothing for a kernel without tiers)."""
        if self._first_tier is not None and self._first_tier.optimised is None:
            compile_queue.wait(_tier_up_key(self._object_key))
            self._first_tier.tier_up()

    @property
    def _module(self) -> JitModule:
        """The module whose IR and assembly this kernel shows: the optimised one."""
        self.optimised()
        return self._jit if self._first_tier is None else self._first_tier.optimised

    def native_entry(self, fallback: Callable[..., object],
                     tuple_result: bool) -> Callable[..., object] | None:
        """A Python callable doing the whole call natively (`call_boundary/fastcall_entry.py`) and
        passing every argument list it does not take to `fallback`; None for a function
        whose boundary needs the Python path."""
        if self._bind is None:
            return None
        return native_entry(self._jit.address(entry_symbol(self.program)), self._bind,
                            self.program.name, fallback, signature_of(self.program),
                            tuple_result, self._helpers, keep_alive=self)

    def launch_record(self) -> tuple | None:
        """What `runtime/native/fastcall.py` needs to make this kernel's native entry in a later
        process without its IR: the entry's symbol and name, its call signature
        (`fastcall_descriptor.CallSignature`), the helpers it calls, whether they need the
        own matrix kernel, and its object code's key (None: no native entry, or code the
        whole-pipeline cache does not remember)."""
        if self._bind is None or not self._object_key:
            return None
        return (entry_symbol(self.program), self.program.name, signature_of(self.program),
                tuple(sorted(self._helper_names)), self._own_kernel, self._object_key)

    @property
    def c_entry(self) -> tuple[int, np.ndarray]:
        """The address of the kernel's C entry (ABI in `backend/llvm.py`) and the helper
        table it is passed (for callers generating their own entry, such as XLA's FFI)."""
        return self._jit.address(entry_symbol(self.program)), self._helpers

    def workspace_bytes(self, dims: dict[str, int]) -> int:
        """Scratch memory of one call with these dimension sizes: every temporary (loop
        state histories included) lives in this one workspace, so it is the peak. A trip
        dimension that `dims` lacks is at the capacity the kernel's calls grew it to."""
        return self._layout(*(dims.get(s, self._capacity.get(s, 0)) for s in self._symbols))[1]

    @property
    def loop_ir(self) -> str:
        """The loop IR, as text."""
        return format_program(self.program)

    @property
    def source_ir(self) -> str:
        """The LLVM IR as generated (made again on first use when loaded from the cache)."""
        return self._module.source_ir

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR."""
        return self._module.llvm_ir

    @property
    def asm(self) -> str:
        """The host assembly."""
        return self._module.asm

    def __call__(self, bound: BoundCall) -> list[np.ndarray]:
        """Run on converted arguments; fresh output arrays in result order (trip dimensions
        at the capacity this kernel remembers, grown when a count does not fit)."""
        if not self._trips:
            return self._run(bound, bound.dims)
        return run_with_capacity(lambda dims: self._run(bound, dims), bound.dims, self._trips,
                                 self._capacity)

    def _run(self, bound: BoundCall, dims: dict[str, int]) -> list[np.ndarray]:
        """One call of the kernel with every dimension sized by `dims`; a call a signal
        stopped raises what the Python handler raises, or runs again (`pool.py`)."""
        while True:
            outputs = self._run_once(bound, dims)
            if outputs is not None:
                return outputs
            check_signals()

    def _run_once(self, bound: BoundCall, dims: dict[str, int]) -> list[np.ndarray] | None:
        """One call of the kernel; None when a signal stopped it (outputs dropped)."""
        sizes = [dims[s] for s in self._symbols]
        shapes, workspace_bytes = self._layout(*sizes)
        if self._first_tier is not None and self._first_tier.optimised is None and \
                sum(a.nbytes for a in bound.arrays) > FIRST_TIER_MAX_BYTES:
            self.optimised()
        with allocating(self.program, dims, shapes, workspace_bytes):
            outputs = [output_pool.empty(shape, dtype)
                       for shape, dtype in zip(shapes, self._dtypes, strict=True)]
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
        if status == INTERRUPTED:
            self._frames.append(frame)
            return None
        if status:
            site, index, size = frame[self._filled:]
            raise self.program.sites[site].error(index, size)
        self._frames.append(frame)
        return outputs

    def _take_workspace(self, size: int) -> np.ndarray:
        """A workspace of at least `size` bytes: the spare one when it fits (the policy of
        the native entry, `abi.workspace_fits`), else a new one."""
        if not size:
            return _NO_WORKSPACE
        spare = _pop_or(self._spare, lambda: None)
        if spare is not None and workspace_fits(spare.nbytes, size):
            return spare
        return np.empty(size, np.uint8)

    def _give_back_workspace(self, workspace: np.ndarray) -> None:
        """Keep `workspace` as the spare unless it is too large or there is one already."""
        if workspace.nbytes <= KEEP_WORKSPACE_BYTES and not self._spare:
            self._spare.append(workspace)


def _tier_up_key(object_key: str) -> tuple[str, str]:
    """The key of a kernel's optimised module on the LLVM thread (`compile_queue.py`)."""
    return ("tier up", object_key)


def _first_tier_pays(object_key: str) -> bool:
    """Whether a kernel remembered under `object_key` starts in the first tier: its object
    code is not in the disk cache, the LLVM thread can optimise it meanwhile, and
    `REVERIE_FIRST_TIER` is not 0."""
    return (os.environ.get("REVERIE_FIRST_TIER", "1").strip() != "0" and compile_queue.enabled()
            and not (artifacts.in_use() and read_note(object_key) is not None))


def native_kernel(fn: Function) -> NativeKernel:
    """The compiled kernel of `fn` (the same as `NativeKernel(fn)`)."""
    return NativeKernel(fn)
