"""Lowering of expressions: names, literals, operators, broadcasting, subscripts.

Consumes AST expressions inside an `Env` and a `Region`; produces `Val`s (IR values plus a
weak-dtype flag) by emitting ops. Built-in calls are in `lower_builtins.py`, index notation
in `lower_index.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

from .ir.dims import Dim
from .ir.ops import broadcast_shapes, dtype_class
from .ir.types import INT_DTYPES, NUMPY_DTYPES, ShapeError
from .lower import Env, Region, TupleVal, Val, VarSlot, dim_of

ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
              "**": "pow"}
COMPARISON = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
LOGICAL = {"and": "and", "or": "or"}
DIMENSION_OPS = ("+", "-", "*", "//")
INT64_MAX = 2**63 - 1


def lower_expr(env: Env, region: Region, node: ast.Expr) -> Val | TupleVal:
    """Lower any expression."""
    from .lower_index import hoisted, in_index_body, lower_index_reduce, lower_read

    if in_index_body(env, region, node):
        return hoisted(env, region, node)
    match node:
        case ast.IntLit(value=v):
            return constant(region, node.span, v, "i64", weak=True)
        case ast.FloatLit(value=v):
            return constant(region, node.span, v, env.default_float, weak=True)
        case ast.BoolLit(value=v):
            return constant(region, node.span, v, "bool", weak=False)
        case ast.Name():
            return lower_name(env, region, node)
        case ast.UnaryOp():
            return lower_unary(env, region, node)
        case ast.BinOp():
            return lower_binop(env, region, node)
        case ast.Call():
            from .lower_builtins import lower_call

            return lower_call(env, region, node)
        case ast.IndexReduce():
            return lower_index_reduce(env, region, node)
        case ast.Subscript() if env.index_ctx is not None:
            return lower_read(env, region, node)
        case ast.Subscript():
            return lower_subscript(env, region, node)
        case ast.Attribute():
            return lower_attribute(env, region, node)
        case ast.TupleExpr():
            return TupleVal([tensor(env, region, e) for e in node.elements])
    raise error_at(node.span, "this expression cannot be used here")


def tensor(env: Env, region: Region, node: ast.Expr) -> Val:
    """Lower an expression that must be a single tensor (not a tuple)."""
    val = lower_expr(env, region, node)
    if isinstance(val, TupleVal):
        if isinstance(node, ast.Name):
            raise error_at(node.span, f"'{node.id}' is a tuple; take an element with "
                                      f"{node.id}[0]")
        raise error_at(node.span, "a tuple cannot be used as a tensor here")
    return val


def constant(region: Region, span: ast.Span, value: object, dtype: str, weak: bool) -> Val:
    """A scalar literal of `dtype` (a CompileError at `span` if it cannot hold the value)."""
    _require_representable(value, dtype, span)
    if dtype_class(dtype) == "float":
        value = float(value)  # type: ignore[arg-type]
    elif dtype in INT_DTYPES:
        value = int(value)  # type: ignore[call-overload]
    return Val(region.op_at(span, "const", [], {"value": value, "dtype": dtype}), weak)


def lower_name(env: Env, region: Region, node: ast.Name) -> Val | TupleVal:
    """A local (possibly a tuple), a `var`, an index or loop variable, or a dimension."""
    if node.id in env.index_vars:
        val = env.index_vars[node.id]
        return Val(region.use(val.value), val.weak)
    binding = env.lookup(node.id)
    if isinstance(binding, VarSlot):
        binding = binding.current
    if isinstance(binding, Val):
        return Val(region.use(binding.value), binding.weak)
    if isinstance(binding, TupleVal):
        return TupleVal([Val(region.use(e.value), e.weak) for e in binding.elements])
    if node.id in env.dim_map:
        return Val(region.op_at(node.span, "dim", [], {"dim": env.dim_map[node.id]}), weak=True)
    if node.id in env.lowering.functions:
        raise error_at(node.span, f"'{node.id}' is a function; call it as {node.id}(...)")
    raise error_at(node.span,
                   f"unknown name '{node.id}'" + did_you_mean(node.id, env.visible_names()))


# ---------------------------------------------------------------- dtypes and broadcasting


def convert_weak(env: Env, region: Region, val: Val, dtype: str | None, span: ast.Span) -> Val:
    """Give a weak value a definite dtype (`None`: keep its default); strong values pass."""
    if not val.weak:
        return val
    if dtype is None or dtype == val.type.dtype:
        return Val(val.value)
    source, target = dtype_class(val.type.dtype), dtype_class(dtype)
    if source == "float" and target != "float":
        raise error_at(span, f"a float value cannot be used as {dtype}; "
                             f"convert explicitly, e.g. {dtype}(...)")
    if val.value.op is not None and val.value.op.name == "const":
        literal = val.value.op
        return constant(region, literal.span or span, literal.attrs["value"], dtype, weak=False)
    return Val(region.op_at(span, "cast", [val.value], {"dtype": dtype}))


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


def unify(env: Env, region: Region, vals: list[Val], span: ast.Span) -> tuple[list[Val], bool]:
    """Bring operands to one dtype (weak ones follow strong ones); returns (vals, weak)."""
    strong = [v for v in vals if not v.weak]
    if not strong:
        classes = {dtype_class(v.type.dtype) for v in vals}
        dtype = env.default_float if "float" in classes else "i64"
        converted = [convert_weak(env, region, v, dtype, span) for v in vals]
        return [Val(v.value, True) for v in converted], True
    dtypes = sorted({v.type.dtype for v in strong})
    if len(dtypes) > 1:
        if set(dtypes) <= set(INT_DTYPES):
            dtypes = ["i64"]
            strong_vals = [Val(region.op_at(span, "cast", [v.value], {"dtype": "i64"}))
                           if not v.weak and v.type.dtype != "i64" else v for v in vals]
            vals = strong_vals
        else:
            a, b = dtypes[0], dtypes[1]
            raise error_at(span, f"cannot mix {a} and {b}; convert one side explicitly, "
                                 f"e.g. {b}(...) or {a}(...)")
    dtype = dtypes[0]
    return [convert_weak(env, region, v, dtype, span) for v in vals], False


def broadcast_to(region: Region, val: Val, shape: tuple[Dim, ...], span: ast.Span) -> Val:
    """`val` broadcast to `shape` (no op when it already has that shape)."""
    if val.type.shape == shape:
        return val
    return Val(region.op_at(span, "broadcast", [val.value], {"shape": shape}), val.weak)


def broadcast_all(region: Region, vals: list[Val], span: ast.Span) -> list[Val]:
    """NumPy-broadcast operands to their common shape."""
    shape: tuple[Dim, ...] = ()
    try:
        for v in vals:
            shape = broadcast_shapes(shape, v.type.shape)
    except ShapeError as e:
        types = " and ".join(str(v.type) for v in vals)
        raise error_at(span, f"cannot broadcast {types}: {e}") from None
    return [broadcast_to(region, v, shape, span) for v in vals]


def elementwise(env: Env, region: Region, name: str, vals: list[Val], span: ast.Span) -> Val:
    """Unify dtypes, broadcast, and emit elementwise op `name`."""
    vals, weak = unify(env, region, vals, span)
    vals = broadcast_all(region, vals, span)
    result = region.op_at(span, name, [v.value for v in vals])
    return Val(result, weak and result.type.dtype != "bool")


# ---------------------------------------------------------------- operators


def lower_unary(env: Env, region: Region, node: ast.UnaryOp) -> Val:
    """`-x` and `not x`."""
    val = tensor(env, region, node.operand)
    if node.op == "not":
        if val.type.dtype != "bool":
            raise error_at(node.span, f"'not' needs a bool operand, got {val.type}")
        return Val(region.op_at(node.span, "not", [val.value]))
    if val.type.dtype == "bool":
        raise error_at(node.span, "cannot negate a bool value; use 'not'")
    op = val.value.op
    if val.weak and op is not None and op.name == "const":  # `-5` is one literal
        return constant(region, node.span, -op.attrs["value"], val.type.dtype, weak=True)
    return Val(region.op_at(node.span, "neg", [val.value]), val.weak)


def lower_binop(env: Env, region: Region, node: ast.BinOp) -> Val:
    """Arithmetic, comparisons, logic and `@`; a chain `a + b - c ...` is lowered in a loop
    from its leftmost operand (`ast.left_spine`), so its length costs no recursion."""
    from .lower_index import in_index_body

    spine = ast.left_spine(node, lambda left: not in_index_body(env, region, left))
    value = tensor(env, region, spine[-1].left)
    for link in reversed(spine):
        value = _apply_binop(env, region, link, value)
    return value


def _apply_binop(env: Env, region: Region, node: ast.BinOp, left: Val) -> Val:
    """`node` applied to its already lowered left operand `left`."""
    if node.op == "@":
        from .lower_builtins import matmul

        return matmul(env, region, left, tensor(env, region, node.right), node.span)
    if node.op == "**" and isinstance(node.right, ast.IntLit) and node.right.value == 2:
        _require_float(left, "**", node.span)
        return elementwise(env, region, "mul", [left, left], node.span)
    right = tensor(env, region, node.right)
    if node.op in LOGICAL:
        for v in (left, right):
            if v.type.dtype != "bool":
                raise error_at(node.span, f"'{node.op}' needs bool operands, got {v.type}")
        return elementwise(env, region, LOGICAL[node.op], [left, right], node.span)
    if node.op in ("==", "!="):
        return elementwise(env, region, COMPARISON[node.op], [left, right], node.span)
    for v in (left, right):
        if v.type.dtype == "bool":
            raise error_at(node.span, f"'{node.op}' needs numbers, got {v.type}; "
                                      "convert with f32(...) or i64(...)")
    if node.op in COMPARISON:
        return elementwise(env, region, COMPARISON[node.op], [left, right], node.span)
    name = ARITHMETIC[node.op]
    if name in ("div", "pow"):
        (left, right), weak = unify(env, region, [left, right], node.span)
        if left.type.dtype in INT_DTYPES:
            if not weak:
                hint = ("use // for integer division, or convert with f32(...)" if name == "div"
                        else "convert the operands with f32(...) or f64(...)")
                raise error_at(node.span, f"'{node.op}' on integers is not supported; {hint}")
            left, right = (convert_weak(env, region, v, env.default_float, node.span)
                           for v in (left, right))
            return Val(elementwise(env, region, name, [left, right], node.span).value, True)
    return elementwise(env, region, name, [left, right], node.span)


def _require_float(val: Val, what: str, span: ast.Span) -> None:
    if not val.weak and dtype_class(val.type.dtype) != "float":
        raise error_at(span, f"'{what}' needs a float operand, got {val.type}; "
                             f"convert with f32(...) or f64(...)")


def lower_attribute(env: Env, region: Region, node: ast.Attribute) -> Val:
    """`x.T`: reverse the axes, like NumPy."""
    if node.attr != "T":
        raise error_at(node.span, f"unknown attribute '.{node.attr}'; the only one is '.T'")
    val = tensor(env, region, node.value)
    perm = list(reversed(range(val.type.rank)))
    return Val(region.op_at(node.span, "transpose", [val.value], {"perm": perm}), val.weak)


# ---------------------------------------------------------------- static dimensions


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
            return _dim_chain(spine, first, lambda e: static_dim(e, dims, allow_new))
    raise error_at(node.span, "expected a dimension: an integer, a dimension name, "
                              "or + - * // of those")


def _dim_chain(spine: list[ast.BinOp], first: Dim,
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


def try_static_dim(env: Env, node: ast.Expr) -> Dim | None:
    """The Dim of `node` if it is built only from integers and dimension names, else None."""
    match node:
        case ast.IntLit():
            return static_dim(node, env.dim_map)
        case ast.Name(id=name):
            if name not in env.dim_map or name in env.index_vars:
                return None
            binding = env.lookup(name)
            if binding is None or (isinstance(binding, Val) and dim_of(binding) is not None):
                return env.dim_map[name]
            return None
        case ast.UnaryOp(op="-"):
            inner = try_static_dim(env, node.operand)
            return None if inner is None else -inner
        case ast.BinOp(op="+" | "-" | "*" | "//"):
            spine = ast.left_spine(node, lambda left: left.op in DIMENSION_OPS)
            first = try_static_dim(env, spine[-1].left)
            return None if first is None else _dim_chain(
                spine, first, lambda e: try_static_dim(env, e))
    return None


# ---------------------------------------------------------------- subscripts


def lower_subscript(env: Env, region: Region, node: ast.Subscript) -> Val:
    """Slices and integer subscripts of a tensor; `f(x)[0]` picks from a tuple."""
    base = lower_expr(env, region, node.value)
    if isinstance(base, TupleVal):
        count = len(base.elements)
        item = node.items[0] if len(node.items) == 1 else None
        if not isinstance(item, ast.IntLit):
            raise error_at(node.span, f"a tuple of {count} is indexed by a single integer "
                                      "literal, e.g. [0]")
        if item.value >= count:
            raise error_at(item.span, f"index {item.value} is out of range for a tuple of "
                                      f"{count}")
        return base.elements[item.value]
    from .lower_slices import slice_tensor

    return slice_tensor(env, region, base, node)


def int_scalar(env: Env, region: Region, node: ast.Expr, what: str) -> Val:
    """Lower an integer scalar expression (a loop bound or a subscript) as i64."""
    val = tensor(env, region, node)
    if val.type.rank != 0 or val.type.dtype not in INT_DTYPES:
        raise error_at(node.span, f"{what} must be an integer scalar, got {val.type}")
    val = convert_weak(env, region, val, "i64", node.span)
    if val.type.dtype != "i64":
        val = Val(region.op_at(node.span, "cast", [val.value], {"dtype": "i64"}))
    return val

