"""Batches of thin matrix products, computed in registers straight from the operands.

A batched product whose output is narrow (W8's `y[n, k, :] = Q[k] @ xc[n, k, :]`: a batch
of K products of 1000 x D x D, and its adjoints, D x 1000 x D and 1000 x D x D, for D of 32
or 64) spent as long in BLAS packing its operands (copying each into the blocked layout
its kernel reads) and zeroing its output (`beta = 0`) as in multiplying: each element of a
packed operand is used only D times, too few for the copy to pay. Here each product is
computed without packing. The output is cut into tiles of ROWS rows by VECTORS vectors of
columns held in registers (`tile_shape`); each step p of the sum loads one row of B's tile
(contiguous) and broadcasts one element of A per row (any strides):

    for each block of steps [p0, p1) of K (one block when K <= SHALLOW, else DEPTH_BLOCK
                                           steps, so the rows of A and B the tiles of a
                                           block read stay in L1):
        for each tile C[i:i+ROWS, j:j+VECTORS*lanes]:
            acc = 0 if p0 == 0 else C[tile]
            for p in [p0, p1):  acc[r, :] = fma(A[i + r, p], B[p, j:j+VECTORS*lanes], acc[r, :])
            C[tile] = acc

(the last rows in tiles of one row, the last columns in tiles of one vector, the last of
which may be partial: masked loads and stores). Each element of C is one chain of fused
multiply-adds over p in order (a block resumes the chain from C, which holds it exactly),
so a product's bits depend on nothing but its operands: not on the tiling, the thread, or
the call. The batch is split over the worker pool, one product per chunk
(`pool_runtime.py`: chunks are claimed, so a descheduled worker delays only the product it
took), rather than over OpenBLAS's threads, which wait for each other in spin loops.

    i1 @rv_gemm_<dtype>_thin(batch, M, N, K, A, sab, sa0, sa1, B, sbb, sb0, sb1, C, scb,
                             sc0, sc1, threads, pool)

returns false, doing nothing, unless the batch is thin: more than one product, none empty,
B's and C's rows contiguous (sb1 = sc1 = 1, C's rows apart: sc0 >= N), N at least one
tile wide (narrower tiles load a row of B and ROWS elements of A for as few multiply-adds:
slower than BLAS's small-matrix kernels, measured for N of 2, 10 and 20) and at most
MAX_COLUMNS, and one product's B at most MAX_RIGHT_ELEMENTS (it is read again for every
band of rows). `gemm_batch.py` asks it first.
"""
from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I1,
    I32,
    I64,
    PTR,
    REGISTER,
    FunctionPointer,
    alloca,
    counted_loop,
    i64,
    intrinsic,
    vector_lanes,
)
from reverie.compiler.call_boundary.abi import ITEMSIZE, NO_SIGNAL_CHECK
from reverie.compiler.runtime_library.pool_runtime import CHUNK_TYPE, RUN_TYPE

MAX_COLUMNS = 64  # wider outputs reuse each packed element enough for BLAS to win
MAX_RIGHT_ELEMENTS = 1 << 16  # K x N of one product: 512 KB of f64, half a Zen 4 L2
SHALLOW = 64  # a product summing over at most this many steps does so in one pass
DEPTH_BLOCK = 16  # else steps per pass over the tiles, so that their rows stay in L1
PARALLEL_MIN_MACS = 1 << 22  # smaller batches stay on the calling thread
FIELDS = 16  # batch, M, N, K, A, sab, sa0, sa1, B, sbb, sb0, sb1, C, scb, sc0, sc1

ENTRY_TYPE = ir.FunctionType(I1, [I64] * 4 + [PTR, I64, I64, I64] * 3 + [I64, I64])
# one product: M, N, K, A, sa0, sa1, B, sb0, C, sc0 (sb1 = sc1 = 1)
PRODUCT_TYPE = ir.FunctionType(ir.VoidType(), [I64] * 3 + [PTR, I64, I64, PTR, I64, PTR, I64])


def tile_shape(dtype: str) -> tuple[int, int]:
    """(ROWS, VECTORS) of a register tile: 16 accumulators where the host's vectors are
    512 bits wide (AVX-512: 32 registers), 12 otherwise (16 registers), each leaving room
    for a row of B and a broadcast element of A."""
    return (4, 4) if vector_lanes(dtype) * ITEMSIZE[dtype] >= 64 else (6, 2)


def define_thin_batch(module: ir.Module, dtype: str) -> ir.Function:
    """`rv_gemm_<dtype>_thin` (internal; the module docstring) in `module`."""
    function = ir.Function(module, ENTRY_TYPE, name=f"rv_gemm_{dtype}_thin")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    product = _define_product(module, dtype)
    task = _define_task(module, product, dtype)
    batch, m, n, k, a, sab, sa0, sa1, bm, sbb, sb0, sb1, c, scb, sc0, sc1, threads, pool = \
        function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    context = alloca(b, ir.ArrayType(I64, FIELDS), "context")
    false, true = ir.Constant(I1, 0), ir.Constant(I1, 1)
    _, vectors = tile_shape(dtype)
    one = i64(1)
    conditions = [b.icmp_signed(">", batch, one), b.icmp_signed(">", m, i64(0)),
                  b.icmp_signed(">=", n, i64(vectors * vector_lanes(dtype))),
                  b.icmp_signed(">", k, i64(0)),
                  b.icmp_signed("==", sb1, one), b.icmp_signed("==", sc1, one),
                  b.icmp_signed(">=", sc0, n),
                  b.icmp_signed("<=", n, i64(MAX_COLUMNS)),
                  b.icmp_signed("<=", b.mul(k, n), i64(MAX_RIGHT_ELEMENTS))]
    thin = conditions[0]
    for condition in conditions[1:]:
        thin = b.and_(thin, condition)
    with b.if_then(b.not_(thin)):
        b.ret(false)
    macs = b.mul(b.mul(b.mul(batch, m), n), k)
    parallel = b.and_(b.and_(b.icmp_signed(">=", macs, i64(PARALLEL_MIN_MACS)),
                             b.icmp_signed(">", threads, one)),
                      b.icmp_unsigned("!=", pool, i64(0)))
    with b.if_then(parallel):
        for index, value in enumerate(function.args[:FIELDS]):
            b.store(value, b.gep(context, [i64(index)], source_etype=I64))
        run = FunctionPointer(b.inttoptr(pool, PTR), RUN_TYPE)
        b.call(run, [FunctionPointer(task, task.function_type), context, batch,
                     i64(NO_SIGNAL_CHECK)])
        b.ret(true)
    with counted_loop(b, i64(0), batch) as index:
        b.call(product, _product_arguments(b, dtype, index, function.args[:FIELDS]))
    b.ret(true)
    return function


def _product_arguments(b: ir.IRBuilder, dtype: str, index: ir.Value,
                       fields: list[ir.Value]) -> list[ir.Value]:
    """The arguments of product `index` of the batch whose entry arguments are `fields`."""
    _, m, n, k, a, sab, sa0, sa1, bm, sbb, sb0, _, c, scb, sc0, _ = fields
    element = REGISTER[dtype]

    def at(base: ir.Value, step: ir.Value) -> ir.Value:
        return b.gep(base, [b.mul(index, step)], source_etype=element)

    return [m, n, k, at(a, sab), sa0, sa1, at(bm, sbb), sb0, at(c, scb), sc0]


def _define_task(module: ir.Module, product: ir.Function, dtype: str) -> ir.Function:
    """`i32 @rv_gemm_<dtype>_thin_task(ptr context, i64 t)`: product t of the batch whose
    entry arguments `context` holds."""
    task = ir.Function(module, CHUNK_TYPE, name=f"rv_gemm_{dtype}_thin_task")
    task.linkage = "internal"
    task.attributes.add("nounwind")
    context, index = task.args
    b = ir.IRBuilder(task.append_basic_block("entry"))
    fields = [b.load(b.gep(context, [i64(field)], source_etype=I64), typ=type_)
              for field, type_ in enumerate(ENTRY_TYPE.args[:FIELDS])]
    b.call(product, _product_arguments(b, dtype, index, fields))
    b.ret(ir.Constant(I32, 0))
    return task


def _define_product(module: ir.Module, dtype: str) -> ir.Function:
    """`void @rv_gemm_<dtype>_thin_product(M, N, K, A, sa0, sa1, B, sb0, C, sc0)`: one thin
    product, tile by tile (full tiles of ROWS rows, then the last rows one at a time; in a
    band of rows, full tiles of VECTORS vectors, then the last columns one vector at a time,
    under a mask). The tiles are four functions, not inlined: a call per tile and block of
    steps costs nothing beside the tile's work, and saves LLVM time in every process with an
    empty cache."""
    rows, vectors = tile_shape(dtype)
    lanes = vector_lanes(dtype)
    function = ir.Function(module, PRODUCT_TYPE, name=f"rv_gemm_{dtype}_thin_product")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    m, n, k, a, sa0, sa1, bm, sb0, c, sc0 = function.args
    tiles = {(height, width): _define_tile(module, dtype, height, width)
             for height in (rows, 1) for width in (vectors, 1)}
    b = ir.IRBuilder(function.append_basic_block("entry"))
    element = REGISTER[dtype]
    full_columns = b.mul(b.sdiv(n, i64(vectors * lanes)), i64(vectors * lanes))
    lane_numbers = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    def columns_mask(column: ir.Value) -> ir.Value:
        """Which of the `lanes` columns from `column` on are columns of C (< N)."""
        left = b.sub(n, column)
        splat = b.shuffle_vector(b.insert_element(ir.Constant(ir.VectorType(I64, lanes), None),
                                                  left, i64(0)),
                                 ir.Constant(ir.VectorType(I64, lanes), None),
                                 ir.Constant(ir.VectorType(I32, lanes), None))
        return b.icmp_signed("<", lane_numbers, splat)

    full_rows = b.mul(b.sdiv(m, i64(rows)), i64(rows))
    block = b.select(b.icmp_signed("<=", k, i64(SHALLOW)), k, i64(DEPTH_BLOCK))
    blocks = b.sdiv(b.add(k, b.sub(block, i64(1))), block)
    with counted_loop(b, i64(0), blocks) as index:
        depth = b.mul(index, block)
        steps = b.sub(k, depth)
        steps = b.select(b.icmp_signed("<", steps, block), steps, block)
        first = b.icmp_signed("==", depth, i64(0))
        a_block = b.gep(a, [b.mul(depth, sa1)], source_etype=element)
        b_block = b.gep(bm, [b.mul(depth, sb0)], source_etype=element)

        def band(first_row: ir.Value, height: int) -> None:
            """The tiles of rows first_row .. first_row + height over this block of K."""
            a_rows = b.gep(a_block, [b.mul(first_row, sa0)], source_etype=element)
            c_rows = b.gep(c, [b.mul(first_row, sc0)], source_etype=element)

            def tile(column: ir.Value, width: int, mask: list[ir.Value]) -> None:
                b.call(tiles[height, width],
                       [steps, a_rows, sa0, sa1, b.gep(b_block, [column], source_etype=element),
                        sb0, b.gep(c_rows, [column], source_etype=element), sc0, first, *mask])

            with counted_loop(b, i64(0), full_columns, vectors * lanes) as column:
                tile(column, vectors, [])
            with counted_loop(b, full_columns, n, lanes) as column:
                tile(column, 1, [columns_mask(column)])

        with counted_loop(b, i64(0), full_rows, rows) as row:
            band(row, rows)
        if rows > 1:
            with counted_loop(b, full_rows, m) as row:
                band(row, 1)
    b.ret_void()
    return function


def _define_tile(module: ir.Module, dtype: str, height: int, width: int) -> ir.Function:
    """`void @..._tile_<height>x<width>(K, A, sa0, sa1, B, sb0, C, sc0, first[, mask])`:
    C[:height, :width vectors] = A[:height, :K] @ B[:K, :width vectors], in registers,
    starting from zero (`first`) or from C. A tile one vector wide takes the mask of the
    columns it covers (the last vector of a row may be partial): it reads and writes only
    those, through masked loads and stores."""
    masked = width == 1
    element = REGISTER[dtype]
    lanes = vector_lanes(dtype)
    vector = ir.VectorType(element, lanes)
    mask_type = ir.VectorType(I1, lanes)
    arguments = [I64, PTR, I64, I64, PTR, I64, PTR, I64, I1] + ([mask_type] if masked else [])
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), arguments),
                           name=f"rv_gemm_{dtype}_thin_tile_{height}x{width}")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    k, a, sa0, sa1, bm, sb0, c, sc0, first, *mask = function.args
    size = ITEMSIZE[dtype]
    fma = intrinsic(module, "llvm.fma", vector, [vector] * 3)
    b = ir.IRBuilder(function.append_basic_block("entry"))
    zeros = ir.Constant(vector, [0.0] * lanes)
    accessor = _VectorAccess(module, b, dtype, mask[0] if masked else None)
    slots = [[alloca(b, vector) for _ in range(width)] for _ in range(height)]
    for r, row in enumerate(slots):
        for v, slot in enumerate(row):
            partial = accessor.load(c, b.add(b.mul(i64(r), sc0), i64(v * lanes)))
            b.store(b.select(first, zeros, partial), slot)
    splat_mask = ir.Constant(ir.VectorType(I32, lanes), None)
    with counted_loop(b, i64(0), k) as p:
        b_row = b.mul(p, sb0)
        columns = [accessor.load(bm, b.add(b_row, i64(v * lanes))) for v in range(width)]
        a_column = b.mul(p, sa1)
        for r in range(height):
            scalar = b.load(b.gep(a, [b.add(a_column, b.mul(i64(r), sa0))],
                                  source_etype=element, inbounds=True), typ=element)
            scalar.align = size
            splat = b.shuffle_vector(b.insert_element(ir.Constant(vector, None), scalar,
                                                      i64(0)),
                                     ir.Constant(vector, None), splat_mask)
            for v in range(width):
                total = b.call(fma, [splat, columns[v], b.load(slots[r][v], typ=vector)])
                b.store(total, slots[r][v])
    for r in range(height):
        for v in range(width):
            accessor.store(b.load(slots[r][v], typ=vector), c,
                           b.add(b.mul(i64(r), sc0), i64(v * lanes)))
    b.ret_void()
    return function


class _VectorAccess:
    """Loads and stores of one vector at an element offset: plain, or under `mask` (the
    lanes it leaves off read as zero and are not written)."""

    def __init__(self, module: ir.Module, b: ir.IRBuilder, dtype: str,
                 mask: ir.Value | None) -> None:
        self.b, self.mask = b, mask
        self.element, self.size = REGISTER[dtype], ITEMSIZE[dtype]
        self.vector = vector = ir.VectorType(self.element, vector_lanes(dtype))
        suffix = f"v{vector.count}{dtype}.p0"
        mask_type = ir.VectorType(I1, vector.count)
        self.masked_load = _declare(module, f"llvm.masked.load.{suffix}", ir.FunctionType(
            vector, [PTR, I32, mask_type, vector]))
        self.masked_store = _declare(module, f"llvm.masked.store.{suffix}", ir.FunctionType(
            ir.VoidType(), [vector, PTR, I32, mask_type]))

    def address(self, base: ir.Value, offset: ir.Value) -> ir.Value:
        return self.b.gep(base, [offset], source_etype=self.element, inbounds=True)

    def load(self, base: ir.Value, offset: ir.Value) -> ir.Value:
        if self.mask is not None:
            return self.b.call(self.masked_load, [
                self.address(base, offset), ir.Constant(I32, self.size), self.mask,
                ir.Constant(self.vector, [0.0] * self.vector.count)])
        value = self.b.load(self.address(base, offset), typ=self.vector)
        value.align = self.size
        return value

    def store(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        if self.mask is not None:
            self.b.call(self.masked_store, [value, self.address(base, offset),
                                            ir.Constant(I32, self.size), self.mask])
            return
        self.b.store(value, self.address(base, offset)).align = self.size


def _declare(module: ir.Module, name: str, function_type: ir.FunctionType) -> ir.Function:
    """The intrinsic `name` of `module`, declared once."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, function_type, name=name)
