"""Turn i64 dimension parameters back into plain values, so they can vary over a batch.

An i64 scalar parameter doubles as a dimension (`for t in 0..steps` has trip count `steps`,
see `Function.value_dims`): its uses are `dim` ops. Before batching over such a parameter,
each top-level `dim` op that mentions it is rewritten as integer arithmetic on the
parameter itself, and the dimension is dropped. A dimension that sizes a tensor type, or a
`dim` op inside a region, cannot be rewritten (the batch would be ragged): ValueError.

    %0 = dim {dim = steps - 1} : i64    →    %0 = sub %steps, %c1 : i64
"""

from __future__ import annotations

from collections.abc import Sequence

from reverie.compiler.ir.core import Block, Builder, Function, Op, Value
from reverie.compiler.ir.dims import Dim, FloorDiv, NonNegative


def _emit_dim(builder: Builder, dim: Dim, values: dict[str, Value]) -> Value:
    """Integer ops computing `dim`, with the symbols in `values` read from those values."""
    def const(number: int) -> Value:
        return builder.op("const", [], {"value": number, "dtype": "i64"})

    def atom_value(atom: str | FloorDiv | NonNegative) -> Value:
        if isinstance(atom, FloorDiv):
            numerator = _emit_dim(builder, atom.numerator, values)
            return builder.op("floordiv", [numerator, const(atom.denominator)])
        if isinstance(atom, NonNegative):
            return builder.op("maximum", [_emit_dim(builder, atom.operand, values), const(0)])
        if atom in values:
            return values[atom]
        return builder.op("dim", [], {"dim": Dim.sym(atom)})

    total = const(0)
    for monomial, coefficient in dim.terms:
        term = const(coefficient)
        for atom in monomial:
            term = builder.op("mul", [term, atom_value(atom)])
        total = builder.op("add", [total, term])
    return total


def _mentions(dim: Dim, symbols: set[str]) -> bool:
    return bool(dim.symbols() & symbols)


def undim_parameters(fn: Function, indices: Sequence[int]) -> Function:
    """`fn` with the dimensions bound by the i64 parameters at `indices` made plain values."""
    chosen = {symbol: index for symbol, index in fn.value_dims if index in indices}
    if not chosen:
        return fn
    symbols = set(chosen)
    for op in fn.body.walk():
        types = [r.type for r in op.results] + [v.type for r in op.regions for v in r.params]
        if any(_mentions(d, symbols) for t in types for d in t.shape):
            raise ValueError(f"{fn.name}: a tensor is sized by {', '.join(sorted(symbols))}, so "
                             "it cannot vary over a batch")
        inside = [o for region in op.regions for o in region.walk()]
        if any(o.name == "dim" and _mentions(o.attrs["dim"], symbols) for o in inside):
            raise ValueError(f"{fn.name}: {', '.join(sorted(symbols))} is used inside a loop "
                             "body as a dimension, so it cannot vary over a batch")
    values = {symbol: fn.params[index] for symbol, index in chosen.items()}
    body = Block(fn.body.params)
    builder = Builder(body)
    replaced: dict[Value, Value] = {}
    for op in fn.body.ops:
        if op.name == "dim" and _mentions(op.attrs["dim"], symbols):
            builder.span = op.span
            replaced[op.result] = _emit_dim(builder, op.attrs["dim"], values)
            continue
        body.ops.append(Op(op.name, [replaced.get(v, v) for v in op.operands], op.attrs,
                           op.results, op.regions, op.span))
        for result in op.results:
            result.op = body.ops[-1]
    body.results = [replaced.get(v, v) for v in fn.body.results]
    out = fn.derive(fn.name, body)
    out.value_dims = [(s, i) for s, i in fn.value_dims if s not in symbols]
    out.dim_names = [d for d in fn.dim_names if d not in symbols]
    return out
