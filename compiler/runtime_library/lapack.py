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
BLAS). Where one is null, the helper runs its own loops (`linalg_loops.py`: Cholesky,
substitution, LU, Jacobi's eigh and svd, Householder's qr). A matrix LAPACK (or
the own loops) refuses — not positive definite, singular — becomes NaN, so a batch never
stops halfway (`ir/ops_linalg.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I32,
    I64,
    PTR,
    REGISTER,
    FunctionPointer,
    i64,
)
from reverie.compiler.call_boundary.abi import LAPACK_FUNCTIONS, LINALG_HELPERS
from reverie.compiler.runtime_library.gemm_blas import define_pointer_slot
from reverie.compiler.runtime_library.linalg_loops import (
    LOWER_FLAG,
    TRANSPOSE_FLAG,
    UNIT_FLAG,
    MatrixLoops,
)

LINALG_TYPE = ir.FunctionType(ir.VoidType(), [I64] * 5 + [PTR] * 4)
ROW_MAJOR, COLUMN_MAJOR = 101, 102
LEFT, UPPER, LOWER, NO_TRANS, TRANS, NON_UNIT, UNIT = 141, 121, 122, 111, 112, 131, 132

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


class _LinalgBuilder(MatrixLoops):
    """Emits one helper: a loop over the batch, each matrix by LAPACK or the own loops."""

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

    # ------------------------------------------------------------ LAPACK or the own loops

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

    def _svd(self, a: ir.Value, u: ir.Value, s: ir.Value, vh: ir.Value) -> None:
        b, m, n, k, info = self.b, self.m, self.n, self.k, self._info()
        self.either("gesdd", lambda gesdd: self.stored(
            info, gesdd, [ir.Constant(I32, ROW_MAJOR), self.char("S"), m, n, a, self.lead(n), s,
                          u, self.lead(k), vh, self.lead(n)]), lambda: self.own_svd(a, u, s, vh))
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
