"""The linear-algebra ops of the op table: factorisations and solves of matrices, batched
over leading axes.

Every operand is a stack of matrices, `[..., M, N]` (the leading axes, possibly none, are
a batch; operands of one op share them exactly: the front end broadcasts). Results are
row-major stacks of the same batch:

    %l = cholesky %a : f64[B, N, N]                       lower L, A = L Lᵀ (reads A's lower
                                                          triangle; NaN where A is not
                                                          positive definite)
    %x = triangular_solve %a, %b {lower = true, transpose = false, unit_diagonal = false}
                                                          op(T) X = B, T the lower (upper)
                                                          triangle of A, op(T) = T or Tᵀ, its
                                                          diagonal read as ones when unit
    %x = solve %a, %b : f64[N, K]                          A X = B (NaN where A is singular)
    %s, %l = slogdet %a : f64[B], f64[B]                   det A = s · exp(l), s in {-1, 0, 1}
    %d = det %a : f64[B]                                   s · exp(l) of slogdet (an op of its
                                                          own for its gradient at singular A)
    %w, %v = eigh %a : f64[N], f64[N, N]                   A = V diag(w) Vᵀ from A's lower
                                                          triangle, w ascending (LAPACK syevd)
    %u, %s, %vh = svd %a : f64[M, K], f64[K], f64[K, N]    reduced SVD, K = min(M, N), s
                                                          descending
    %q, %r = qr %a : f64[M, K], f64[K, N]                  reduced QR (Householder, LAPACK's
                                                          signs)

The tensor interpreter runs them with `numpy.linalg`, the native code with LAPACK
(`runtime_library/lapack.py`), and their derivative and batching rules are
`transforms/linalg_rules.py`. Non-positive-definite input to `cholesky` and singular input to
`solve` give NaN (JAX's convention; NumPy and torch raise instead) at every level, so that a
kernel never stops halfway through a batch; so do eigh and svd of a matrix LAPACK does not
converge on (NaN input).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.dims import Dim, nonnegative
from reverie.compiler.ir.op_defs import ROOT, expect_arity, register
from reverie.compiler.ir.types import FLOAT_DTYPES, ShapeError, TensorType

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op

LINALG_OPS = ("cholesky", "triangular_solve", "solve", "slogdet", "det", "eigh", "svd", "qr")


def smaller(m: Dim, n: Dim) -> Dim:
    """min(m, n) as a dimension expression (n when they are equal)."""
    return n - nonnegative(n - m)


def _matrices(name: str, x: TensorType, square: bool = False) -> None:
    """ShapeError unless `x` is a float stack of (square) matrices."""
    if x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"'{name}' needs float matrices, got {x}")
    if x.rank < 2:
        raise ShapeError(f"'{name}' needs a matrix (at least 2 axes), got {x}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"'{name}' needs square matrices, got {x}: its last two dimensions "
                         f"{x.shape[-2]} and {x.shape[-1]} differ")


def _infer_square(name: str) -> Callable[..., list[TensorType]]:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 1)
        _matrices(name, ops[0], square=True)
        a = ops[0]
        if name == "cholesky":
            return [a]
        if name in ("slogdet", "det"):
            return [TensorType(a.dtype, a.shape[:-2])] * (2 if name == "slogdet" else 1)
        return [TensorType(a.dtype, a.shape[:-1]), a]          # eigh
    return infer


def _infer_solve(name: str) -> Callable[..., list[TensorType]]:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 2)
        a, b = ops
        _matrices(name, a, square=True)
        _matrices(name, b)
        if a.dtype != b.dtype:
            raise ShapeError(f"'{name}' operands must share a dtype, got {a.dtype} and {b.dtype}")
        if b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"'{name}': the right-hand side has {b.shape[-2]} rows, the matrix "
                             f"{a.shape[-1]} columns")
        if a.shape[:-2] != b.shape[:-2]:
            raise ShapeError(f"'{name}' batch dimensions differ: {a} and {b}")
        return [b]
    return infer


def _infer_factor(name: str) -> Callable[..., list[TensorType]]:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 1)
        _matrices(name, ops[0])
        a = ops[0]
        *batch, m, n = a.shape
        k = smaller(m, n)
        first, last = TensorType(a.dtype, (*batch, m, k)), TensorType(a.dtype, (*batch, k, n))
        if name == "qr":
            return [first, last]
        return [first, TensorType(a.dtype, (*batch, k)), last]    # svd
    return infer


def per_matrix(function: Callable[..., Any], *arrays: np.ndarray) -> Any:
    """`function` over a batch of matrices, NaN results for a matrix it refuses
    (`LinAlgError`) instead of an error for the whole batch."""
    try:
        return function(*arrays)
    except np.linalg.LinAlgError:
        pass
    batch = arrays[0].shape[:-2]
    out = np.empty(batch + arrays[-1].shape[-2:], arrays[-1].dtype)
    for index in np.ndindex(*batch):
        try:
            out[index] = function(*(x[index] for x in arrays))
        except np.linalg.LinAlgError:
            out[index] = np.nan
    return out


def each_or_nan(function: Callable[[np.ndarray], Any], a: np.ndarray,
                shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The results of a decomposition `function` (of one matrix's `shapes`) over a batch,
    NaN for a matrix it does not converge on (`LinAlgError`: NaN input, say)."""
    try:
        return list(function(a))
    except np.linalg.LinAlgError:
        pass
    batch = a.shape[:-2]
    outs = [np.empty(batch + shape, a.dtype) for shape in shapes]
    for index in np.ndindex(*batch):
        try:
            parts = function(a[index])
        except np.linalg.LinAlgError:
            parts = [np.nan] * len(shapes)
        for out, part in zip(outs, parts, strict=True):
            out[index] = part
    return outs


def triangle(a: np.ndarray, lower: bool, unit_diagonal: bool) -> np.ndarray:
    """The triangle of `a` a triangular solve reads (its diagonal ones when unit)."""
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        t = t - np.tril(np.triu(t)) + np.eye(a.shape[-1], dtype=a.dtype)
    return t


def triangular_solve_array(a: np.ndarray, b: np.ndarray, lower: bool, transpose: bool,
                           unit_diagonal: bool) -> np.ndarray:
    """op(T) X = B for the triangle T of `a` (the op's semantics, in NumPy)."""
    t = triangle(a, lower, unit_diagonal)
    if transpose:
        t = np.swapaxes(t, -1, -2)
    return per_matrix(np.linalg.solve, t, b)


def _cholesky(a: np.ndarray) -> np.ndarray:
    lower = np.tril(a)
    return per_matrix(np.linalg.cholesky, lower + np.swapaxes(np.tril(a, -1), -1, -2))


def linalg_arrays(name: str, args: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """The results of op `name` on `args` (NumPy arrays of the operand types)."""
    a, dtype = args[0], args[0].dtype
    if name == "cholesky":
        out = [_cholesky(a)]
    elif name == "triangular_solve":
        out = [triangular_solve_array(a, args[1], attrs["lower"], attrs["transpose"],
                                      attrs["unit_diagonal"])]
    elif name == "solve":
        out = [per_matrix(np.linalg.solve, a, args[1])]
    elif name == "slogdet":
        out = list(np.linalg.slogdet(a))
    elif name == "det":
        sign, logabs = np.linalg.slogdet(a)
        out = [sign * np.exp(logabs)]
    elif name == "eigh":
        n = a.shape[-1]
        out = each_or_nan(lambda x: np.linalg.eigh(x, UPLO="L"), a, [(n,), (n, n)])
    elif name == "svd":
        m, n = a.shape[-2:]
        k = min(m, n)
        out = each_or_nan(lambda x: np.linalg.svd(x, full_matrices=False), a,
                          [(m, k), (k,), (k, n)])
    else:
        out = list(np.linalg.qr(a, mode="reduced"))
    return [np.asarray(x, dtype=dtype, order="C") for x in out]


def _evaluate(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return linalg_arrays(op.name, args, op.attrs)


# The loop IR's `LinalgCall` works in place on buffers (`runtime_library/lapack.py`): by op,
# which buffers hold the operands and which the results, and the attribute of each flag bit.
IN_PLACE: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "cholesky": ((0,), (0,)), "triangular_solve": ((0, 1), (1,)), "solve": ((0, 1), (1,)),
    "slogdet": ((0,), (1, 2)), "eigh": ((1,), (0, 1)), "svd": ((0,), (1, 2, 3)),
    "qr": ((0,), (1, 2)),
}
# the buffers a helper only reads (by op): an operand already in a whole buffer is passed as is
READ_ONLY: dict[str, tuple[int, ...]] = {"triangular_solve": (0,)}
FLAG_BITS = ("lower", "transpose", "unit_diagonal")   # bit 0, 1, 2 of `LinalgCall.flags`


def flags_of(attrs: dict[str, Any]) -> int:
    return sum(1 << bit for bit, name in enumerate(FLAG_BITS) if attrs.get(name))


def attrs_of(flags: int) -> dict[str, bool]:
    return {name: bool(flags >> bit & 1) for bit, name in enumerate(FLAG_BITS)}


_TRIANGULAR = {"lower": bool, "transpose": bool, "unit_diagonal": bool}

for _name, _infer, _attrs, _doc in (
    ("cholesky", _infer_square("cholesky"), {},
     "Lower Cholesky factor of A's lower triangle (NaN where not positive definite): "
     "`%l = cholesky %a : f64[N, N]`."),
    ("triangular_solve", _infer_solve("triangular_solve"), _TRIANGULAR,
     "op(T) X = B for the lower or upper triangle T of A: `%x = triangular_solve %a, %b "
     "{lower = true, transpose = false, unit_diagonal = false} : f64[N, K]`."),
    ("solve", _infer_solve("solve"), {},
     "A X = B by LU with partial pivoting (NaN where A is singular): "
     "`%x = solve %a, %b : f64[N, K]`."),
    ("slogdet", _infer_square("slogdet"), {},
     "Sign and log of |det A|: `%s, %l = slogdet %a : f64, f64`."),
    ("det", _infer_square("det"), {},
     "Determinant, as slogdet's sign · exp(log|det|): `%d = det %a : f64`."),
    ("eigh", _infer_square("eigh"), {},
     "Eigenvalues (ascending) and eigenvectors of the symmetric matrix A's lower triangle: "
     "`%w, %v = eigh %a : f64[N], f64[N, N]`."),
    ("svd", _infer_factor("svd"), {},
     "Reduced SVD, singular values descending: `%u, %s, %vh = svd %a : f64[M, K], f64[K], "
     "f64[K, N]`."),
    ("qr", _infer_factor("qr"), {},
     "Reduced QR: `%q, %r = qr %a : f64[M, K], f64[K, N]`."),
):
    register(_name, "linalg", _infer, _evaluate, _doc, attrs=_attrs, fusion=ROOT)
