"""The entry of the matrix-product helper that kernels call: a batch of equally laid-out
products, one `?gemm_batch` call of the BLAS where it serves, else one product at a time.

    void @rv_gemm_<dtype>(i64 batch, i64 M, i64 N, i64 K, ptr A, i64 sab, i64 sa0, i64 sa1,
                          ptr B, i64 sbb, i64 sb0, i64 sb1, ptr C, i64 scb, i64 sc0, i64 sc1,
                          ptr pack, i64 threads, i64 pool)

computes C_i = A_i @ B_i for i < batch, where operand X_i starts sXb elements after X_(i-1)
(a 2-D product is a batch of one). `void @rv_gemm_<dtype>_use_blas_batch(ptr)` hands the
helper the BLAS's `?gemm_batch` (CBLAS, 64-bit integers, the interface OpenBLAS and MKL
share), or null:

    if the batch is thin (gemm_thin.py: more than one product, N at most 64, rows of B
            and C contiguous):
        its products in register tiles without packing, one per chunk of the worker pool
    elif batch > 1 and gemm_batch and M*N*K > SMALL_MATRIX_MACS and BLAS can express the
            layout (gemm_blas.py):
        for each chunk of at most BATCH_CHUNK products (their pointers on the stack):
            gemm_batch(RowMajor, [transL], [transR], [rows], [cols], [K], [1], lefts, [ldL],
                       rights, [ldR], [0], outs, [ldC], 1 group, [count])
    elif batch == 1 and gemm_batch and SMALL_MATRIX_MACS < M*N*K <= THREADED_MACS and BLAS
            can express the layout:
        split over the worker pool (threads.py: MAX_TASKS slabs of SLAB_UNIT-multiples of rows
        or columns when threads > 1), each slab a batch of one: gemm_batch(..., [1])
    else:
        for i < batch: product(M, N, K, A_i, sa0, sa1, B_i, sb0, sb1, C_i, sc0, sc1, ...)

Why: OpenBLAS threads one `?gemm` over blocks of C and wakes and synchronises its threads
once per product, which for many small products (W8: 100 products of 1000 x 64 x 64) costs
about as much as the arithmetic (benchmarks/README.md, "W8: each batched product one
`?gemm_batch` call"); `?gemm_batch` gives each thread whole products, one wake-up
per chunk. Each product is then computed by one thread, and OpenBLAS never splits the
summed index, so the results are the same bits from call to call at a fixed thread count;
in f64 they are bitwise those of the loop of `?gemm` calls (and NumPy's), in f32 too with
one thread, while with several OpenBLAS's `sgemm_batch` rounds differently from its
`sgemm` (measured with OpenBLAS 0.3.31; `tests/native/test_gemm_batch.py`).

A single product of at most THREADED_MACS multiply-adds does not go to `?gemm`, which splits
it over OpenBLAS's threads; they wait for each other in spin loops, so one of them
descheduled by other work (another process, a torch thread, our own pool) stalls the product
by a time slice (benchmarks/README.md, "The pool beside other work"). It is
split over Reverie's pool instead, whose calling thread claims slabs too, so a late worker
delays only the slab it took; each slab is a batch of one of `?gemm_batch`, which OpenBLAS
runs on the calling thread (its `exec_blas` of one job). OpenBLAS's thread count is left
alone (no `openblas_set_num_threads`; its `_local` variant is process-wide too in OpenBLAS
0.3.31's pthreads build), so NumPy's products keep their threads. Larger products keep
OpenBLAS's threads: there a second thread's gain outweighs an occasional wait. Bits: the
same from call to call at a fixed thread count (the slabs depend on M, N and whether
threads > 1); they may differ from NumPy's `?gemm` in the last place, since OpenBLAS rounds
a slab's edge rows as edge rows (measured: f64 1000 x 300 x 500 cut at row 512).

Small products stay one at a time: OpenBLAS (up to 0.3.31 at least, in its DYNAMIC_ARCH
builds, which NumPy's wheels are) crashes in `?gemm_batch` when it routes a batch to its
small-matrix kernels (OpenMathLib/OpenBLAS pull request 5980), which its kernels permit for
M*N*K <= 100^3 (x86-64; 64^3 on arm64); measured here: 13 x 6 x 9 and 200 x 64 x 64 crash,
1000 x 64 x 64 does not. Small products gain little from the batch call anyway.
"""

from __future__ import annotations

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
)
from reverie.compiler.call_boundary.abi import MAX_TASKS
from reverie.compiler.runtime_library.gemm_blas import ROW_MAJOR, BlasOperands, define_pointer_slot
from reverie.compiler.runtime_library.gemm_thin import define_thin_batch
from reverie.compiler.runtime_library.threads import define_parallel_gemm

BATCH_CHUNK = 256  # products per `?gemm_batch` call: 6 KB of pointer arrays on the stack
SMALL_MATRIX_MACS = 100 ** 3  # the largest product OpenBLAS's small-matrix path may take
THREADED_MACS = 2 ** 28  # larger single products are left to OpenBLAS's threads
SLAB_UNIT = 64  # rows or columns: a split product's slabs are multiples of this


def blas_gemm_batch_type() -> ir.FunctionType:
    """`cblas_?gemm_batch` with 64-bit integers: order, then arrays (one entry per group) of
    transA, transB, M, N, K, alpha, one pointer per product to A, lda, to B, ldb, beta,
    to C, ldc; then the group count and an array of group sizes."""
    return ir.FunctionType(ir.VoidType(), [I32, *[PTR] * 13, I64, PTR])


def define_batched_gemm(function: ir.Function, product: ir.Function, dtype: str) -> None:
    """Body of `function` (the entry above) over `product` (one product, BLAS or own kernel);
    also defines the `<function>_use_blas_batch` setter and the global it sets."""
    slot = define_pointer_slot(function.module, f"{function.name}_blas_batch",
                               f"{function.name}_use_blas_batch")
    function.attributes.add("nounwind")
    batch, m, n, k, a, sab, sa0, sa1, bm, sbb, sb0, sb1, c, scb, sc0, sc1, *rest = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    thin = define_thin_batch(function.module, dtype)
    with b.if_then(b.call(thin, [*function.args[:16], *rest[1:]])):
        b.ret_void()
    gemm_batch = b.load_atomic(slot, "monotonic", 8, typ=PTR)
    macs = b.mul(b.mul(m, n), k)
    wanted = b.and_(b.icmp_unsigned("!=", gemm_batch, ir.Constant(PTR, None)),
                    b.icmp_signed(">", macs, i64(SMALL_MATRIX_MACS)))
    by_batch = _define_batch_call(function, dtype)
    with b.if_then(b.and_(wanted, b.icmp_signed(">", batch, i64(1)))):
        with b.if_then(b.call(by_batch, [gemm_batch, *function.args[:16]])):
            b.ret_void()
    one = b.and_(b.icmp_signed("==", batch, i64(1)),
                 b.icmp_signed("<=", macs, i64(THREADED_MACS)))
    with b.if_then(b.and_(wanted, one)):
        split = _define_split_product(function, by_batch, product, slot, dtype)
        with b.if_then(b.call(split, [m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1,
                                      *rest])):
            b.ret_void()
    with counted_loop(b, i64(0), batch) as i:
        element = REGISTER[dtype]
        operands = [b.gep(base, [b.mul(i, step)], source_etype=element)
                    for base, step in ((a, sab), (bm, sbb), (c, scb))]
        b.call(product, [m, n, k, operands[0], sa0, sa1, operands[1], sb0, sb1, operands[2],
                         sc0, sc1, *rest])
    b.ret_void()


def _define_batch_call(entry: ir.Function, dtype: str) -> ir.Function:
    """`i1 @<entry>_by_batch(ptr gemm_batch, batch, M, N, K, A, ..., sc1)` (internal): the
    whole batch through `?gemm_batch` when BLAS can express its layout (true), else nothing
    (false). Compiled without LLVM's optimiser (`optnone`): it runs only for batches of
    products of over SMALL_MATRIX_MACS multiply-adds each, where a few instructions more
    cost nothing, and optimising it would be a large share of the helper module's LLVM
    time, which every process with an empty cache pays before its first product."""
    types = [PTR, *(arg.type for arg in entry.args[:16])]
    function = ir.Function(entry.module, ir.FunctionType(ir.IntType(1), types),
                           name=f"{entry.name}_by_batch")
    function.linkage = "internal"
    for attribute in ("nounwind", "noinline", "optnone"):
        function.attributes.add(attribute)
    gemm_batch, batch, m, n, k, a, sab, sa0, sa1, bm, sbb, sb0, sb1, c, scb, sc0, sc1 = \
        function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    arrays = _CallArrays(b, dtype)
    call = BlasOperands(b, m, n, k, a, sa0, sa1, bm, sb0, sb1, sc0, sc1)
    with b.if_then(call.expressible):
        steps = (call.pick(sbb, sab), call.pick(sab, sbb), scb)
        arrays.call_in_chunks(FunctionPointer(gemm_batch, blas_gemm_batch_type()), call,
                              batch, (call.left, call.right, c), steps)
        b.ret(ir.Constant(ir.IntType(1), 1))
    b.ret(ir.Constant(ir.IntType(1), 0))
    return function


def _define_split_product(entry: ir.Function, by_batch: ir.Function, product: ir.Function,
                          slot: ir.GlobalVariable, dtype: str) -> ir.Function:
    """`i1 @<entry>_split(M, N, K, A, sa0, sa1, B, sb0, sb1, C, sc0, sc1, pack, threads,
    pool)` (internal, `optnone` like `_by_batch`): one product whose layout BLAS can express,
    cut into slabs over the worker pool (`threads.py`), each slab a batch of one of
    `?gemm_batch` on the thread that claims it (true); false when BLAS cannot express it."""
    types = [arg.type for arg in product.args]
    function = ir.Function(entry.module, ir.FunctionType(ir.IntType(1), types),
                           name=f"{entry.name}_split")
    function.linkage = "internal"
    for attribute in ("nounwind", "noinline", "optnone"):
        function.attributes.add(attribute)
    m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1, *_ = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    with b.if_then(BlasOperands(b, m, n, k, a, sa0, sa1, bm, sb0, sb1, sc0, sc1).expressible):
        slabs = ir.Function(entry.module, product.function_type, name=f"{entry.name}_slabs")
        slabs.linkage = "internal"
        define_parallel_gemm(slabs, _define_slab(entry, by_batch, product, slot), dtype,
                             SLAB_UNIT, SLAB_UNIT, 0)
        *operands, threads, pool = function.args
        # MAX_TASKS slabs whenever the pool serves: a worker descheduled with a slab of its
        # own holds back a quarter of the product, not half (two threads)
        tasks = b.select(b.icmp_signed(">", threads, i64(1)), i64(MAX_TASKS), threads)
        b.call(slabs, [*operands, tasks, pool])
        b.ret(ir.Constant(ir.IntType(1), 1))
    b.ret(ir.Constant(ir.IntType(1), 0))
    return function


def _define_slab(entry: ir.Function, by_batch: ir.Function, product: ir.Function,
                 slot: ir.GlobalVariable) -> ir.Function:
    """`void @<entry>_slab(M, ..., sc1, pack)` (internal): one slab of a split product, a
    batch of one of `?gemm_batch` (a slab of an expressible product is expressible; were it
    not, or is it a small slab at the edge, `product` on this thread alone)."""
    types = [arg.type for arg in product.args[:-2]]
    function = ir.Function(entry.module, ir.FunctionType(ir.VoidType(), types),
                           name=f"{entry.name}_slab")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1, pack = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    gemm_batch = b.load_atomic(slot, "monotonic", 8, typ=PTR)
    # a slab at the edge may be small, and OpenBLAS's small-matrix path of `?gemm_batch`
    # crashes (below): such a slab is `product`'s, on this thread
    large = b.icmp_signed(">", b.mul(b.mul(m, n), k), i64(SMALL_MATRIX_MACS))
    alone = [*function.args, i64(1), i64(0)]
    with b.if_else(large) as (batched, small):
        with batched:
            done = b.call(by_batch, [gemm_batch, i64(1), m, n, k, a, i64(0), sa0, sa1, bm,
                                     i64(0), sb0, sb1, c, i64(0), sc0, sc1])
            with b.if_then(b.not_(done)):
                b.call(product, alone)
        with small:
            b.call(product, alone)
    b.ret_void()
    return function


class _CallArrays:
    """The stack arrays of one `?gemm_batch` call (allocated in the entry block)."""

    def __init__(self, b: ir.IRBuilder, dtype: str) -> None:
        self.b = b
        self.element = REGISTER[dtype]
        self.flags = [alloca(b, I32, name) for name in ("trans_left", "trans_right")]
        self.sizes = [alloca(b, I64, name) for name in ("rows", "cols", "depth", "count")]
        self.lds = [alloca(b, I64, name) for name in ("ld_left", "ld_right", "ld_out")]
        self.scalars = [alloca(b, self.element, name) for name in ("alpha", "beta")]
        self.pointers = [alloca(b, ir.ArrayType(PTR, BATCH_CHUNK), name)
                         for name in ("lefts", "rights", "outs")]

    def call_in_chunks(self, gemm_batch: FunctionPointer, call: BlasOperands, batch: ir.Value,
                       bases: tuple[ir.Value, ...], steps: tuple[ir.Value, ...]) -> None:
        """Fill the arrays for `call` and call `gemm_batch` once per chunk of products."""
        b = self.b
        for value, where in zip((call.left_layout.flag, call.right_layout.flag,
                                 call.rows, call.cols, call.k, call.left_layout.ld,
                                 call.right_layout.ld, call.out.ld,
                                 ir.Constant(self.element, 1.0),
                                 ir.Constant(self.element, 0.0)),
                                (*self.flags, *self.sizes[:3], *self.lds, *self.scalars),
                                strict=True):
            b.store(value, where)
        with counted_loop(b, i64(0), batch, BATCH_CHUNK) as start:
            remaining = b.sub(batch, start)
            count = b.select(b.icmp_signed("<", remaining, i64(BATCH_CHUNK)), remaining,
                             i64(BATCH_CHUNK))
            with counted_loop(b, i64(0), count) as j:
                index = b.add(start, j)
                for base, step, array in zip(bases, steps, self.pointers, strict=True):
                    pointer = b.gep(base, [b.mul(index, step)], source_etype=self.element)
                    b.store(pointer, b.gep(array, [j], source_etype=PTR))
            b.store(count, self.sizes[3])
            left_flag, right_flag = self.flags
            rows, cols, depth, sizes = self.sizes
            ld_left, ld_right, ld_out = self.lds
            alpha, beta = self.scalars
            lefts, rights, outs = self.pointers
            b.call(gemm_batch, [ir.Constant(I32, ROW_MAJOR), left_flag, right_flag, rows, cols,
                                depth, alpha, lefts, ld_left, rights, ld_right, beta, outs,
                                ld_out, i64(1), sizes])
