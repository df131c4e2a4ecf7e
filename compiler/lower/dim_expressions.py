"""Static facts the lowering reads off the source: dimension expressions and annotations.

Pure functions, with no lowering state: a dimension expression (`N - 1`, `2 * M`) becomes a
`Dim`, a type annotation (`float[N, 3]`) a `TensorType`, and an integer value that
statically equals a dimension is recognised as one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import FLOAT_DTYPES, TensorType
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

DIMENSION_OPS = ("+", "-", "*", "//")
INT64_MAX = 2**63 - 1


def static_dim(node: ast.Expr, dims: dict[str, Dim], allow_new: bool = False) -> Dim:
    """A dimension expression from source: integers, dimension names, + - * // and -x."""
    match node:
        case ast.IntLit(value=v):
            return Dim.const(v)
        case ast.Name(id=name):
            if name not in dims:
                if not allow_new:
                    raise error_at(node.span, f"unknown dimension '{name}'"
                                              + did_you_mean(name, dims))
                dims[name] = Dim.sym(name)
            return dims[name]
        case ast.UnaryOp(op="-"):
            return -static_dim(node.operand, dims, allow_new)
        case ast.BinOp(op="+" | "-" | "*" | "//"):
            spine = ast.left_spine(node, lambda left: left.op in DIMENSION_OPS)
            first = static_dim(spine[-1].left, dims, allow_new)
            return dim_chain(spine, first, lambda e: static_dim(e, dims, allow_new))
    raise error_at(node.span, "expected a dimension: an integer, a dimension name, "
                              "or + - * // of those")


def dim_chain(spine: list[ast.BinOp], first: Dim,
              operand: Callable[[ast.Expr], Dim | None]) -> Dim | None:
    """`first` combined with the right operands of a left-leaning chain of dimension
    operators (None when `operand` gives None). A run of `//` divides once by the product
    of its divisors, as (n // a) // b == n // (a * b), so no chain nests floor divisions."""
    total, divisor = first, 1
    for link in reversed(spine):
        right = operand(link.right)
        if right is None:
            return None
        if link.op == "//":
            if not right.is_const or right.value <= 0:
                raise error_at(link.right.span, "a dimension can only be divided by a "
                                                "positive integer constant")
            divisor *= right.value
            if divisor > INT64_MAX:
                raise error_at(link.right.span, "the divisors of this dimension multiply to "
                                                "more than 64 bits")
            continue
        total, divisor = total // divisor, 1
        total = total + right if link.op == "+" else total - right if link.op == "-" \
            else total * right
    return total // divisor


def type_of(type_expr: ast.TensorTypeExpr, float_dtype: str, dims: dict[str, Dim],
            allow_new: bool = False) -> TensorType:
    """The IR type of an annotation; `allow_new` binds unseen dimension names (parameters
    of the called function); elsewhere an unknown dimension is an error."""
    dtype = float_dtype if type_expr.dtype == "float" else type_expr.dtype
    shape = tuple(static_dim(d, dims, allow_new) for d in (type_expr.dims or []))
    return TensorType(dtype, shape)


def return_types(ret: ast.TypeExpr | None) -> list[ast.TensorTypeExpr]:
    """The declared result types of a function, one per result (none if undeclared)."""
    if ret is None:
        return []
    return list(ret.elements) if isinstance(ret, ast.TupleTypeExpr) else [ret]


def default_float_of(dtypes: Sequence[str]) -> str:
    """The dtype a weak float literal takes: the function's float dtype if unique, else f32."""
    floats = {d for d in dtypes if d in FLOAT_DTYPES}
    return floats.pop() if len(floats) == 1 else "f32"


def is_dim_scalar(t: TensorType) -> bool:
    """An i64 scalar parameter is also a dimension: its value can size loops and slices."""
    return t.rank == 0 and t.dtype == "i64"


def dim_of(val: ExprValue) -> Dim | None:
    """The Dim an integer value statically equals (a `dim` or integer `const` op), if any."""
    op = val.value.op
    if op is not None and op.name == "dim":
        return op.attrs["dim"]
    if op is not None and op.name == "const" and val.type.is_int:
        return Dim.const(op.attrs["value"])
    return None


def unbindable_dims(shapes: Sequence[tuple[Dim, ...]], values: Sequence[str]) -> list[
        tuple[str, int, Dim]]:
    """The dimensions the call boundary can never bind, as (name, parameter index, the
    dimension it appears in). The boundary binds the `values` (i64 parameters) and every
    axis that is one name, then solves the other axes in parameter order when each is
    linear in its one unknown name (`runtime/native/call.py`); a name left over, such as one that
    appears only in `N * M` or `N // 2`, would fail every call."""
    known = set(values) | {d.symbol for shape in shapes for d in shape} - {None}
    missing = []
    for index, shape in enumerate(shapes):
        for dim in shape:
            if dim.symbol is not None or dim.is_const:
                continue
            unknown = dim.symbols() - known
            if len(unknown) == 1 and dim.is_linear_in(next(iter(unknown))):
                known |= unknown
                continue
            missing += [(name, index, dim) for name in sorted(unknown)]
            known |= unknown
    return missing
