"""Matrix products with few columns (N <= NARROW_COLUMNS), streaming A once, unpacked.

The public `rv_gemm_<dtype>` (`gemm.py`) calls this kernel before BLAS whenever
`narrow_forms` says it applies: 1 <= N <= NARROW_COLUMNS, K >= 1, and A contiguous along one
of its axes. W2's `X @ W` (4096 x 512 x 10) and `X^T @ G` (512 x 4096 x 10) are such
products: OpenBLAS packs the large operand A (a copy of X, written and read again: half its
time in `sgemm_?ncopy`, measured) and fills 16-column tiles with 10 columns. Here A is read
in place, once from memory; only the small operand is ever copied.

Two forms, by the axis along which A is contiguous (C[i, j] = sum_p A[i, p] B[p, j]):

    rows form (A's rows contiguous, sa1 = 1: X @ W): vectors run along p.
        pack B^T: P[j, p] = B[p, j], rows padded with zeros to whole vectors
        for ROWS rows i, GROUP columns j of C:         # ROWS x GROUP vector accumulators
            acc[i, j] += A[i, p:p+L] * P[j, p:p+L]     # the last step's A load masked
            C[i, j] = horizontal sum of acc[i, j]      # a fixed pairwise tree
    columns form (A's columns contiguous, sa0 = 1: X^T @ G): vectors run along i.
        for blocks of BLOCK_K values of p, GROUP columns j, VECTORS * L rows i of C:
            acc = partial sums of this tile so far (in `pack`; zeros for the first block)
            acc[i:i+L, j] += A[i:i+L, p] * B[p, j]     # B[p, j] broadcast; A's loads
                                                       # masked at the bottom edge of C
            keep acc in `pack`, or after the last block store it to C
        Each block's rows of A (of X: BLOCK_K rows) are read along their length, a few
        sequential streams, and again for each group of columns while they are in cache
        (a loop over p innermost, without blocks, would read X down its 2 KB-strided
        columns, which the caches map to two sets: 2.2x slower, measured).
Tiles at the right edge of C repeat its last column (clamped indices) and store only the
valid ones; the rows form repeats the last row likewise. Every element of C is summed by one
thread in a fixed order, so results do not depend on the thread count; large products are
split over whole row blocks of C by `threads.define_parallel_gemm`, each with its own copy
of B^T or partial sums in its part of `pack`. Both forms prefetch the part of A the next
tile reads (the next tile's rows; the next block's rows).
"""

from __future__ import annotations

from llvmlite import ir

from .irutil import (
    I1,
    I32,
    I64,
    PTR,
    ProductBuilder,
    alloca,
    counted_loop,
    i64,
    intrinsic,
    type_suffix,
    vector_lanes,
)
from .threads import define_parallel_gemm

NARROW_COLUMNS = 16  # widest C the narrow kernel takes
GROUP = 4            # columns of C per register tile
ROWS = 2             # rows form: rows of C per register tile
VECTORS = 2          # columns form: vectors of rows of C per register tile
BLOCK_K = 32         # columns form: rows of A per pass over C (X^T @ G: 64 KB of X)


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _ceil_to(b: ir.IRBuilder, x: ir.Value, unit: int) -> ir.Value:
    return b.mul(b.sdiv(b.add(x, i64(unit - 1)), i64(unit)), i64(unit))


def narrow_forms(b: ir.IRBuilder, args: list[ir.Value], dtype: str,
                 pack_bytes: int) -> tuple[ir.Value, ir.Value]:
    """(applies, rows form) for the product `args` (the serial kernel's arguments): whether
    the narrow kernel takes it, and which form it uses (see the module docstring); the rows
    form needs B^T to fit in one thread's `pack_bytes` of packing scratch."""
    m, n, k, _, sa0, sa1 = args[:6]
    lanes, size = vector_lanes(dtype), 4 if dtype == "f32" else 8
    sizes = b.and_(b.and_(b.icmp_signed(">", m, i64(0)), b.icmp_signed(">", k, i64(0))),
                   b.and_(b.icmp_signed(">", n, i64(0)),
                          b.icmp_signed("<=", n, i64(NARROW_COLUMNS))))
    packed_bytes = b.mul(b.mul(n, _ceil_to(b, k, lanes)), i64(size))
    rows = b.and_(b.icmp_signed("==", sa1, i64(1)),
                  b.icmp_signed("<=", packed_bytes, i64(pack_bytes)))
    partial_bytes = b.mul(b.mul(_ceil_to(b, m, VECTORS * lanes), _ceil_to(b, n, GROUP)),
                          i64(size))
    columns = b.and_(b.icmp_signed("==", sa0, i64(1)),
                     b.icmp_signed("<=", partial_bytes, i64(pack_bytes)))
    return b.and_(sizes, b.or_(rows, columns)), rows


def define_narrow_gemm(function: ir.Function, serial: ir.Function, dtype: str,
                       pack_bytes: int) -> None:
    """Bodies of `serial` (the serial kernel's signature) and `function` (the same plus
    `threads` and `pool`: `serial` split over the worker pool)."""
    _NarrowBuilder(serial, dtype, pack_bytes).build()
    rows_per_slab_unit = VECTORS * vector_lanes(dtype)  # whole tiles of either form
    never_by_columns = 1 << 40  # a slab's columns: more than any C here has
    define_parallel_gemm(function, serial, dtype, rows_per_slab_unit, never_by_columns,
                         pack_bytes)


class _NarrowBuilder(ProductBuilder):
    """Emits the body of the serial narrow kernel."""

    def __init__(self, function: ir.Function, dtype: str, pack_bytes: int) -> None:
        super().__init__(function, dtype)
        function.linkage = "internal"
        function.attributes.add("nounwind")
        self.dtype, self.pack_bytes = dtype, pack_bytes
        self.args = list(function.args)
        self.fma = intrinsic(self.module, "llvm.fma", self.vec, [self.vec] * 3)

    def build(self) -> None:
        b = self.b
        _, rows = narrow_forms(b, self.args, self.dtype, self.pack_bytes)
        with b.if_else(rows) as (rows_form, columns_form):
            with rows_form:
                self.rows_form()
            with columns_form:
                self.columns_form()
        b.ret_void()
        self.allocas.branch(self.start)

    # -- memory -----------------------------------------------------------------------------

    def masked_load(self, base: ir.Value, offset: ir.Value, count: ir.Value) -> ir.Value:
        """The first `count` elements at base + offset as a vector, zeros after them (the
        lanes past `count` are not read)."""
        b = self.b
        mask_type = ir.VectorType(I1, self.lanes)
        name = f"llvm.masked.load.{type_suffix(self.vec)}.p0"
        load = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(self.vec, [PTR, I32, mask_type, self.vec]), name=name)
        lane_index = ir.Constant(ir.VectorType(I64, self.lanes), list(range(self.lanes)))
        mask = b.icmp_signed("<", lane_index, self.splat(count, I64))
        zeros = ir.Constant(self.vec, [0.0] * self.lanes)
        return b.call(load, [self.at(base, offset), ir.Constant(I32, self.size), mask, zeros])

    def prefetch(self, base: ir.Value, offset: ir.Value) -> None:
        """Ask for the cache line at base + offset (a hint: it never faults)."""
        fetch = self.module.globals.get("llvm.prefetch.p0") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]),
            name="llvm.prefetch.p0")
        self.b.call(fetch, [self.at(base, offset), ir.Constant(I32, 0), ir.Constant(I32, 3),
                            ir.Constant(I32, 1)])

    def splat(self, scalar: ir.Value, element: ir.Type | None = None) -> ir.Value:
        """A vector with `scalar` in every lane."""
        b = self.b
        vec = ir.VectorType(element or self.t, self.lanes)
        first = b.insert_element(ir.Constant(vec, None), scalar, i64(0))
        return b.shuffle_vector(first, ir.Constant(vec, None),
                                ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

    def accumulators(self, count: int) -> list[ir.Value]:
        """`count` vector slots set to zero (promoted to registers by LLVM)."""
        slots = [alloca(self.allocas, self.vec) for _ in range(count)]
        for slot in slots:
            self.b.store(ir.Constant(self.vec, [0.0] * self.lanes), slot)
        return slots

    def accumulate(self, slot: ir.Value, x: ir.Value, y: ir.Value) -> None:
        """slot += x * y, one fused multiply-add."""
        b = self.b
        b.store(b.call(self.fma, [x, y, b.load(slot, typ=self.vec)]), slot)

    def write_tile(self, tile: ir.Value, tile_rows: int, row: ir.Value, column: ir.Value,
                   height: ir.Value, width: ir.Value) -> None:
        """C[row + r, column + g] = tile[g * tile_rows + r] for r < height, g < width."""
        b = self.b
        with counted_loop(b, i64(0), width) as g, counted_loop(b, i64(0), height) as r:
            value = self.load(tile, b.add(b.mul(g, i64(tile_rows)), r))
            offset = b.add(b.mul(b.add(row, r), self.sc0), b.mul(b.add(column, g), self.sc1))
            self.store(value, self.c, offset)

    def horizontal_sum(self, vector: ir.Value) -> ir.Value:
        """The sum of a vector's lanes, halves added pairwise (a fixed order)."""
        b = self.b
        width = self.lanes
        while width > 1:
            width //= 2
            low = b.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(I32, width),
                                                              list(range(width))))
            high = b.shuffle_vector(vector, vector, ir.Constant(
                ir.VectorType(I32, width), list(range(width, 2 * width))))
            vector = b.fadd(low, high)
        return b.extract_element(vector, i64(0))

    # -- the two forms ----------------------------------------------------------------------

    def rows_form(self) -> None:
        """A's rows contiguous: dot products along p against the packed B^T."""
        b = self.b
        lanes = self.lanes
        padded = _ceil_to(b, self.k, lanes)
        whole = b.mul(b.sdiv(self.k, i64(lanes)), i64(lanes))
        with counted_loop(b, i64(0), self.n) as j:  # P[j, p] = B[p, j], then zeros
            row = b.mul(j, padded)
            with counted_loop(b, i64(0), self.k) as p:
                value = self.load(self.bm, b.add(b.mul(p, self.sb0), b.mul(j, self.sb1)))
                self.store(value, self.pack, b.add(row, p))
            with counted_loop(b, self.k, padded) as p:
                self.store(ir.Constant(self.t, 0.0), self.pack, b.add(row, p))
        last_row, last_column = b.sub(self.m, i64(1)), b.sub(self.n, i64(1))
        tile = alloca(self.allocas, ir.ArrayType(self.t, ROWS * GROUP))
        with counted_loop(b, i64(0), self.m, ROWS) as i0, \
                counted_loop(b, i64(0), self.n, GROUP) as j0:
            a_rows = [b.mul(_min(b, b.add(i0, i64(r)), last_row), self.sa0)
                      for r in range(ROWS)]
            b_rows = [b.mul(_min(b, b.add(j0, i64(g)), last_column), padded)
                      for g in range(GROUP)]
            acc = self.accumulators(ROWS * GROUP)

            def step(p: ir.Value, a_vectors: list[ir.Value]) -> None:
                b_vectors = [self.load(self.pack, b.add(row, p), self.vec) for row in b_rows]
                for r, a_vector in enumerate(a_vectors):
                    for g, b_vector in enumerate(b_vectors):
                        self.accumulate(acc[r * GROUP + g], a_vector, b_vector)

            ahead = [b.mul(_min(b, b.add(i0, i64(ROWS + r)), last_row), self.sa0)
                     for r in range(ROWS)]  # the next tile's rows
            with counted_loop(b, i64(0), whole, lanes) as p:
                for row in ahead:
                    self.prefetch(self.a, b.add(row, p))
                step(p, [self.load(self.a, b.add(row, p), self.vec) for row in a_rows])
            with b.if_then(b.icmp_signed("<", whole, self.k)):
                rest = b.sub(self.k, whole)
                step(whole, [self.masked_load(self.a, b.add(row, whole), rest)
                             for row in a_rows])
            for r in range(ROWS):
                for g in range(GROUP):
                    total = self.horizontal_sum(b.load(acc[r * GROUP + g], typ=self.vec))
                    self.store(total, tile, i64(g * ROWS + r))
            self.write_tile(tile, ROWS, i0, j0, _min(b, i64(ROWS), b.sub(self.m, i0)),
                            _min(b, i64(GROUP), b.sub(self.n, j0)))

    def columns_form(self) -> None:
        """A's columns contiguous: rank-1 updates of column blocks of C, over blocks of
        BLOCK_K values of p (A's rows), each block read from memory once; the partial sums
        wait between blocks in `pack`, tile after tile."""
        b = self.b
        lanes = self.lanes
        height = VECTORS * lanes
        last_column = b.sub(self.n, i64(1))
        tile = alloca(self.allocas, ir.ArrayType(self.t, height * GROUP))
        tiles_across = b.sdiv(_ceil_to(b, self.n, GROUP), i64(GROUP))
        ahead = b.mul(i64(BLOCK_K), self.sa1)  # from a row of A to that of the next block
        with counted_loop(b, i64(0), self.k, BLOCK_K) as p0, \
                counted_loop(b, i64(0), self.n, GROUP) as j0, \
                counted_loop(b, i64(0), self.m, height) as i0:
            p1 = _min(b, b.add(p0, i64(BLOCK_K)), self.k)
            tile_index = b.add(b.mul(b.sdiv(i0, i64(height)), tiles_across),
                               b.sdiv(j0, i64(GROUP)))
            partial = b.mul(tile_index, i64(height * GROUP))
            b_columns = [b.mul(_min(b, b.add(j0, i64(g)), last_column), self.sb1)
                         for g in range(GROUP)]
            acc = self.accumulators(VECTORS * GROUP)
            with b.if_then(b.icmp_signed(">", p0, i64(0))):
                for index, slot in enumerate(acc):
                    offset = b.add(partial, i64(index * lanes))
                    b.store(self.load(self.pack, offset, self.vec), slot)
            rows_left = b.sub(self.m, i0)

            def sweep(a_vector: ir.Value | None) -> None:
                """acc += A[i0:i0+height, p] B[p, columns] for p in the block;
                `a_vector(v, offset)` loads A's v-th vector (None: plain loads)."""
                with counted_loop(b, p0, p1) as p:
                    a_column = b.add(i0, b.mul(p, self.sa1))
                    next_block = b.icmp_signed("<", b.add(p, i64(BLOCK_K)), self.k)
                    self.prefetch(self.a, b.add(a_column, b.select(next_block, ahead, i64(0))))
                    a_vectors = [a_vector(v, a_column) if a_vector else
                                 self.load(self.a, b.add(a_column, i64(v * lanes)), self.vec)
                                 for v in range(VECTORS)]
                    b_row = b.mul(p, self.sb0)
                    for g, column in enumerate(b_columns):
                        b_value = self.splat(self.load(self.bm, b.add(b_row, column)))
                        for v, vector in enumerate(a_vectors):
                            self.accumulate(acc[g * VECTORS + v], vector, b_value)

            def masked(v: int, a_column: ir.Value) -> ir.Value:
                count = b.sub(rows_left, i64(v * lanes))
                count = b.select(b.icmp_signed("<", count, i64(0)), i64(0), count)
                return self.masked_load(self.a, b.add(a_column, i64(v * lanes)), count)

            with b.if_else(b.icmp_signed(">=", rows_left, i64(height))) as (inside, edge):
                with inside:
                    sweep(None)
                with edge:
                    sweep(masked)
            with b.if_else(b.icmp_signed("<", p1, self.k)) as (more, last):
                with more:
                    for index, slot in enumerate(acc):
                        offset = b.add(partial, i64(index * lanes))
                        self.store(b.load(slot, typ=self.vec), self.pack, offset)
                with last:
                    for index, slot in enumerate(acc):
                        self.store(b.load(slot, typ=self.vec), tile, i64(index * lanes))
                    self.write_tile(tile, height, i0, j0, _min(b, i64(height), rows_left),
                                    _min(b, i64(GROUP), b.sub(self.n, j0)))
