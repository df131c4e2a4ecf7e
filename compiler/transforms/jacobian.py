"""Full Jacobians as one IR function: a batched JVP or a batched VJP over an identity.

Consumes a typed `Function` and the positions of float parameters; produces a `Function`
with the same parameters whose results are the Jacobian blocks `∂ result_j / ∂ param_k`,
each of shape `result_j.shape + param_k.shape`, ordered result-major. Two constructions,
both a single batched call (never a loop over rows or columns):

- forward: batch `jvp_function` over its tangents, the batch being the n = Σ size(param_k)
  columns of an identity (the tangent of param k is its block of columns, reshaped);
- reverse: batch `vjp_function` over its cotangents, the batch being the m = Σ
  size(result_j) rows of an identity.

Forward is cheaper when n < m. The identity is built in IR by a `generic` op
(`select(row == column + offset, 1, 0)`), so the whole Jacobian stays differentiable.
Where it meets a matrix product (the tangent `A @ I`, the cotangent `diag(s) @ A`), the
final `simplify` removes the product (compiler/transforms/identity_products.py): the
Jacobian of `tanh(A @ x)` is `(1 - tanh²)[:, None] · A`, n² multiplications, not n³.
"""

from __future__ import annotations

from collections.abc import Sequence

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim, num_elements
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw
from reverie.compiler.ir.types import TensorType, scalar
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.forward import jvp_function
from reverie.compiler.transforms.simplify import simplify

MODES = ("forward", "reverse")


def identity_columns(s: Scope, total: Dim, offset: Dim, shape: tuple[Dim, ...],
                     dtype: str) -> Value:
    """Columns offset..offset+size(shape) of the total×total identity, as [total, *shape]."""
    row, column = Value(scalar("i64"), name="r"), Value(scalar("i64"), name="c")
    body = Scope(Block(params=[row, column]))
    shifted = body.add(column, body.op("dim", [], {"dim": offset}))
    one, zero = body.const(1, scalar(dtype)), body.const(0, scalar(dtype))
    body.block.results = [body.select(body.eq(row, shifted), one, zero)]
    width = num_elements(shape)
    attrs = {"indices": (("r", Dim.const(0), total), ("c", Dim.const(0), width))}
    eye = s.op("generic", [], attrs, [body.block])
    return s.op("reshape", [eye], {"shape": (total, *shape)})


def _offsets(types: Sequence[TensorType]) -> tuple[list[Dim], Dim]:
    """The starting row of each type's block in the concatenated identity, and the total."""
    offsets, total = [], Dim.const(0)
    for t in types:
        offsets.append(total)
        total = total + num_elements(t.shape)
    return offsets, total


def _rows(s: Scope, batched: Value, start: Dim, shape: tuple[Dim, ...]) -> Value:
    """Rows start..start+size(shape) of a batched value, the batch axis reshaped to `shape`."""
    rest = batched.type.shape[1:]
    attrs = {"starts": (start,) + (Dim.const(0),) * len(rest),
             "stops": (start + num_elements(shape), *rest), "steps": (1,) * (1 + len(rest))}
    block = s.op("slice", [batched], attrs)
    return s.op("reshape", [block], {"shape": (*shape, *rest)})


def _move_front(s: Scope, value: Value, count: int) -> Value:
    """`value` with its first `count` axes moved to the back."""
    rank = value.type.rank
    if count in (0, rank):
        return value
    return s.op("transpose", [value], {"perm": [*range(count, rank), *range(count)]})


def jacobian_function(fn: Function, wrt: Sequence[int], mode: str = "forward", *,
                      name: str | None = None) -> Function:
    """The Jacobian blocks of every result of `fn` with respect to each `wrt` parameter,
    from one batched JVP (`mode="forward"`) or one batched VJP (`mode="reverse"`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    outputs = fn.result_types
    if not all(t.is_float for t in outputs):
        raise ValueError(f"the Jacobian of {fn.name} needs float results; it returns "
                         + ", ".join(map(str, outputs)))
    params = [Value(p.type, name=n) for p, n in zip(fn.params, fn.param_names, strict=True)]
    s = Scope(Block(params=params), span=fn.span)
    inputs = [params[k].type for k in wrt]
    if mode == "forward":
        offsets, total = _offsets(inputs)
        seeds = [identity_columns(s, total, o, t.shape, t.dtype)
                 for o, t in zip(offsets, inputs, strict=True)]
        batched = batch_function(jvp_function(fn, wrt), range(len(params), len(params)
                                                               + len(wrt)), size=total)
        tangents = s.clone(batched.body, params + seeds)[len(outputs):]
        blocks = [_move_front(s, _rows(s, tangent, o, t.shape), t.rank)
                  for tangent in tangents for o, t in zip(offsets, inputs, strict=True)]
    else:
        from reverie.compiler.transforms.reverse import vjp_function

        offsets, total = _offsets(outputs)
        seeds = [identity_columns(s, total, o, t.shape, t.dtype)
                 for o, t in zip(offsets, outputs, strict=True)]
        batched = batch_function(vjp_function(fn, wrt), range(len(params), len(params)
                                                               + len(outputs)), size=total)
        grads = s.clone(batched.body, params + seeds)[len(outputs):]
        blocks = [_rows(s, grad, o, out.shape)
                  for o, out in zip(offsets, outputs, strict=True) for grad in grads]
    s.block.results = blocks
    out = fn.derive(name or f"{fn.name}_jacobian", s.block)
    simplify(show_raw(out, "jacobian"))
    return after_pass(out, "simplify")
