"""The bf16 matrix product with an f32 result, by AVX512_BF16's `vdpbf16ps` (LLVM IR).

    void @rv_gemm_bf16(i64 batch, i64 M, i64 N, i64 K, ptr A, i64 sab, i64 sa0, i64 sa1,
                       ptr B, i64 sbb, i64 sb0, i64 sb1, ptr C, i64 scb, i64 sc0, i64 sc1,
                       ptr pack, i64 threads, i64 pool)

computes C_i = A_i @ B_i for bf16 operands A, B (their 16 bits, any strides) into an f32
C: the kernels' `gemm.GEMM_TYPE`, operand strides in bf16 elements. Kernels call it for a
`Matmul` whose operands are bf16 buffers (`backend/bf16_products.py` makes such products
where the host has the instruction, instead of converting both operands to f32 copies for
`rv_gemm_f32`). There is no library to call: NumPy's OpenBLAS has no `sbgemm`, so the
kernel is written here, in the style of the own f32 kernel (`gemm.py`): B's KC x NC block and
A's MC x KC block are packed, an MR x NR tile of C stays in 2 * MR registers of 16 f32 lanes,
tiles at the edges go through a stack tile, and large products are split over the worker
pool (`threads.py`). On a host with AMX the same blocking and B packing
(`gemm_bf16_blocking.py`) serve a kernel on tiles instead (`gemm_amx.py`).

`vdpbf16ps acc, a, b` (`llvm.x86.avx512bf16.dpbf16ps.512`) takes 32 bf16 values in each of
a and b and adds, in each of its 16 f32 lanes, the two products of a lane's pair:
acc[l] += a[2l] b[2l] + a[2l+1] b[2l+1]. So the packing interleaves pairs of k:

    B panel (NR columns), pair p:  [B[2p, j], B[2p+1, j]] for j < NR   (2 vectors of 32)
    A panel (MR rows),    pair p:  [A[r, 2p], A[r, 2p+1]] for r < MR   (one i32 each, splat)

An odd K (or block of K) gets a zero pair partner, rows and columns past the edges zeros.
Whole pairs are packed at once where the layout allows (row-major B: two rows interleaved
by one shuffle; B with k contiguous, a transposed operand, and row-major A: one i32 per
pair), the rest element by element. K = 0 writes zeros; narrow products (a matrix-vector
one) go through the same blocked kernel, whose tile is then mostly padding.

Speed (AMD EPYC Zen 4, one thread, a busy shared host): 1024^3 in 12.4 ms (173 GFLOP/s)
against 29.5 ms for the f32 path (converted copies, then OpenBLAS's sgemm); W3's
1024 x 256 @ 256 x 512 in 1.27 ms against 2.58 ms.

Semantics against the f32 path (f32 copies of the operands, then f32 products and sums):
the product of two bf16 values is exact in f32 (8-bit significands), and the instruction
adds in f32 with round-to-nearest-even, so the results differ only in the order of the f32
additions (pairs first, then K in blocks of KC) and in subnormals: `vdpbf16ps` reads
subnormal inputs as zero and flushes subnormal results to zero (bf16 subnormals are below
2^-126 ~ 1.2e-38). The order costs a few f32 roundings of a row's sum of |products|
(`tests/native/test_bf16_gemm.py`), the flushes less than 2^-126 per term.
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    F32,
    I16,
    I32,
    alloca,
    counted_loop,
    i64,
    smaller,
)
from reverie.compiler.backend.matrix_tiles import matrix_tiles
from reverie.compiler.backend.storage_conversions import BFLOAT
from reverie.compiler.call_boundary.abi import BF16_GEMM_HELPER
from reverie.compiler.runtime_library.gemm import GEMM_TYPE, PRODUCT_TYPE, SERIAL_TYPE
from reverie.compiler.runtime_library.gemm_amx import tile_builder
from reverie.compiler.runtime_library.gemm_bf16_blocking import (
    LANES,
    MC,
    NR,
    PACK_PER_TASK,
    Bf16ProductBuilder,
    interleaved,
)
from reverie.compiler.runtime_library.threads import define_parallel_gemm

MR = 8  # rows of a micro-tile: 2 * MR accumulators of LANES f32 lanes
assert MC % MR == 0
DOT = "llvm.x86.avx512bf16.dpbf16ps.512"
ACCUMULATOR, PAIRS = ir.VectorType(F32, LANES), ir.VectorType(BFLOAT, 2 * LANES)
SPLAT = ir.VectorType(I32, LANES)
PANEL_LINE = ir.VectorType(I16, MR)  # one term of a panel's MR rows


def helper_module(name: str = BF16_GEMM_HELPER, tiles: str | None = None) -> str:
    """LLVM IR of the module defining `rv_gemm_bf16`, the one helper here (only for hosts
    with AVX512_BF16 at 512-bit vectors, or AMX tiles: `backend/bf16_products.py` decides):
    by `vdpbf16ps`, or on AMX tiles where `tiles` says so ("hardware" or "emulate"; by
    default the host's setting, `backend/matrix_tiles.py`)."""
    if name != BF16_GEMM_HELPER:
        raise ValueError(f"no run-time helper named {name!r} here; expected "
                         f"{BF16_GEMM_HELPER!r}")
    if tiles is None:
        import llvmlite.binding as llvm

        tiles = matrix_tiles(llvm.get_host_cpu_features())
    builder = _DotProductBuilder if tiles == "off" else tile_builder(tiles == "emulate")
    module = ir.Module(name=name)
    serial = ir.Function(module, SERIAL_TYPE, name="rv_gemm_bf16_serial")
    serial.linkage = "internal"
    serial.attributes.add("nounwind")
    builder(serial).build()
    product = ir.Function(module, PRODUCT_TYPE, name="rv_gemm_bf16_product")
    product.linkage = "internal"
    define_parallel_gemm(product, serial, "f32", builder.mr, NR, PACK_PER_TASK,
                         operand_dtype="bf16")
    _define_batch(ir.Function(module, GEMM_TYPE, name=name), product)
    return str(module)


def _define_batch(function: ir.Function, product: ir.Function) -> None:
    """Body of the public helper: its products one after another."""
    function.attributes.add("nounwind")
    batch, m, n, k, a, sab, sa0, sa1, bm, sbb, sb0, sb1, c, scb, sc0, sc1, *rest = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    with counted_loop(b, i64(0), batch) as i:
        a_i, b_i, c_i = (b.gep(base, [b.mul(i, step)], source_etype=element)
                         for base, step, element in ((a, sab, I16), (bm, sbb, I16), (c, scb, F32)))
        b.call(product, [m, n, k, a_i, sa0, sa1, b_i, sb0, sb1, c_i, sc0, sc1, *rest])
    b.ret_void()


class _DotProductBuilder(Bf16ProductBuilder):
    """The kernel by `vdpbf16ps`: an MR x NR micro-tile in 2 * MR vector registers."""

    mr = MR

    def pack_a(self, dest: ir.Value, ic: ir.Value, pc: ir.Value, mc: ir.Value, kc: ir.Value,
               pairs: ir.Value) -> None:
        """Panels of MR rows, k in pairs:
        dest[ir*2*pairs + p*2*MR + 2r + t] = A[ic + ir + r, pc + 2p + t] (0-padded).
        Whole pairs of row-major A are one i32 each; of a whole panel of A with its rows
        adjacent (a transposed operand), two lines of MR rows interleaved by one shuffle."""
        b = self.b
        whole = b.ashr(kc, i64(1))
        adjacent = b.icmp_signed("==", self.sa1, i64(1))
        rows_adjacent = b.and_(b.not_(adjacent), b.icmp_signed("==", self.sa0, i64(1)))
        with counted_loop(b, i64(0), mc, MR) as ir_:
            height = smaller(b, i64(MR), b.sub(mc, ir_))
            panel = b.mul(ir_, b.mul(pairs, i64(2)))
            sources = [b.mul(smaller(b, b.add(b.add(ic, ir_), i64(r)), b.sub(self.m, i64(1))),
                             self.sa0) for r in range(MR)]
            lines = b.and_(rows_adjacent, b.icmp_signed("==", height, i64(MR)))
            with b.if_then(lines), counted_loop(b, i64(0), whole) as p:
                first_line = b.add(b.add(ic, ir_), b.mul(b.add(pc, b.mul(p, i64(2))), self.sa1))
                pair = [self.element(self.a, offset, PANEL_LINE)
                        for offset in (first_line, b.add(first_line, self.sa1))]
                self.put(interleaved(b, *pair), dest, b.add(panel, b.mul(p, i64(2 * MR))))
            with b.if_then(adjacent), counted_loop(b, i64(0), whole) as p:
                row = b.add(panel, b.mul(p, i64(2 * MR)))
                first_term = b.add(pc, b.mul(p, i64(2)))
                for r, source in enumerate(sources):
                    value = self.element(self.a, b.add(source, first_term), I32)
                    inside = b.icmp_signed("<", i64(r), height)
                    self.put(b.select(inside, value, ir.Constant(I32, 0)), dest,
                             b.add(row, i64(2 * r)))
            with counted_loop(b, b.select(b.or_(adjacent, lines), whole, i64(0)), pairs) as p:
                row = b.add(panel, b.mul(p, i64(2 * MR)))
                for t in range(2):
                    term = b.add(b.mul(p, i64(2)), i64(t))
                    column = b.mul(b.add(pc, smaller(b, term, b.sub(kc, i64(1)))), self.sa1)
                    term_inside = b.icmp_signed("<", term, kc)
                    for r, source in enumerate(sources):
                        inside = b.and_(term_inside, b.icmp_signed("<", i64(r), height))
                        value = self.element(self.a, b.add(source, column))
                        self.put(b.select(inside, value, ir.Constant(I16, 0)), dest,
                                 b.add(row, i64(2 * r + t)))

    def micro_kernel(self, pairs: ir.Value, a_panel: ir.Value, b_panel: ir.Value,
                     row: ir.Value, column: ir.Value, height: ir.Value, width: ir.Value,
                     first: ir.Value) -> None:
        """C[row:row+height, column:column+width] (+)= A panel @ B panel, in registers
        (one vector of each row where the tile is at most LANES columns wide: a narrow
        product, such as an MLP's last layer, then does half the work)."""
        b = self.b
        slots = [[alloca(self.allocas, ACCUMULATOR) for _ in range(2)] for _ in range(MR)]
        zeros = ir.Constant(ACCUMULATOR, [0.0] * LANES)
        for pair in slots:
            for slot in pair:
                b.store(zeros, slot)
        with b.if_else(b.icmp_signed("<=", width, i64(LANES))) as (narrow, wide):
            for vectors, case in ((1, narrow), (2, wide)):
                with case:
                    self.accumulate(pairs, a_panel, b_panel, slots, vectors)
        full = b.and_(b.and_(b.icmp_signed("==", height, i64(MR)),
                             b.icmp_signed("==", width, i64(NR))),
                      b.icmp_signed("==", self.sc1, i64(1)))
        with b.if_else(full) as (fast, edge):
            with fast:
                for r in range(MR):
                    base = b.add(b.mul(b.add(row, i64(r)), self.sc0), column)
                    for v in range(2):
                        offset = b.add(base, i64(v * LANES))
                        tile = b.load(slots[r][v], typ=ACCUMULATOR)
                        old = self.load(self.c, offset, ACCUMULATOR)
                        self.store(b.select(first, tile, b.fadd(old, tile)), self.c, offset)
            with edge:
                self.edge_tile(slots, row, column, height, width, first)

    def accumulate(self, pairs: ir.Value, a_panel: ir.Value, b_panel: ir.Value,
                   slots: list[list[ir.Value]], vectors: int) -> None:
        """slots[r][v] += the panels' products, for the first `vectors` vectors of B's
        panel: one `vdpbf16ps` per row and vector per pair of terms."""
        b = self.b
        dot = self.module.globals.get(DOT) or ir.Function(
            self.module, ir.FunctionType(ACCUMULATOR, [ACCUMULATOR, PAIRS, PAIRS]), name=DOT)
        with counted_loop(b, i64(0), pairs) as p:
            b_row = b.mul(p, i64(2 * NR))
            columns = [self.element(b_panel, b.add(b_row, i64(v * 2 * LANES)), PAIRS)
                       for v in range(vectors)]
            a_row = b.mul(p, i64(2 * MR))
            for r in range(MR):
                pair = self.element(a_panel, b.add(a_row, i64(2 * r)), I32)
                splat = b.shuffle_vector(
                    b.insert_element(ir.Constant(SPLAT, None), pair, i64(0)),
                    ir.Constant(SPLAT, None), ir.Constant(SPLAT, None))
                splat = b.bitcast(splat, PAIRS)
                for v in range(vectors):
                    total = b.call(dot, [b.load(slots[r][v], typ=ACCUMULATOR), splat,
                                         columns[v]])
                    b.store(total, slots[r][v])

    def edge_tile(self, slots: list[list[ir.Value]], row: ir.Value, column: ir.Value,
                  height: ir.Value, width: ir.Value, first: ir.Value) -> None:
        """Write the valid part of a tile element by element."""
        b = self.b
        tile = alloca(self.allocas, ir.ArrayType(F32, MR * NR))
        for r in range(MR):
            for v in range(2):
                self.store(b.load(slots[r][v], typ=ACCUMULATOR), tile, i64(r * NR + v * LANES))
        with counted_loop(b, i64(0), height) as r, counted_loop(b, i64(0), width) as c:
            value = self.load(tile, b.add(b.mul(r, i64(NR)), c))
            offset = b.add(b.mul(b.add(row, r), self.sc0), b.mul(b.add(column, c), self.sc1))
            old = self.load(self.c, offset)
            self.store(b.select(first, value, b.fadd(old, value)), self.c, offset)
