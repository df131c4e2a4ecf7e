"""Structured ops of the op table: index notation (`generic`, `read`) and loops (`for`).

`generic` is a loop nest with a scalar body, like MLIR's `linalg.generic`:

    %y = generic %x, %k {indices = [b in 0..B, i in 0..L], reduce = sum, over = [j in 0..K]}
      ^(%b: i64, %i: i64, %j: i64, %x1: f32[B, N], %k1: f32[K]) {
        %s = read %x1, %b, %t {modes = [direct, zero]} : f32
        ...
        yield %p : f32
      } : f32[B, L]

Its region is isolated: parameters are the index variables (output first, then reduction)
followed by one parameter per operand. `read` fetches one element; each axis has a mode:
`direct` (in range by construction), `zero` (out-of-range reads give 0) or `checked`
(out of range raises IndexError). `for` carries loop state:

    %u2 = for %lo, %hi, %u0, %w {carried = 1} ^(%t: i64, %u: f64[N], %w1: f64[N]) {...}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NotRequired

import numpy as np

from reverie.compiler.ir.attr_types import Label, Mode, Range, ReduceKind
from reverie.compiler.ir.op_defs import FUSED, ROOT, ROOT_WHEN_REDUCING, VJP, reduce_array, register
from reverie.compiler.ir.types import ShapeError, TensorType, scalar
from reverie.compiler.ir.views import ForOp, GenericOp, ReadOp, nest_ranges

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Block, Op


def _expect_params(block: Block, types: list[TensorType], what: str) -> None:
    got = [p.type for p in block.params]
    if got != types:
        raise ShapeError(f"{what} region parameters {list(map(str, got))} "
                         f"should be {list(map(str, types))}")


# ---------------------------------------------------------------- generic


def _infer_generic(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    if len(regions) != 1:
        raise ShapeError("generic needs exactly one region")
    (body,) = regions
    ranges = nest_ranges(attrs)
    _expect_params(body, [scalar("i64")] * len(ranges) + list(ops), "generic")
    if len(body.results) != 1 or body.results[0].type.rank != 0:
        raise ShapeError("a generic body must yield one scalar")
    dtype = body.results[0].type.dtype
    if attrs.get("reduce") and dtype == "bool":
        raise ShapeError(f"cannot {attrs['reduce']}-reduce bool values")
    return [TensorType(dtype, tuple(hi - lo for _, lo, hi in attrs["indices"]))]


def _eval_generic(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """Evaluate the body once on broadcast index grids, then reduce the trailing axes."""
    generic = GenericOp(op)
    ranges = [(lo.evaluate(ctx.dims), hi.evaluate(ctx.dims)) for _, lo, hi in generic.ranges]
    rank = len(ranges)
    grids = []
    for axis, (lo, hi) in enumerate(ranges):
        shape = [1] * rank
        shape[axis] = max(hi - lo, 0)
        grids.append(np.arange(lo, max(hi, lo), dtype=np.int64).reshape(shape))
    (value,) = ctx.run_block(generic.body, grids + list(args))
    full = tuple(max(hi - lo, 0) for lo, hi in ranges)
    value = np.broadcast_to(value, full)
    if not generic.reduce:
        return [value]
    return [reduce_array(generic.reduce, value, tuple(range(len(generic.indices), rank)))]


register("generic", "structured", _infer_generic, _eval_generic,
         "A loop nest over index ranges with a scalar body and an optional reduction "
         "(index notation): `%y = generic %a, %b {indices = [i in 0..N, j in 0..M], "
         "reduce = sum, over = [k in 0..K]} ^(...) {...} : f32[N, M]`.",
         attrs={"indices": Sequence[Range], "reduce": NotRequired[ReduceKind],
                "over": NotRequired[Sequence[Range]]},
         fusion=ROOT_WHEN_REDUCING)


def _infer_read(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    if not ops:
        raise ShapeError("read needs a tensor operand")
    tensor, indices = ops[0], ops[1:]
    if len(indices) != tensor.rank:
        raise ShapeError(f"{tensor} needs {tensor.rank} subscripts, got {len(indices)}")
    if any(t.rank or not t.is_int for t in indices):
        raise ShapeError("subscripts in index notation must be integer scalars")
    if len(attrs["modes"]) != tensor.rank:
        raise ShapeError("read needs one mode per axis")
    return [scalar(tensor.dtype)]


def _eval_read(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    tensor, indices = args[0], [np.asarray(i, dtype=np.int64) for i in args[1:]]
    read = ReadOp(op)
    valid: np.ndarray | bool = True
    clipped = []
    for axis, (index, mode) in enumerate(zip(indices, read.modes, strict=True)):
        size = tensor.shape[axis]
        inside = (index >= 0) & (index < size)
        if mode == "checked" and not np.all(inside):
            bad = int(index[~inside].flat[0]) if np.ndim(index) else int(index)
            raise IndexError(f"index {bad} is out of bounds for axis {axis} of "
                             f"'{read.label}' with size {size}")
        if mode == "zero":
            valid = valid & inside
        clipped.append(np.clip(index, 0, max(size - 1, 0)))
    if tensor.size == 0:
        return [np.zeros(np.broadcast_shapes(*(i.shape for i in indices)), tensor.dtype)]
    value = tensor[tuple(clipped)] if clipped else tensor
    return [np.where(valid, value, np.zeros((), tensor.dtype))]


register("read", "structured", _infer_read, _eval_read,
         "One element of a tensor inside a generic body: "
         "`%v = read %x, %i, %j {modes = [direct, zero]} : f32`.",
         attrs={"modes": Sequence[Mode], "label": Label}, fusion=FUSED,
         exempt={VJP: "reverse mode transposes it with its generic body, never alone"})


# ---------------------------------------------------------------- for


def _infer_for(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    carried = attrs["carried"]
    if len(ops) < 2 + carried:
        raise ShapeError("for needs bounds and its initial state")
    lo, hi = ops[0], ops[1]
    if lo.rank or hi.rank or not (lo.is_int and hi.is_int):
        raise ShapeError("loop bounds must be integer scalars")
    (body,) = regions
    state = list(ops[2:2 + carried])
    _expect_params(body, [scalar("i64")] + list(ops[2:]), "for")
    if [v.type for v in body.results] != state:
        raise ShapeError(f"a loop body must yield its state types {list(map(str, state))}")
    return state


def _eval_for(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    loop = ForOp(op)
    (lo, hi), state, invariants = loop.split_operands(args)
    for t in range(int(lo), int(hi)):
        state = ctx.run_block(loop.body, [np.int64(t)] + state + invariants)
    return state


register("for", "control", _infer_for, _eval_for,
         "A counted loop carrying state: `%u = for %lo, %hi, %u0 {carried = 1} "
         "^(%t: i64, %u1: f64[N]) {... yield %u2} : f64[N]`.", attrs={"carried": int},
         fusion=ROOT)

