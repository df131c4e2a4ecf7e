"""Lowering of calls: the built-ins of SPEC §2.3, casts, and user functions.

Each built-in checks its own signature (positional count, keywords) and lowers to
primitive ops from the op table. Composite built-ins are spelled out here once:

    mean(x)           = reduce_sum(x) / size
    logsumexp(x)      = log(reduce_sum(exp(x - m'))) + m', m' = m, or 0 where m is ±inf
    softmax(x)        = e / reduce_sum(e),                 e = exp(x - m)
    log_softmax(x)    = s - log(reduce_sum(exp(s))),       s = x - m
                        with m = stop_gradient(max(x)) along the axes

The shifts give torch's values for ±inf and NaN: a NaN, a +inf or a row of only -inf
makes the softmax and log_softmax row NaN, while logsumexp is then NaN, +inf or -inf.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

from .ir.dims import Dim, num_elements
from .ir.ops import cast_array, dtype_class, unary_builtins
from .ir.types import DTYPES, INT_DTYPES, NUMPY_DTYPES
from .lower import Env, Region, TupleVal, Val
from .lower_expr import (
    broadcast_all,
    constant,
    convert_weak,
    elementwise,
    static_dim,
    tensor,
    try_static_dim,
    unify,
)

UNARY_BUILTINS = unary_builtins()
BINARY_BUILTINS = {"pow": "pow", "max": "maximum", "min": "minimum"}
REDUCE_OPS = {"sum": "reduce_sum", "prod": "reduce_prod", "max": "reduce_max", "min": "reduce_min"}
CASTS = ("f32", "f64", "i32", "i64", "float")


def _signature(call: ast.Call, positional: int | tuple[int, int], keywords: set[str]) -> dict:
    """Check positional count and keyword names; return keywords by name."""
    lo, hi = (positional, positional) if isinstance(positional, int) else positional
    if not lo <= len(call.args) <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        raise error_at(call.span, f"'{call.func}' takes {count} positional argument(s), "
                                  f"got {len(call.args)}")
    found = {}
    for kw in call.keywords:
        if kw.name not in keywords:
            allowed = ", ".join(sorted(keywords)) or "none"
            raise error_at(kw.span, f"'{call.func}' has no keyword '{kw.name}' "
                                    f"(allowed: {allowed})")
        if kw.name in found:
            raise error_at(kw.span, f"keyword '{kw.name}' given twice")
        found[kw.name] = kw.value
    return found


def _int_literal(node: ast.Expr) -> int | None:
    if isinstance(node, ast.IntLit):
        return node.value
    if isinstance(node, ast.UnaryOp) and node.op == "-" and isinstance(node.operand, ast.IntLit):
        return -node.operand.value
    return None


def _axis(node: ast.Expr, rank: int) -> int:
    """One axis (negative counts from the end), checked against `rank`."""
    value = _int_literal(node)
    if value is None:
        raise error_at(node.span, "an axis must be an integer literal")
    if not -rank <= value < rank:
        raise error_at(node.span, f"axis {value} is out of range for a rank-{rank} tensor")
    return value % rank


def _axes(node: ast.Expr | None, rank: int) -> tuple[int, ...]:
    """`axis=` as a sorted tuple; None means every axis."""
    if node is None:
        return tuple(range(rank))
    items = node.elements if isinstance(node, ast.TupleExpr) else [node]
    axes = tuple(_axis(item, rank) for item in items)
    if len(set(axes)) != len(axes):
        raise error_at(node.span, "repeated axis")
    return tuple(sorted(axes))


def _keepdims(node: ast.Expr | None) -> bool:
    if node is None:
        return False
    if not isinstance(node, ast.BoolLit):
        raise error_at(node.span, "keepdims must be true or false")
    return node.value


def _float_operand(env: Env, region: Region, node: ast.Expr, what: str) -> Val:
    """An operand that must have a float dtype (weak literals become the default float)."""
    val = tensor(env, region, node)
    if val.weak:
        return Val(convert_weak(env, region, val, env.default_float, node.span).value, True)
    if dtype_class(val.type.dtype) != "float":
        raise error_at(node.span, f"'{what}' needs a float operand, got {val.type}; "
                                  "convert with f32(...) or f64(...)")
    return val


# ---------------------------------------------------------------- reductions


def _kept_shape(shape: tuple[Dim, ...], axes: tuple[int, ...]) -> tuple[Dim, ...]:
    return tuple(Dim.const(1) if i in axes else d for i, d in enumerate(shape))


def reduce(region: Region, op: str, val: Val, axes: tuple[int, ...], keepdims: bool,
           span: ast.Span) -> Val:
    """A reduction over `axes`, optionally keeping them as size-1 dims."""
    value = region.op_at(span, op, [val.value], {"axes": axes})
    if keepdims:
        value = region.op_at(span, "reshape", [value], {"shape": _kept_shape(val.type.shape, axes)})
    return Val(value)


def _max_without_gradient(region: Region, x: Val, axes: tuple[int, ...],
                          span: ast.Span) -> Val:
    """max over axes (kept), through stop_gradient: the shift of softmax and log_softmax."""
    m = reduce(region, "reduce_max", x, axes, True, span)
    return Val(region.op_at(span, "stop_gradient", [m.value]))


def _stable_max(env: Env, region: Region, x: Val, axes: tuple[int, ...], span: ast.Span) -> Val:
    """The shift of logsumexp: max over axes (kept), without gradient, ±inf replaced by 0."""
    m = _max_without_gradient(region, x, axes, span)
    inf = constant(region, span, float("inf"), x.type.dtype, weak=True)
    is_inf = elementwise(env, region, "eq", [Val(region.op_at(span, "abs", [m.value])), inf], span)
    zero = constant(region, span, 0.0, x.type.dtype, weak=False)
    zero = broadcast_all(region, [zero, m], span)[0]
    return Val(region.op_at(span, "select", [is_inf.value, zero.value, m.value]))


def logsumexp(env: Env, region: Region, x: Val, axes: tuple[int, ...], keepdims: bool,
              span: ast.Span) -> Val:
    """log(sum(exp(x))) over axes, shifted by the max for stability."""
    m = _stable_max(env, region, x, axes, span)
    shifted = elementwise(env, region, "sub", [x, m], span)
    e = Val(region.op_at(span, "exp", [shifted.value]))
    total = reduce(region, "reduce_sum", e, axes, True, span)
    log_total = Val(region.op_at(span, "log", [total.value]))
    result = elementwise(env, region, "add", [log_total, m], span)
    if not keepdims:
        shape = tuple(d for i, d in enumerate(x.type.shape) if i not in axes)
        result = Val(region.op_at(span, "reshape", [result.value], {"shape": shape}))
    return result


def _lower_reduction(env: Env, region: Region, call: ast.Call) -> Val:
    kws = _signature(call, 1, {"axis", "keepdims"})
    x = tensor(env, region, call.args[0])
    x = convert_weak(env, region, x, None, call.span)
    axes = _axes(kws.get("axis"), x.type.rank)
    keepdims = _keepdims(kws.get("keepdims"))
    if x.type.dtype == "bool":
        raise error_at(call.args[0].span, f"'{call.func}' needs numbers, got {x.type}")
    if call.func in REDUCE_OPS:
        return reduce(region, REDUCE_OPS[call.func], x, axes, keepdims, call.span)
    x = _float_operand(env, region, call.args[0], call.func)
    if call.func == "logsumexp":
        return logsumexp(env, region, x, axes, keepdims, call.span)
    total = reduce(region, "reduce_sum", x, axes, keepdims, call.span)
    count = num_elements(tuple(x.type.shape[a] for a in axes))
    size = Val(region.op_at(call.span, "dim", [], {"dim": count}), weak=True)
    return elementwise(env, region, "div", [total, size], call.span)


def _lower_arg_reduction(env: Env, region: Region, call: ast.Call) -> Val:
    kws = _signature(call, 1, {"axis", "keepdims"})
    x = convert_weak(env, region, tensor(env, region, call.args[0]), None, call.span)
    axis_node = kws.get("axis")
    axis = None if axis_node is None else _axis(axis_node, x.type.rank)
    result = Val(region.op_at(call.span, call.func, [x.value], {"axis": axis}))
    if _keepdims(kws.get("keepdims")):
        axes = tuple(range(x.type.rank)) if axis is None else (axis,)
        shape = _kept_shape(x.type.shape, axes)
        result = Val(region.op_at(call.span, "reshape", [result.value], {"shape": shape}))
    return result


def _lower_softmax(env: Env, region: Region, call: ast.Call) -> Val:
    kws = _signature(call, 1, {"axis"})
    x = _float_operand(env, region, call.args[0], call.func)
    axis_node = kws.get("axis")
    axes = (x.type.rank - 1,) if axis_node is None else (_axis(axis_node, x.type.rank),)
    if x.type.rank == 0:
        raise error_at(call.args[0].span, f"'{call.func}' needs at least one axis")
    m = _max_without_gradient(region, x, axes, call.span)
    shifted = elementwise(env, region, "sub", [x, m], call.span)
    e = Val(region.op_at(call.span, "exp", [shifted.value]))
    total = reduce(region, "reduce_sum", e, axes, True, call.span)
    if call.func == "log_softmax":
        log_total = Val(region.op_at(call.span, "log", [total.value]))
        return elementwise(env, region, "sub", [shifted, log_total], call.span)
    return elementwise(env, region, "div", [e, total], call.span)


# ---------------------------------------------------------------- shapes and linear algebra


def matmul(env: Env, region: Region, a: Val, b: Val, span: ast.Span) -> Val:
    """NumPy matmul for 1-D and 2-D operands, through a 2-D `matmul` op and reshapes."""
    (a, b), _ = unify(env, region, [a, b], span)
    if not (1 <= a.type.rank <= 2 and 1 <= b.type.rank <= 2):
        raise error_at(span, f"'@' needs 1-D or 2-D operands, got {a.type} and {b.type}")
    one = Dim.const(1)
    a2 = a.value if a.type.rank == 2 else region.op_at(span, "reshape", [a.value],
                                                    {"shape": (one, a.type.shape[0])})
    b2 = b.value if b.type.rank == 2 else region.op_at(span, "reshape", [b.value],
                                                    {"shape": (b.type.shape[0], one)})
    product = region.op_at(span, "matmul", [a2, b2])
    shape = tuple(([a.type.shape[0]] if a.type.rank == 2 else [])
                  + ([b.type.shape[1]] if b.type.rank == 2 else []))
    if shape != product.type.shape:
        product = region.op_at(span, "reshape", [product], {"shape": shape})
    return Val(product)


def _lower_transpose(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, (1, 2), set())
    x = tensor(env, region, call.args[0])
    if len(call.args) == 1:
        perm = list(reversed(range(x.type.rank)))
    else:
        node = call.args[1]
        items = node.elements if isinstance(node, ast.TupleExpr) else [node]
        perm = [_axis(item, x.type.rank) for item in items]
    if sorted(perm) != list(range(x.type.rank)):
        raise error_at(call.span, f"{tuple(perm)} is not a permutation of the axes of {x.type}")
    return Val(region.op_at(call.span, "transpose", [x.value], {"perm": perm}), x.weak)


def _lower_reshape(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 2, set())
    x = tensor(env, region, call.args[0])
    node = call.args[1]
    items = node.elements if isinstance(node, ast.TupleExpr) else [node]
    shape = tuple(static_dim(item, env.dim_map) for item in items)
    return Val(region.op_at(call.span, "reshape", [x.value], {"shape": shape}), x.weak)


def _lower_roll(env: Env, region: Region, call: ast.Call) -> Val:
    kws = _signature(call, 2, {"axis"})
    x = tensor(env, region, call.args[0])
    shift = try_static_dim(env, call.args[1])
    if shift is None:
        raise error_at(call.args[1].span, "a roll shift must be an integer constant or a "
                                          "dimension expression")
    if "axis" in kws or x.type.rank == 1:
        axis = _axis(kws["axis"], x.type.rank) if "axis" in kws else 0
        attrs = {"shift": shift, "axis": axis}
        return Val(region.op_at(call.span, "roll", [x.value], attrs), x.weak)
    flat = region.op_at(call.span, "reshape", [x.value], {"shape": (num_elements(x.type.shape),)})
    rolled = region.op_at(call.span, "roll", [flat], {"shift": shift, "axis": 0})
    return Val(region.op_at(call.span, "reshape", [rolled], {"shape": x.type.shape}), x.weak)


def _lower_concat(env: Env, region: Region, call: ast.Call) -> Val:
    kws = _signature(call, 1, {"axis"})
    node = call.args[0]
    if not isinstance(node, ast.TupleExpr) or not node.elements:
        raise error_at(node.span, "concat takes a tuple of tensors, e.g. concat((a, b), axis=0)")
    parts, weak = unify(env, region, [tensor(env, region, e) for e in node.elements], call.span)
    rank = parts[0].type.rank
    axis = _axis(kws["axis"], rank) if "axis" in kws else 0
    return Val(region.op_at(call.span, "concat", [p.value for p in parts], {"axis": axis}), weak)


def _lower_where(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 3, set())
    cond = tensor(env, region, call.args[0])
    if cond.type.dtype != "bool":
        raise error_at(call.args[0].span, f"the condition of 'where' must be bool, got {cond.type}")
    (a, b), weak = unify(env, region, [tensor(env, region, e) for e in call.args[1:]], call.span)
    cond, a, b = broadcast_all(region, [cond, a, b], call.span)
    return Val(region.op_at(call.span, "select", [cond.value, a.value, b.value]), weak)


def _lower_cast(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 1, set())
    dtype = env.default_float if call.func == "float" else call.func
    x = tensor(env, region, call.args[0])
    if x.weak and x.value.op is not None and x.value.op.name == "const":
        value = x.value.op.attrs["value"]
        if dtype in INT_DTYPES and isinstance(value, float):  # the run-time rule, for literals
            value = cast_array(np.array(value), NUMPY_DTYPES[dtype]).item()
        return constant(region, call.span, value, dtype, weak=False)
    if x.type.dtype == dtype:
        return Val(x.value)
    return Val(region.op_at(call.span, "cast", [x.value], {"dtype": dtype}))


def _lower_unary(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 1, set())
    if call.func in ("abs", "sign"):
        x = tensor(env, region, call.args[0])
        if x.type.dtype == "bool":
            raise error_at(call.args[0].span, f"'{call.func}' needs numbers, got bool")
    else:
        x = _float_operand(env, region, call.args[0], call.func)
    return Val(region.op_at(call.span, call.func, [x.value]), x.weak)


def _lower_stop_gradient(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 1, set())
    x = tensor(env, region, call.args[0])
    return Val(region.op_at(call.span, "stop_gradient", [x.value]), x.weak)


def _lower_binary(env: Env, region: Region, call: ast.Call) -> Val:
    _signature(call, 2, set())
    a, b = (tensor(env, region, e) for e in call.args)
    result = elementwise(env, region, BINARY_BUILTINS[call.func], [a, b], call.span)
    return result


BUILTINS: dict[str, Callable[[Env, Region, ast.Call], Val]] = {
    **{name: _lower_unary for name in UNARY_BUILTINS},
    **{name: _lower_cast for name in CASTS},
    "pow": _lower_binary,
    "sum": _lower_reduction, "prod": _lower_reduction, "mean": _lower_reduction,
    "logsumexp": _lower_reduction,
    "argmax": _lower_arg_reduction, "argmin": _lower_arg_reduction,
    "softmax": _lower_softmax, "log_softmax": _lower_softmax,
    "transpose": _lower_transpose, "reshape": _lower_reshape, "roll": _lower_roll,
    "concat": _lower_concat, "where": _lower_where, "stop_gradient": _lower_stop_gradient,
}


def lower_call(env: Env, region: Region, call: ast.Call) -> Val | TupleVal:
    """A built-in, a cast, `max`/`min` (reduction with one argument, elementwise with two),
    or a user function (inlined)."""
    if call.func in env.lowering.functions:
        from .lower_stmt import lower_user_call

        return lower_user_call(env, region, call)
    if call.func in ("max", "min"):
        if len(call.args) == 2:
            return _lower_binary(env, region, call)
        return _lower_reduction(env, region, call)
    if call.func in BUILTINS:
        return BUILTINS[call.func](env, region, call)
    if env.lookup(call.func) is not None or call.func in env.index_vars:
        raise error_at(call.func_span, f"'{call.func}' is a value, not a function")
    if call.func == "bool" or call.func in DTYPES:
        raise error_at(call.func_span, f"'{call.func}' is not a cast; compare instead, e.g. x != 0")
    names = list(BUILTINS) + ["max", "min"] + list(env.lowering.functions)
    raise error_at(call.func_span,
                   f"unknown function '{call.func}'" + did_you_mean(call.func, names))

