"""What the run time must know about generated code, without generating any (no llvmlite).

The native kernels' calling convention is described in `llvm.py`; the facts a caller needs
are here so that `runtime/native.py` can load and call cached code without importing the
code generators: entry symbol names, where an ndarray keeps its data pointer, element
sizes, the run-time helpers a kernel may call (the helper table's order), where the table
keeps the thread count and the worker pool's entry, and the most threads a matrix product
uses.
"""

from __future__ import annotations

from reverie.compiler.loops.ir import Matmul, Program

ARRAY_DATA_OFFSET = 16  # bytes from a CPython ndarray object to its data pointer field
ITEMSIZE = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1}
# the run-time helper table passed to every kernel holds these functions, in this order,
# then the number of threads the kernel may use, then the address of the worker pool's
# entry (`runtime/pool.py`; 0 when there is none)
HELPERS = ("rv_gemm_f32", "rv_gemm_f64")
THREADS_SLOT, POOL_SLOT = len(HELPERS), len(HELPERS) + 1
MAX_TASKS = 4  # threads one matrix product may use at most
# the largest workspace a kernel keeps for its next call (`runtime/native.py`, `workspace.py`)
KEEP_WORKSPACE_BYTES = 1 << 30


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
