"""The bf16 matrix product on AMX tiles (LLVM IR): `rv_gemm_bf16` where the host has AMX.

AMX (Intel Sapphire Rapids and later) adds eight tile registers of 16 rows x 64 bytes and
`tdpbf16ps c, a, b`, which for a 16 x 32 tile a of bf16 values, a 16 x 16 tile b of pairs of
bf16 values and a 16 x 16 tile c of f32 sums adds 512 products at once:

    c[i, j] += a[i, 2p] b[p, 2j] + a[i, 2p+1] b[p, 2j+1]     for each p < 16, in order

The kernel is `gemm_bf16.py`'s, blocked and B packed the same way (`gemm_bf16_blocking.py`:
B's panels of NR = 32 columns are already the pairs `tdpbf16ps` reads, 16 columns per tile,
128 bytes a pair), with another packing of A and another micro-kernel:

    A panel (MR = 32 rows):  row r, term k at r * 2 * pairs + k, as A is stored; the block's
                             terms padded with zeros to whole tiles of 32 (so pairs is a
                             multiple of 16, for B's panels too)
    micro-tile:              a 32 x 32 tile of C in four accumulator tiles; per 32 terms two
                             tiles of A, two of B and four `tdpbf16ps`

A whole micro-tile of C with unit column stride is loaded into the tiles and stored back in
place (in the first block of K from a row of zeros instead, read with stride 0 into each
of a tile's 16 rows: zeroing the tiles would give the loop two entries, and LLVM then carries
the tiles through memory); one at an edge goes through a 32 x 32 tile on the stack. The
tiles' work is one function (`rv_amx_tiles`), inlined into the serial kernel; its tile
values are all 16 x 64 bytes, so LLVM configures the tiles (`ldtilecfg`) once per call of
the kernel, and again after each call the kernel makes (a callee may change the
configuration: the loops filling padding with zeros select them, since LLVM would make a
zeroing loop a `memset` call), and releases them (`tilerelease`) on return.

Two builds of the same kernel (`backend/matrix_tiles.py` picks one):

    hardware   the tile instructions, where the host has them and Linux granted the tiles
    emulate    LLVM's scalar lowering of them (X86LowerAMXIntrinsics, enabled by
               `-enable-x86-scalar-amx` in `runtime/native/jit.py`): loops over the tiles'
               elements adding in the instruction's order, for tests on hosts without AMX

They differ only in how a tile value becomes the 1 KB vector it is carried in between
iterations, and in `rv_amx_tiles` staying a function of its own: LLVM's lowering reads
`bitcast`s and runs only in an `optnone` function (which is never inlined), its code
generation for the instructions reads the `llvm.x86.cast.*` intrinsics (it aborts on the
bitcasts). Like `vdpbf16ps`, the instruction flushes subnormal inputs and results to zero,
which the emulation does not: the results of the two builds differ there only.
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    F32,
    I16,
    I64,
    PTR,
    alloca,
    counted_loop,
    i64,
    smaller,
)
from reverie.compiler.runtime_library.gemm_bf16_blocking import MC, NR, Bf16ProductBuilder

MR = 32  # rows of a micro-tile: two tiles of 16
assert MC % MR == 0
ROWS, ROW_BYTES = 16, 64  # every tile here: 16 rows of 64 bytes
TERMS = 32  # bf16 terms per tile row of A (per 16 pairs of B)
VECTOR = ir.VectorType(ir.IntType(32), 256)  # a tile's 1 KB, as LLVM carries it
TILES_TYPE = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, I64, PTR, I64, PTR, I64])
ZERO_ROW = "rv_amx_zero_row"  # a micro-tile's row of zeros: the first block's accumulators


class _AmxType(ir.Type):
    """LLVM's `x86_amx`, the type of a tile register's value (llvmlite has no class for it)."""

    def _to_string(self) -> str:
        return "x86_amx"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AmxType)

    def __hash__(self) -> int:
        return hash("x86_amx")


AMX = _AmxType()
INTRINSICS = {  # name: (result, parameters)
    "llvm.x86.tileloadd64.internal": (AMX, [I16, I16, PTR, I64]),
    "llvm.x86.tdpbf16ps.internal": (AMX, [I16, I16, I16, AMX, AMX, AMX]),
    "llvm.x86.tilestored64.internal": (ir.VoidType(), [I16, I16, PTR, I64, AMX]),
    "llvm.x86.cast.vector.to.tile.v256i32": (AMX, [VECTOR]),
    "llvm.x86.cast.tile.to.vector.v256i32": (VECTOR, [AMX]),
}


def tile_builder(emulate: bool) -> type[Bf16ProductBuilder]:
    """The builder of the kernel on tiles, for the hardware or LLVM's emulation of it."""
    return _EmulatedTileBuilder if emulate else _TileBuilder


class _TileBuilder(Bf16ProductBuilder):
    """The serial kernel on AMX tiles (see the module docstring)."""

    mr = MR
    emulate = False

    def pairs(self, kc: ir.Value) -> ir.Value:
        """Whole tiles: the block's terms rounded up to a multiple of 32, in pairs."""
        b = self.b
        return b.mul(b.ashr(b.add(kc, i64(TERMS - 1)), i64(5)), i64(TERMS // 2))

    def pack_a(self, dest: ir.Value, ic: ir.Value, pc: ir.Value, mc: ir.Value, kc: ir.Value,
               pairs: ir.Value) -> None:
        """Panels of MR rows, each row's terms as stored:
        dest[(ir + r) * 2 * pairs + k] = A[ic + ir + r, pc + k], the terms past kc zeros.
        Rows past the edge copy A's last row: their sums are never written back. The zeros
        are one vector store of a tile's row (32 terms) before the copy, not a loop, which
        LLVM would make a `memset` call (see the module docstring); the copy is a plain
        loop LLVM vectorises where A's terms are adjacent."""
        b = self.b
        span = b.mul(pairs, i64(2))
        zeros = ir.Constant(ir.VectorType(I16, TERMS), None)
        with counted_loop(b, i64(0), mc, MR) as panel, counted_loop(b, i64(0), i64(MR)) as r:
            source_row = smaller(b, b.add(ic, b.add(panel, r)), b.sub(self.m, i64(1)))
            source = b.add(b.mul(source_row, self.sa0), b.mul(pc, self.sa1))
            row = b.mul(b.add(panel, r), span)
            self.put(zeros, dest, b.add(row, b.sub(span, i64(TERMS))))
            with counted_loop(b, i64(0), kc) as k:
                self.put(self.element(self.a, b.add(source, b.mul(k, self.sa1))), dest,
                         b.add(row, k))

    def micro_kernel(self, pairs: ir.Value, a_panel: ir.Value, b_panel: ir.Value,
                     row: ir.Value, column: ir.Value, height: ir.Value, width: ir.Value,
                     first: ir.Value) -> None:
        """C[row:row+height, column:column+width] (+)= A panel @ B panel, on tiles: in place
        for a whole tile of C with unit column stride, else through a stack tile."""
        b = self.b
        full = b.and_(b.and_(b.icmp_signed("==", height, i64(MR)),
                             b.icmp_signed("==", width, i64(NR))),
                      b.icmp_signed("==", self.sc1, i64(1)))
        in_place = self.at(self.c, b.add(b.mul(row, self.sc0), column))
        in_place_stride = b.mul(self.sc0, i64(4))
        stack = alloca(self.allocas, ir.ArrayType(F32, MR * NR))
        with b.if_then(b.not_(full)):
            self.copy_edge(stack, row, column, height, width, first, into_stack=True)
        zeros = b.bitcast(self._zero_row(), PTR)
        fresh = b.and_(full, first)
        target = b.select(full, in_place, stack)
        target_stride = b.select(full, in_place_stride, i64(NR * 4))
        b.call(self._tiles_function(), [
            a_panel, b.mul(pairs, i64(4)), b_panel, b.ashr(pairs, i64(4)),
            b.select(fresh, zeros, target), b.select(fresh, i64(0), target_stride),
            target, target_stride])
        with b.if_then(b.not_(full)):
            self.copy_edge(stack, row, column, height, width, first, into_stack=False)

    def copy_edge(self, stack: ir.Value, row: ir.Value, column: ir.Value, height: ir.Value,
                  width: ir.Value, first: ir.Value, into_stack: bool) -> None:
        """An edge tile: into the stack tile, C's valid part (zeros in the first block of K)
        and zeros around it (selected, as in `pack_a`); or the valid part back into C."""
        b = self.b

        def offset(r: ir.Value, c: ir.Value) -> ir.Value:
            return b.add(b.mul(b.add(row, r), self.sc0), b.mul(b.add(column, c), self.sc1))

        if not into_stack:
            with counted_loop(b, i64(0), height) as r, counted_loop(b, i64(0), width) as c:
                self.store(self.load(stack, b.add(b.mul(r, i64(NR)), c)), self.c, offset(r, c))
            return
        with counted_loop(b, i64(0), i64(MR)) as r, counted_loop(b, i64(0), i64(NR)) as c:
            inside = b.and_(b.not_(first), b.and_(b.icmp_signed("<", r, height),
                                                  b.icmp_signed("<", c, width)))
            nearest = offset(smaller(b, r, b.sub(height, i64(1))),
                             smaller(b, c, b.sub(width, i64(1))))
            self.store(b.select(inside, self.load(self.c, nearest), ir.Constant(F32, 0.0)),
                       stack, b.add(b.mul(r, i64(NR)), c))

    def _zero_row(self) -> ir.GlobalVariable:
        found = self.module.globals.get(ZERO_ROW)
        if found is not None:
            return found
        row = ir.ArrayType(F32, NR)  # (both column tiles read it, at 0 and 64 bytes)
        zeros = ir.GlobalVariable(self.module, row, name=ZERO_ROW)
        zeros.linkage, zeros.global_constant = "internal", True
        zeros.initializer = ir.Constant(row, None)
        zeros.align = 64
        return zeros

    def _tiles_function(self) -> ir.Function:
        """`rv_amx_tiles(a, a_stride, b, k_tiles, c_in, c_in_stride, c_out, c_out_stride)`:
        the four accumulator tiles loaded from c_in, k_tiles steps of 32 terms, stored to
        c_out (strides in bytes; B's panel rows are 2 * NR bf16 values apart)."""
        found = self.module.globals.get("rv_amx_tiles")
        if found is not None:
            return found
        function = ir.Function(self.module, TILES_TYPE, name="rv_amx_tiles")
        function.linkage = "internal"
        kept_apart = ("noinline", "optnone")  # (LLVM's emulation works in optnone only)
        for attribute in ("nounwind", *(kept_apart if self.emulate else ("alwaysinline",))):
            function.attributes.add(attribute)
        _TileEmitter(function, self.emulate).emit()
        return function


class _EmulatedTileBuilder(_TileBuilder):
    """The same kernel, its tile instructions emulated by LLVM (see the module docstring)."""

    emulate = True


class _TileEmitter:
    """The body of `rv_amx_tiles`: a loop over K's tiles carrying the four accumulators."""

    def __init__(self, function: ir.Function, emulate: bool) -> None:
        self.function, self.emulate = function, emulate
        self.module = function.module
        self.b = ir.IRBuilder(function.append_basic_block("entry"))

    def intrinsic(self, name: str, *args: ir.Value) -> ir.Value:
        result, parameters = INTRINSICS[name]
        callee = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(result, parameters), name=name)
        return self.b.call(callee, list(args))

    def to_vector(self, tile: ir.Value) -> ir.Value:
        if self.emulate:
            return self.b.bitcast(tile, VECTOR)
        return self.intrinsic("llvm.x86.cast.tile.to.vector.v256i32", tile)

    def to_tile(self, vector: ir.Value) -> ir.Value:
        if self.emulate:
            return self.b.bitcast(vector, AMX)
        return self.intrinsic("llvm.x86.cast.vector.to.tile.v256i32", vector)

    def load(self, base: ir.Value, offset: ir.Value, stride: ir.Value) -> ir.Value:
        """The tile of 16 rows of 64 bytes at byte `offset` of `base`, rows `stride` apart."""
        address = self.b.gep(base, [offset], source_etype=ir.IntType(8))
        return self.intrinsic("llvm.x86.tileloadd64.internal", ir.Constant(I16, ROWS),
                              ir.Constant(I16, ROW_BYTES), address, stride)

    def emit(self) -> None:
        b = self.b
        a, a_stride, b_panel, k_tiles, c_in, c_in_stride, c_out, c_out_stride = \
            self.function.args
        corners = [(h, v) for h in range(2) for v in range(2)]  # (row tile, column tile)

        def corner(h: int, v: int, stride: ir.Value) -> ir.Value:
            return b.add(b.mul(stride, i64(h * ROWS)), i64(v * ROW_BYTES))

        start = [self.to_vector(self.load(c_in, corner(h, v, c_in_stride), c_in_stride))
                 for h, v in corners]
        before, loop = b.block, self.function.append_basic_block("terms")
        done = self.function.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        step = b.phi(I64, "t")
        sums = [b.phi(VECTOR, f"c{h}{v}") for h, v in corners]
        a_tiles = [self.load(a, b.add(b.mul(a_stride, i64(h * ROWS)), b.mul(step, i64(64))),
                             a_stride) for h in range(2)]
        pair_row = i64(2 * NR * 2)  # bytes between pairs of B's panel
        b_tiles = [self.load(b_panel, b.add(b.mul(step, i64(ROWS * 2 * NR * 2)),
                                            i64(v * ROW_BYTES)), pair_row) for v in range(2)]
        shape = [ir.Constant(I16, n) for n in (ROWS, ROW_BYTES, ROW_BYTES)]
        new_sums = [self.to_vector(self.intrinsic(
            "llvm.x86.tdpbf16ps.internal", *shape, self.to_tile(total), a_tiles[h], b_tiles[v]))
            for total, (h, v) in zip(sums, corners, strict=True)]
        following = b.add(step, i64(1))
        step.add_incoming(i64(0), before)
        step.add_incoming(following, loop)
        for phi, initial, new in zip(sums, start, new_sums, strict=True):
            phi.add_incoming(initial, before)
            phi.add_incoming(new, loop)
        b.cbranch(b.icmp_signed("<", following, k_tiles), loop, done)
        b.position_at_end(done)
        for total, (h, v) in zip(new_sums, corners, strict=True):
            address = b.gep(c_out, [corner(h, v, c_out_stride)], source_etype=ir.IntType(8))
            self.intrinsic("llvm.x86.tilestored64.internal", ir.Constant(I16, ROWS),
                           ir.Constant(I16, ROW_BYTES), address, c_out_stride,
                           self.to_tile(total))
        b.ret_void()
