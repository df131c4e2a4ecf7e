"""Storage types made explicit: every op on bf16/f16 values computes in f32 and rounds.

bf16 and f16 are storage types (docs/language.md §2): an op reads them as f32 and rounds
each result back, as torch and JAX do. The reference interpreter applies that rule to every
op as it runs (`ir/tensor_interpreter.py`); the back ends get it written out by this pass,
so they compute only in the types they already know and meet bf16/f16 only in `cast`,
`const`, loads and stores:

    %0 = mul %x, %y : bf16[N]             %0 = cast %x {dtype = f32} : f32[N]
    %1 = exp %0 : bf16[N]          →      %1 = cast %y {dtype = f32} : f32[N]
                                          %2 = mul %0, %1 : f32[N]
                                          %3 = cast %2 {dtype = bf16} : bf16[N]
                                          %4 = cast %3 {dtype = f32} : f32[N]
                                          %5 = exp %4 : f32[N]
                                          %6 = cast %5 {dtype = bf16} : bf16[N]

The round trip `%3`, `%4` is the rounding of the product (fusion keeps it in registers), so
results do not depend on how the back end fuses. Reductions and matrix products on the
widened operands accumulate in f32 (or wider) and round once.

Contract: `widen_storage(fn)` computes bitwise what the interpreter computes for `fn`; `fn`
is never modified, and returned as it is when it has no bf16/f16 operand. Ops kept as they
are: those that only move values, exactly (`cast`, constants, `read`, `select`, shape ops,
broadcasts), and ops with regions (`for`, `while`, `if`, `generic`: their carried values
keep their types; the ops in their regions are rewritten). It runs first in the back ends' stages
(`fuse`, `mlir`), after every transform, so gradients are built on the program as written
(adjoints typed like their primals); REVERIE_PRINT_IR pass `widen_storage`.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Block, Builder, Function, Op, Value
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.print_ir import show

PASS_NAME = "widen_storage"

MOVING_KINDS = ("shape", "broadcast", "constant")
MOVING_OPS = ("cast", "read", "select", "stop_gradient")


def _stored(value: Value) -> bool:
    return value.type.dtype in STORAGE_DTYPES


def _computes(op: Op) -> bool:
    """Whether `op` computes on bf16/f16 operands (rather than moving them exactly)."""
    return not op.regions and op.name not in MOVING_OPS and \
        OPS[op.name].kind not in MOVING_KINDS


class _Widener:
    """Rewrites one block into a new one, mapping its values to their rewritten ones."""

    def __init__(self, block: Block) -> None:
        self.values: dict[Value, Value] = {p: p for p in block.params}
        self.widened: dict[Value, Value] = {}
        self.block = Block(list(block.params))

    def rewrite(self, block: Block) -> Block:
        for op in block.ops:
            self.op(op)
        self.block.results = [self.values[v] for v in block.results]
        return self.block

    def op(self, op: Op) -> None:
        operands = [self.values[v] for v in op.operands]
        builder = Builder(self.block, op.span)
        if not _computes(op) or not any(_stored(v) for v in operands):
            regions = [widen_block(region) for region in op.regions]
            copy = Op(op.name, operands, dict(op.attrs), regions=regions, span=op.span)
            copy.results = [Value(r.type, copy, r.index) for r in op.results]
            self.block.ops.append(copy)
            self.values.update(zip(op.results, copy.results, strict=True))
            return
        wide = builder.emit(op.name, [self.f32(v, builder) for v in operands], op.attrs)
        for old, new in zip(op.results, wide, strict=True):
            if new.type != old.type:  # an f32 result where the op made bf16/f16: round it
                new = builder.op("cast", [new], {"dtype": old.type.dtype})
                assert new.type == old.type, f"{op.name}: {new.type} is not {old.type}"
            self.values[old] = new

    def f32(self, value: Value, builder: Builder) -> Value:
        """`value` read as f32: a bf16/f16 value widened (once per block), else itself."""
        if not _stored(value):
            return value
        if value not in self.widened:
            self.widened[value] = builder.op("cast", [value], {"dtype": "f32"})
        return self.widened[value]


def widen_block(block: Block) -> Block:
    """`block` with every op on bf16/f16 operands computing in f32 (a new block)."""
    return _Widener(block).rewrite(block)


def widen_storage(fn: Function) -> Function:
    """`fn` with its bf16/f16 arithmetic written as f32 arithmetic and rounding casts."""
    stored = any(_stored(v) for op in fn.body.walk() for v in op.operands)
    widened = fn.derive(fn.name, widen_block(fn.body)) if stored else fn
    show(PASS_NAME, f"@{fn.name}", lambda: format_function(widened))
    return widened
