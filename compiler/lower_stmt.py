"""Lowering of statements (`let`, `var`, assignment, `for`, `return`) and user calls.

A `for` loop becomes a `for` op whose region takes the loop index, the carried state (the
`var`s assigned in the body) and, as captured parameters, every outer value the body uses.
A call to a user function is inlined: the callee's body is lowered with its parameters
bound to the arguments and its dimensions bound to the arguments' shapes.
"""

from __future__ import annotations

from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

from .ir.core import Block, Value
from .ir.dims import Dim
from .ir.types import FLOAT_DTYPES, scalar
from .lower import (
    Env,
    Region,
    TupleVal,
    Val,
    VarSlot,
    default_float_of,
    define_dim_scalar,
    dim_of,
    is_dim_scalar,
    type_of,
)
from .lower_expr import convert_weak, int_scalar, lower_expr, tensor, try_static_dim
from .lower_index import lower_let_indexed


def lower_body(env: Env, region: Region, body: list[ast.Stmt], fn: ast.FunctionDef) -> list[Val]:
    """A function body: statements, then exactly one final `return`."""
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Return):
            if i != len(body) - 1:
                raise error_at(body[i + 1].span, "unreachable code after 'return'")
            value = lower_expr(env, region, stmt.value)
            return value.elements if isinstance(value, TupleVal) else [value]
        lower_stmt(env, region, stmt)
    raise error_at(fn.name_span, f"function '{fn.name}' must end with a 'return' statement")


def lower_block(env: Env, region: Region, body: list[ast.Stmt]) -> None:
    """The statements of a loop body, in a scope of their own."""
    env.scopes.append({})
    try:
        for stmt in body:
            if isinstance(stmt, ast.Return):
                raise error_at(stmt.span, "'return' is only allowed at the end of a function")
            lower_stmt(env, region, stmt)
    finally:
        env.scopes.pop()


def lower_stmt(env: Env, region: Region, stmt: ast.Stmt) -> None:
    """One statement other than `return`."""
    match stmt:
        case ast.Let():
            value = lower_expr(env, region, stmt.value)
            if isinstance(value, Val) and value.value.name is None and value.value.op is not None:
                value.value.name = stmt.name
            env.define(stmt.name, value, stmt.name_span)
        case ast.LetIndexed():
            value = lower_let_indexed(env, region, stmt)
            value.value.name = stmt.name
            env.define(stmt.name, value, stmt.name_span)
        case ast.VarDecl():
            value = convert_weak(env, region, tensor(env, region, stmt.value), None, stmt.span)
            env.define(stmt.name, VarSlot(value, stmt.span), stmt.name_span)
        case ast.Assign():
            _assign(env, region, stmt)
        case ast.For():
            _lower_for(env, region, stmt)
        case _:
            raise error_at(stmt.span, "this statement cannot be used here")


def _assign(env: Env, region: Region, stmt: ast.Assign) -> None:
    slot = env.lookup(stmt.name)
    if not isinstance(slot, VarSlot):
        if slot is None:
            raise error_at(stmt.name_span, f"unknown name '{stmt.name}'"
                                           + did_you_mean(stmt.name, env.visible_names()))
        raise error_at(stmt.name_span, f"cannot assign to '{stmt.name}': it was declared with "
                                       "'let'; declare it with 'var' to change it")
    value = tensor(env, region, stmt.value)
    value = convert_weak(env, region, value, slot.current.type.dtype, stmt.value.span)
    if value.type != slot.current.type:
        raise error_at(stmt.value.span, f"'{stmt.name}' has type {slot.current.type} but the "
                                        f"new value has type {value.type}")
    slot.current = value


def _assigned(body: list[ast.Stmt]) -> list[str]:
    """Names assigned anywhere in `body`, in first-assignment order."""
    names: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and node.name not in names:
                names.append(node.name)
    return names


def _lower_for(env: Env, region: Region, stmt: ast.For) -> None:
    lo, hi = _loop_bound(env, region, stmt.lo), _loop_bound(env, region, stmt.hi)
    slots = [(name, env.lookup(name)) for name in _assigned(stmt.body)]
    carried = [(name, slot) for name, slot in slots if isinstance(slot, VarSlot)]
    index = Value(scalar("i64"), name=stmt.var)
    block = Block(params=[index] + [Value(s.current.type, name=n) for n, s in carried])
    body = Region(block, parent=region)
    inits = [slot.current for _, slot in carried]
    for (_, slot), param in zip(carried, block.params[1:], strict=True):
        slot.current = Val(param)
    env.scopes.append({})
    env.define(stmt.var, Val(index, weak=True), stmt.var_span)
    try:
        lower_block(env, body, stmt.body)
    finally:
        env.scopes.pop()
    block.results = [body.use(slot.current.value) for _, slot in carried]
    operands = [lo.value, hi.value] + [v.value for v in inits] + [o for o, _ in body.captures]
    results = region.emit_at(stmt.span, "for", operands, {"carried": len(carried)}, [block])
    for (name, slot), result in zip(carried, results, strict=True):
        result.name = name
        slot.current = Val(result)


def _loop_bound(env: Env, region: Region, node: ast.Expr) -> Val:
    """A loop bound as an i64; one built from literals and dimensions (`N - 1`) is a single
    `dim` op, so its trip count is a dimension expression however long the bound is."""
    dim = None if isinstance(node, ast.IntLit | ast.Name) else try_static_dim(env, node)
    if dim is None:
        return int_scalar(env, region, node, "a loop bound")
    return Val(region.op_at(node.span, "dim", [], {"dim": dim}))


# ---------------------------------------------------------------- user calls


def _callee_float(env: Env, callee: ast.FunctionDef, args: list[Val]) -> str:
    """The dtype `float` means in this call: from the arguments given for `float` params."""
    seen = {a.type.dtype for p, a in zip(callee.params, args, strict=True)
            if p.type.dtype == "float" and not a.weak and a.type.dtype in FLOAT_DTYPES}
    if len(seen) > 1:
        raise error_at(callee.name_span, f"'{callee.name}' is called with both f32 and f64 "
                                         "arguments for its 'float' parameters")
    return seen.pop() if seen else env.default_float


def _bind_dims(callee: ast.FunctionDef, args: list[Val], call: ast.Call) -> dict[str, Dim]:
    """Callee dimension names → caller Dims, from plain dimension names in parameter types."""
    dims: dict[str, Dim] = {}
    for param, arg, node in zip(callee.params, args, call.args, strict=True):
        declared = param.type.dims or []
        if len(declared) != arg.type.rank:
            raise error_at(node.span, f"argument '{param.name}' of '{callee.name}' needs "
                                      f"{len(declared)} dimension(s), got {arg.type}")
        for dim_expr, size in zip(declared, arg.type.shape, strict=True):
            if isinstance(dim_expr, ast.Name) and dim_expr.id not in dims:
                dims[dim_expr.id] = size
    return dims


def _argument_key(value: Value) -> object:
    """What a callee can see of an argument: a constant or dimension by its attributes
    (equal literals give equal calls), any other value by identity."""
    op = value.op
    if op is not None and op.name in ("const", "dim"):
        return op.name, value.type, repr(sorted(op.attrs.items()))
    return value


def lower_user_call(env: Env, region: Region, call: ast.Call) -> Val | TupleVal:
    """Inline a call to a function of this module, once per region, callee and arguments.

    Functions are pure, so a second call of the same callee on the same values reuses the
    results of the first: `g(x) + g(x)` inlines `g` once, and a chain of such doublings
    lowers in time linear in its depth rather than exponential.
    """
    lowering = env.lowering
    callee = lowering.functions[call.func]
    if call.keywords:
        raise error_at(call.keywords[0].span, f"'{callee.name}' takes positional arguments only")
    if len(call.args) != len(callee.params):
        raise error_at(call.span, f"'{callee.name}' takes {len(callee.params)} argument(s), "
                                  f"got {len(call.args)}")
    args = [tensor(env, region, a) for a in call.args]
    float_dtype = _callee_float(env, callee, args)
    dims = _bind_dims(callee, args, call)
    converted: list[Val] = []
    for param, arg, node in zip(callee.params, args, call.args, strict=True):
        want = type_of(param.type, float_dtype, dims)
        arg = convert_weak(env, region, arg, want.dtype, node.span)
        if arg.type != want:
            raise error_at(node.span, f"argument '{param.name}' of '{callee.name}' must be "
                                      f"{want}, got {arg.type}")
        converted.append(arg)
    key = (callee.name, float_dtype, region, *(_argument_key(a.value) for a in converted))
    if key not in lowering.inlined:
        lowering.inlined[key] = _inline(env, region, callee, converted, dims, float_dtype)
    results = lowering.inlined[key]
    return results[0] if len(results) == 1 else TupleVal(results)


def _inline(env: Env, region: Region, callee: ast.FunctionDef, args: list[Val],
            dims: dict[str, Dim], float_dtype: str) -> list[Val]:
    """Lower `callee`'s body into `region` with its parameters bound to `args`."""
    callee_env = Env(callee, env.lowering, default_float_of([a.type.dtype for a in args]), dims)
    for param, arg in zip(callee.params, args, strict=True):
        if is_dim_scalar(arg.type) and dim_of(arg) is not None:
            define_dim_scalar(callee_env, region, param.name, dim_of(arg), param.span)
        else:
            callee_env.define(param.name, arg, param.span)
    results = lower_body(callee_env, region, callee.body, callee)
    return env.lowering.coerce_return(callee_env, region, callee, results, float_dtype)

