"""`Lowerer`: the lowering of one function body, assembled from its parts.

`lower_expr` is the expression dispatch every part recurses through; calls are either
built-ins (`builtins.py`) or calls to user functions, inlined here: the callee's body is
lowered by a `Lowerer` of its own, with its parameters bound to the arguments and its
dimensions bound to the arguments' shapes, into the caller's current block.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import FLOAT_DTYPES
from reverie.compiler.lower.builtins import BuiltinLowering
from reverie.compiler.lower.dim_expressions import default_float_of, dim_of, is_dim_scalar, type_of
from reverie.compiler.lower.expressions import ExpressionLowering
from reverie.compiler.lower.statements import StatementLowering
from reverie.compiler.lower.values import ExprTuple, ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


def _bind_dims(callee: ast.FunctionDef, args: list[ExprValue], call: ast.Call) -> dict[str, Dim]:
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


class Lowerer(StatementLowering, BuiltinLowering, ExpressionLowering):
    """Lowers one (possibly inlined) function body into a block; see the package docstring
    for its parts."""

    def lower_expr(self, node: ast.Expr) -> ExprValue | ExprTuple:
        """Lower any expression into the current block."""
        if self.in_index_body(node):
            return self.hoisted(node)
        match node:
            case ast.IntLit(value=v):
                return self.constant(node.span, v, "i64", weak=True)
            case ast.FloatLit(value=v):
                return self.constant(node.span, v, self.default_float, weak=True)
            case ast.BoolLit(value=v):
                return self.constant(node.span, v, "bool", weak=False)
            case ast.Name():
                return self.lower_name(node)
            case ast.UnaryOp():
                return self.lower_unary(node)
            case ast.BinOp():
                return self.lower_binop(node)
            case ast.Call():
                return self.lower_call(node)
            case ast.IndexReduce():
                return self.lower_index_reduce(node)
            case ast.Subscript() if self.index_ctx is not None:
                return self.lower_read(node)
            case ast.Subscript():
                return self.lower_subscript(node)
            case ast.Attribute():
                return self.lower_attribute(node)
            case ast.TupleExpr():
                return ExprTuple([self.tensor(e) for e in node.elements])
        raise error_at(node.span, "this expression cannot be used here")

    def lower_call(self, call: ast.Call) -> ExprValue | ExprTuple:
        """A call of a user function (inlined), else of a built-in or a cast."""
        if call.func in self.specialisation.functions:
            return self.lower_user_call(call)
        return self.lower_builtin_call(call)

    # ------------------------------------------------------------ user calls

    def lower_user_call(self, call: ast.Call) -> ExprValue | ExprTuple:
        """Inline a call to a function of this module, once per block, callee and arguments.

        Functions are pure, so a second call of the same callee on the same values reuses the
        results of the first: `g(x) + g(x)` inlines `g` once, and a chain of such doublings
        lowers in time linear in its depth rather than exponential.
        """
        inlined = self.specialisation.inlined
        callee = self.specialisation.functions[call.func]
        if call.keywords:
            raise error_at(call.keywords[0].span,
                           f"'{callee.name}' takes positional arguments only")
        if len(call.args) != len(callee.params):
            raise error_at(call.span, f"'{callee.name}' takes {len(callee.params)} "
                                      f"argument(s), got {len(call.args)}")
        args = [self.tensor(a) for a in call.args]
        float_dtype = self._callee_float(callee, args)
        dims = _bind_dims(callee, args, call)
        converted: list[ExprValue] = []
        for param, arg, node in zip(callee.params, args, call.args, strict=True):
            want = type_of(param.type, float_dtype, dims)
            arg = self.convert_weak(arg, want.dtype, node.span)
            if arg.type != want:
                raise error_at(node.span, f"argument '{param.name}' of '{callee.name}' must "
                                          f"be {want}, got {arg.type}")
            converted.append(arg)
        key = (callee.name, float_dtype, self.builder,
               *(_argument_key(a.value) for a in converted))
        if key not in inlined:
            inlined[key] = self._inline(callee, converted, dims, float_dtype)
        results = inlined[key]
        return results[0] if len(results) == 1 else ExprTuple(results)

    def _callee_float(self, callee: ast.FunctionDef, args: list[ExprValue]) -> str:
        """The dtype `float` means in this call: from the arguments given for `float` params."""
        seen = {a.type.dtype for p, a in zip(callee.params, args, strict=True)
                if p.type.dtype == "float" and not a.weak and a.type.dtype in FLOAT_DTYPES}
        if len(seen) > 1:
            raise error_at(callee.name_span, f"'{callee.name}' is called with "
                                             f"{' and '.join(sorted(seen))} arguments for its "
                                             "'float' parameters")
        return seen.pop() if seen else self.default_float

    def _inline(self, callee: ast.FunctionDef, args: list[ExprValue], dims: dict[str, Dim],
                float_dtype: str) -> list[ExprValue]:
        """Lower `callee`'s body into the current block with its parameters bound to `args`."""
        inner = Lowerer(callee, self.specialisation, default_float_of([a.type.dtype for a in args]),
                        dims, self.builder)
        for param, arg in zip(callee.params, args, strict=True):
            if is_dim_scalar(arg.type) and dim_of(arg) is not None:
                inner.define_dim_scalar(param.name, dim_of(arg), param.span)
            else:
                inner.define(param.name, arg, param.span)
        return inner.coerce_return(inner.lower_body(), float_dtype)
