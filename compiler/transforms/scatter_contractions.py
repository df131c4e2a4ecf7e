"""Scatters of contractions: a `generic_scatter` whose value is a product summed over
indices its positions do not use becomes that sum — a contraction, which the next pass
makes a matrix product (`contractions.py`) — followed by a scatter of the sum alone.

Reverse mode writes the adjoint of a read at shifted subscripts, such as the input of a
convolution, x[b, c, i + k, j + l], as one scatter over the whole iteration space:

    x̄[b, c, i + k, j + l] += ȳ[b, o, i, j] · w[o, c, k, l]      for every b, o, i, j, c, k, l

No position uses o, so each (b, i, j, c, k, l) adds a sum over o, computed one product
at a time in a seven-deep loop nest. The rewrite computes the sum first and scatters
only its result (im2col's transpose, "col2im", in convolution terms):

    t[b, i, j, c, k, l] = Σ_o ȳ[b, o, i, j] · w[o, c, k, l]       (a matrix product)
    x̄[b, c, i + k, j + l] += t[b, i, j, c, k, l]

Contract: `split_scatter_contractions(fn)` returns a function computing the same values
(up to float rounding order) in which every top-level `generic_scatter` whose value is a
true matrix product over its unpositioned indices (`contractions.best_split`) is split
so; it runs just before the contraction pass (REVERIE_PRINT_IR pass `scatter_contract`).
The sum costs a temporary over the positioned indices, the size of the matrix product's
result; scatters that are not matrix products are left alone.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.views import GenericScatterOp
from reverie.compiler.print_ir import show
from reverie.compiler.transforms.contractions import (
    best_split,
    copier,
    factors_of,
    nest_block,
    replace_ops,
)

PASS_NAME = "scatter_contract"


def split_scatter_contractions(fn: Function) -> Function:
    """`fn` with each scatter of a matrix product split into the product and a scatter."""
    splits = {op: positioned for op in fn.body.ops if op.name == "generic_scatter"
              and (positioned := _positioned_indices(GenericScatterOp(op))) is not None}
    rewritten = replace_ops(fn, {
        op: lambda scope, values, op=op: _split(scope, GenericScatterOp(op), splits[op], values)
        for op in splits})
    show(PASS_NAME, f"@{fn.name}", lambda: format_function(rewritten))
    return rewritten


def _positioned_indices(scatter: GenericScatterOp) -> tuple[int, ...] | None:
    """The index positions the scattered positions use, in loop order, when the value is a
    true matrix product summed over the others; else None."""
    body, ranges = scatter.body, scatter.ranges
    if not scatter.op.result.type.is_float or any(lo != Dim.const(0) for _, lo, _ in ranges):
        return None
    positions = [factors_of(scatter, position) for position in body.results[:-1]]
    factors = factors_of(scatter, body.results[-1])
    if factors is None or None in positions:
        return None
    positioned = frozenset().union(*(f.indices for p in positions for f in p))
    summed = frozenset(range(len(ranges))) - positioned
    if not summed or best_split(factors, positioned, summed) is None:
        return None
    return tuple(sorted(positioned))


def _split(scope: Scope, scatter: GenericScatterOp, positioned: tuple[int, ...],
           values: dict[Value, Value]) -> Value:
    """Emit the sum over the unpositioned indices and the scatter of it; the value
    replacing the scatter's result."""
    operands = [values[v] for v in scatter.op.operands]
    ranges = scatter.ranges
    summed = tuple(k for k in range(len(ranges)) if k not in positioned)
    block, index = nest_block(scatter, positioned + summed)
    body = scope.child(block)
    block.results = [copier(body, scatter, operands, index)(scatter.body.results[-1])]
    total = scope.op("generic", body.outer_operands(),
                     {"indices": tuple(ranges[k] for k in positioned), "reduce": "sum",
                      "over": tuple(ranges[k] for k in summed)}, [block])
    block, index = nest_block(scatter, positioned)
    body = scope.child(block)
    copy = copier(body, scatter, operands, index)
    read = body.op("read", [body.use(total), *(index[k] for k in positioned)],
                   {"modes": ("direct",) * len(positioned), "label": "contraction"})
    block.results = [*(copy(p) for p in scatter.body.results[:-1]), read]
    attrs = dict(scatter.op.attrs, indices=tuple(ranges[k] for k in positioned))
    return scope.op("generic_scatter", body.outer_operands(), attrs, [block])
