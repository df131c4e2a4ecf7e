"""MLIR export rules for the ops with regions (`generic`, `generic_scatter`, `for`,
`for_history`) and for `read`, which only appears inside a `generic` body.

Consumes an IR `Op` and its operand `Tensor`s; emits MLIR and returns the results. A
region's parameters are bound to MLIR values and its ops are exported in place (MLIR's
`linalg.generic` and `scf.for` bodies may use values from outside):

- `generic`: a `linalg.generic` over the output indices; each element runs the body once,
  or, with a reduction, inside an `scf.for` nest over the reduced indices.
- `read`: `memref.load`; `zero` and `checked` axes guard the load with `scf.if`, and a
  `checked` position outside its axis is reported through the status buffer.
- `generic_scatter`: an `scf.for` nest adding each yielded value at its yielded position.
- `for`: an `scf.for`. Scalar state travels in `iter_args`; each tensor state lives in
  one buffer that the body reads, and is overwritten with the body's results at the end
  of each iteration.
- `for_history`: the same, also copying the state into a row of each history buffer
  every `stride` iterations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import (
    INDEX_ERROR,
    LOWERINGS,
    all_of,
    generate,
    guarded_load,
    in_range,
    reduce_value,
)
from reverie.compiler.export.mlir_scalar import scalar_op
from reverie.compiler.export.mlir_writer import REGISTER, Tensor
from reverie.compiler.ir.core import Block, Op
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import ForHistoryOp, ForOp, GenericOp, GenericScatterOp, ReadOp

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter


def index_values(ex: Exporter, ivs: list[str], ranges: list[tuple[str, Dim, Dim]]) -> list[Tensor]:
    """The i64 values of index variables `lo + iv` for loop counters `ivs` counted from 0."""
    values = []
    for iv, (_, lo, _) in zip(ivs, ranges, strict=True):
        value = ex.w.to_i64(iv)
        if lo != Dim.const(0):
            value = ex.w.assign(f"arith.addi {value}, {ex.w.dim(lo)} : i64")
        values.append(Tensor(value, scalar("i64")))
    return values


def extents(ex: Exporter, ranges: list[tuple[str, Dim, Dim]]) -> list[str]:
    return [ex.w.extent(hi - lo) for _, lo, hi in ranges]


@LOWERINGS.register("generic")
def _generic(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    generic = GenericOp(op)
    indices, over, kind, body = generic.indices, generic.over, generic.reduce, generic.body
    dtype = op.result.type.dtype

    def run_body(outer: list[str], inner: list[str]) -> str:
        params = index_values(ex, outer + inner, indices + over)
        (value,) = ex.block(body, params + args)
        return value.ssa

    def element(outer: list[str]) -> str:
        if not kind:
            return run_body(outer, [])
        return reduce_value(ex.w, kind, dtype, extents(ex, over),
                            lambda inner: run_body(outer, inner))

    return [generate(ex.w, op.result.type, element)]


@LOWERINGS.register("read")
def _read(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w = ex.w
    tensor, *subscripts = args
    positions = [w.to_index(w.as_i64(s)) for s in subscripts]
    conditions = []
    read = ReadOp(op)
    for axis, (position, mode) in enumerate(zip(positions, read.modes, strict=True)):
        if mode == "direct":
            continue
        inside = in_range(w, position, w.extent(tensor.type.shape[axis]))
        if mode == "checked":
            value = w.to_i64(position)
            ex.fail_unless(inside, value, w.dim(tensor.type.shape[axis]),
                           INDEX_ERROR % (axis, read.label))
        conditions.append(inside)
    if not conditions:
        return [Tensor(w.load(tensor, positions), op.result.type)]
    return [Tensor(guarded_load(w, tensor, positions, all_of(w, conditions)), op.result.type)]


@LOWERINGS.register("generic_scatter")
def _generic_scatter(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """Zeros, plus each yielded value at its yielded position (positions in range only)."""
    w = ex.w
    result = op.result.type
    scatter = GenericScatterOp(op)
    ranges = scatter.ranges
    out = w.alloc(result)
    w.fill(out, w.typed_const(0, result.dtype))
    label = scatter.label

    def step(ivs: list[str], _: list[str]) -> list[str]:
        *positions, value = ex.block(scatter.body, index_values(ex, ivs, ranges) + args)
        targets, conditions = [], []
        for axis, (position, mode) in enumerate(zip(positions, scatter.modes, strict=True)):
            target = w.to_index(position.ssa)
            inside = in_range(w, target, w.extent(result.shape[axis]))
            if mode != "zero":
                ex.fail_unless(inside, position.ssa, w.dim(result.shape[axis]),
                               INDEX_ERROR % (axis, label))
            targets.append(target)
            conditions.append(inside)

        def accumulate() -> None:
            add = "or" if result.dtype == "bool" else "add"
            total = scalar_op(w, add, [w.load(out, targets), value.ssa], result.dtype)
            w.store(total, out, targets)

        w.if_then(all_of(w, conditions), accumulate)
        return []

    w.loop_nest(extents(ex, ranges), [], step)
    if result.rank:
        return [out]
    total = w.load(out, [])
    w.dealloc(out)
    return [Tensor(total, result)]


# ---------------------------------------------------------------- loops


def _history_rows(ex: Exporter, loop: ForHistoryOp, states: list[Tensor]) -> list[Tensor]:
    """Zero-filled history buffers `[rows, *state shape]`, one per carried state."""
    histories = []
    for state in states:
        history = ex.w.alloc(state.type.with_shape((loop.rows, *state.type.shape)))
        ex.w.fill(history, ex.w.typed_const(0, state.type.dtype))
        histories.append(history)
    return histories


def _save_row(ex: Exporter, loop: ForHistoryOp, t: str, lo: str, states: list[Tensor],
              histories: list[Tensor]) -> None:
    """At iterations lo + r * stride, copy every state into row r of its history."""
    w = ex.w
    stride = loop.stride
    offset = w.assign(f"arith.subi {t}, {lo} : i64")
    row = offset
    on_row = w.const(True, "i1")
    if stride != 1:
        remainder = w.assign(f"arith.remsi {offset}, {w.const(stride, 'i64')} : i64")
        on_row = w.assign(f"arith.cmpi eq, {remainder}, {w.const(0, 'i64')} : i64")
        row = w.assign(f"arith.divsi {offset}, {w.const(stride, 'i64')} : i64")
    rows = w.dim(loop.rows)
    fits = w.assign(f"arith.cmpi slt, {row}, {rows} : i64")
    no_save = w.assign(f"arith.xori {on_row}, {w.const(True, 'i1')} : i1")
    ex.fail_unless(w.assign(f"arith.ori {no_save}, {fits} : i1"), row, rows,
                   "for_history needs more than its {bound} rows")

    def save() -> None:
        position = w.to_index(row)
        for state, history in zip(states, histories, strict=True):
            sizes = [w.extent(d) for d in state.type.shape]

            def copy(ivs: list[str], _: list[str], state: Tensor = state,
                     history: Tensor = history) -> list[str]:
                w.store(w.load(state, ivs), history, [position, *ivs])
                return []

            w.loop_nest(sizes, [], copy)

    w.if_then(all_of(w, [on_row, fits]), save)


def carry_into_buffers(ex: Exporter, buffers: list[Tensor | None],
                       results: list[Tensor]) -> None:
    """Copy a loop body's results into the buffers that carry them to the next iteration
    (through a copy first where a result is not owned: it may alias a carried buffer)."""
    staged = [ex.copy(r) if b and not r.owned else r
              for b, r in zip(buffers, results, strict=True)]
    for buffer, value in zip(buffers, staged, strict=True):
        if buffer:
            ex.copy_into(value, buffer)
    ex.release(staged + results)


def _loop(ex: Exporter, op: Op, args: list[Tensor], with_history: bool) -> list[Tensor]:
    w = ex.w
    loop = ForOp(op)
    (lo, hi), initial, invariants = loop.split_operands(args)
    lo, hi = w.as_i64(lo), w.as_i64(hi)
    buffers = [ex.copy(t) if t.is_buffer else None for t in initial]
    histories = _history_rows(ex, ForHistoryOp(op), initial) if with_history else []
    scalar_inits = [(t.ssa, REGISTER[t.type.dtype]) for t in initial if not t.is_buffer]
    body: Block = loop.body

    def iteration(iv: str, carried_scalars: list[str]) -> list[str]:
        t = w.to_i64(iv)
        scalars = iter(carried_scalars)
        states = [Tensor(b.ssa, b.type, b.memref) if b else Tensor(next(scalars), init.type)
                  for b, init in zip(buffers, initial, strict=True)]
        if with_history:
            _save_row(ex, ForHistoryOp(op), t, lo, states, histories)
        results = ex.block(body, [Tensor(t, scalar("i64")), *states, *invariants])
        carry_into_buffers(ex, buffers, results)
        return [r.ssa for r in results if not r.is_buffer]

    finals = iter(w.scf_for(w.to_index(lo), w.to_index(hi), scalar_inits, iteration))
    states = [b if b else Tensor(next(finals), init.type)
              for b, init in zip(buffers, initial, strict=True)]
    return states + histories


@LOWERINGS.register("for")
def _for(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    return _loop(ex, op, args, with_history=False)


@LOWERINGS.register("for_history")
def _for_history(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    return _loop(ex, op, args, with_history=True)
