"""The blocking of the bf16 matrix product and the packing of B, shared by its two kernels:
by `vdpbf16ps` (`gemm_bf16.py`) and on AMX tiles (`gemm_amx.py`).

C (f32) = A @ B in blocks as the own f32 kernel (`gemm.py`) makes them: NC columns of B, KC
terms, MC rows of A at a time; B's KC x NC block and A's MC x KC block are packed into the
thread's scratch, then each micro-tile of `mr` rows and NR columns of C is computed from a
panel of each. Both instructions add products of pairs of terms, so B's panels hold pairs
of k interleaved:

    B panel (NR columns), pair p:  [B[2p, j], B[2p+1, j]] for j < NR

An odd K (or block of K) gets a zero pair partner (the tile kernel pads to whole tiles of
32 terms), columns past the edge zeros. Whole pairs are packed at once where the layout
allows (row-major B: two rows interleaved by one shuffle; B with k contiguous, a transposed
operand: one i32 per pair), the rest element by element. K = 0 writes zeros. How A's panels
are packed and how a micro-tile is computed, each kernel defines (`Bf16ProductBuilder`'s
abstract methods).
"""

from __future__ import annotations

import abc

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    F32,
    I16,
    I32,
    ProductBuilder,
    counted_loop,
    i64,
    smaller,
)
from reverie.compiler.call_boundary.abi import MAX_TASKS
from reverie.compiler.loops.ir import MATMUL_PACK_ELEMENTS

LANES = 16  # f32 lanes of one 512-bit vector: vdpbf16ps's accumulator, 16 columns of a tile
NR, KC, MC, NC = 2 * LANES, 256, 192, 1024
PACK_PER_TASK = (MC * KC + KC * NC) * 2  # bytes of packing scratch per thread
assert MAX_TASKS * PACK_PER_TASK <= MATMUL_PACK_ELEMENTS * 8 and KC % 32 == 0
ROW = ir.VectorType(I16, NR)  # a row of a panel of B


def interleaved(b: ir.IRBuilder, first: ir.Value, second: ir.Value) -> ir.Value:
    """Two vectors' elements alternated: first[0] second[0] first[1] second[1] ..., the
    pairs of terms two lines of an operand make (one shuffle)."""
    count = first.type.count
    mask = [i // 2 + (count if i % 2 else 0) for i in range(2 * count)]
    return b.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, 2 * count), mask))


class Bf16ProductBuilder(ProductBuilder, abc.ABC):
    """Emits the serial kernel: C (f32) = A @ B for bf16 A, B (`gemm_bf16.py`'s docstring),
    but for how a panel of A is packed and how a micro-tile of C is computed, which the
    `vdpbf16ps` kernel (`_DotProductBuilder`) and the AMX one (`gemm_amx.py`) each define.
    A micro-tile is `mr` rows by NR columns; K is packed in `pairs(kc)` pairs of terms."""

    mr: int  # (each kind's; MC is a multiple of it)

    def __init__(self, function: ir.Function) -> None:
        super().__init__(function, "f32")

    def pairs(self, kc: ir.Value) -> ir.Value:
        """How many pairs of terms a block of `kc` terms is packed in (a zero partner for
        an odd last term)."""
        return self.b.ashr(self.b.add(kc, i64(1)), i64(1))

    @abc.abstractmethod
    def pack_a(self, dest: ir.Value, ic: ir.Value, pc: ir.Value, mc: ir.Value, kc: ir.Value,
               pairs: ir.Value) -> None:
        """Pack rows ic..ic+mc, terms pc..pc+kc of A into `dest`, in panels of `mr` rows."""

    @abc.abstractmethod
    def micro_kernel(self, pairs: ir.Value, a_panel: ir.Value, b_panel: ir.Value,
                     row: ir.Value, column: ir.Value, height: ir.Value, width: ir.Value,
                     first: ir.Value) -> None:
        """C[row:row+height, column:column+width] = (first) or += A panel @ B panel."""

    def element(self, base: ir.Value, offset: ir.Value, type_: ir.Type = I16) -> ir.Value:
        """The `type_` value at bf16 element `offset` of `base` (aligned to 2 bytes)."""
        value = self.b.load(self.b.gep(base, [offset], source_etype=I16), typ=type_)
        value.align = 2
        return value

    def put(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        self.b.store(value, self.b.gep(base, [offset], source_etype=I16)).align = 2

    def build(self) -> None:
        b = self.b
        with b.if_else(b.icmp_signed("==", self.k, i64(0))) as (empty, blocked):
            with empty:  # no terms: zeros
                with counted_loop(b, i64(0), self.m) as i, counted_loop(b, i64(0), self.n) as j:
                    offset = b.add(b.mul(i, self.sc0), b.mul(j, self.sc1))
                    self.store(ir.Constant(F32, 0.0), self.c, offset)
            with blocked:
                self.blocked()
        b.ret_void()
        self.allocas.branch(self.start)

    def blocked(self) -> None:
        """The packed, blocked product: NC columns, KC terms, MC rows at a time."""
        b = self.b
        a_pack, b_pack = self.pack, b.gep(self.pack, [i64(MC * KC)], source_etype=I16)
        with counted_loop(b, i64(0), self.n, NC) as jc:
            nc = smaller(b, i64(NC), b.sub(self.n, jc))
            with counted_loop(b, i64(0), self.k, KC) as pc:
                kc = smaller(b, i64(KC), b.sub(self.k, pc))
                pairs = self.pairs(kc)
                self.pack_b(b_pack, pc, jc, kc, nc, pairs)
                with counted_loop(b, i64(0), self.m, MC) as ic:
                    mc = smaller(b, i64(MC), b.sub(self.m, ic))
                    self.pack_a(a_pack, ic, pc, mc, kc, pairs)
                    first = b.icmp_signed("==", pc, i64(0))
                    span = b.mul(pairs, i64(2))
                    with counted_loop(b, i64(0), nc, NR) as jr, \
                            counted_loop(b, i64(0), mc, self.mr) as ir_:
                        self.micro_kernel(
                            pairs, b.gep(a_pack, [b.mul(ir_, span)], source_etype=I16),
                            b.gep(b_pack, [b.mul(jr, span)], source_etype=I16),
                            b.add(ic, ir_), b.add(jc, jr), smaller(b, i64(self.mr), b.sub(mc, ir_)),
                            smaller(b, i64(NR), b.sub(nc, jr)), first)

    def pack_b(self, dest: ir.Value, pc: ir.Value, jc: ir.Value, kc: ir.Value, nc: ir.Value,
               pairs: ir.Value) -> None:
        """Panels of NR columns, k in pairs:
        dest[jr*2*pairs + p*2*NR + 2c + t] = B[pc + 2p + t, jc + jr + c] (0-padded).
        Whole pairs of a full panel of row-major B are two rows interleaved by one shuffle;
        of B with k contiguous (a transposed operand), one i32 each."""
        b = self.b
        whole = b.ashr(kc, i64(1))
        with counted_loop(b, i64(0), nc, NR) as jr:
            width = smaller(b, i64(NR), b.sub(nc, jr))
            panel = b.mul(jr, b.mul(pairs, i64(2)))
            column = b.mul(b.add(jc, jr), self.sb1)
            rows = b.and_(b.icmp_signed("==", self.sb1, i64(1)),
                          b.icmp_signed("==", width, i64(NR)))
            pairs_adjacent = b.and_(b.not_(rows), b.icmp_signed("==", self.sb0, i64(1)))
            with b.if_then(rows), counted_loop(b, i64(0), whole) as p:
                first_row = b.add(b.mul(b.add(pc, b.mul(p, i64(2))), self.sb0), column)
                lines = [self.element(self.bm, offset, ROW)
                         for offset in (first_row, b.add(first_row, self.sb0))]
                self.put(interleaved(b, *lines), dest,
                         b.add(panel, b.mul(p, i64(2 * NR))))
            with b.if_then(pairs_adjacent), counted_loop(b, i64(0), whole) as p:
                row = b.add(panel, b.mul(p, i64(2 * NR)))
                first_term = b.add(pc, b.mul(p, i64(2)))
                with counted_loop(b, i64(0), width) as col:
                    source = b.add(first_term, b.add(column, b.mul(col, self.sb1)))
                    self.put(self.element(self.bm, source, I32), dest,
                             b.add(row, b.mul(col, i64(2))))
                with counted_loop(b, width, i64(NR)) as col:
                    self.put(ir.Constant(I32, 0), dest, b.add(row, b.mul(col, i64(2))))
            self.pack_b_terms(dest, pc, column, kc, width, panel,
                              b.select(b.or_(rows, pairs_adjacent), whole, i64(0)), pairs)

    def pack_b_terms(self, dest: ir.Value, pc: ir.Value, column: ir.Value, kc: ir.Value,
                     width: ir.Value, panel: ir.Value, start: ir.Value,
                     pairs: ir.Value) -> None:
        """Pairs `start` to `pairs` of one panel of B, element by element."""
        b = self.b
        zero = ir.Constant(I16, 0)
        with counted_loop(b, start, pairs) as p:
            row = b.add(panel, b.mul(p, i64(2 * NR)))
            for t in range(2):
                term = b.add(b.mul(p, i64(2)), i64(t))
                source_row = b.add(b.mul(b.add(pc, term), self.sb0), column)
                with b.if_else(b.icmp_signed("<", term, kc)) as (real, padding):
                    with real:
                        with counted_loop(b, i64(0), width) as col:
                            source = b.add(source_row, b.mul(col, self.sb1))
                            target = b.add(row, b.add(b.mul(col, i64(2)), i64(t)))
                            self.put(self.element(self.bm, source), dest, target)
                        with counted_loop(b, width, i64(NR)) as col:
                            self.put(zero, dest, b.add(row, b.add(b.mul(col, i64(2)),
                                                                  i64(t))))
                    with padding:
                        with counted_loop(b, i64(0), i64(NR)) as col:
                            self.put(zero, dest, b.add(row, b.add(b.mul(col, i64(2)),
                                                                  i64(t))))
