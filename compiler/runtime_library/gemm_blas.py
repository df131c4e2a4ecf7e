"""The public matrix-product helper: an optimised BLAS when one was found, else our own kernel.

`define_blas_dispatch` fills in the helper's one-product function (`gemm.PRODUCT_TYPE`: M,
N, K, A, sa0, sa1, B, sb0, sb1, C, sc0, sc1, pack, threads, pool) and defines
`void @rv_gemm_<dtype>_use_blas(ptr gemm)`, through which the run time
(`runtime/native/helpers.py`, with `runtime/native/blas.py` finding the library) hands the
module the address of a CBLAS `?gemm` with 64-bit integers, or null to use the own kernel
only. The address lives in an internal global, so the object code holds no process-specific
address and stays valid in the disk cache. (`gemm_batch.py` builds the batched entry kernels
call on top of this one, with `BlasOperands` for its `?gemm_batch` calls.)

    product(M, N, K, A, sa0, sa1, B, sb0, sb1, C, sc0, sc1, pack, threads, pool):
        if blas and M*N*K > 0:
            if C is not row-major: swap the roles: C^T = B^T @ A^T (M <-> N, A <-> B^T)
            if C row-major and A, B each plain or transposed:
                blas(RowMajor, transA, transB, M, N, K, 1, A, lda, B, ldb, 0, C, ldc); return
        fallback(...)             # layouts BLAS cannot express (e.g. two non-unit strides):
                                  # the own kernel, or dot products until it is handed over

An operand of r rows and c columns with strides (s0, s1) is *plain* for BLAS when its
rows are contiguous (s1 = 1, or c <= 1) with a leading dimension ld = s0 >= max(1, c)
(any s0 when r <= 1: then ld = max(1, c)); it is *transposed* when its transpose is plain.
These conditions make BLAS address exactly the elements the strides address, so a call
never reads or writes outside the operands (negative or zero strides fall back).
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import I32, I64, PTR, REGISTER, FunctionPointer, i64

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS_ORDER / CBLAS_TRANSPOSE enum values


def blas_gemm_type(dtype: str) -> ir.FunctionType:
    """`cblas_?gemm` with 64-bit integers: order, transA, transB, M, N, K, alpha, A, lda,
    B, ldb, beta, C, ldc."""
    t = REGISTER[dtype]
    return ir.FunctionType(ir.VoidType(), [I32, I32, I32, I64, I64, I64, t, PTR, I64, PTR,
                                           I64, t, PTR, I64])


class _Layout:
    """IR values saying how BLAS sees one strided r x c operand."""

    def __init__(self, b: ir.IRBuilder, rows: ir.Value, cols: ir.Value, s0: ir.Value,
                 s1: ir.Value) -> None:
        one = i64(1)

        def fits(r: ir.Value, c: ir.Value, slow: ir.Value, fast: ir.Value) -> tuple:
            """(ok, ld) for reading an r x c operand as row-major with these strides."""
            single_row = b.icmp_signed("<=", r, one)
            need = b.select(b.icmp_signed(">", c, one), c, one)
            contiguous = b.or_(b.icmp_signed("==", fast, one), b.icmp_signed("<=", c, one))
            ld = b.select(single_row, need, slow)
            return b.and_(contiguous, b.icmp_signed(">=", ld, need)), ld

        self.plain, plain_ld = fits(rows, cols, s0, s1)
        transposed, transposed_ld = fits(cols, rows, s1, s0)
        self.ok = b.or_(self.plain, transposed)
        self.ld = b.select(self.plain, plain_ld, transposed_ld)
        self.flag = b.select(self.plain, ir.Constant(I32, NO_TRANS), ir.Constant(I32, TRANS))


class BlasOperands:
    """How a row-major CBLAS call computes C = A @ B (M x K times K x N) for strided
    operands: as is when C is row-major, else as C^T = B^T A^T (`swap`: M <-> N, A <-> B^T,
    C's strides exchanged). `expressible` says whether BLAS can; `left`, `right` are the
    call's first and second operands (A and B, or B and A), `rows` x `cols` its output."""

    def __init__(self, b: ir.IRBuilder, m: ir.Value, n: ir.Value, k: ir.Value, a: ir.Value,
                 sa0: ir.Value, sa1: ir.Value, bm: ir.Value, sb0: ir.Value, sb1: ir.Value,
                 sc0: ir.Value, sc1: ir.Value) -> None:
        self.b = b
        self.swap = b.not_(_Layout(b, m, n, sc0, sc1).plain)
        pick = self.pick
        self.rows, self.cols, self.k = pick(n, m), pick(m, n), k
        self.left, self.right = pick(bm, a), pick(a, bm)
        self.left_layout = _Layout(b, self.rows, k, pick(sb1, sa0), pick(sb0, sa1))
        self.right_layout = _Layout(b, k, self.cols, pick(sa1, sb0), pick(sa0, sb1))
        self.out = _Layout(b, self.rows, self.cols, pick(sc1, sc0), pick(sc0, sc1))
        self.expressible = b.and_(b.and_(self.out.plain, self.left_layout.ok),
                                  self.right_layout.ok)

    def pick(self, if_swapped: ir.Value, otherwise: ir.Value) -> ir.Value:
        """`if_swapped` when the call computes C^T, else `otherwise`."""
        return self.b.select(self.swap, if_swapped, otherwise)


def define_pointer_slot(module: ir.Module, name: str, setter_name: str) -> ir.GlobalVariable:
    """An internal pointer global `name` (null at first) and `void @<setter_name>(ptr)`, the
    exported function through which the run time sets it (an atomic store)."""
    slot = ir.GlobalVariable(module, PTR, name=name)
    slot.linkage = "internal"
    slot.initializer = ir.Constant(PTR, None)
    setter = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=setter_name)
    b = ir.IRBuilder(setter.append_basic_block("entry"))
    b.atomic_rmw("xchg", slot, setter.args[0], "monotonic")
    b.ret_void()
    return slot


def define_blas_dispatch(function: ir.Function, own: ir.Function, dtype: str,
                         setter_prefix: str) -> None:
    """Body of `function` (one product) calling BLAS or `own` (the fallback); also defines
    the `<setter_prefix>_use_blas` setter and the global it sets."""
    slot = define_pointer_slot(function.module, f"{setter_prefix}_blas",
                               f"{setter_prefix}_use_blas")
    function.attributes.add("nounwind")
    m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1 = function.args[:12]
    b = ir.IRBuilder(function.append_basic_block("entry"))
    blas = b.load_atomic(slot, "monotonic", 8, typ=PTR)
    empty = b.icmp_signed("==", b.mul(b.mul(m, n), k), i64(0))
    with b.if_then(b.or_(b.icmp_unsigned("==", blas, ir.Constant(PTR, None)), empty)):
        b.call(own, function.args)
        b.ret_void()
    call = BlasOperands(b, m, n, k, a, sa0, sa1, bm, sb0, sb1, sc0, sc1)
    with b.if_then(call.expressible):
        gemm = FunctionPointer(blas, blas_gemm_type(dtype))
        one, zero = ir.Constant(REGISTER[dtype], 1.0), ir.Constant(REGISTER[dtype], 0.0)
        b.call(gemm, [ir.Constant(I32, ROW_MAJOR), call.left_layout.flag,
                      call.right_layout.flag, call.rows, call.cols, k, one, call.left,
                      call.left_layout.ld, call.right, call.right_layout.ld, zero, c,
                      call.out.ld])
        b.ret_void()
    b.call(own, function.args)
    b.ret_void()
