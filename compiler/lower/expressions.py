"""Lowering of names, operators, `@`, `.T` and subscripts outside index notation.

Each method consumes one kind of AST expression and emits ops into the current block,
returning an `ExprValue` (an IR value plus its weak-dtype flag). Operands are lowered
through `lower_expr`, the dispatch of `Lowerer`.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Value
from reverie.compiler.ir.dims import Dim, num_elements
from reverie.compiler.ir.op_defs import broadcast_shapes, dtype_class
from reverie.compiler.ir.types import INT_DTYPES, ShapeError
from reverie.compiler.lower.index_notation import IndexLowering
from reverie.compiler.lower.slices import SliceLowering
from reverie.compiler.lower.values import (
    ExprTuple,
    ExprValue,
    FailedBinding,
    Suppressed,
    VarBinding,
)
from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
              "**": "pow"}
COMPARISON = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
LOGICAL = {"and": "and", "or": "or"}


def _require_float(val: ExprValue, what: str, span: ast.Span) -> None:
    """A strong operand of `what` must have a float dtype."""
    if not val.weak and dtype_class(val.type.dtype) != "float":
        raise error_at(span, f"'{what}' needs a float operand, got {val.type}; "
                             f"convert with f32(...) or f64(...)")


class ExpressionLowering(IndexLowering, SliceLowering):
    """Names, unary and binary operators, matmul, attributes and subscripts."""

    def lower_name(self, node: ast.Name) -> ExprValue | ExprTuple:
        """A local (possibly a tuple), a `var`, an index or loop variable, or a dimension."""
        if node.id in self.index_vars:
            val = self.index_vars[node.id]
            return ExprValue(self.builder.use(val.value), val.weak)
        binding = self.lookup(node.id)
        if isinstance(binding, FailedBinding):
            raise Suppressed
        if isinstance(binding, VarBinding):
            binding = binding.current
        if isinstance(binding, ExprValue):
            return ExprValue(self.builder.use(binding.value), binding.weak)
        if isinstance(binding, ExprTuple):
            return ExprTuple([ExprValue(self.builder.use(e.value), e.weak)
                              for e in binding.elements])
        if node.id in self.dim_map:
            dim = self.builder.op_at(node.span, "dim", [], {"dim": self.dim_map[node.id]})
            return ExprValue(dim, weak=True)
        if node.id in self.specialisation.functions:
            raise error_at(node.span, f"'{node.id}' is a function; call it as {node.id}(...)")
        raise error_at(node.span,
                       f"unknown name '{node.id}'" + did_you_mean(node.id, self.visible_names()))

    def lower_unary(self, node: ast.UnaryOp) -> ExprValue:
        """`-x` and `not x`."""
        val = self.tensor(node.operand)
        if node.op == "not":
            if val.type.dtype != "bool":
                raise error_at(node.span, f"'not' needs a bool operand, got {val.type}")
            return ExprValue(self.builder.op_at(node.span, "not", [val.value]))
        if val.type.dtype == "bool":
            raise error_at(node.span, "cannot negate a bool value; use 'not'")
        op = val.value.op
        if val.weak and op is not None and op.name == "const":  # `-5` is one literal
            return self.constant(node.span, -op.attrs["value"], val.type.dtype, weak=True)
        return ExprValue(self.builder.op_at(node.span, "neg", [val.value]), val.weak)

    def lower_binop(self, node: ast.BinOp) -> ExprValue:
        """Arithmetic, comparisons, logic and `@`; a chain `a + b - c ...` is lowered in a loop
        from its leftmost operand (`ast.left_spine`), so its length costs no recursion."""
        spine = ast.left_spine(node, lambda left: not self.in_index_body(left))
        value = self.tensor(spine[-1].left)
        for link in reversed(spine):
            value = self._apply_binop(link, value)
        return value

    def _apply_binop(self, node: ast.BinOp, left: ExprValue) -> ExprValue:
        """`node` applied to its already lowered left operand `left`."""
        if node.op == "@":
            return self.matmul(left, self.tensor(node.right), node.span)
        if node.op == "**" and isinstance(node.right, ast.IntLit) and node.right.value == 2:
            _require_float(left, "**", node.span)
            return self.elementwise("mul", [left, left], node.span)
        right = self.tensor(node.right)
        if node.op in LOGICAL:
            for v in (left, right):
                if v.type.dtype != "bool":
                    raise error_at(node.span, f"'{node.op}' needs bool operands, got {v.type}")
            return self.elementwise(LOGICAL[node.op], [left, right], node.span)
        if node.op in ("==", "!="):
            return self.elementwise(COMPARISON[node.op], [left, right], node.span)
        for v in (left, right):
            if v.type.dtype == "bool":
                raise error_at(node.span, f"'{node.op}' needs numbers, got {v.type}; "
                                          "convert with f32(...) or i64(...)")
        if node.op in COMPARISON:
            return self.elementwise(COMPARISON[node.op], [left, right], node.span)
        name = ARITHMETIC[node.op]
        if name in ("div", "pow"):
            (left, right), weak = self.unify([left, right], node.span)
            if left.type.dtype in INT_DTYPES:
                if not weak:
                    hint = ("use // for integer division, or convert with f32(...)"
                            if name == "div" else "convert the operands with f32(...) or f64(...)")
                    raise error_at(node.span,
                                   f"'{node.op}' on integers is not supported; {hint}")
                left, right = (self.convert_weak(v, self.default_float, node.span)
                               for v in (left, right))
                return ExprValue(self.elementwise(name, [left, right], node.span).value, True)
        return self.elementwise(name, [left, right], node.span)

    def matmul(self, a: ExprValue, b: ExprValue, span: ast.Span) -> ExprValue:
        """NumPy `matmul`: a 1-D operand is a row (left) or column (right) whose axis the
        result drops; the axes before the last two are batch axes, broadcast against each
        other. The product is one 2-D `matmul` op when the right operand has no batch axes
        (the left one's fold into its rows), else one 3-D one over the flattened batch."""
        (a, b), _ = self.unify([a, b], span)
        if a.type.rank == 0 or b.type.rank == 0:
            raise error_at(span, f"'@' needs operands of at least one dimension, got {a.type} "
                                 f"and {b.type}; use '*' for a scalar")
        one = Dim.const(1)
        left = a.value if a.type.rank > 1 else self._reshaped(a.value, (one, *a.type.shape), span)
        right = b.value if b.type.rank > 1 else self._reshaped(b.value, (*b.type.shape, one),
                                                                  span)
        k, k2 = left.type.shape[-1], right.type.shape[-2]
        if k != k2:
            raise error_at(span, f"matmul inner dimensions differ: {k} and {k2}")
        try:
            batch = broadcast_shapes(left.type.shape[:-2], right.type.shape[:-2])
        except ShapeError as e:
            raise error_at(span, f"'@' of {a.type} and {b.type}: the batch axes do not "
                                 f"broadcast ({e})") from None
        if right.type.rank == 2:
            rows = self._reshaped(left, (num_elements(left.type.shape[:-1]), k), span)
            product = self.builder.op_at(span, "matmul", [rows, right])
        else:
            stacks = [self._stacked(v, batch, span) for v in (left, right)]
            product = self.builder.op_at(span, "matmul", stacks)
        shape = (*batch, *a.type.shape[-2:-1], *(b.type.shape[-1:] if b.type.rank > 1 else ()))
        return ExprValue(self._reshaped(product, shape, span))

    def _stacked(self, matrices: Value, batch: tuple[Dim, ...], span: ast.Span) -> Value:
        """`matrices` broadcast to the batch axes `batch`, then flattened to one batch axis."""
        matrix = matrices.type.shape[-2:]
        full = self.broadcast_to(ExprValue(matrices), (*batch, *matrix), span).value
        return self._reshaped(full, (num_elements(batch), *matrix), span)

    def _reshaped(self, value: Value, shape: tuple[Dim, ...], span: ast.Span) -> Value:
        """`value` reshaped to `shape` (itself when it has that shape)."""
        if value.type.shape == shape:
            return value
        return self.builder.op_at(span, "reshape", [value], {"shape": shape})

    def lower_attribute(self, node: ast.Attribute) -> ExprValue:
        """`x.T`: reverse the axes, like NumPy."""
        if node.attr != "T":
            raise error_at(node.span, f"unknown attribute '.{node.attr}'; the only one is '.T'")
        val = self.tensor(node.value)
        perm = list(reversed(range(val.type.rank)))
        return ExprValue(self.builder.op_at(node.span, "transpose", [val.value], {"perm": perm}),
                         val.weak)

    def lower_subscript(self, node: ast.Subscript) -> ExprValue:
        """Slices and integer subscripts of a tensor; `f(x)[0]` picks from a tuple."""
        base = self.lower_expr(node.value)
        if isinstance(base, ExprTuple):
            count = len(base.elements)
            item = node.items[0] if len(node.items) == 1 else None
            if not isinstance(item, ast.IntLit):
                raise error_at(node.span, f"a tuple of {count} is indexed by a single integer "
                                          "literal, e.g. [0]")
            if item.value >= count:
                raise error_at(item.span, f"index {item.value} is out of range for a tuple of "
                                          f"{count}")
            return base.elements[item.value]
        return self.slice_tensor(base, node)
