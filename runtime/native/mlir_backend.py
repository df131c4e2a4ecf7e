"""`backend="mlir"`: run a tensor-IR function through the upstream MLIR tools (docs/api.md).

Consumes a typed `Function` and, per call, a `BoundCall` from the call boundary; produces
the results as NumPy arrays. The route is the MLIR ladder of `compiler/pipeline.py`:

    mlir          export_function(fn)                func/arith/math/memref/scf/linalg text
    mlir-to-llvm  mlir-opt-19 <MLIR_PIPELINE>        -> LLVM dialect
                  mlir-translate-19 --mlir-to-llvmir -> LLVM IR  (`mlir_to_llvm.py`)
    llvm-opt      no optimisation
    jit           the process-wide JIT               -> native code
    call          _mlir_ciface_<fn>(&x, ..., &result0, ..., &status)   via ctypes memref descriptors

This backend exists to cross-check the native pipeline, so it favours compile time: LLVM's
optimiser does not run on its modules (`pipeline=None`), which takes far less compile time
than the native kernels' `KERNEL_PIPELINE`. The LLVM IR of each MLIR text is kept in the
disk cache (`runtime/native/cache.py`), so the tools run once per function. Transcendentals
become libm calls (`convert-math-to-libm`), resolved in the running process.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from collections.abc import Sequence

import numpy as np

from reverie.compiler.backend.allocation import INT64_MAX, MAX_ALLOCATION_BYTES
from reverie.compiler.ir.capacity import CapacityError, run_with_capacity, trip_symbols
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import evaluate_shape
from reverie.compiler.ir.iteration_limit import error_for
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.pipeline import Request, back_end_start, climb
from reverie.runtime.native.call import BoundCall


@functools.cache
def descriptor_type(rank: int) -> type[ctypes.Structure]:
    """The C struct of a rank-`rank` memref: pointers, offset, sizes, strides (elements)."""
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
              ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def describe(array: np.ndarray) -> ctypes.Structure:
    """A memref descriptor viewing `array` (any strides that are whole elements)."""
    descriptor = descriptor_type(array.ndim)()
    descriptor.allocated = descriptor.aligned = array.ctypes.data
    descriptor.offset = 0
    for axis, (size, stride) in enumerate(zip(array.shape, array.strides, strict=True)):
        descriptor.sizes[axis] = size
        descriptor.strides[axis] = stride // array.itemsize
    return descriptor


def check_value_sizes(fn: Function, dims: dict[str, int]) -> None:
    """Refuse a call before MLIR's code allocates a value its sizes make impossible: the
    memrefs of the lowered code are sized in unchecked int64 (`n * n * 8` bytes with
    n = 2**61 wraps) and their `malloc` results are not checked. ValueError when a value's
    bytes exceed what int64 holds, MemoryError when they exceed this machine's memory (or
    MAX_ALLOCATION_BYTES, `backend/allocation.py`), naming the function and the value."""
    limit = min(MAX_ALLOCATION_BYTES, physical_memory())
    for op in fn.body.walk():
        for value in op.results:
            shape = evaluate_shape(value.type.shape, dims)
            nbytes = math.prod(shape) * np.dtype(NUMPY_DTYPES[value.type.dtype]).itemsize
            if nbytes <= limit:
                continue
            what = f"{fn.name}(): a {value.type.dtype}{list(shape)} value of `{op.name}`"
            if nbytes > INT64_MAX:
                raise ValueError(f"{what} would need more bytes than a 64-bit size holds")
            raise MemoryError(f"{what} would need {nbytes} bytes, more than the {limit} "
                              f"this machine has")


@functools.cache
def physical_memory() -> int:
    """Bytes of memory this machine has."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class MlirProgram:
    """Functions exported into one MLIR module, lowered by one run of the tools, and
    JIT-compiled together (one climb of the MLIR ladder); `kernels` has one `MlirKernel`
    per function."""

    def __init__(self, functions: Sequence[Function], filename: str = "<source>") -> None:
        stages = climb(list(functions), Request(backend="mlir", filename=filename),
                       start=back_end_start("mlir"), stop="jit")
        self.parts = stages["mlir"].parts
        self.mlir: str = stages["mlir"].text
        self.llvm_ir: str = stages["mlir-to-llvm"]
        self.engine = stages["jit"]
        self.kernels = [MlirKernel(fn, self, k) for k, fn in enumerate(functions)]


class MlirKernel:
    """A function compiled through MLIR: `kernel(bound)` returns its results as arrays.

    `MlirKernel(fn)` compiles `fn` alone; `MlirProgram` builds kernels for several
    functions (function `index` of `program`) with one run of the tools.
    """

    def __init__(self, fn: Function, program: MlirProgram | None = None,
                 index: int = 0) -> None:
        self.fn = fn
        self.program = program or MlirProgram([fn])
        self.part = self.program.parts[index]
        self.trips = trip_symbols(fn.body)
        self.capacity: dict[str, int] = {}  # of each trip dimension (`ir/capacity.py`)
        arity = len(fn.params) + len(fn.result_types) + 1 + bool(self.trips)
        prototype = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * arity)
        address = self.program.engine.address(f"_mlir_ciface_{self.part.symbol}")
        self.entry = prototype(address)

    def __call__(self, bound: BoundCall) -> list[np.ndarray]:
        """Run on checked arguments; IndexError for a subscript the code found out of range
        (RuntimeError for a `while` past its iteration limit). Trip dimensions start at the
        capacity this kernel remembers and grow until every count fits."""
        if not self.trips:
            return self._run(bound, bound.dims)
        return run_with_capacity(lambda dims: self._run(bound, dims), bound.dims, self.trips,
                                 self.capacity)

    def _run(self, bound: BoundCall, dims: dict[str, int]) -> list[np.ndarray]:
        """One call with every dimension sized by `dims`."""
        check_value_sizes(self.fn, dims)
        results = [np.empty(evaluate_shape(t.shape, dims), dtype=NUMPY_DTYPES[t.dtype])
                   for t in self.fn.result_types]
        status = np.zeros(4, dtype=np.int64)
        trips = [np.array([dims[s] for s in self.trips], dtype=np.int64)] if self.trips else []
        descriptors = [describe(a) for a in [*bound.arrays, *results, status, *trips]]
        self.entry(*[ctypes.addressof(d) for d in descriptors])
        if status[0]:
            _, value, size, site = (int(v) for v in status)
            message = self.part.errors[site].format(value=value, bound=size)
            raise CapacityError.parse(message) or error_for(message)
        return results
