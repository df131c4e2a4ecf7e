"""The typing rules: literals, weak dtypes, unification, broadcasting (docs/language.md §6, §7).

Literals, dimension names and index/loop variables are *weak*: they take the dtype of the
other operand. Mixing strong dtypes is an error with a cast suggestion (mixed integer
widths widen to i64). Operands of elementwise ops broadcast like NumPy, through explicit
`broadcast` ops.
"""

from __future__ import annotations

import math

import numpy as np

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.op_defs import broadcast_shapes, dtype_class
from reverie.compiler.ir.types import INT_DTYPES, NUMPY_DTYPES, ShapeError
from reverie.compiler.lower.base import LowererBase
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


def _require_representable(value: object, dtype: str, span: ast.Span) -> None:
    """A literal given `dtype` must keep its value: an integer within the type's range, a
    finite float finite (in `f32` anything beyond about 3.4e38 would become inf)."""
    if dtype in INT_DTYPES:
        info = np.iinfo(NUMPY_DTYPES[dtype])
        if isinstance(value, int) and not info.min <= value <= info.max:
            raise error_at(span, f"integer literal {value} does not fit in {dtype} "
                                 f"({info.min}..{info.max})")
    elif dtype == "f32" and isinstance(value, float) and math.isfinite(value):
        with np.errstate(over="ignore"):
            overflows = math.isinf(np.float32(value))
        if overflows:
            raise error_at(span, f"float literal {value!r} overflows f32 (its largest value "
                                 "is about 3.4e38); use f64")


class DtypeRules(LowererBase):
    """Constants, weak-dtype conversion, dtype unification and broadcasting."""

    def constant(self, span: ast.Span, value: object, dtype: str, weak: bool) -> ExprValue:
        """A scalar literal of `dtype` (a CompileError at `span` if it cannot hold the value)."""
        _require_representable(value, dtype, span)
        if dtype_class(dtype) == "float":
            value = float(value)  # type: ignore[arg-type]
        elif dtype in INT_DTYPES:
            value = int(value)  # type: ignore[call-overload]
        return ExprValue(self.builder.op_at(span, "const", [], {"value": value, "dtype": dtype}),
                         weak)

    def convert_weak(self, val: ExprValue, dtype: str | None, span: ast.Span) -> ExprValue:
        """Give a weak value a definite dtype (`None`: keep its default); strong values pass."""
        if not val.weak:
            return val
        if dtype is None or dtype == val.type.dtype:
            return ExprValue(val.value)
        source, target = dtype_class(val.type.dtype), dtype_class(dtype)
        if source == "float" and target != "float":
            raise error_at(span, f"a float value cannot be used as {dtype}; "
                                 f"convert explicitly, e.g. {dtype}(...)")
        if val.value.op is not None and val.value.op.name == "const":
            literal = val.value.op
            return self.constant(literal.span or span, literal.attrs["value"], dtype, weak=False)
        return ExprValue(self.builder.op_at(span, "cast", [val.value], {"dtype": dtype}))

    def unify(self, vals: list[ExprValue], span: ast.Span) -> tuple[list[ExprValue], bool]:
        """Bring operands to one dtype (weak ones follow strong ones); returns (vals, weak)."""
        strong = [v for v in vals if not v.weak]
        if not strong:
            classes = {dtype_class(v.type.dtype) for v in vals}
            dtype = self.default_float if "float" in classes else "i64"
            converted = [self.convert_weak(v, dtype, span) for v in vals]
            return [ExprValue(v.value, True) for v in converted], True
        dtypes = sorted({v.type.dtype for v in strong})
        if len(dtypes) > 1:
            if set(dtypes) <= set(INT_DTYPES):
                dtypes = ["i64"]
                vals = [ExprValue(self.builder.op_at(span, "cast", [v.value], {"dtype": "i64"}))
                        if not v.weak and v.type.dtype != "i64" else v for v in vals]
            else:
                a, b = dtypes[0], dtypes[1]
                raise error_at(span, f"cannot mix {a} and {b}; convert one side explicitly, "
                                     f"e.g. {b}(...) or {a}(...)")
        dtype = dtypes[0]
        return [self.convert_weak(v, dtype, span) for v in vals], False

    def broadcast_to(self, val: ExprValue, shape: tuple[Dim, ...], span: ast.Span) -> ExprValue:
        """`val` broadcast to `shape` (no op when it already has that shape)."""
        if val.type.shape == shape:
            return val
        return ExprValue(self.builder.op_at(span, "broadcast", [val.value], {"shape": shape}),
                         val.weak)

    def broadcast_all(self, vals: list[ExprValue], span: ast.Span) -> list[ExprValue]:
        """NumPy-broadcast operands to their common shape."""
        shape: tuple[Dim, ...] = ()
        try:
            for v in vals:
                shape = broadcast_shapes(shape, v.type.shape)
        except ShapeError as e:
            types = " and ".join(str(v.type) for v in vals)
            raise error_at(span, f"cannot broadcast {types}: {e}") from None
        return [self.broadcast_to(v, shape, span) for v in vals]

    def elementwise(self, name: str, vals: list[ExprValue], span: ast.Span) -> ExprValue:
        """Unify dtypes, broadcast, and emit elementwise op `name`."""
        vals, weak = self.unify(vals, span)
        vals = self.broadcast_all(vals, span)
        result = self.builder.op_at(span, name, [v.value for v in vals])
        return ExprValue(result, weak and result.type.dtype != "bool")

    def int_scalar(self, node: ast.Expr, what: str) -> ExprValue:
        """Lower an integer scalar expression (a loop bound or a subscript) as i64."""
        val = self.tensor(node)
        if val.type.rank != 0 or val.type.dtype not in INT_DTYPES:
            raise error_at(node.span, f"{what} must be an integer scalar, got {val.type}")
        val = self.convert_weak(val, "i64", node.span)
        if val.type.dtype != "i64":
            val = ExprValue(self.builder.op_at(node.span, "cast", [val.value], {"dtype": "i64"}))
        return val
