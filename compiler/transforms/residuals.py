"""A VJP split in two at its cotangents: a forward that also returns the residuals (the
primal values the adjoint reads) and a backward that starts from them.

A VJP function (`reverse.vjp_function`) first recomputes the primal program, then runs the
adjoint sweep, which reads primal values: a training step that calls the forward kernel
and later the VJP kernel computes the forward twice. Splitting it where the cotangents
enter removes the second time, as torch autograd does by saving tensors for backward:

    vjp(x, ȳ)          = (y, x̄)      one function: y and every primal value recomputed
    forward(x)         = (y, r)      r: the primal values the adjoint sweep reads
    backward(x, r, ȳ)  = x̄           the adjoint sweep alone

An op belongs to the backward when it reads a cotangent (or a value that does), else to
the forward; the residuals are the forward's values that backward ops read or that are
adjoints themselves, except those the backward rebuilds from what it has without reading a
tensor's worth of memory: those are copied into the backward, never saved. They are

    constant   a `const` or `dim`; a cheap elementwise op (`ops.py`'s `cheap`) or an
               iota-like `generic` (no reduction, a body of cheap ops and reads) of constants
    view       a constant, a primal parameter, or a data-movement op (the `VIEW` fusion
               class: broadcast, reshape, transpose, slice, ...) of views

so `x * x * 3.0` saves no `broadcast` of `3.0`: the backward broadcasts it again. Nor is
a broadcast of another forward value saved, only its smaller operand (a layer norm saves
its per-row `rsqrt`, not a copy per element).

Contract: `split_vjp(vjp, inputs, outputs)` takes a VJP function with `inputs` primal
parameters followed by one cotangent per each of its first `outputs` results, and returns
`Split(forward, backward, residual_types)`: `forward` has the primal parameters and
returns the first `outputs` results then the residuals; `backward` has the primal
parameters, then one parameter per residual, then the cotangents, and returns the
remaining results (the adjoints). Together they compute what `vjp` does, with the same
rounding (the same ops on the same values).
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.core import Block, Function, Op, Value
from reverie.compiler.ir.op_defs import VIEW
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.types import TensorType
from reverie.compiler.ir.views import GenericOp


@dataclass(frozen=True)
class Split:
    """The two halves of a VJP and the types of what passes between them."""

    forward: Function
    backward: Function
    residual_types: tuple[TensorType, ...]


def split_vjp(vjp: Function, inputs: int, outputs: int) -> Split:
    """The forward (with residuals) and backward halves of `vjp` (see the module doc)."""
    cotangents = vjp.params[inputs:]
    backward_ops = _reading(vjp.body.ops, set(cotangents))
    adjoints = vjp.body.results[outputs:]
    forward_ops = [op for op in vjp.body.ops if op not in backward_ops]
    residuals = _residuals(forward_ops, backward_ops, adjoints, vjp.params[:inputs])
    forward_body = Block(list(vjp.params[:inputs]), forward_ops,
                         [*vjp.body.results[:outputs], *residuals])
    forward = vjp.derive(f"{vjp.name}_forward", forward_body, vjp.param_names[:inputs])
    names = [f"residual{i}" for i in range(len(residuals))]
    backward = vjp.derive(f"{vjp.name}_backward",
                          _backward_body(vjp, inputs, backward_ops, residuals, adjoints),
                          [*vjp.param_names[:inputs], *names, *vjp.param_names[inputs:]])
    return Split(forward, backward, tuple(r.type for r in residuals))


def _reading(ops: list[Op], sources: set[Value]) -> set[Op]:
    """The ops that read one of `sources`, directly or through other ops' results."""
    tainted, reading = set(sources), set()
    for op in ops:
        if any(v in tainted for v in op.operands):
            reading.add(op)
            tainted.update(op.results)
    return reading


def _rebuildable(forward_ops: list[Op], primal_params: list[Value]) -> set[Value]:
    """The forward values the backward rebuilds from the primal parameters alone: the
    constants and the views of constants and parameters (see the module doc)."""
    constants: set[Value] = set()
    views: set[Value] = set(primal_params)
    for op in forward_ops:
        if all(v in constants for v in op.operands) and _computes_cheaply(op):
            constants.update(op.results)
            views.update(op.results)
        elif OPS[op.name].fusion == VIEW and not op.regions and all(v in views
                                                                   for v in op.operands):
            views.update(op.results)
    return views


def _computes_cheaply(op: Op) -> bool:
    """Whether `op` is a constant, a cheap elementwise or data-movement op, or an iota-like
    `generic`: one that reduces nothing and whose body runs only cheap ops and reads."""
    row = OPS[op.name]
    if op.name == "generic":
        return GenericOp(op).reduce is None and all(
            inner.name == "read" or _computes_cheaply(inner) for inner in op.regions[0].ops)
    return not op.regions and (row.kind == "constant" or row.cheap or row.fusion == VIEW)


def _residuals(forward_ops: list[Op], backward_ops: set[Op], adjoints: list[Value],
               primal_params: list[Value]) -> list[Value]:
    """The forward values the backward reads (or returns) and cannot rebuild, in definition
    order. A broadcast of a forward value is not saved: its operand is, and the backward
    broadcasts it again."""
    rebuilt = _rebuildable(forward_ops, primal_params)
    read = {v for op in backward_ops for v in op.operands} | set(adjoints)
    for op in reversed(forward_ops):
        if op.name == "broadcast" and op.result in read and op.result not in rebuilt:
            rebuilt.add(op.result)
            read.add(op.operands[0])
    return [r for op in forward_ops for r in op.results if r in read and r not in rebuilt]


def _backward_body(vjp: Function, inputs: int, backward_ops: set[Op],
                   residuals: list[Value], adjoints: list[Value]) -> Block:
    """The adjoint sweep over parameters (inputs, residuals, cotangents), with the forward
    values it rebuilds copied in before their first use."""
    inputs_params = [Value(p.type, name=p.name) for p in vjp.params[:inputs]]
    residual_params = [Value(r.type, name=f"residual{i}") for i, r in enumerate(residuals)]
    cotangent_params = [Value(p.type, name=p.name) for p in vjp.params[inputs:]]
    block = Block(params=[*inputs_params, *residual_params, *cotangent_params])
    scope = Scope(block)
    values: dict[Value, Value] = dict(zip(vjp.params, [*inputs_params, *cotangent_params],
                                          strict=True))
    values.update(zip(residuals, residual_params, strict=True))
    defined_by = {r: op for op in vjp.body.ops for r in op.results}

    def operand(value: Value) -> Value:
        if value not in values:  # a forward value the backward rebuilds
            copy(defined_by[value])
        return values[value]

    def copy(op: Op) -> None:
        new = scope.emit(op.name, [operand(v) for v in op.operands], dict(op.attrs),
                         [copy_block(r) for r in op.regions], op.span)
        values.update(zip(op.results, new.results, strict=True))

    for op in vjp.body.ops:
        if op in backward_ops:
            copy(op)
    block.results = [operand(v) for v in adjoints]
    return block
