"""Ops that only reverse mode creates: `generic_scatter` (scatter-add), `for_history` and
`trip_dim`.

`generic_scatter` is the adjoint of a `read` that is not a plain permutation of the loop
indices (a gather with an integer tensor, a stencil `x[i + j - 1]`, a diagonal `A[i, i]`).
It runs a loop nest like `generic`, but its body yields a position as well as a value, and
the values are added into a zero tensor at those positions:

    %xb = generic_scatter %yb, %k {shape = [N], indices = [i in 0..N, j in 0..K],
                                   modes = [zero]} (%i: i64, %j: i64, %yb1: f64[N], %k1: f64[K]) {
      %p = ...                                   # the position i + j - 1
      %v = ...                                   # the value ȳ[i] * k[j]
      yield %p, %v
    } : f64[N]

`modes` has one entry per axis of `shape`, with the meaning they have on `read`: `zero`
drops a write whose position is out of range (the read it came from gave 0), `direct` and
`checked` positions are in range by construction (a checked gather already ran forward);
out-of-range positions there raise IndexError rather than write outside the result.
Several points may write the same position; their values are summed (in any order, so
float results may differ from the reference interpreter's in the last bits).

`for_history` is a `for` loop that also returns the states it passed through, for the
reverse sweep. It has the operands, region and `carried` attribute of `for`; its results
are the final states followed by one history per carried state:

    %h, %hs = for_history %lo, %hi, %h0, %W {carried = 1, rows = T, stride = 1}
              (%t: i64, %h1: f64[H], %W1: f64[H, H]) {...} : f64[H], f64[T, H]

Row `r` of a history holds the state at the start of iteration `lo + r * stride`, for every
such iteration before `hi`; rows past those are zero. `rows` (a Dim) is the capacity:
needing more rows than that raises IndexError. `stride = 1` stores every state;
checkpointing stores one state every `stride` iterations.

`trip_dim` gives a run-time trip count T (an i64 scalar, T ≥ 0) a dimension that a history
can be sized by, a trip dimension of `capacity.py`; its result is T, and it fails with
`CapacityError` (the caller retries with more capacity) unless T ≤ the dimension:

    %n1 = trip_dim %n {dim = #T0} : i64
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import Label, Mode, Range
from reverie.compiler.ir.capacity import CapacityError
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.op_defs import JVP, OPS, ROOT, VJP, expect_arity, register
from reverie.compiler.ir.types import ShapeError, TensorType, scalar
from reverie.compiler.ir.views import ForHistoryOp, GenericScatterOp

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op


# ---------------------------------------------------------------- generic_scatter


def _infer_generic_scatter(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    if len(regions) != 1:
        raise ShapeError("generic_scatter needs exactly one region")
    (body,) = regions
    shape, ranges, modes = tuple(attrs["shape"]), attrs["indices"], attrs["modes"]
    want = [scalar("i64")] * len(ranges) + list(ops)
    if [p.type for p in body.params] != want:
        raise ShapeError("generic_scatter region parameters must be the indices, then one "
                         "per operand")
    if len(modes) != len(shape):
        raise ShapeError("generic_scatter needs one mode per result axis")
    yielded = [v.type for v in body.results]
    if len(yielded) != len(shape) + 1 or any(t != scalar("i64") for t in yielded[:-1]):
        raise ShapeError(f"a generic_scatter body must yield {len(shape)} i64 position(s) "
                         "and one scalar value")
    if yielded[-1].rank:
        raise ShapeError("a generic_scatter body must yield a scalar value")
    return [TensorType(yielded[-1].dtype, shape)]


def _eval_generic_scatter(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    """Evaluate the body on broadcast index grids, then `np.add.at` the values in range."""
    scatter = GenericScatterOp(op)
    ranges = [(lo.evaluate(ctx.dims), hi.evaluate(ctx.dims)) for _, lo, hi in scatter.ranges]
    grids = []
    for axis, (lo, hi) in enumerate(ranges):
        shape = [1] * len(ranges)
        shape[axis] = max(hi - lo, 0)
        grids.append(np.arange(lo, max(hi, lo), dtype=np.int64).reshape(shape))
    *positions, value = ctx.run_block(scatter.body, grids + list(args))
    full = tuple(max(hi - lo, 0) for lo, hi in ranges)
    out_shape = tuple(d.evaluate(ctx.dims) for d in scatter.shape)
    out = np.zeros(out_shape, dtype=np.asarray(value).dtype)
    value = np.broadcast_to(value, full).ravel()
    positions = [np.broadcast_to(p, full).ravel() for p in positions]
    keep = np.ones(value.shape, dtype=bool)
    for axis, (position, mode) in enumerate(zip(positions, scatter.modes, strict=True)):
        inside = (position >= 0) & (position < out_shape[axis])
        if mode != "zero" and not np.all(inside):
            bad = int(position[~inside][0])
            raise IndexError(f"index {bad} is out of bounds for axis {axis} of "
                             f"'{scatter.label}' with size {out_shape[axis]}")
        keep &= inside
    np.add.at(out, tuple(p[keep] for p in positions), value[keep])
    return [out]


register("generic_scatter", "structured", _infer_generic_scatter, _eval_generic_scatter,
         "Scatter-add over a loop nest (the adjoint of a gather or stencil read): "
         "`%xb = generic_scatter %yb {shape = [N], indices = [i in 0..N], modes = [zero]} "
         "^(...) {... yield %pos, %val} : f64[N]`.",
         attrs={"shape": Sequence[Dim], "indices": Sequence[Range], "modes": Sequence[Mode],
                "label": Label},
         fusion=ROOT)


# ---------------------------------------------------------------- for_history


def _infer_for_history(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    if attrs["stride"] < 1:
        raise ShapeError("for_history needs a positive stride")
    states = OPS["for"].infer(ops, attrs, regions)
    rows = attrs["rows"]
    return states + [s.with_shape((rows, *s.shape)) for s in states]


def _eval_for_history(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    loop = ForHistoryOp(op)
    stride, rows = loop.stride, loop.rows.evaluate(ctx.dims)
    (lo, hi), state, invariants = loop.split_operands(args)
    lo, hi = int(lo), int(hi)
    histories = [np.zeros((max(rows, 0), *np.shape(s)), dtype=np.asarray(s).dtype) for s in state]
    for t in range(lo, hi):
        if (t - lo) % stride == 0:
            row = (t - lo) // stride
            if row >= rows:
                raise IndexError(f"for_history needs more than its {rows} rows")
            for history, s in zip(histories, state, strict=True):
                history[row] = s
        state = ctx.run_block(loop.body, [np.int64(t)] + state + invariants)
    return state + histories


register("for_history", "control", _infer_for_history, _eval_for_history,
         "A `for` loop that also returns its states, one row every `stride` iterations: "
         "`%u, %us = for_history %lo, %hi, %u0 {carried = 1, rows = T, stride = 1} "
         "^(%t: i64, %u1: f64[N]) {...} : f64[N], f64[T, N]`.",
         attrs={"carried": int, "rows": Dim, "stride": int}, fusion=ROOT)


# ---------------------------------------------------------------- trip_dim


def _infer_trip_dim(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("trip_dim", ops, 1)
    if ops[0] != scalar("i64"):
        raise ShapeError(f"trip_dim takes an i64 scalar count, got {ops[0]}")
    if len(attrs["dim"].symbols()) != 1 or attrs["dim"] != Dim.sym(*attrs["dim"].symbols()):
        raise ShapeError(f"trip_dim needs one dimension name, got {attrs['dim']}")
    return [scalar("i64")]


def _eval_trip_dim(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    dim: Dim = op.attrs["dim"]
    count, capacity = int(args[0]), dim.evaluate(ctx.dims)
    if count > capacity:
        raise CapacityError(str(dim), count)
    return [np.array(count, dtype=np.int64)]


_INTEGER = "an integer count carries no derivative"
register("trip_dim", "control", _infer_trip_dim, _eval_trip_dim,
         "A run-time trip count given a dimension to size a history by (`capacity.py`): "
         "`%n1 = trip_dim %n {dim = #T0} : i64` is %n, checked to be at most #T0.",
         attrs={"dim": Dim}, exempt={VJP: _INTEGER, JVP: _INTEGER}, fusion=ROOT)
