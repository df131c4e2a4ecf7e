"""Storage types made explicit: bf16/f16 arithmetic in f32, rounded where values are stored.

bf16 and f16 are storage types (docs/language.md §3.4): operations compute in f32, and a
value is rounded to its storage type where the program stores it — where a function returns
it, a loop carries it, index notation or a region reads it, or a cast converts it. Between
those points values stay f32, as XLA and torch.compile keep them inside a fusion (torch
eager rounds after every op instead). This pass writes the rule out; the reference
interpreter and every back end run its result, so they agree bit for bit and the rule does
not depend on how the back end fuses:

    %0 = mul %x, %y : bf16[N]             %0 = cast %x {dtype = f32} : f32[N]
    %1 = exp %0 : bf16[N]          →      %1 = cast %y {dtype = f32} : f32[N]
    return %1                             %2 = mul %0, %1 : f32[N]
                                          %3 = exp %2 : f32[N]
                                          %4 = cast %3 {dtype = bf16} : bf16[N]
                                          return %4

Every op but `cast` (of floats), `const`, `read` and the ops with regions computes on f32
operands (a bf16/f16 operand widened once per block, exactly); its bf16/f16 results stay
f32 until something reads them as stored values: a result of the block, an operand of
`cast`, `read` or of an op with regions (`for`, `while`, `if`, `generic`: their parameters
and carried values keep their types, and their regions are rewritten the same way), or an
operand of a matrix product, which reads its operands from memory as XLA's dots and torch's
autocast do (so both are bf16, and the product can run on the host's bf16 instructions:
`backend/bf16_products.py`). An op that only moves elements (a transpose, slice, reshape,
broadcast: `MOVES`) of values still stored moves their 16 bits; one of computed values,
where its rounded form is read, moves their rounded values (rounding is elementwise, so
the bits are the same, and each value is rounded once for all its readers). A cast of an
integer to bf16/f16 (a size in `mean`, a loop counter) is arithmetic too: f32 until stored.
Reductions, matrix products and scatter-adds (`generic_scatter`, a gather's adjoint: its
values each as stored) accumulate in f32 or wider.

Contract: `widen_storage(fn)` computes what `fn` means for storage types; `fn` is never
modified, and returned as it is when it has no bf16/f16 operand. It runs after every
transform (gradients are built on the program as written, adjoints typed like their
primals): first in the back ends' stages (`fuse`, `mlir`), and in `interpret` (so it lives
beside the interpreter in the IR's layer, below the transforms);
REVERIE_PRINT_IR pass `widen_storage`.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Block, Builder, Function, Op, Value
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.op_defs import OPS
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.print_ir import show

PASS_NAME = "widen_storage"

KEPT = ("cast", "const", "read")  # `read`: an element of a stored tensor, as stored
PRODUCTS = ("matmul",)  # read their bf16/f16 operands as stored (rounded), in f32
MOVES = ("shape", "broadcast")  # op kinds that only move elements (the op table's)
DROPS = ("slice", "dynamic_index")  # moves that keep a part of their operand


def _stored(value: Value) -> bool:
    return value.type.dtype in STORAGE_DTYPES


class _Widener:
    """Rewrites one block into a new one. A bf16/f16 value of the old block may have two
    new forms: `stored` (its rounded value) and `wide` (f32); the one its producer makes
    comes first, the other is a `cast` emitted when a consumer first needs it."""

    def __init__(self, block: Block) -> None:
        self.values: dict[Value, Value] = {p: p for p in block.params if not _stored(p)}
        self.stored: dict[Value, Value] = {p: p for p in block.params if _stored(p)}
        self.wide: dict[Value, Value] = {}
        self.computed: set[Value] = set()  # values whose first form is `wide`
        self.stored_f32: dict[Value, Value] = {}  # their rounded form, widened again
        self.block = Block(list(block.params))
        self.builder = Builder(self.block)

    def rewrite(self, block: Block) -> Block:
        for op in block.ops:
            self.builder.span = op.span
            self.op(op)
        self.block.results = [self.as_stored(v) for v in block.results]
        return self.block

    def op(self, op: Op) -> None:
        if op.name == "cast" and _stored(op.result) and not op.operands[0].type.is_float:
            # an integer converted (a size in `mean`, a loop counter): arithmetic, not a
            # rounding of a computed value, so it stays f32 until stored like arithmetic
            self.wide[op.result] = self.builder.op("cast", [self.values[op.operands[0]]],
                                                   {"dtype": "f32"})
            self.computed.add(op.result)
            return
        if op.name == "generic_scatter" and _stored(op.results[0]):
            self.scatter_in_f32(op)
            return
        if op.regions or op.name in KEPT or not any(_stored(v) for v in op.operands) or \
                self.moves_stored(op):
            regions = [widen_block(region) for region in op.regions]
            copy = Op(op.name, [self.as_stored(v) for v in op.operands], dict(op.attrs),
                      regions=regions, span=op.span)
            copy.results = [Value(r.type, copy, r.index) for r in op.results]
            self.block.ops.append(copy)
            for old, new in zip(op.results, copy.results, strict=True):
                (self.stored if _stored(old) else self.values)[old] = new
            return
        read = self.as_stored_f32 if op.name in PRODUCTS else self.as_f32
        wide = self.builder.emit(op.name, [read(v) for v in op.operands], op.attrs)
        for old, new in zip(op.results, wide, strict=True):
            if _stored(old):
                assert new.type.dtype == "f32", f"{op.name}: {new.type} for {old.type}"
                self.wide[old] = new
                self.computed.add(old)
            else:
                self.values[old] = new

    def moves_stored(self, op: Op) -> bool:
        """Whether `op` only moves elements (a transpose, slice, reshape, broadcast, ...) of
        values already stored: it then moves their 16 bits, not their f32 widenings (the
        same bits, half the memory, and no rounding back for a product to read)."""
        return OPS[op.name].kind in MOVES and not any(v in self.computed for v in op.operands)

    def scatter_in_f32(self, op: Op) -> None:
        """A scatter-add into a bf16/f16 tensor (a gather's adjoint) adds its values, each
        as stored, in f32: its sum is rounded once, where it is stored, as a reduction's."""
        body = widen_block(op.regions[0])
        *positions, value = body.results
        body.results = [*positions, Builder(body).op("cast", [value], {"dtype": "f32"})]
        (total,) = self.builder.emit(op.name, [self.as_stored(v) for v in op.operands],
                                     dict(op.attrs), [body])
        self.wide[op.results[0]] = total
        self.computed.add(op.results[0])

    def as_f32(self, value: Value) -> Value:
        """The new form of `value` that computing ops read: f32 for a bf16/f16 value."""
        if not _stored(value):
            return self.values[value]
        if value not in self.wide:
            self.wide[value] = self.builder.op("cast", [self.stored[value]], {"dtype": "f32"})
        return self.wide[value]

    def as_stored_f32(self, value: Value) -> Value:
        """The f32 form of `value` as stored (rounded first): what a product reads."""
        if value not in self.computed:
            return self.as_f32(value)
        if value not in self.stored_f32:
            self.stored_f32[value] = self.builder.op("cast", [self.as_stored(value)],
                                                     {"dtype": "f32"})
        return self.stored_f32[value]

    def as_stored(self, value: Value) -> Value:
        """The new form of `value` as stored: a bf16/f16 value rounded (once per block). A
        move of computed values moves their rounded values instead (the same bits: rounding
        is elementwise), each rounded once for all its uses — a gradient's transposed hidden
        layer, read by a product, is the rounded one the forward's product read, as
        strides; but a move keeping part of its operand (`DROPS`) rounds that part, unless
        the whole is rounded anyway."""
        if not _stored(value):
            return self.values[value]
        if value not in self.stored:
            move = value.op  # (a computed value's: the op of the old block that made it)
            if value in self.computed and OPS[move.name].kind in MOVES and (
                    move.name not in DROPS or all(
                    v in self.stored or not _stored(v) for v in move.operands)):
                (self.stored[value],) = self.builder.emit(
                    move.name, [self.as_stored(v) for v in move.operands], move.attrs)
            else:
                self.stored[value] = self.builder.op("cast", [self.wide[value]],
                                                     {"dtype": value.type.dtype})
        return self.stored[value]


def widen_block(block: Block) -> Block:
    """`block` with its bf16/f16 arithmetic in f32, rounded where stored (a new block)."""
    return _Widener(block).rewrite(block)


def widened(fn: Function) -> Function:
    """`fn` with its bf16/f16 arithmetic in f32 and a rounding cast where a value is stored
    (`fn` itself when it reads no bf16/f16 value)."""
    stored = any(_stored(v) for op in fn.body.walk() for v in op.operands)
    return fn.derive(fn.name, widen_block(fn.body)) if stored else fn


def widen_storage(fn: Function) -> Function:
    """The pass: `widened(fn)`, printed under REVERIE_PRINT_IR."""
    result = widened(fn)
    show(PASS_NAME, f"@{fn.name}", lambda: format_function(result))
    return result
