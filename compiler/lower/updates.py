"""Lowering of indexed updates `h[t] = e;` and `y[i, :] = row;` of a `var` tensor.

An update is functional: it makes a new value of `h`'s type, equal to `e` on the window
the subscripts select (as a read `h[...]` would) and to `h` elsewhere. It is built from
structured ops that every stage already knows, never from a loop over elements:

    placed = embed(e)                 # zeros of h's shape with e at the window
    inside = embed(1) != 0            # the window, as a bool mask
    new_h  = select(inside, placed, h)

where `embed` undoes the read: a `dynamic_scatter` for each integer subscript (bounds
checked at run time, an IndexError naming `h`, like a read) and a `pad` for the slices.
The derivatives follow from those ops' rules: h̄ = select(inside, 0, ḡ) (the cotangent
with the updated window zeroed) and ē = ḡ[window] (the cotangent's window).
"""

from __future__ import annotations

from reverie.compiler.ir.core import Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.op_defs import broadcast_shapes
from reverie.compiler.ir.ops_shape import slice_extent
from reverie.compiler.ir.types import ShapeError
from reverie.compiler.lower.slices import SliceLowering, Window
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


def _without(shape: tuple[Dim, ...], axis: int) -> tuple[Dim, ...]:
    """`shape` with axis `axis` removed."""
    return shape[:axis] + shape[axis + 1:]


class UpdateLowering(SliceLowering):
    """`name[items] = value` for a tensor: the new tensor."""

    def updated(self, base: ExprValue, items: list[ast.Expr | ast.Slice], value: ExprValue,
                span: ast.Span, value_span: ast.Span, label: str) -> ExprValue:
        """`base` with the window of `items` replaced by `value` (broadcast to the window);
        the ops are emitted at the statement's `span`, a mismatched value is reported at
        `value_span`."""
        window = self.slice_window(base.type, items, span)
        shape = base.type.shape
        box = tuple(map(slice_extent, window.starts, window.stops, window.steps))
        region = box
        for axis, _ in reversed(window.integer_items):
            region = _without(region, axis)
        indices = [self._integer_subscript(item, box[axis]).value
                   for axis, item in window.integer_items]
        value = self.convert_weak(value, base.type.dtype, value_span)
        if value.type.dtype != base.type.dtype:
            raise error_at(value_span, f"'{label}' has dtype {base.type.dtype} but the new value "
                                 f"has type {value.type}")
        value = self._broadcast_region(value, region, value_span, label)
        mask_dtype = "i64" if base.type.dtype == "bool" else base.type.dtype
        ones = self.broadcast_to(self.constant(span, 1, mask_dtype, weak=False), region, span)
        placed = self._embed(value.value, window, indices, shape, box, span, label)
        mask = self._embed(ones.value, window, indices, shape, box, span, label)
        zero = self.constant(span, 0, mask_dtype, weak=True)
        inside = self.elementwise("ne", [ExprValue(mask), zero], span)
        return ExprValue(self.builder.op_at(span, "select", [inside.value, placed, base.value]))

    def _broadcast_region(self, value: ExprValue, region: tuple[Dim, ...], span: ast.Span,
                          label: str) -> ExprValue:
        """`value` broadcast to the window's shape, or a TypeCheckError saying both shapes."""
        try:
            fits = broadcast_shapes(value.type.shape, region) == region
        except ShapeError:
            fits = False
        if not fits:
            window_type = value.type.with_shape(region)
            raise error_at(span, f"the window of '{label}' has type {window_type} but the new "
                                 f"value has type {value.type}")
        return self.broadcast_to(value, region, span)

    def _embed(self, part: Value, window: Window, indices: list[Value], shape: tuple[Dim, ...],
               box: tuple[Dim, ...], span: ast.Span, label: str) -> Value:
        """Zeros of `shape` with `part` (the window's shape) at the window: the adjoint of
        the read, one `dynamic_scatter` per integer subscript, then a `pad`."""
        removed = [box]
        for axis, _ in reversed(window.integer_items):
            removed.append(_without(removed[-1], axis))
        for (axis, _), index, into in zip(window.integer_items, indices,
                                          reversed(removed[:-1]), strict=True):
            part = self.builder.op_at(span, "dynamic_scatter", [part, index],
                                      {"shape": into, "axis": axis, "label": label})
        if window.is_whole(shape):
            return part
        return self.builder.op_at(span, "pad", [part], {"shape": shape, "starts": window.starts,
                                                         "steps": window.steps})
