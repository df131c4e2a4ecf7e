"""What the run time must know about generated code, without generating any (no llvmlite).

The native kernels' calling convention is described in `llvm.py`; the facts a caller needs
are here so that `runtime/native/native_kernel.py` can load and call cached code without
importing the code generators: entry symbol names, where an ndarray keeps its data pointer,
element sizes, the run-time helpers a kernel may call (the helper table's order: the matrix
products, then the sort, then the linear algebra), where the table keeps the thread count
and the worker pool's entry, the most threads a matrix product uses, and how the call paths
keep a kernel's workspace between calls. It imports nothing at module level, so a warm
start reads these facts without loading the loop IR (`helpers_called` imports it when a
program is at hand).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reverie.compiler.loops.ir import Matmul, Program, View

ARRAY_DATA_OFFSET = 16  # bytes from a CPython ndarray object to its data pointer field
ITEMSIZE = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "bool": 1}
# the run-time helper table passed to every kernel holds these functions, in this order,
# then the signal count, the cycle count after which a kernel re-arms the signal handler
# and the address of the function that does (`pool_runtime.py`), then the number of threads
# the kernel may use, then the address of the worker pool's entry (`runtime/native/pool.py`; 0
# when there is none)
GEMM_HELPERS = ("rv_gemm_f32", "rv_gemm_f64")    # matrix products (`gemm.py`)
BF16_GEMM_HELPER = "rv_gemm_bf16"  # bf16 operands, f32 result, by vdpbf16ps (`gemm_bf16.py`)
SORT_HELPERS = ("rv_argsort",)                   # the stable merge sort (`sort.py`)
# the linear-algebra helpers (`lapack.py`), one per op of `ir/ops_linalg.py` and float dtype,
# and the LAPACKE (trsm: CBLAS) functions each may be handed, by their name without the
# type letter: `potrf` is `LAPACKE_dpotrf` for f64 (`runtime/native/blas.py` finds them)
LAPACK_FUNCTIONS = {"cholesky": ("potrf",), "triangular_solve": ("trsm",), "solve": ("gesv",),
                    "slogdet": ("getrf",), "eigh": ("syevd",), "svd": ("gesdd",),
                    "qr": ("geqrf", "orgqr")}
LINALG_HELPERS = tuple(f"rv_linalg_{op}_{dtype}" for op in LAPACK_FUNCTIONS
                       for dtype in ("f32", "f64"))
HELPERS = GEMM_HELPERS + SORT_HELPERS + LINALG_HELPERS + (BF16_GEMM_HELPER,)
SORT_DTYPES = ("f32", "f64", "i32", "i64")       # rv_argsort's `dtype` argument indexes this
# the own matrix kernels, modules of their own that the run time hands to the gemm helpers
# only when a kernel may need them (`needs_own_kernel`; see `gemm.py`)
OWN_KERNELS = ("rv_gemm_own_f32", "rv_gemm_own_f64")
SIGNALS_SLOT, ARM_AT_SLOT, ARM_SLOT, THREADS_SLOT, POOL_SLOT = range(len(HELPERS),
                                                                  len(HELPERS) + 5)
INTERRUPTED = 2  # a kernel's status when a signal stopped it (1: a failed bounds check)
NO_SIGNAL_CHECK = -1  # the signal count a pool job is given that no signal may stop
CALL_ENTRY = "rv_vectorcall"  # the native call entry every kernel shares (`fastcall.py`)
MAX_TASKS = 4  # threads one matrix product may use at most


# The native Python entry (`fastcall.py`) reads CPython and NumPy objects at these byte
# offsets (CPython 3.11+, NumPy 1.x/2.x; `runtime/native/fastcall.py` checks them on real
# objects before it installs any entry): `ob_type`, a float's value, a tuple's items, and
# an ndarray's data, ndim, shape, descriptor and flags.
OB_TYPE, FLOAT_VALUE, TUPLE_ITEMS = 8, 16, 24
ARRAY_DATA, ARRAY_NDIM, ARRAY_SHAPE, ARRAY_DESCR, ARRAY_FLAGS = 16, 24, 32, 56, 64
C_CONTIGUOUS = 0x1
ARGUMENTS_OFFSET = 1 << 63  # PY_VECTORCALL_ARGUMENTS_OFFSET, a flag bit in nargsf

# slots of the entry's `self` tuple (`fastcall.py`): the fallback, the types it compares
# against, numpy.empty and the output pool's `empty` (`runtime/native/output_pool.py`, for outputs
# of POOLED_OUTPUT_BYTES or more), the helper table, the spare-workspace cell, the call
# descriptor (`fastcall_descriptor.py`); then the dtype (numpy.dtype) of each parameter and
# of each output, and the scalar type (numpy.float64, ...) of each output
(FALLBACK, NDARRAY, FLOAT, INT, EMPTY, POOLED_EMPTY, HELPER_TABLE, SPARE_WORKSPACE,
 CALL_DESCRIPTOR, FIRST_DTYPE) = range(10)
# glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): malloc
# serves every block this large with a fresh mmap and unmaps it on free, so each call's
# output of this size would page-fault (and the kernel zero) all of its memory again
POOLED_OUTPUT_BYTES = 32 << 20

# Workspace reuse between calls (both call paths). The native entry's SPARE_WORKSPACE slot is
# an int64[1] array holding the address of one spare block (0: none); a block is
# WORKSPACE_HEADER bytes (its capacity in bytes, as an i64, first) then the workspace. A
# call takes the spare (an atomic exchange with 0, so two threads never share a block) when
# it needs between capacity / WORKSPACE_SLACK and capacity bytes, and offers its block back
# when that holds at most KEEP_WORKSPACE_BYTES, freeing the spare it displaces.
WORKSPACE_HEADER = 64  # keeps the workspace's alignment (mod 64) that of the malloc'd block
WORKSPACE_SLACK = 4
KEEP_WORKSPACE_BYTES = 1 << 30  # W8's gradient needs ~330 MB (benchmarks/README.md, W8)


def workspace_fits(capacity: int, needed: int) -> bool:
    """Whether a spare workspace of `capacity` bytes serves a call needing `needed` bytes:
    large enough, and not so large that a small call would keep a huge block alive."""
    return needed <= capacity <= WORKSPACE_SLACK * needed


def entry_symbol(program: Program) -> str:
    """The exported name of a program's entry function."""
    return "rv_" + "".join(c if c.isalnum() or c == "_" else "_" for c in program.name)


def helpers_called(program: Program) -> frozenset[str]:
    """The helpers (names in HELPERS) that the kernel of `program` calls."""
    from reverie.compiler.loops.ir import LinalgCall, Matmul, Sort

    called = set()
    for stmt in program.walk():
        if isinstance(stmt, Matmul):
            called.add(matmul_helper(stmt))
        elif isinstance(stmt, Sort):
            called.add("rv_argsort")
        elif isinstance(stmt, LinalgCall):
            called.add(stmt.helper)
    return frozenset(called)


def matmul_helper(stmt: Matmul) -> str:
    """The helper a `Matmul` calls: by its result's dtype, `BF16_GEMM_HELPER` for bf16
    operands (`backend/bf16_products.py` makes those products)."""
    if stmt.a.buffer.dtype == "bf16":
        return BF16_GEMM_HELPER
    return f"rv_gemm_{stmt.out.buffer.dtype}"


def _blas_layout(view: View) -> bool:
    """Whether a 2-D view (each matrix of a 3-D one) is, whatever the sizes, a row-major
    block or its transpose (a BLAS operand: `gemm_blas.py`'s *plain* or *transposed* with
    the tightest leading dimension). The stride of an axis of size 1 never matters (a
    vector as a 1 x n view)."""
    from reverie.compiler.ir.dims import Dim
    from reverie.compiler.loops.ir import row_major_strides

    shape, strides = view.shape[-2:], view.strides[-2:]  # a batched product's matrices
    rows, columns = shape
    row_major = row_major_strides(shape)
    column_major = row_major_strides((columns, rows))[::-1]
    return any(all(stride == wanted or size == Dim.const(1)
                   for stride, wanted, size in zip(strides, layout, shape, strict=True))
               for layout in (row_major, column_major))


def needs_own_kernel(program: Program) -> bool:
    """Whether a matrix product of `program` may reach the own kernel although BLAS was
    found: one of its operands has a layout not known to suit BLAS for every size (an empty
    product never needs it: the helpers' dot-product fallback zero-fills its output)."""
    from reverie.compiler.loops.ir import Matmul

    return any(isinstance(stmt, Matmul) and matmul_helper(stmt) in GEMM_HELPERS and
               not all(_blas_layout(view) for view in (stmt.out, stmt.a, stmt.b))
               for stmt in program.walk())
