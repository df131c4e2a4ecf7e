"""Lowering of `for` and `for_history` loops (loop-carried tensors) to a `ForLoop`.

Each carried state gets two workspace buffers. The initial state is copied (fused) into
the first; inside the loop the body reads `s.cur` and its results are written straight into
`s.next`; the pointers swap after every iteration, so `s.cur` holds the result when the loop
ends (also after zero iterations). `for_history` also copies the state into row
`(t - lo) // stride` of each history at the start of every `stride`-th iteration, and zeroes
the rows no iteration reached.

    for %i1 in 0..200 carry s0.cur/s0.next in (t0, t1) {
      ... store s0.next[%i6] = %14
      swap s0.cur <-> s0.next
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.views import ForHistoryOp, ForOp

from .emitter import Binding, Emitter, zero
from .ir import Buffer, ForLoop, If, LoopState, Store, View

if TYPE_CHECKING:
    from reverie.compiler.transforms.to_loops import BlockLowering


def lower_for(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """A `for` or `for_history` op."""
    ctx, loop = lowering.ctx, ForOp(op)
    lo = em.index(lowering.scalar(loop.lo, em))
    hi = em.index(lowering.scalar(loop.hi, em))
    states = []
    for init in loop.inits:
        dtype, shape = init.type.dtype, init.type.shape
        first, second = ctx.temp(dtype, shape), ctx.temp(dtype, shape)
        name = ctx.fresh("s")
        states.append(LoopState(Buffer(f"{name}.cur", dtype, shape, "state"),
                                Buffer(f"{name}.next", dtype, shape, "state"), first, second))
        em.map_nest(View.of(first), lambda index, body, v=init: lowering.eval.at(v, index, body))
    var = ctx.fresh("%i")
    body = Emitter(ctx, [])
    histories = [lowering.buffer_for(r) for r in loop.histories]
    if histories:
        _record_history(ForHistoryOp(op), Dim.sym(var) - lo, states, histories, body)
    block: Block = loop.body
    env: dict[Value, Binding] = {loop.index_param: Dim.sym(var)}
    for param, state in zip(loop.state_params, states, strict=True):
        current = View.of(state.current)
        env[param] = current if param.type.rank else body.load(current, ())
    for param, outer in zip(loop.invariant_params, loop.invariants, strict=True):
        env[param] = lowering.env[outer] if outer in lowering.env else \
            lowering.scalar(outer, em)
    lowering.nested(env).lower(block, [s.next for s in states], body)
    em.stmts.append(ForLoop(var, lo, hi, states, body.stmts))
    for result, state in zip(loop.final_states, states, strict=True):
        current = View.of(state.current)
        lowering.env[result] = current if result.type.rank else em.load(current, ())
    if histories:
        _clear_unused_rows(ForHistoryOp(op).stride, hi - lo, histories, em)
        lowering.env.update(zip(loop.histories, histories, strict=True))


def _record_history(loop: ForHistoryOp, step: Dim, states: list[LoopState],
                    histories: list[View], body: Emitter) -> None:
    """Copy each state into row (t - lo) // stride of its history on every `stride`-th
    iteration (IndexError when that row is past `rows`)."""
    stride = loop.stride
    if stride != 1:
        remainder = body.let("mod", (step, Dim.const(stride)), "i64")
        conditional = If(body.let("eq", (remainder, Dim.const(0)), "bool"))
        body.stmts.append(conditional)
        body = Emitter(body.ctx, conditional.body)
    row = step // stride
    body.check(row, loop.rows, body.ctx.site("rows", loop.op.name))
    for state, history in zip(states, histories, strict=True):
        current = View.of(state.current)
        index, inner = body.nest([(Dim.const(0), d) for d in current.shape])
        inner.stmts.append(Store(history, (row, *index), inner.load(current, index)))


def _clear_unused_rows(stride: int, span: Dim, histories: list[View], em: Emitter) -> None:
    """Zero the history rows no iteration reached (one row every `stride` iterations)."""
    used = Dim.sym(em.let("maximum", ((span + stride - 1) // stride, Dim.const(0)), "i64").name)
    for history in histories:
        ranges = [(Dim.const(0), d) for d in history.shape]
        ranges[0] = (used, history.shape[0])
        index, inner = em.nest(ranges)
        inner.stmts.append(Store(history, index, zero(history.buffer.dtype)))
