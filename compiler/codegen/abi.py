"""What the run time must know about generated code, without generating any (no llvmlite).

The native kernels' calling convention is described in `llvm.py`; the facts a caller needs
are here so that `runtime/native.py` can load and call cached code without importing the
code generators: entry symbol names, where an ndarray keeps its data pointer, element
sizes, the run-time helpers a kernel may call (the helper table's order), where the table
keeps the thread count and the worker pool's entry, and the most threads a matrix product
uses.
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import Matmul, Program, View, row_major_strides

ARRAY_DATA_OFFSET = 16  # bytes from a CPython ndarray object to its data pointer field
ITEMSIZE = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1}
# the run-time helper table passed to every kernel holds these functions, in this order,
# then the number of threads the kernel may use, then the address of the worker pool's
# entry (`runtime/pool.py`; 0 when there is none)
HELPERS = ("rv_gemm_f32", "rv_gemm_f64")
# the own matrix kernels, modules of their own that the run time hands to the helpers
# above only when a kernel may need them (`needs_own_kernel`; see `gemm.py`)
OWN_KERNELS = ("rv_gemm_own_f32", "rv_gemm_own_f64")
THREADS_SLOT, POOL_SLOT = len(HELPERS), len(HELPERS) + 1
MAX_TASKS = 4  # threads one matrix product may use at most


# The native Python entry (`fastcall.py`) reads CPython and NumPy objects at these byte
# offsets (CPython 3.11+, NumPy 1.x/2.x; `runtime/fastcall.py` checks them on real
# objects before it installs any entry): `ob_type`, a float's value, a tuple's items, and
# an ndarray's data, ndim, shape, descriptor and flags.
OB_TYPE, FLOAT_VALUE, TUPLE_ITEMS = 8, 16, 24
ARRAY_DATA, ARRAY_NDIM, ARRAY_SHAPE, ARRAY_DESCR, ARRAY_FLAGS = 16, 24, 32, 56, 64
C_CONTIGUOUS = 0x1
ARGUMENTS_OFFSET = 1 << 63  # PY_VECTORCALL_ARGUMENTS_OFFSET, a flag bit in nargsf

# slots of the entry's `self` tuple; then one descriptor per parameter, one dtype per output and
# one scalar type (numpy.float64, ...) per output
FALLBACK, NDARRAY, FLOAT, INT, EMPTY, HELPER_TABLE, TUPLE_RESULT, FIRST_DESCRIPTOR = range(8)



def entry_symbol(program: Program) -> str:
    """The exported name of a program's entry function."""
    return "rv_" + "".join(c if c.isalnum() or c == "_" else "_" for c in program.name)


def helpers_called(program: Program) -> frozenset[str]:
    """The helpers (names in HELPERS) that the kernel of `program` calls."""
    return frozenset(f"rv_gemm_{stmt.out.buffer.dtype}" for stmt in program.walk()
                     if isinstance(stmt, Matmul))


def _blas_layout(view: View) -> bool:
    """Whether a 2-D view is, whatever the sizes, a row-major block or its transpose (a
    BLAS operand: `gemm_blas.py`'s *plain* or *transposed* with the tightest leading
    dimension). The stride of an axis of size 1 never matters (a vector as a 1 x n view)."""
    rows, columns = view.shape
    row_major = row_major_strides(view.shape)
    column_major = row_major_strides((columns, rows))[::-1]
    return any(all(stride == wanted or size == Dim.const(1)
                   for stride, wanted, size in zip(view.strides, layout, view.shape, strict=True))
               for layout in (row_major, column_major))


def needs_own_kernel(program: Program) -> bool:
    """Whether a matrix product of `program` may reach the own kernel although BLAS was
    found: one of its operands has a layout not known to suit BLAS for every size (an empty
    product never needs it: the helpers' dot-product fallback zero-fills its output)."""
    return any(isinstance(stmt, Matmul) and
               not all(_blas_layout(view) for view in (stmt.out, stmt.a, stmt.b))
               for stmt in program.walk())
