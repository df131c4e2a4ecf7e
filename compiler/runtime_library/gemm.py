"""A cache- and register-blocked matrix product in LLVM IR (the loop IR's `Matmul`).

Each helper (one per element type) is its own small module, compiled once per process and
only when a kernel first calls it (`runtime/native/native_kernel.py`); kernels call it
through the helper table they receive (see `compiler/backend/llvm.py`), so a kernel with a
matmul compiles as fast as any other.

    void @rv_gemm_product_f32(i64 M, i64 N, i64 K, ptr A, i64 sa0, i64 sa1, ptr B, i64 sb0,
                              i64 sb1, ptr C, i64 sc0, i64 sc1, ptr pack, i64 threads, i64 pool)

computes C = A @ B for strided operands (a transpose is just swapped strides); kernels call
`rv_gemm_f32`, which runs a batch of such products (`gemm_batch.py`). The own kernel works
in the style of BLIS/GotoBLAS: blocks of B (KC x NC) and A (MC x KC) are packed into `pack`
so the micro-kernel reads both contiguously; the micro-kernel keeps an MR x NR tile of C in
2 * MR vector registers and updates it with one fused multiply-add per register per step
of k. Tiles at the matrix edges go through a small stack tile. Very narrow products
(N <= 4, e.g. matrix-vector) and empty ones (K = 0) use plain dot products instead.
Large products are split over `threads` threads of the worker pool `pool` (`threads.py`).

This own kernel is the fallback: each product of the public `rv_gemm_<dtype>` calls an
optimised BLAS found at run time when there is one and the operands' layout suits it
(`gemm_blas.py`; a batch of products one `?gemm_batch`, `gemm_batch.py`). So the own
kernel is a module of its own (`helper_module("rv_gemm_own_<dtype>")`), compiled only when a
kernel may need it (no BLAS, or a layout BLAS cannot express: `abi.needs_own_kernel`) and
handed to the public helper through `void @rv_gemm_<dtype>_use_own(ptr own)`; until then the
public helper's fallback is plain dot products (any strides: what an empty product, which
BLAS is never asked for, needs). That saves compiling the own kernel, a large part of a cold
process's LLVM time, wherever NumPy's OpenBLAS serves every product (benchmarks/README.md,
"Latency").

    helper_module("rv_gemm_f64")       # batch entry, BLAS dispatch, fallback (own kernel or
                                       # dot products)
    helper_module("rv_gemm_own_f64")   # the blocked, parallel own kernel
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I64,
    PTR,
    FunctionPointer,
    ProductBuilder,
    alloca,
    counted_loop,
    i64,
    intrinsic,
    smaller,
    vector_lanes,
)
from reverie.compiler.call_boundary.abi import GEMM_HELPERS, MAX_TASKS, OWN_KERNELS
from reverie.compiler.loops.ir import MATMUL_PACK_ELEMENTS
from reverie.compiler.runtime_library.gemm_batch import define_batched_gemm
from reverie.compiler.runtime_library.gemm_blas import define_blas_dispatch, define_pointer_slot
from reverie.compiler.runtime_library.threads import define_parallel_gemm

MR, KC, MC, NC = 6, 256, 96, 1024
PACK_PER_TASK = MC * KC + KC * NC  # f64 elements of packing scratch per thread
assert MAX_TASKS * PACK_PER_TASK <= MATMUL_PACK_ELEMENTS and MC % MR == 0

SERIAL_TYPE = ir.FunctionType(ir.VoidType(), [I64] * 3 + [PTR, I64, I64] * 3 + [PTR])
PRODUCT_TYPE = ir.FunctionType(ir.VoidType(), [*SERIAL_TYPE.args, I64, I64])  # threads, pool
# what kernels call: the batch size, then M, N, K, each operand with its batch stride first
GEMM_TYPE = ir.FunctionType(ir.VoidType(), [I64] * 4 + [PTR, I64, I64, I64] * 3 + [PTR, I64, I64])


def helper_module(name: str) -> str:
    """LLVM IR of the module defining the helper `name`: one of GEMM_HELPERS (a public helper)
    or of OWN_KERNELS (the own kernel it may be handed)."""
    if name in GEMM_HELPERS:
        return _public_helper_module(name.removeprefix("rv_gemm_"))
    if name in OWN_KERNELS:
        return _own_kernel_module(name.removeprefix("rv_gemm_own_"))
    raise ValueError(f"no run-time helper named {name!r}; expected one of "
                     f"{GEMM_HELPERS + OWN_KERNELS}")


def _public_helper_module(dtype: str) -> str:
    """`rv_gemm_<dtype>`: a batch of products (`gemm_batch.py`), each by BLAS where it serves,
    else by the fallback (`_define_fallback`)."""
    module = ir.Module(name=f"rv_gemm_{dtype}")
    product = ir.Function(module, PRODUCT_TYPE, name=f"rv_gemm_product_{dtype}")
    product.linkage = "internal"
    # a call from the batch entry's loop, not inlined there: optimising the two together
    # costs LLVM time in every process with an empty cache, for one call saved per product
    product.attributes.add("noinline")
    define_blas_dispatch(product, _define_fallback(module, dtype), dtype, f"rv_gemm_{dtype}")
    public = ir.Function(module, GEMM_TYPE, name=f"rv_gemm_{dtype}")
    define_batched_gemm(public, product, dtype)
    return str(module)


def _define_fallback(module: ir.Module, dtype: str) -> ir.Function:
    """`rv_gemm_fallback_<dtype>` (internal): the own kernel once the run time handed it over
    (`rv_gemm_<dtype>_use_own`), else plain dot products, correct for any strides."""
    own_slot = define_pointer_slot(module, f"rv_gemm_{dtype}_own", f"rv_gemm_{dtype}_use_own")
    plain = ir.Function(module, SERIAL_TYPE, name=f"rv_gemm_plain_{dtype}")
    plain.linkage = "internal"
    for attribute in ("nounwind", "noinline", "optnone"):  # only for empty products: not
        plain.attributes.add(attribute)                     # worth most of the compile time
    _GemmBuilder(plain, dtype).build_dot_products()
    fallback = ir.Function(module, PRODUCT_TYPE, name=f"rv_gemm_fallback_{dtype}")
    fallback.linkage = "internal"
    fallback.attributes.add("nounwind")
    b = ir.IRBuilder(fallback.append_basic_block("entry"))
    own = b.load_atomic(own_slot, "monotonic", 8, typ=PTR)
    with b.if_then(b.icmp_unsigned("!=", own, ir.Constant(PTR, None))):
        b.call(FunctionPointer(own, PRODUCT_TYPE), fallback.args)
        b.ret_void()
    b.call(plain, fallback.args[:len(SERIAL_TYPE.args)])
    b.ret_void()
    return fallback


def _own_kernel_module(dtype: str) -> str:
    """`rv_gemm_own_<dtype>`: the blocked kernel, split over the worker pool."""
    module = ir.Module(name=f"rv_gemm_own_{dtype}")
    serial = ir.Function(module, SERIAL_TYPE, name=f"rv_gemm_serial_{dtype}")
    serial.linkage = "internal"
    serial.attributes.add("nounwind")
    _GemmBuilder(serial, dtype).build()
    own = ir.Function(module, PRODUCT_TYPE, name=f"rv_gemm_own_{dtype}")
    define_parallel_gemm(own, serial, dtype, MR, 2 * vector_lanes(dtype), PACK_PER_TASK * 8)
    return str(module)


class _GemmBuilder(ProductBuilder):
    """Emits the body of one gemm function."""

    def __init__(self, function: ir.Function, dtype: str) -> None:
        super().__init__(function, dtype)
        self.nr = 2 * self.lanes

    def zero(self) -> ir.Constant:
        return ir.Constant(self.t, 0.0)

    def offset2(self, i: ir.Value, si: ir.Value, j: ir.Value, sj: ir.Value) -> ir.Value:
        b = self.b
        return b.add(b.mul(i, si), b.mul(j, sj))

    def build(self) -> None:
        b = self.b
        narrow = b.or_(b.icmp_signed("<=", self.n, i64(4)), b.icmp_signed("==", self.k, i64(0)))
        with b.if_else(narrow) as (dot, blocked):
            with dot:
                self.dot_products()
            with blocked:
                self.blocked()
        b.ret_void()
        self.allocas.branch(self.start)

    def build_dot_products(self) -> None:
        """The whole body as plain dot products (no packing: any strides, any sizes)."""
        self.dot_products()
        self.b.ret_void()
        self.allocas.branch(self.start)

    def dot_products(self) -> None:
        """C[i, j] = sum_p A[i, p] B[p, j], vectorised over p when strides allow."""
        b = self.b
        acc = alloca(self.allocas, self.t)
        with counted_loop(b, i64(0), self.m) as i, counted_loop(b, i64(0), self.n) as j:
            b.store(self.zero(), acc)
            with counted_loop(b, i64(0), self.k) as p:
                product = b.fmul(self.load(self.a, self.offset2(i, self.sa0, p, self.sa1)),
                                 self.load(self.bm, self.offset2(p, self.sb0, j, self.sb1)),
                                 flags=("contract",))
                b.store(b.fadd(b.load(acc, typ=self.t), product,
                               flags=("reassoc", "nsz", "contract")), acc)
            self.store(b.load(acc, typ=self.t), self.c, self.offset2(i, self.sc0, j, self.sc1))

    def blocked(self) -> None:
        """The packed, blocked product (see the module docstring)."""
        b = self.b
        a_pack = self.pack
        b_pack = self.at(self.pack, i64(MC * KC))
        with counted_loop(b, i64(0), self.n, NC) as jc:
            nc = smaller(b, i64(NC), b.sub(self.n, jc))
            with counted_loop(b, i64(0), self.k, KC) as pc:
                kc = smaller(b, i64(KC), b.sub(self.k, pc))
                self.pack_b(b_pack, pc, jc, kc, nc)
                with counted_loop(b, i64(0), self.m, MC) as ic:
                    mc = smaller(b, i64(MC), b.sub(self.m, ic))
                    self.pack_a(a_pack, ic, pc, mc, kc)
                    first = b.icmp_signed("==", pc, i64(0))
                    with counted_loop(b, i64(0), nc, self.nr) as jr, \
                            counted_loop(b, i64(0), mc, MR) as ir_:
                        self.micro_kernel(
                            kc, self.at(a_pack, b.mul(ir_, kc)), self.at(b_pack, b.mul(jr, kc)),
                            b.add(ic, ir_), b.add(jc, jr), smaller(b, i64(MR), b.sub(mc, ir_)),
                            smaller(b, i64(self.nr), b.sub(nc, jr)), first)

    def pack_b(self, dest: ir.Value, pc: ir.Value, jc: ir.Value, kc: ir.Value,
               nc: ir.Value) -> None:
        """Panels of NR columns: dest[jr*kc + p*NR + c] = B[pc + p, jc + jr + c] (0-padded)."""
        b = self.b
        with counted_loop(b, i64(0), nc, self.nr) as jr:
            width = smaller(b, i64(self.nr), b.sub(nc, jr))
            panel = b.mul(jr, kc)
            with counted_loop(b, i64(0), kc) as p:
                row = b.add(panel, b.mul(p, i64(self.nr)))
                with counted_loop(b, i64(0), width) as c:
                    value = self.load(self.bm, self.offset2(b.add(pc, p), self.sb0,
                                                            b.add(b.add(jc, jr), c), self.sb1))
                    self.store(value, dest, b.add(row, c))
                with counted_loop(b, width, i64(self.nr)) as c:
                    self.store(self.zero(), dest, b.add(row, c))

    def pack_a(self, dest: ir.Value, ic: ir.Value, pc: ir.Value, mc: ir.Value,
               kc: ir.Value) -> None:
        """Panels of MR rows: dest[ir*kc + p*MR + r] = A[ic + ir + r, pc + p] (0-padded)."""
        b = self.b
        with counted_loop(b, i64(0), mc, MR) as ir_:
            height = smaller(b, i64(MR), b.sub(mc, ir_))
            panel = b.mul(ir_, kc)
            with counted_loop(b, i64(0), kc) as p:
                row = b.add(panel, b.mul(p, i64(MR)))
                column = b.add(pc, p)
                for r in range(MR):
                    inside = b.icmp_signed("<", i64(r), height)
                    clamped = smaller(b, b.add(b.add(ic, ir_), i64(r)), b.sub(self.m, i64(1)))
                    source = self.offset2(clamped, self.sa0, column, self.sa1)
                    value = b.select(inside, self.load(self.a, source), self.zero())
                    self.store(value, dest, b.add(row, i64(r)))

    def micro_kernel(self, kc: ir.Value, a_panel: ir.Value, b_panel: ir.Value, row: ir.Value,
                     column: ir.Value, height: ir.Value, width: ir.Value,
                     first: ir.Value) -> None:
        """C[row:row+height, column:column+width] (+)= A panel @ B panel, in registers."""
        b = self.b
        fma = intrinsic(self.module, "llvm.fma", self.vec, [self.vec] * 3)
        slots = [[alloca(self.allocas, self.vec) for _ in range(2)] for _ in range(MR)]
        zeros = ir.Constant(self.vec, [0.0] * self.lanes)
        for pair in slots:
            for slot in pair:
                b.store(zeros, slot)
        with counted_loop(b, i64(0), kc) as p:
            b_row = b.mul(p, i64(self.nr))
            columns = [self.load(b_panel, b.add(b_row, i64(v * self.lanes)), self.vec)
                       for v in range(2)]
            a_row = b.mul(p, i64(MR))
            for r in range(MR):
                scalar = self.load(a_panel, b.add(a_row, i64(r)))
                splat = b.shuffle_vector(
                    b.insert_element(ir.Constant(self.vec, None), scalar, i64(0)),
                    ir.Constant(self.vec, None), ir.Constant(ir.VectorType(ir.IntType(32),
                                                                           self.lanes), None))
                for v in range(2):
                    total = b.call(fma, [splat, columns[v], b.load(slots[r][v], typ=self.vec)])
                    b.store(total, slots[r][v])
        full = b.and_(b.and_(b.icmp_signed("==", height, i64(MR)),
                             b.icmp_signed("==", width, i64(self.nr))),
                      b.icmp_signed("==", self.sc1, i64(1)))
        with b.if_else(full) as (fast, edge):
            with fast:
                for r in range(MR):
                    base = b.add(b.mul(b.add(row, i64(r)), self.sc0), column)
                    for v in range(2):
                        offset = b.add(base, i64(v * self.lanes))
                        tile = b.load(slots[r][v], typ=self.vec)
                        old = self.load(self.c, offset, self.vec)
                        total = b.select(first, tile, b.fadd(old, tile))
                        self.store(total, self.c, offset)
            with edge:
                self.edge_tile(slots, row, column, height, width, first)

    def edge_tile(self, slots: list[list[ir.Value]], row: ir.Value, column: ir.Value,
                  height: ir.Value, width: ir.Value, first: ir.Value) -> None:
        """Write the valid part of a tile element by element."""
        b = self.b
        tile = alloca(self.allocas, ir.ArrayType(self.t, MR * self.nr))
        for r in range(MR):
            for v in range(2):
                offset = i64(r * self.nr + v * self.lanes)
                self.store(b.load(slots[r][v], typ=self.vec), tile, offset)
        with counted_loop(b, i64(0), height) as r, counted_loop(b, i64(0), width) as c:
            value = self.load(tile, b.add(b.mul(r, i64(self.nr)), c))
            offset = self.offset2(b.add(row, r), self.sc0, b.add(column, c), self.sc1)
            old = self.load(self.c, offset)
            self.store(b.select(first, value, b.fadd(old, value)), self.c, offset)
