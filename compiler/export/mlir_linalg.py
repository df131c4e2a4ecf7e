"""MLIR export of the linear-algebra ops (`ir/ops_linalg.py`): loops, where loops serve.

The upstream dialects (`linalg`, `scf`, `arith`, `math`, `memref`) have no factorisation and
the export calls no library, so the ops with short direct algorithms are written as `scf.for`
loops over each matrix of the batch (an `scf.for` nest over the leading axes), on a copy of
the operand:

- `cholesky`: Cholesky-Banachiewicz by columns, the strict upper triangle zeroed, NaN
  throughout a matrix with a pivot that is not > 0;
- `triangular_solve`: forward or backward substitution (the order fixed by `lower` and
  `transpose`, which are attributes);
- `solve`, `slogdet`, `det`: LU with partial pivoting (the rows of the right-hand side
  swapped with the matrix's), then substitution; NaN for a singular matrix's solution;
  the sign and log|det| from the pivots and U's diagonal.

All O(n³) and unblocked, like the native fallback (`runtime_library/lapack.py`). `eigh`, `svd`
and `qr` (iterative or Householder algorithms) are not lowered: a function using them (also
through `pinv` or the spectral and nuclear norms) is a CompileError naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import LOWERINGS, index_arith
from reverie.compiler.export.mlir_scalar import Scalars
from reverie.compiler.export.mlir_writer import MlirWriter, Tensor
from reverie.compiler.ir.core import Op
from reverie.dsl.ast import NO_SPAN
from reverie.dsl.diagnostics import CompileError, error_at

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter

NOT_LOWERED = ("eigh", "svd", "qr")


@LOWERINGS.register(*NOT_LOWERED)
def _not_lowered(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    raise error_at(op.span or NO_SPAN, f"the MLIR export cannot lower '{op.name}': the "
                                       "upstream dialects have no eigen- or singular-value "
                                       "decomposition (use the native back end)", CompileError)


class _Matrices:
    """Loops over the matrices of stacks: index arithmetic, copies, element access."""

    def __init__(self, w: MlirWriter, dtype: str) -> None:
        self.w, self.s, self.dtype = w, Scalars(w, dtype), dtype

    def add(self, a: str, b: str) -> str:
        return index_arith(self.w, "addi", a, b)

    def sub(self, a: str, b: str) -> str:
        return index_arith(self.w, "subi", a, b)

    def less(self, a: str, b: str) -> str:
        return self.w.assign(f"arith.cmpi ult, {a}, {b} : index")

    def loop(self, lo: str, hi: str, body: Callable[[str], None]) -> None:
        self.w.scf_for(lo, hi, [], lambda iv, _: body(iv) or [])

    def fold(self, lo: str, hi: str, start: str, step: Callable[[str, str], str]) -> str:
        """start, then step(i, value) for i in lo..hi: the final value."""
        return self.w.scf_for(lo, hi, [(start, self.s.type)],
                              lambda iv, carried: [step(iv, carried[0])])[0]

    def copy(self, x: Tensor) -> Tensor:
        out = self.w.alloc(x.type)
        extents = [self.w.extent(d) for d in x.type.shape]
        self.w.loop_nest(extents, [], lambda ivs, _: self.w.store(
            self.w.load(x, ivs), out, ivs) or [])
        return out

    def nan_fill(self, x: Tensor, batch: list[str], rows: str, cols: str) -> None:
        nan = self.s.const(float("nan"))
        self.loop(self.w.index(0), rows, lambda i: self.loop(
            self.w.index(0), cols, lambda j: self.w.store(nan, x, [*batch, i, j])))


def _per_matrix(ex: Exporter, op: Op, body: Callable[[list[str]], list[str]]) -> list[Tensor]:
    """body(batch indices) over every matrix; its scalars become the op's results (rank 0
    values, or buffers over the batch). Results that are whole matrices are the body's to
    store; it returns no values for them."""
    w = ex.w
    batch = [w.extent(d) for d in op.operands[0].type.shape[:-2]]
    scalar = [r for r in op.results if r.type.rank == len(batch)]
    if not batch:
        values = body([])
        return [Tensor(v, r.type) for v, r in zip(values, scalar, strict=True)]
    outs = [w.alloc(r.type) for r in scalar]

    def each(ivs: list[str], _: list[str]) -> list[str]:
        for value, out in zip(body(ivs), outs, strict=True):
            w.store(value, out, ivs)
        return []

    w.loop_nest(batch, [], each)
    return outs


@LOWERINGS.register("cholesky")
def _cholesky(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    m = _Matrices(ex.w, op.result.type.dtype)
    w, s = m.w, m.s
    c = m.copy(args[0])
    n, zero, one = w.extent(op.result.type.shape[-1]), w.index(0), w.index(1)

    def factor(b: list[str]) -> list[str]:
        def column(j: str, carried: list[str]) -> list[str]:
            square = m.fold(zero, j, w.load(c, [*b, j, j]), lambda p, acc: s.op(
                "arith.subf", acc, s.op("arith.mulf", *[w.load(c, [*b, j, p])] * 2)))
            bad = s.cmp("ule", square, s.const(0.0))
            pivot = s.op("math.sqrt", square)
            w.store(pivot, c, [*b, j, j])

            def row(i: str) -> None:
                value = m.fold(zero, j, w.load(c, [*b, i, j]), lambda p, acc: s.op(
                    "arith.subf", acc, s.op("arith.mulf", w.load(c, [*b, i, p]),
                                            w.load(c, [*b, j, p]))))
                w.store(s.op("arith.divf", value, pivot), c, [*b, i, j])

            m.loop(m.add(j, one), n, row)
            return [s.logic("arith.ori", carried[0], bad)]

        (failed,) = w.scf_for(zero, n, [(w.assign("arith.constant false"), "i1")], column)
        m.loop(zero, n, lambda i: m.loop(m.add(i, one), n, lambda j: w.store(
            s.const(0.0), c, [*b, i, j])))
        w.if_then(failed, lambda: m.nan_fill(c, b, n, n))
        return []

    _per_matrix(ex, op, factor)
    return [c]


def _substitute(m: _Matrices, a: Tensor, x: Tensor, b: list[str], n: str, k: str,
                lower: bool, transpose: bool, unit: bool) -> None:
    """op(T) X = X in place for the triangle T of `a` (op(T) = Tᵀ when transposed)."""
    w, s, zero = m.w, m.s, m.w.index(0)
    forward = lower != transpose
    last = m.sub(n, w.index(1))

    def t(i: str, p: str) -> str:
        return w.load(a, [*b, p, i] if transpose else [*b, i, p])

    def step(position: str) -> None:
        i = position if forward else m.sub(last, position)
        diagonal = s.const(1.0) if unit else t(i, i)

        def column(col: str) -> None:
            def subtract(q: str, acc: str) -> str:
                p = q if forward else m.sub(last, q)
                return s.op("arith.subf", acc, s.op("arith.mulf", t(i, p),
                                                    w.load(x, [*b, p, col])))

            value = m.fold(zero, position, w.load(x, [*b, i, col]), subtract)
            w.store(s.op("arith.divf", value, diagonal), x, [*b, i, col])

        m.loop(zero, k, column)

    m.loop(zero, n, step)


@LOWERINGS.register("triangular_solve")
def _triangular_solve(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    m = _Matrices(ex.w, op.result.type.dtype)
    a, x = args[0], m.copy(args[1])
    n, k = (m.w.extent(d) for d in op.result.type.shape[-2:])
    _per_matrix(ex, op, lambda b: _substitute(
        m, a, x, b, n, k, op.attrs["lower"], op.attrs["transpose"],
        op.attrs["unit_diagonal"]) or [])
    return [x]


def _lu(m: _Matrices, c: Tensor, b: list[str], n: str, rhs: Tensor | None,
        k: str) -> tuple[str, str]:
    """P C = L U in place (rows of `rhs` swapped alike); (the swaps' sign, singular: i1)."""
    w, s, zero, one = m.w, m.s, m.w.index(0), m.w.index(1)

    def column(j: str, carried: list[str]) -> list[str]:
        def better(i: str, best: list[str]) -> list[str]:
            size = s.op("math.absf", w.load(c, [*b, i, j]))
            larger = s.cmp("ogt", size, best[1])
            return [w.assign(f"arith.select {larger}, {i}, {best[0]} : index"),
                    s.select(larger, size, best[1])]

        start = s.op("math.absf", w.load(c, [*b, j, j]))
        pivot_row = w.scf_for(m.add(j, one), n, [(j, "index"), (start, s.type)], better)[0]

        def swap(tensor: Tensor, width: str) -> None:
            def element(col: str) -> None:
                here, there = [*b, j, col], [*b, pivot_row, col]
                first, second = w.load(tensor, here), w.load(tensor, there)
                w.store(second, tensor, here)
                w.store(first, tensor, there)
            m.loop(zero, width, element)

        swap(c, n)
        if rhs is not None:
            swap(rhs, k)
        moved = w.assign(f"arith.cmpi ne, {pivot_row}, {j} : index")
        sign = s.select(moved, s.op("arith.negf", carried[0]), carried[0])
        pivot = w.load(c, [*b, j, j])
        singular = s.cmp("oeq", pivot, s.const(0.0))

        def eliminate(i: str) -> None:
            factor = s.select(singular, s.const(0.0),
                              s.op("arith.divf", w.load(c, [*b, i, j]), pivot))
            w.store(factor, c, [*b, i, j])
            m.loop(m.add(j, one), n, lambda col: w.store(s.op(
                "arith.subf", w.load(c, [*b, i, col]),
                s.op("arith.mulf", factor, w.load(c, [*b, j, col]))), c, [*b, i, col]))

        m.loop(m.add(j, one), n, eliminate)
        return [sign, s.logic("arith.ori", carried[1], singular)]

    false = w.assign("arith.constant false")
    sign, singular = w.scf_for(zero, n, [(s.const(1.0), s.type), (false, "i1")], column)
    return sign, singular


@LOWERINGS.register("solve")
def _solve(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    m = _Matrices(ex.w, op.result.type.dtype)
    c, x = m.copy(args[0]), m.copy(args[1])
    n, k = (m.w.extent(d) for d in op.result.type.shape[-2:])

    def each(b: list[str]) -> list[str]:
        _, singular = _lu(m, c, b, n, x, k)
        _substitute(m, c, x, b, n, k, lower=True, transpose=False, unit=True)
        _substitute(m, c, x, b, n, k, lower=False, transpose=False, unit=False)
        m.w.if_then(singular, lambda: m.nan_fill(x, b, n, k))
        return []

    _per_matrix(ex, op, each)
    m.w.dealloc(c)
    return [x]


def _log_determinant(m: _Matrices, c: Tensor, b: list[str], n: str) -> tuple[str, str]:
    """(sign, log|det|) of a matrix factored in place."""
    w, s = m.w, m.s
    swaps, _ = _lu(m, c, b, n, None, n)
    zero = s.const(0.0)

    def step(j: str, carried: list[str]) -> list[str]:
        d = w.load(c, [*b, j, j])
        sign = s.select(s.cmp("olt", d, zero), s.const(-1.0),
                        s.select(s.cmp("ogt", d, zero), s.const(1.0), zero))
        return [s.op("arith.mulf", carried[0], sign),
                s.op("arith.addf", carried[1], s.op("math.log", s.op("math.absf", d)))]

    sign, logabs = w.scf_for(w.index(0), n, [(swaps, s.type), (zero, s.type)], step)
    return sign, logabs


@LOWERINGS.register("slogdet", "det")
def _determinant(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    dtype = op.results[0].type.dtype
    m = _Matrices(ex.w, dtype)
    c = m.copy(args[0])
    n = m.w.extent(args[0].type.shape[-1])

    def each(b: list[str]) -> list[str]:
        sign, logabs = _log_determinant(m, c, b, n)
        if op.name == "slogdet":
            return [sign, logabs]
        return [m.s.op("arith.mulf", sign, m.s.op("math.exp", logabs))]

    results = _per_matrix(ex, op, each)
    m.w.dealloc(c)
    return results

