"""Lowering of `x[1:]`, `x[:, 0]`, `x[:N-1]`, `x[::2]` and `xs[t]` outside index notation.

Slices become one `slice` op with symbolic bounds; integer subscripts become bounds-checked
`dynamic_index` ops. Bounds that are not constants are recorded as run-time constraints
(a size that must not be negative), checked at the call boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import TensorType
from reverie.compiler.lower.typing_rules import DtypeRules
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


@dataclass(frozen=True)
class Window:
    """What subscript items select: a strided box (`starts`, `stops`, `steps` per axis),
    then one position along each axis that has an integer subscript."""

    starts: tuple[Dim, ...]
    stops: tuple[Dim, ...]
    steps: tuple[int, ...]
    integer_items: list[tuple[int, ast.Expr]]

    def is_whole(self, shape: tuple[Dim, ...]) -> bool:
        """Whether the box is all of a tensor of `shape` (no `slice` op needed)."""
        return all(a == Dim.const(0) and b == d and s == 1
                   for a, b, s, d in zip(self.starts, self.stops, self.steps, shape, strict=True))

    def bounds(self) -> dict[str, tuple]:
        """The box as the attributes of a `slice` op."""
        return {"starts": self.starts, "stops": self.stops, "steps": self.steps}


class SliceLowering(DtypeRules):
    """Slices and integer subscripts of a tensor value."""

    def _slice_bound(self, node: ast.Expr | None, default: Dim, size: Dim) -> Dim:
        """A slice bound as a Dim; negative constants count from the end like Python."""
        if node is None:
            return default
        dim = self.try_static_dim(node)
        if dim is None:
            raise error_at(node.span, "slice bounds must be integer constants or dimension "
                                      "expressions such as N - 1")
        if dim.is_const and dim.value < 0:
            return size + dim
        return dim

    def slice_window(self, base: TensorType, items: list[ast.Expr | ast.Slice],
                     span: ast.Span) -> Window:
        """The window that subscript `items` select from a tensor of type `base` (no op
        emitted; bounds that are not constants are recorded as constraints)."""
        shape = base.shape
        if len(items) > len(shape):
            raise error_at(span, f"too many subscripts for {base}: "
                                 f"{len(items)} given, {len(shape)} axes")
        starts, stops, steps = [Dim.const(0)] * len(shape), list(shape), [1] * len(shape)
        integer_items: list[tuple[int, ast.Expr]] = []
        for axis, item in enumerate(items):
            if not isinstance(item, ast.Slice):
                integer_items.append((axis, item))
                continue
            size = shape[axis]
            start = self._slice_bound(item.lo, Dim.const(0), size)
            stop = self._slice_bound(item.hi, size, size)
            step = 1
            if item.step is not None:
                step_dim = self.try_static_dim(item.step)
                if step_dim is None or not step_dim.is_const or step_dim.value <= 0:
                    raise error_at(item.step.span,
                                   "a slice step must be a positive integer constant")
                step = step_dim.value
            text = f"slice {start}:{stop} of axis {axis} (size {size})"
            self.require_nonnegative(start, item.span, f"{text} starts before 0")
            self.require_nonnegative(stop - start, item.span, f"{text} ends before it starts")
            self.require_nonnegative(size - stop, item.span, f"{text} ends past the end")
            starts[axis], stops[axis], steps[axis] = start, stop, step
        return Window(tuple(starts), tuple(stops), tuple(steps), integer_items)

    def slice_tensor(self, base: ExprValue, node: ast.Subscript) -> ExprValue:
        """Apply the subscript items of `node` to tensor `base`."""
        shape = base.type.shape
        window = self.slice_window(base.type, node.items, node.span)
        value = base.value
        if not window.is_whole(shape):
            value = self.builder.op_at(node.span, "slice", [value], window.bounds())
        label = node.value.id if isinstance(node.value, ast.Name) else "tensor"
        for axis, item in reversed(window.integer_items):
            index = self._integer_subscript(item, shape[axis])
            value = self.builder.op_at(item.span, "dynamic_index", [value, index.value],
                                       {"axis": axis, "label": label})
        return ExprValue(value, base.weak)

    def _integer_subscript(self, item: ast.Expr, size: Dim) -> ExprValue:
        """An integer subscript as an i64 value; a negative constant counts from the end."""
        dim = self.try_static_dim(item)
        if dim is not None and dim.is_const and dim.value < 0:
            dim = size + dim
        if dim is not None:
            return ExprValue(self.builder.op_at(item.span, "dim", [], {"dim": dim}))
        return self.int_scalar(item, "a subscript")
