"""Lowering of `x[1:]`, `x[:, 0]`, `x[:N-1]`, `x[::2]` and `xs[t]` outside index notation.

Slices become one `slice` op with symbolic bounds; integer subscripts become bounds-checked
`dynamic_index` ops. Bounds that are not constants are recorded as run-time constraints
(a size that must not be negative), checked at the call boundary.
"""

from __future__ import annotations

from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at

from .ir.dims import Dim
from .lower import Env, Region, Val
from .lower_expr import int_scalar, try_static_dim


def _bound(env: Env, node: ast.Expr | None, default: Dim, size: Dim) -> Dim:
    """A slice bound as a Dim; negative constants count from the end like Python."""
    if node is None:
        return default
    dim = try_static_dim(env, node)
    if dim is None:
        raise error_at(node.span, "slice bounds must be integer constants or dimension "
                                  "expressions such as N - 1")
    if dim.is_const and dim.value < 0:
        return size + dim
    return dim


def require_nonnegative(env: Env, size: Dim, span: ast.Span, reason: str) -> None:
    """Reject a provably negative size now; record a symbolic one for the call boundary."""
    if size.is_const:
        if size.value < 0:
            raise error_at(span, reason)
    else:
        env.lowering.constraints.append((size, reason))


def slice_tensor(env: Env, region: Region, base: Val, node: ast.Subscript) -> Val:
    """Apply the subscript items of `node` to tensor `base`."""
    shape = base.type.shape
    if len(node.items) > len(shape):
        raise error_at(node.span, f"too many subscripts for {base.type}: "
                                  f"{len(node.items)} given, {len(shape)} axes")
    starts, stops, steps = [Dim.const(0)] * len(shape), list(shape), [1] * len(shape)
    integer_items: list[tuple[int, ast.Expr]] = []
    for axis, item in enumerate(node.items):
        if not isinstance(item, ast.Slice):
            integer_items.append((axis, item))
            continue
        size = shape[axis]
        start = _bound(env, item.lo, Dim.const(0), size)
        stop = _bound(env, item.hi, size, size)
        step = 1
        if item.step is not None:
            step_dim = try_static_dim(env, item.step)
            if step_dim is None or not step_dim.is_const or step_dim.value <= 0:
                raise error_at(item.step.span, "a slice step must be a positive integer constant")
            step = step_dim.value
        text = f"slice {start}:{stop} of axis {axis} (size {size})"
        require_nonnegative(env, start, item.span, f"{text} starts before 0")
        require_nonnegative(env, stop - start, item.span, f"{text} ends before it starts")
        require_nonnegative(env, size - stop, item.span, f"{text} ends past the end")
        starts[axis], stops[axis], steps[axis] = start, stop, step
    value = base.value
    if any(a != Dim.const(0) or b != d or s != 1
           for a, b, s, d in zip(starts, stops, steps, shape, strict=True)):
        value = region.op_at(node.span, "slice", [value],
                          {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)})
    label = node.value.id if isinstance(node.value, ast.Name) else "tensor"
    for axis, item in reversed(integer_items):
        index = _integer_subscript(env, region, item, shape[axis])
        value = region.op_at(item.span, "dynamic_index", [value, index.value],
                          {"axis": axis, "label": label})
    return Val(value, base.weak)


def _integer_subscript(env: Env, region: Region, item: ast.Expr, size: Dim) -> Val:
    """An integer subscript as an i64 value; a negative constant counts from the end."""
    dim = try_static_dim(env, item)
    if dim is not None and dim.is_const and dim.value < 0:
        dim = size + dim
    if dim is not None:
        return Val(region.op_at(item.span, "dim", [], {"dim": dim}))
    return int_scalar(env, region, item, "a subscript")
