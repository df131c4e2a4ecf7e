"""Hoisting: expensive work in a `generic` body that uses only some of the generic's
indices moves into a `generic` of its own over just those indices; the body reads it back.

Contract: `hoist_function(fn)` returns a function computing bitwise the same values as
`fn` (every op applies to the same operands as before; an expensive one is evaluated once
per point of its own indices instead of once per point of the loop nest), or `fn` itself
when nothing is hoisted. `fn` is never modified. (Native code sums a reduction with
reassociable adds, and LLVM picks their vector order from the loop body, which hoisting
changes: a reducing nest may round differently there.) It runs on the function a back end
is given, after every transform (pipeline stage `fuse`, after `contract`; stage `mlir`;
the `interp` backend), so reverse and forward mode differentiate the program as written;
REVERIE_PRINT_IR pass `hoist`.

A value of a body is hoisted when it is
- expensive: a math-library function of the op table (`math`, not `cheap`: exp, log,
  tanh, sin, pow, erf, ...), and
- reads a strict, non-empty subset S of the generic's indices (output and reduction
  indices alike), following its operands back to index variables, and
- safe to evaluate at points the loop nest might not reach (when another index's range
  is empty): nothing it depends on is a `checked` read (which raises IndexError) or has
  regions.

Its whole dependency cone is copied into a new `generic` over the ranges of S (in the loop
nest's order), and the body reads the result at those indices, less each range's start:

    %y = generic %s, %x {indices = [n in 0..N, k in 0..K]} (%n: i64, %k: i64, %s1: f64[K],
                                                             %x1: f64[N, K]) {
      %1 = read %s1, %k {modes = [direct]} : f64
      %2 = exp %1 : f64
      %3 = read %x1, %n, %k {modes = [direct, direct]} : f64
      %4 = mul %2, %3 : f64
      yield %4
    } : f64[N, K]
becomes
    %exp = generic %s {indices = [k in 0..K]} (%k: i64, %s1: f64[K]) {
      %1 = read %s1, %k {modes = [direct]} : f64
      %2 = exp %1 : f64
      yield %2
    } : f64[K]
    %y = generic %x, %exp {indices = [n in 0..N, k in 0..K]} (..., %x1: f64[N, K],
                                                                %exp_1: f64[K]) {
      %2 = read %exp_1, %k {modes = [direct]} : f64
      ...

Values are taken last first (so `log(exp(a[k]))` moves as one), and repeatedly until none
is left; each new generic is hoisted from in turn (`log(exp(a[k]) * b[j])` in a nest over
[n, k, j] moves to a nest over [k, j], and `exp(a[k])` from there to one over [k]).
Operands the body no longer reads are dropped. Two hoisted generics of one block with the
same operands, ranges (in the same order) and body are one (W8's three loop nests over
[n, k, j] share one `exp(s[k, j])` over [k, j]). Only generics directly in a block are
rewritten (bodies of `for`, `while` and `if` included); `generic_scatter` bodies are left
as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from reverie.compiler.ir.attr_types import Range
from reverie.compiler.ir.core import Block, Builder, Function, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.scope import copy_block
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.views import GenericOp, nest_ranges
from reverie.compiler.print_ir import show
from reverie.dsl.span import Span

PASS_NAME = "hoist"


def hoist_function(fn: Function) -> Function:
    """`fn` with its generics' expensive partial-index work hoisted (itself if none)."""
    if not any(_has_candidate(op) for op in fn.body.walk()):
        show(PASS_NAME, f"@{fn.name}", lambda: format_function(fn))
        return fn
    hoisted = fn.derive(fn.name, _rewrite_block(fn.body))
    show(PASS_NAME, f"@{fn.name}", lambda: format_function(hoisted))
    return hoisted


def is_expensive(op: Op) -> bool:
    """Whether `op` is a math-library function of the op table (not a one-instruction op)."""
    row = OPS[op.name].elementwise
    return row is not None and row.math and not OPS[op.name].cheap


# ---------------------------------------------------------------- finding what to hoist


def _last_candidate(body: Block, rank: int) -> Value | None:
    """The last expensive value of a loop-nest body over `rank` indices that reads a
    strict, non-empty subset of them and is safe to evaluate anywhere in their ranges."""
    uses = _index_uses(body, rank)
    safe: dict[Value, bool] = dict.fromkeys(body.params, True)
    last = None
    for op in body.ops:
        ok = not op.regions and not _is_checked_read(op) and all(safe[v] for v in op.operands)
        safe.update(dict.fromkeys(op.results, ok))
        if ok and is_expensive(op) and 0 < len(uses[op.results[0]]) < rank:
            last = op.results[0]
    return last


def _index_uses(body: Block, rank: int) -> dict[Value, frozenset[int]]:
    """For every value of the body, the positions of the index variables it depends on."""
    uses = {p: frozenset([i] if i < rank else []) for i, p in enumerate(body.params)}
    for op in body.ops:
        used = frozenset().union(*(uses[v] for v in op.operands))
        uses.update(dict.fromkeys(op.results, used))
    return uses


def _is_checked_read(op: Op) -> bool:
    return op.name == "read" and "checked" in op.attrs["modes"]


def _has_candidate(op: Op) -> bool:
    return op.name == "generic" and _last_candidate(
        op.regions[0], len(GenericOp(op).ranges)) is not None


# ---------------------------------------------------------------- rewriting


class _BlockBuilder:
    """A block being rebuilt: ops appended in order, and the hoisted generics it already
    holds, by structure (so identical ones are emitted once)."""

    def __init__(self, block: Block) -> None:
        self.block = block
        self.hoisted: dict[tuple, Value] = {}

    def emit(self, op: Op, operands: list[Value], regions: list[Block]) -> list[Value]:
        """A copy of `op` on `operands` with `regions`; its results keep their names."""
        results = Builder(self.block, op.span).emit(op.name, operands, dict(op.attrs),
                                                    regions)
        for new, old in zip(results, op.results, strict=True):
            new.name = old.name
        return results

    def generic(self, attrs: dict, operands: list[Value], body: Block, name: str | None,
                span: Span | None) -> Value:
        """Emit a generic (result hint `name`) with its candidates hoisted into generics
        emitted before it; its result. `body` is the rebuilt block's own, edited here."""
        ranges = nest_ranges(attrs)
        operands = list(operands)
        while (value := _last_candidate(body, len(ranges))) is not None:
            positions = sorted(_index_uses(body, len(ranges))[value])
            tensor = self._hoisted(ranges, positions, body, operands, value)
            _read_back(body, operands, ranges, positions, value, tensor)
            _remove_dead(body, len(ranges), operands)
        result = Builder(self.block, span).op("generic", operands, attrs, [body])
        result.name = name
        return result

    def _hoisted(self, ranges: list[Range], positions: list[int], body: Block,
                 operands: list[Value], value: Value) -> Value:
        """The generic over `ranges[positions]` computing `value` from its dependency cone
        (emitted, and hoisted from in turn, unless an identical one is already here)."""
        cone = _cone(body, value)
        read = [i for i in range(len(ranges), len(body.params)) if body.params[i] in cone.params]
        old_params = [body.params[i] for i in positions + read]
        params = [Value(p.type, name=p.name) for p in old_params]
        block = Block(params=params)
        values = dict(zip(old_params, params, strict=True))
        builder = Builder(block)
        for op in cone.ops:
            new = builder.emit(op.name, [values[v] for v in op.operands], dict(op.attrs))
            values.update(zip(op.results, new, strict=True))
        block.results = [values[value]]
        tensor_operands = [operands[i - len(ranges)] for i in read]
        indices = [ranges[i] for i in positions]
        key = (tuple(map(id, tensor_operands)), tuple((lo, hi) for _, lo, hi in indices),
               _structure(block))
        if key not in self.hoisted:
            self.hoisted[key] = self.generic({"indices": indices}, tensor_operands, block,
                                             value.op.name, value.op.span)
        return self.hoisted[key]


def _rewrite_block(block: Block) -> Block:
    """A copy of `block` in which every generic has been hoisted from (regions too)."""
    params = [Value(p.type, name=p.name) for p in block.params]
    out = _BlockBuilder(Block(params=params))
    values = dict(zip(block.params, params, strict=True))
    for op in block.ops:
        operands = [values[v] for v in op.operands]
        if op.name == "generic":
            results = [out.generic(dict(op.attrs), operands, copy_block(op.regions[0]),
                                   op.result.name, op.span)]
        else:
            results = out.emit(op, operands, [_rewrite_block(r) for r in op.regions])
        values.update(zip(op.results, results, strict=True))
    out.block.results = [values[v] for v in block.results]
    return out.block


class _Cone:
    """The ops of a body that one value depends on (in body order), and the body
    parameters they read."""

    def __init__(self, ops: list[Op], params: set[Value]) -> None:
        self.ops = ops
        self.params = params


def _cone(body: Block, value: Value) -> _Cone:
    needed = {value}
    ops = []
    for op in reversed(body.ops):
        if any(r in needed for r in op.results):
            ops.append(op)
            needed.update(op.operands)
    return _Cone(ops[::-1], needed & set(body.params))


def _structure(block: Block) -> tuple:
    """A hashable form of a region: each op's name, attributes and operand positions."""
    position = {v: ("param", i) for i, v in enumerate(block.params)}
    ops = []
    for k, op in enumerate(block.ops):
        ops.append((op.name, repr(sorted(op.attrs.items())),
                    tuple(position[v] for v in op.operands)))
        position.update({r: ("op", k, j) for j, r in enumerate(op.results)})
    return (tuple(str(p.type) for p in block.params), tuple(ops),
            tuple(position[v] for v in block.results))


def _read_back(body: Block, operands: list[Value], ranges: list[Range],
               positions: Sequence[int], value: Value, tensor: Value) -> None:
    """Replace `value` in `body` by a read of `tensor` (a new operand unless it is one
    already) at the index variables `positions`, each less its range's start."""
    if tensor in operands:
        param = body.params[len(ranges) + operands.index(tensor)]
    else:
        param = Value(tensor.type, name=tensor.name)
        body.params.append(param)
        operands.append(tensor)
    scratch = Block()
    builder = Builder(scratch, value.op.span)
    subscripts = []
    for i in positions:
        index, lo = body.params[i], ranges[i][1]
        if lo != Dim.const(0):
            index = builder.op("sub", [index, builder.op("dim", [], {"dim": lo})])
        subscripts.append(index)
    read = builder.op("read", [param, *subscripts],
                      {"modes": ("direct",) * len(positions), "label": tensor.name})
    at = body.ops.index(value.op)
    body.ops[at:at] = scratch.ops
    for op in body.ops[at + len(scratch.ops):]:
        op.operands = [read if v is value else v for v in op.operands]
    body.results = [read if v is value else v for v in body.results]


def _remove_dead(body: Block, rank: int, operands: list[Value]) -> None:
    """Drop the body's unused ops, then the operands (and parameters) it no longer reads."""
    live = set(body.results)
    kept = []
    for op in reversed(body.ops):
        if any(r in live for r in op.results):
            kept.append(op)
            live.update(op.operands)
    body.ops = kept[::-1]
    keep = [i for i in range(rank, len(body.params)) if body.params[i] in live]
    operands[:] = [operands[i - rank] for i in keep]
    body.params = body.params[:rank] + [body.params[i] for i in keep]
