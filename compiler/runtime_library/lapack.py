"""The linear-algebra helpers in LLVM IR: LAPACK found at run time, own loops as fallback.

One helper per op of `ir/ops_linalg.py` and float dtype (`abi.LINALG_HELPERS`), each its
own small module like the sort (`sort.py`), called by the loop IR's `LinalgCall`
(`backend/llvm.py`) through the helper table:

    void @rv_linalg_<op>_<dtype>(i64 batch, i64 m, i64 n, i64 k, i64 flags,
                                 ptr b0, ptr b1, ptr b2, ptr b3)

The buffers are whole, row-major stacks of `batch` matrices, worked on in place
(`to_loops/linalg.py` copies the operands into them first); `BUFFERS` lists each op's
buffers and the elements one matrix of each takes (0: scratch shared by the batch):

    cholesky          A→L (n×n)                              potrf (column-major 'U' of the
                                                             row-major lower triangle)
    triangular_solve  A (n×n), B→X (n×k); flags 1 lower,     cblas trsm, row-major
                      2 transpose, 4 unit diagonal
    solve             A→LU (n×n), B→X (n×k), pivots (n)      gesv
    slogdet           A→LU, sign (1), log|det| (1), pivots   getrf
    eigh              w (n), A→V (n×n), work (n×n)           syevd ('V', 'L')
    svd               A (m×n), U (m×k), s (k), Vh (k×n)      gesdd ('S')
    qr                A (m×n), Q (m×k), R (k×n), tau (k)     geqrf, orgqr

The LAPACKE (and CBLAS) functions with 64-bit integers of the OpenBLAS NumPy loaded
(`runtime/native/blas.py`) reach each module through a setter per function,
`<helper>_use_<name>` (`abi.LAPACK_FUNCTIONS`; an internal global, as the matrix product's
BLAS). Where one is null, cholesky, triangular_solve, solve and slogdet run their own loops
(Cholesky-Banachiewicz, substitution, LU with partial pivoting: O(n³), unblocked), eigh
cyclic Jacobi rotations (JACOBI_SWEEPS sweeps at most, then sorted), qr Householder
reflectors with LAPACK's signs (geqr2), and svd gives NaN. A matrix LAPACK (or the
fallback) refuses — not positive definite, singular — becomes NaN, so a batch never stops
halfway (`ir/ops_linalg.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I32,
    I64,
    PTR,
    REGISTER,
    FunctionPointer,
    alloca,
    counted_loop,
    i64,
    intrinsic,
)
from reverie.compiler.call_boundary.abi import LAPACK_FUNCTIONS, LINALG_HELPERS
from reverie.compiler.runtime_library.gemm_blas import define_pointer_slot

LINALG_TYPE = ir.FunctionType(ir.VoidType(), [I64] * 5 + [PTR] * 4)
ROW_MAJOR, COLUMN_MAJOR = 101, 102
LEFT, UPPER, LOWER, NO_TRANS, TRANS, NON_UNIT, UNIT = 141, 121, 122, 111, 112, 131, 132
LOWER_FLAG, TRANSPOSE_FLAG, UNIT_FLAG = 1, 2, 4
JACOBI_SWEEPS = 60  # cyclic Jacobi converges quadratically: a few sweeps do; later ones skip

Size = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]
_NN: Size = lambda b, m, n, k: b.mul(n, n)  # noqa: E731
_NK: Size = lambda b, m, n, k: b.mul(n, k)  # noqa: E731
_ONE: Size = lambda b, m, n, k: i64(1)  # noqa: E731
_SHARED: Size = lambda b, m, n, k: i64(0)  # noqa: E731
# each op's buffers: the elements one matrix of each takes (in the order of the docstring)
BUFFERS: dict[str, tuple[Size, ...]] = {
    "cholesky": (_NN,),
    "triangular_solve": (_NN, _NK),
    "solve": (_NN, _NK, _SHARED),
    "slogdet": (_NN, _ONE, _ONE, _SHARED),
    "eigh": (lambda b, m, n, k: n, _NN, _SHARED),
    "svd": (lambda b, m, n, k: b.mul(m, n), lambda b, m, n, k: b.mul(m, k),
            lambda b, m, n, k: k, lambda b, m, n, k: b.mul(k, n)),
    "qr": (lambda b, m, n, k: b.mul(m, n), lambda b, m, n, k: b.mul(m, k),
           lambda b, m, n, k: b.mul(k, n), _SHARED),
}


def helper_module(name: str) -> str:
    """LLVM IR of the module defining the linear-algebra helper `name` (LINALG_HELPERS)."""
    if name not in LINALG_HELPERS:
        raise ValueError(f"no linear-algebra helper named {name!r}")
    op, dtype = name.removeprefix("rv_linalg_").rsplit("_", 1)
    module = ir.Module(name=name)
    function = ir.Function(module, LINALG_TYPE, name=name)
    function.attributes.add("nounwind")
    _LinalgBuilder(function, op, dtype).build()
    return str(module)


class _LinalgBuilder:
    """Emits one helper: a loop over the batch, each matrix by LAPACK or the fallback."""

    def __init__(self, function: ir.Function, op: str, dtype: str) -> None:
        self.op, self.dtype, self.t = op, dtype, REGISTER[dtype]
        self.module = function.module
        self.allocas = ir.IRBuilder(function.append_basic_block("entry"))
        self.start = function.append_basic_block("start")
        self.b = ir.IRBuilder(self.start)
        self.batch, self.m, self.n, self.k, self.flags, *self.buffers = function.args
        self.slots = {fn: define_pointer_slot(self.module, f"{fn}_address",
                                              f"{function.name}_use_{fn}")
                      for fn in LAPACK_FUNCTIONS[op]}

    # ------------------------------------------------------------ small pieces

    def at(self, base: ir.Value, offset: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.gep(base, [offset], source_etype=type_ or self.t, inbounds=True)

    def load(self, base: ir.Value, offset: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.load(self.at(base, offset, type_), typ=type_ or self.t)

    def store(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        self.b.store(value, self.at(base, offset, value.type))

    def index(self, row: ir.Value, column: ir.Value, width: ir.Value) -> ir.Value:
        return self.b.add(self.b.mul(row, width), column)

    def variable(self, initial: ir.Value, name: str) -> ir.Value:
        slot = alloca(self.allocas, initial.type, name)
        self.b.store(initial, slot)
        return slot

    def get(self, slot: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.load(slot, typ=type_ or self.t)

    def const(self, value: float) -> ir.Constant:
        return ir.Constant(self.t, value)

    def math(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(intrinsic(self.module, f"llvm.{name}", self.t, [self.t] * len(args)),
                           list(args))

    def loop(self, lo: ir.Value, hi: ir.Value) -> Iterator[ir.Value]:
        return counted_loop(self.b, lo, hi)

    def either(self, function: str, lapack: Callable[[ir.Value], None],
               own: Callable[[], None]) -> None:
        """`lapack(address)` when the run time handed over LAPACK's `function`, else `own()`
        (the own loops, or a refusal: info = -1)."""
        b = self.b
        address = b.load_atomic(self.slots[function], "monotonic", 8, typ=PTR)
        with b.if_else(b.icmp_unsigned("!=", address, ir.Constant(PTR, None))) as (found, missing):
            with found:
                lapack(address)
            with missing:
                own()

    def call(self, address: ir.Value, result: ir.Type, args: list[ir.Value]) -> ir.Value:
        types = [a.type for a in args]
        return self.b.call(FunctionPointer(address, ir.FunctionType(result, types)), args)

    def fill_nan(self, base: ir.Value, count: ir.Value) -> None:
        with self.loop(i64(0), count) as i:
            self.store(self.const(float("nan")), base, i)

    def when_failed(self, info: ir.Value, bases: list[tuple[ir.Value, ir.Value]]) -> None:
        """NaN in each (buffer, count) when `info` (a slot) is not 0."""
        with self.b.if_then(self.b.icmp_signed("!=", self.get(info, I64), i64(0))):
            for base, count in bases:
                self.fill_nan(base, count)

    # ------------------------------------------------------------ the helper

    def build(self) -> None:
        b = self.b
        sizes = [size(b, self.m, self.n, self.k) for size in BUFFERS[self.op]]
        with self.loop(i64(0), self.batch) as item:
            bases = [self.at(base, b.mul(item, size))
                     for base, size in zip(self.buffers, sizes, strict=False)]
            getattr(self, "_" + self.op)(*bases)
        b.ret_void()
        self.allocas.branch(self.start)

    def _info(self) -> ir.Value:
        return self.variable(i64(0), "info")

    def lead(self, size: ir.Value) -> ir.Value:
        """A leading dimension: max(size, 1), as LAPACK requires even of empty matrices."""
        return self.b.select(self.b.icmp_signed(">", size, i64(1)), size, i64(1))

    def char(self, letter: str) -> ir.Constant:
        """A C `char` argument, passed widened (its upper bits zero)."""
        return ir.Constant(I32, ord(letter))

    def stored(self, info: ir.Value, address: ir.Value, args: list[ir.Value]) -> None:
        """info = LAPACKE function at `address`(args)."""
        self.b.store(self.call(address, I64, args), info)

    def refuse(self, info: ir.Value) -> Callable[[], None]:
        return lambda: self.b.store(i64(-1), info)

    def _cholesky(self, a: ir.Value) -> None:
        b, n, info = self.b, self.n, self._info()
        # potrf of the column-major upper triangle, which is the row-major lower one
        self.either("potrf", lambda potrf: self.stored(
            info, potrf, [ir.Constant(I32, COLUMN_MAJOR), self.char("U"), n, a, self.lead(n)]),
            lambda: self.own_cholesky(a, info))
        with self.loop(i64(0), n) as i:
            with self.loop(b.add(i, i64(1)), n) as j:
                self.store(self.const(0.0), a, self.index(i, j, n))
        self.when_failed(info, [(a, b.mul(n, n))])

    def own_cholesky(self, a: ir.Value, info: ir.Value) -> None:
        """L[j,j] = √(A[j,j] − Σ_{p<j} L[j,p]²),
        L[i,j] = (A[i,j] − Σ_{p<j} L[i,p] L[j,p]) / L[j,j]; info 1 when a pivot is not > 0."""
        b, n = self.b, self.n
        with self.loop(i64(0), n) as j:
            total = self.variable(self.load(a, self.index(j, j, n)), "diagonal")
            with self.loop(i64(0), j) as p:
                x = self.load(a, self.index(j, p, n))
                b.store(b.fsub(self.get(total), b.fmul(x, x)), total)
            square = self.get(total)
            b.store(b.select(b.fcmp_unordered("ule", square, self.const(0.0)), i64(1),
                             self.get(info, I64)), info)
            pivot = self.math("sqrt", square)
            self.store(pivot, a, self.index(j, j, n))
            with self.loop(b.add(j, i64(1)), n) as i:
                value = self.variable(self.load(a, self.index(i, j, n)), "value")
                with self.loop(i64(0), j) as p:
                    product = b.fmul(self.load(a, self.index(i, p, n)),
                                     self.load(a, self.index(j, p, n)))
                    b.store(b.fsub(self.get(value), product), value)
                self.store(b.fdiv(self.get(value), pivot), a, self.index(i, j, n))

    def _triangular_solve(self, a: ir.Value, x: ir.Value) -> None:
        b, n, k, flags = self.b, self.n, self.k, self.flags

        def bit(flag: int, yes: int, no: int) -> ir.Value:
            set_ = b.icmp_signed("!=", b.and_(flags, i64(flag)), i64(0))
            return b.select(set_, ir.Constant(I32, yes), ir.Constant(I32, no))

        self.either("trsm", lambda trsm: self.call(trsm, ir.VoidType(), [
            ir.Constant(I32, ROW_MAJOR), ir.Constant(I32, LEFT),
            bit(LOWER_FLAG, LOWER, UPPER), bit(TRANSPOSE_FLAG, TRANS, NO_TRANS),
            bit(UNIT_FLAG, UNIT, NON_UNIT), n, k, self.const(1.0), a, self.lead(n), x,
            self.lead(k)]),
            lambda: self.own_substitution(a, x, flags))

    def own_substitution(self, a: ir.Value, x: ir.Value, flags: ir.Value) -> None:
        """op(T) X = B in place, row by row: forward when op(T) is lower, else backward.
        op(T)[i, p] = A[i·r + p·c] with (r, c) = (n, 1), or (1, n) when transposed."""
        b, n, k = self.b, self.n, self.k
        has = [b.icmp_signed("!=", b.and_(flags, i64(f)), i64(0))
               for f in (LOWER_FLAG, TRANSPOSE_FLAG, UNIT_FLAG)]
        lower, transpose, unit = has
        forward = b.xor(lower, transpose)
        r, c = b.select(transpose, i64(1), n), b.select(transpose, n, i64(1))
        last = b.sub(n, i64(1))
        with self.loop(i64(0), n) as step:
            i = b.select(forward, step, b.sub(last, step))
            diagonal = b.select(unit, self.const(1.0),
                                self.load(a, b.add(b.mul(i, r), b.mul(i, c))))
            with self.loop(i64(0), k) as col:
                value = self.variable(self.load(x, self.index(i, col, k)), "value")
                with self.loop(i64(0), step) as q:
                    p = b.select(forward, q, b.sub(last, q))
                    product = b.fmul(self.load(a, b.add(b.mul(i, r), b.mul(p, c))),
                                     self.load(x, self.index(p, col, k)))
                    b.store(b.fsub(self.get(value), product), value)
                self.store(b.fdiv(self.get(value), diagonal), x, self.index(i, col, k))

    def own_lu(self, a: ir.Value, pivots: ir.Value, info: ir.Value) -> None:
        """P A = L U in place with partial pivoting; pivots 1-based as LAPACK's getrf; info
        1 when a pivot is 0."""
        b, n = self.b, self.n
        with self.loop(i64(0), n) as j:
            best = self.variable(j, "best")
            with self.loop(b.add(j, i64(1)), n) as i:
                larger = b.fcmp_ordered(">", self.math("fabs", self.load(a, self.index(i, j, n))),
                                        self.math("fabs", self.load(a, self.index(
                                            self.get(best, I64), j, n))))
                b.store(b.select(larger, i, self.get(best, I64)), best)
            p = self.get(best, I64)
            self.store(b.add(p, i64(1)), pivots, j)
            with self.loop(i64(0), n) as col:
                here, there = self.index(j, col, n), self.index(p, col, n)
                upper, lower = self.load(a, here), self.load(a, there)
                self.store(lower, a, here)
                self.store(upper, a, there)
            pivot = self.load(a, self.index(j, j, n))
            b.store(b.select(b.fcmp_ordered("==", pivot, self.const(0.0)), i64(1),
                             self.get(info, I64)), info)
            with self.loop(b.add(j, i64(1)), n) as i:
                singular = b.fcmp_ordered("==", pivot, self.const(0.0))   # as getrf: skip
                factor = b.select(singular, self.const(0.0),
                                  b.fdiv(self.load(a, self.index(i, j, n)), pivot))
                self.store(factor, a, self.index(i, j, n))
                with self.loop(b.add(j, i64(1)), n) as col:
                    at = self.index(i, col, n)
                    self.store(b.fsub(self.load(a, at), b.fmul(factor, self.load(
                        a, self.index(j, col, n)))), a, at)

    def _solve(self, a: ir.Value, x: ir.Value, pivots: ir.Value) -> None:
        b, n, k, info = self.b, self.n, self.k, self._info()
        def own() -> None:
            self.own_lu(a, pivots, info)
            with self.loop(i64(0), n) as j:
                p = b.sub(self.load(pivots, j, I64), i64(1))
                with self.loop(i64(0), k) as col:
                    here, there = self.index(j, col, k), self.index(p, col, k)
                    first, second = self.load(x, here), self.load(x, there)
                    self.store(second, x, here)
                    self.store(first, x, there)
            self.own_substitution(a, x, i64(LOWER_FLAG | UNIT_FLAG))
            self.own_substitution(a, x, i64(0))

        self.either("gesv", lambda gesv: self.stored(
            info, gesv, [ir.Constant(I32, ROW_MAJOR), n, k, a, self.lead(n), pivots, x,
                         self.lead(k)]), own)
        self.when_failed(info, [(x, b.mul(n, k))])

    def _slogdet(self, a: ir.Value, sign: ir.Value, logabs: ir.Value, pivots: ir.Value) -> None:
        b, n, info = self.b, self.n, self._info()
        self.either("getrf", lambda getrf: self.stored(
            info, getrf, [ir.Constant(I32, ROW_MAJOR), n, n, a, self.lead(n), pivots]),
            lambda: self.own_lu(a, pivots, info))
        signs, total = self.variable(self.const(1.0), "sign"), self.variable(self.const(0.0), "log")
        one, zero = self.const(1.0), self.const(0.0)
        with self.loop(i64(0), n) as j:
            d = self.load(a, self.index(j, j, n))
            swapped = b.icmp_signed("!=", b.sub(self.load(pivots, j, I64), i64(1)), j)
            sign_d = b.select(b.fcmp_ordered("<", d, zero), self.const(-1.0),
                              b.select(b.fcmp_ordered(">", d, zero), one, zero))
            factor = b.select(swapped, b.fneg(sign_d), sign_d)
            b.store(b.fmul(self.get(signs), factor), signs)
            b.store(b.fadd(self.get(total), self.math("log", self.math("fabs", d))), total)
        # getrf's info > 0 is an exact zero pivot: sign 0 and log|det| = -inf already
        self.store(self.get(signs), sign, i64(0))
        self.store(self.get(total), logabs, i64(0))

    def _eigh(self, w: ir.Value, v: ir.Value, work: ir.Value) -> None:
        b, n, info = self.b, self.n, self._info()
        self.either("syevd", lambda syevd: self.stored(
            info, syevd, [ir.Constant(I32, ROW_MAJOR), self.char("V"), self.char("L"), n, v,
                          self.lead(n), w]), lambda: self.own_jacobi(w, v, work))
        self.when_failed(info, [(w, n), (v, b.mul(n, n))])

    def own_jacobi(self, w: ir.Value, v: ir.Value, a: ir.Value) -> None:
        """Eigen-decomposition of the symmetric matrix whose lower triangle `v` holds:
        a = that matrix, v = I; sweeps of rotations A ← Jᵀ A J, V ← V J zeroing each
        a[p, q] (Golub and Van Loan's sym.schur2: τ = (a_qq − a_pp) / 2a_pq,
        t = sign(τ) / (|τ| + √(1 + τ²)), c = 1/√(1 + t²), s = t c), skipping the a[p, q]
        already negligible against the diagonal; then w = diag(a), sorted ascending with
        V's columns."""
        b, n, zero, one = self.b, self.n, self.const(0.0), self.const(1.0)
        with self.loop(i64(0), n) as i:
            with self.loop(i64(0), n) as j:
                below = b.icmp_signed(">", i, j)   # read the lower triangle
                row, column = b.select(below, i, j), b.select(below, j, i)
                self.store(self.load(v, self.index(row, column, n)), a, self.index(i, j, n))
                self.store(b.select(b.icmp_signed("==", i, j), one, zero), v,
                           self.index(i, j, n))
        tiny = self.const(float(np.finfo(np.float32 if self.dtype == "f32" else np.float64).eps)
                          * 1e-3)
        with self.loop(i64(0), i64(JACOBI_SWEEPS)):
            with self.loop(i64(0), n) as p:
                with self.loop(b.add(p, i64(1)), n) as q:
                    apq = self.load(a, self.index(p, q, n))
                    app, aqq = self.load(a, self.index(p, p, n)), self.load(a, self.index(q, q, n))
                    scale = self.math("sqrt", self.math("fabs", b.fmul(app, aqq)))
                    negligible = b.fcmp_ordered("<=", self.math("fabs", apq), b.fmul(tiny, scale))
                    with b.if_then(b.not_(b.or_(negligible, b.fcmp_ordered("==", apq, zero)))):
                        self.rotate(a, v, p, q, app, aqq, apq)
        with self.loop(i64(0), n) as i:
            self.store(self.load(a, self.index(i, i, n)), w, i)
        self.sort_pairs(w, v)

    def rotate(self, a: ir.Value, v: ir.Value, p: ir.Value, q: ir.Value, app: ir.Value,
               aqq: ir.Value, apq: ir.Value) -> None:
        """The Jacobi rotation in the (p, q) plane that zeroes a[p, q] (`own_jacobi`)."""
        b, n, one = self.b, self.n, self.const(1.0)
        tau = b.fdiv(b.fsub(aqq, app), b.fmul(self.const(2.0), apq))
        root = self.math("sqrt", b.fadd(one, b.fmul(tau, tau)))
        sign = b.select(b.fcmp_ordered("<", tau, self.const(0.0)), self.const(-1.0), one)
        t = b.fdiv(sign, b.fadd(self.math("fabs", tau), root))
        c = b.fdiv(one, self.math("sqrt", b.fadd(one, b.fmul(t, t))))
        s = b.fmul(t, c)

        def turn(base: ir.Value, first: ir.Value, second: ir.Value) -> None:
            x, y = self.load(base, first), self.load(base, second)
            self.store(b.fsub(b.fmul(c, x), b.fmul(s, y)), base, first)
            self.store(b.fadd(b.fmul(s, x), b.fmul(c, y)), base, second)

        with self.loop(i64(0), n) as k:
            turn(a, self.index(k, p, n), self.index(k, q, n))    # columns: A J
        with self.loop(i64(0), n) as k:
            turn(a, self.index(p, k, n), self.index(q, k, n))    # rows: Jᵀ (A J)
        with self.loop(i64(0), n) as k:
            turn(v, self.index(k, p, n), self.index(k, q, n))    # V J

    def sort_pairs(self, w: ir.Value, v: ir.Value) -> None:
        """w ascending, V's columns moved with their values (selection sort, O(n²))."""
        b, n = self.b, self.n
        with self.loop(i64(0), n) as i:
            best = self.variable(i, "best")
            with self.loop(b.add(i, i64(1)), n) as j:
                smaller = b.fcmp_ordered("<", self.load(w, j), self.load(w, self.get(best, I64)))
                b.store(b.select(smaller, j, self.get(best, I64)), best)
            j = self.get(best, I64)
            first, second = self.load(w, i), self.load(w, j)
            self.store(second, w, i)
            self.store(first, w, j)
            with self.loop(i64(0), n) as k:
                here, there = self.index(k, i, n), self.index(k, j, n)
                x, y = self.load(v, here), self.load(v, there)
                self.store(y, v, here)
                self.store(x, v, there)

    def upper_part(self, a: ir.Value, r: ir.Value) -> None:
        """R = the upper triangle of the first k rows of the factored a (m×n)."""
        b, n, k = self.b, self.n, self.k
        with self.loop(i64(0), k) as i:
            with self.loop(i64(0), n) as j:
                value = self.load(a, self.index(i, j, n))
                kept = b.select(b.icmp_signed(">=", j, i), value, self.const(0.0))
                self.store(kept, r, self.index(i, j, n))

    def own_householder(self, a: ir.Value, tau: ir.Value) -> None:
        """geqr2's factorisation in place: for each column j < k, the reflector
        H = I − τ v vᵀ (v_j = 1, the rest of v below the diagonal) that makes a[j:, j]
        (β, 0, ...) with β = −sign(a_jj)·‖a[j:, j]‖ (LAPACK's signs), applied to the
        columns after j; τ = 0 (H = I) where a[j+1:, j] is already 0, as larfg."""
        b, m, n, k, zero = self.b, self.m, self.n, self.k, self.const(0.0)
        with self.loop(i64(0), k) as j:
            total = self.variable(zero, "below")
            with self.loop(b.add(j, i64(1)), m) as i:
                x = self.load(a, self.index(i, j, n))
                b.store(b.fadd(self.get(total), b.fmul(x, x)), total)
            alpha = self.load(a, self.index(j, j, n))
            zero_column = b.fcmp_ordered("==", self.get(total), zero)   # as larfg: H = I
            norm = self.math("sqrt", b.fadd(self.get(total), b.fmul(alpha, alpha)))
            beta = b.select(b.fcmp_ordered("<", alpha, zero), norm, b.fneg(norm))
            safe = b.select(zero_column, self.const(1.0), beta)
            self.store(b.select(zero_column, zero, b.fdiv(b.fsub(safe, alpha), safe)), tau, j)
            with b.if_then(b.not_(zero_column)):
                head = b.fsub(alpha, beta)
                with self.loop(b.add(j, i64(1)), m) as i:
                    at = self.index(i, j, n)
                    self.store(b.fdiv(self.load(a, at), head), a, at)
                self.store(beta, a, self.index(j, j, n))
                self.reflect(a, tau, j, n, b.add(j, i64(1)), n, a, n)

    def reflect(self, v: ir.Value, tau: ir.Value, j: ir.Value, v_width: ir.Value,
                first: ir.Value, last: ir.Value, x: ir.Value, width: ir.Value) -> None:
        """x[j:, c] ← (I − τ_j v vᵀ) x[j:, c] for columns first ≤ c < last, v the reflector
        j stored below the diagonal of `v` (row-major, `v_width` columns; v_j = 1)."""
        b, m = self.b, self.m
        scale = self.load(tau, j)

        def v_at(i: ir.Value) -> ir.Value:
            return b.select(b.icmp_signed("==", i, j), self.const(1.0),
                            self.load(v, self.index(i, j, v_width)))

        with self.loop(first, last) as col:
            dot = self.variable(self.const(0.0), "dot")
            with self.loop(j, m) as i:
                product = b.fmul(v_at(i), self.load(x, self.index(i, col, width)))
                b.store(b.fadd(self.get(dot), product), dot)
            factor = b.fmul(scale, self.get(dot))
            with self.loop(j, m) as i:
                at = self.index(i, col, width)
                self.store(b.fsub(self.load(x, at), b.fmul(factor, v_at(i))), x, at)

    def own_q(self, a: ir.Value, tau: ir.Value, q: ir.Value) -> None:
        """Q (m×k) = H_0 ⋯ H_(k-1) applied to the first k columns of I, last reflector first."""
        b, m, n, k = self.b, self.m, self.n, self.k
        with self.loop(i64(0), m) as i:
            with self.loop(i64(0), k) as j:
                self.store(b.select(b.icmp_signed("==", i, j), self.const(1.0),
                                    self.const(0.0)), q, self.index(i, j, k))
        with self.loop(i64(0), k) as step:
            j = b.sub(b.sub(k, i64(1)), step)
            self.reflect(a, tau, j, n, i64(0), k, q, k)

    def _svd(self, a: ir.Value, u: ir.Value, s: ir.Value, vh: ir.Value) -> None:
        b, m, n, k, info = self.b, self.m, self.n, self.k, self._info()
        self.either("gesdd", lambda gesdd: self.stored(
            info, gesdd, [ir.Constant(I32, ROW_MAJOR), self.char("S"), m, n, a, self.lead(n), s,
                          u, self.lead(k), vh, self.lead(n)]), self.refuse(info))
        self.when_failed(info, [(u, b.mul(m, k)), (s, k), (vh, b.mul(k, n))])

    def _qr(self, a: ir.Value, q: ir.Value, r: ir.Value, tau: ir.Value) -> None:
        b, m, n, k, info = self.b, self.m, self.n, self.k, self._info()
        layout = ir.Constant(I32, ROW_MAJOR)

        def with_lapack(geqrf: ir.Value) -> None:
            self.stored(info, geqrf, [layout, m, n, a, self.lead(n), tau])
            self.upper_part(a, r)
            self.either("orgqr", lambda orgqr: self.stored(
                info, orgqr, [layout, m, k, k, a, self.lead(n), tau]), self.refuse(info))
            with self.loop(i64(0), m) as i:
                with self.loop(i64(0), k) as j:
                    self.store(self.load(a, self.index(i, j, n)), q, self.index(i, j, k))

        def own() -> None:
            self.own_householder(a, tau)
            self.upper_part(a, r)
            self.own_q(a, tau, q)

        self.either("geqrf", with_lapack, own)
        self.when_failed(info, [(q, b.mul(m, k)), (r, b.mul(k, n))])
