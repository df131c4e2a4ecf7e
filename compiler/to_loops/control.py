"""Lowering of `for`/`for_history` loops to a `ForLoop`, `while` to a `WhileLoop`, `if` to `If`s.

Each carried state gets two workspace buffers. The initial state is copied (fused) into
the first; inside the loop the body reads `s.cur` and its results are written straight into
`s.next`; the pointers swap after every iteration, so `s.cur` holds the result when the loop
ends (also after zero iterations). `for_history` also copies the state into row
`(t - lo) // stride` of each history at the start of every `stride`-th iteration, and zeroes
the rows no iteration reached. A state that only adds a scattered row to itself (the
adjoint of `xs[t]` in a reverse sweep) lives in one temporary instead (`accumulate.py`).

    for %i1 in 0..200 carry s0.cur/s0.next in (t0, t1) {
      ... store s0.next[%i6] = %14
      swap s0.cur <-> s0.next
    }

A `while` carries its states the same way in a `WhileLoop`: each iteration computes the
condition region into a bool temporary, leaves unless it holds, checks the iteration count
against the op's `limit` (error site `iterations`: a RuntimeError), then runs the body. An
`if` writes each state into a temporary of its own from one of two `If`s (the condition and
its negation), which keeps the states it reads and the ones it writes apart. A `trip_dim`
is its count after a check that the count fits its trip dimension (error site `capacity`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.views import ForHistoryOp, ForOp, IfOp, WhileOp
from reverie.compiler.loops.ir import (
    Buffer,
    Const,
    ExitUnless,
    ForLoop,
    If,
    LoopState,
    Store,
    Var,
    View,
    WhileLoop,
    as_index,
)
from reverie.compiler.to_loops.accumulate import Accumulators
from reverie.compiler.to_loops.emitter import Binding, Emitter, zero

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering


def lower_for(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """A `for` or `for_history` op."""
    ctx, loop = lowering.ctx, ForOp(op)
    lo = em.index(lowering.scalar(loop.lo, em))
    hi = em.index(lowering.scalar(loop.hi, em))
    accumulators = Accumulators(lowering, op, em)  # states updated one row in place
    states = _carried_states(lowering, accumulators.carried(loop.inits), em)
    var = ctx.fresh("%i")
    body = Emitter(ctx, [])
    histories = [lowering.buffer_for(r) for r in loop.histories]
    if histories:
        _record_history(ForHistoryOp(op), Dim.sym(var) - lo, states, histories, body)
    block: Block = loop.body
    env = _state_env(accumulators.carried(loop.state_params), states, body)
    env[loop.index_param] = Dim.sym(var)
    env.update(_outer_env(lowering, loop.invariant_params, loop.invariants, em))
    accumulators.lower_body(lowering.nested(env), block, [s.next for s in states], body)
    em.stmts.append(ForLoop(var, lo, hi, states, body.stmts))
    _bind_final_states(lowering, accumulators.carried(loop.final_states), states, em)
    accumulators.bind_results(lowering, loop.final_states)
    if histories:
        _clear_unused_rows(ForHistoryOp(op).stride, hi - lo, histories, em)
        lowering.env.update(zip(loop.histories, histories, strict=True))


def lower_while(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """A `while` op: a `WhileLoop` that leaves when its condition region yields false."""
    ctx, loop = lowering.ctx, WhileOp(op)
    states = _carried_states(lowering, loop.inits, em)
    var = ctx.fresh("%i")
    body = Emitter(ctx, [])
    outer = _outer_env(lowering, loop.split(loop.body.params)[1], loop.invariants, em)
    condition = ctx.temp("bool", ())
    count = ctx.temp("i64", ()) if loop.counted else None
    for region, targets in ((loop.before, [condition]), (loop.body, [s.next for s in states])):
        params, invariant_params = loop.split(region.params)
        env = _state_env(params, states, body)
        env.update(zip(invariant_params, outer.values(), strict=True))
        lowering.nested(env).lower(region, targets, body)
        if region is loop.before:
            if count is not None:
                body.stmts.append(Store(View.of(count), (), Dim.sym(var)))
            body.stmts.append(ExitUnless(body.load(View.of(condition), ())))
            body.check(Dim.sym(var), Dim.const(loop.limit), ctx.site("iterations", "while"))
    em.stmts.append(WhileLoop(var, states, body.stmts))
    _bind_final_states(lowering, loop.final_states, states, em)
    if count is not None:
        lowering.env[op.results[-1]] = em.load(View.of(count), ())


def lower_trip_dim(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """A `trip_dim` op: its count, once 0 <= count <= its trip dimension is checked."""
    count = lowering.scalar(op.operands[0], em)
    dim: Dim = op.attrs["dim"]
    em.check(as_index(count), dim + 1, lowering.ctx.site("capacity", str(dim)))
    lowering.env[op.result] = count


def lower_if(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """An `if` op: each branch writes the new states into temporaries, under an `If`."""
    ctx, branch = lowering.ctx, IfOp(op)
    outputs = [ctx.temp(v.type.dtype, v.type.shape) for v in op.results]
    cond = lowering.scalar(branch.cond, em)
    operands = branch.inputs
    taken = [(branch.then, cond), (branch.orelse, em.let("not", (cond,), "bool"))]
    if isinstance(cond, Const):  # a constant condition needs no `If`
        taken = [(branch.then if cond.value else branch.orelse, None)]
    for region, guard in taken:
        inner = Emitter(ctx, []) if isinstance(guard, Var) else em
        env = _outer_env(lowering, region.params, operands, em)
        lowering.nested(env).lower(region, outputs, inner)
        if isinstance(guard, Var):
            em.stmts.append(If(guard, inner.stmts))
    for result, output in zip(op.results, outputs, strict=True):
        lowering.env[result] = View.of(output) if result.type.rank else \
            em.load(View.of(output), ())


def _carried_states(lowering: BlockLowering, inits: list[Value], em: Emitter) -> list[LoopState]:
    """Two workspace buffers per carried state; the initial state copied into the first."""
    ctx, states = lowering.ctx, []
    for init in inits:
        dtype, shape = init.type.dtype, init.type.shape
        first, second = ctx.temp(dtype, shape), ctx.temp(dtype, shape)
        name = ctx.fresh("s")
        states.append(LoopState(Buffer(f"{name}.cur", dtype, shape, "state"),
                                Buffer(f"{name}.next", dtype, shape, "state"), first, second))
        em.map_nest(View.of(first), lambda index, body, v=init: lowering.eval.at(v, index, body))
    return states


def _state_env(params: list[Value], states: list[LoopState], body: Emitter
               ) -> dict[Value, Binding]:
    """Region parameters bound to the current states (scalars loaded in `body`)."""
    env: dict[Value, Binding] = {}
    for param, state in zip(params, states, strict=True):
        current = View.of(state.current)
        env[param] = current if param.type.rank else body.load(current, ())
    return env


def _outer_env(lowering: BlockLowering, params: list[Value], outers: list[Value],
               em: Emitter) -> dict[Value, Binding]:
    """Region parameters bound to values of the enclosing block (in memory, or scalars)."""
    return {param: lowering.env[outer] if outer in lowering.env else lowering.scalar(outer, em)
            for param, outer in zip(params, outers, strict=True)}


def _bind_final_states(lowering: BlockLowering, results: list[Value], states: list[LoopState],
                       em: Emitter) -> None:
    """The loop's results are its states' current buffers once it ends."""
    for result, state in zip(results, states, strict=True):
        current = View.of(state.current)
        lowering.env[result] = current if result.type.rank else em.load(current, ())


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
