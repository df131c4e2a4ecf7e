"""Lowering of calls to the built-ins of docs/language.md §8 and to casts.

Each built-in checks its own signature (positional count, keywords) and lowers to
primitive ops from the op table. Composite built-ins are spelled out here once:

    mean(x)           = reduce_sum(x) / size
    logsumexp(x)      = log(reduce_sum(exp(x - m'))) + m', m' = m, or 0 where m is ±inf
    softmax(x)        = e / reduce_sum(e),                 e = exp(x - m)
    log_softmax(x)    = s - log(reduce_sum(exp(s))),       s = x - m
                        with m = stop_gradient(max(x)) along the axes

The shifts give torch's values for ±inf and NaN: a NaN, a +inf or a row of only -inf
makes the softmax and log_softmax row NaN, while logsumexp is then NaN, +inf or -inf.
`BUILTINS` maps each name to the method that lowers it; calls to user functions are
inlined by `Lowerer` before a name is looked up here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reverie.compiler.ir.bessel_real_order import MAX_ORDER
from reverie.compiler.ir.dims import num_elements
from reverie.compiler.ir.elementwise import builtin_names
from reverie.compiler.ir.op_defs import cast_array, dtype_class
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.types import DTYPES, INT_DTYPES, NUMPY_DTYPES
from reverie.compiler.lower.arguments import axes, axis, keepdims, kept_shape, signature
from reverie.compiler.lower.dim_expressions import static_dim
from reverie.compiler.lower.linalg import LINALG_BUILTINS, LinalgLowering
from reverie.compiler.lower.scans_sorts import SCAN_BUILTINS
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

UNARY_BUILTINS = builtin_names(1)
# `pow(a, b)`, `max(a, b)`, and the binary rows flagged `builtin`: `arctan2(y, x)`, ...
BINARY_BUILTINS = {"pow": "pow", "max": "maximum", "min": "minimum",
                   **{name: name for name in builtin_names(2)}}
# Every reduction of `ir/reduce_kinds.py`, by the name users call it by: `sum(x, axis=0)`
REDUCTIONS = {kind.name: kind.op for kind in REDUCE_KINDS.values()}
CASTS = ("f32", "f64", "bf16", "f16", "i32", "i64", "float")


class BuiltinLowering(LinalgLowering):
    """One method per family of built-ins; `lower_builtin_call` picks it by name."""

    def lower_builtin_call(self, call: ast.Call) -> ExprValue:
        """A built-in, a cast, or `max`/`min` (a reduction with one argument, elementwise
        with two); any other name is an error that says what the name is."""
        if call.func in ("max", "min"):
            if len(call.args) == 2:
                return self._binary(call)
            return self._reduction(call)
        if call.func in BUILTINS:
            return BUILTINS[call.func](self, call)
        if self.lookup(call.func) is not None or call.func in self.index_vars:
            raise error_at(call.func_span, f"'{call.func}' is a value, not a function")
        if call.func == "bool" or call.func in DTYPES:
            raise error_at(call.func_span,
                           f"'{call.func}' is not a cast; compare instead, e.g. x != 0")
        names = list(BUILTINS) + ["max", "min"] + list(self.specialisation.functions)
        raise error_at(call.func_span,
                       f"unknown function '{call.func}'" + did_you_mean(call.func, names))

    def _float_operand(self, node: ast.Expr, what: str) -> ExprValue:
        """An operand that must have a float dtype (weak literals become the default float)."""
        val = self.tensor(node)
        if val.weak:
            return ExprValue(self.convert_weak(val, self.default_float, node.span).value, True)
        if dtype_class(val.type.dtype) != "float":
            raise error_at(node.span, f"'{what}' needs a float operand, got {val.type}; "
                                      "convert with f32(...) or f64(...)")
        return val

    # ------------------------------------------------------------ reductions

    def reduce(self, op: str, val: ExprValue, over: tuple[int, ...], keep: bool,
               span: ast.Span) -> ExprValue:
        """A reduction over axes `over`, optionally keeping them as size-1 dims."""
        value = self.builder.op_at(span, op, [val.value], {"axes": over})
        if keep:
            value = self.builder.op_at(span, "reshape", [value],
                                       {"shape": kept_shape(val.type.shape, over)})
        return ExprValue(value)

    def _max_without_gradient(self, x: ExprValue, over: tuple[int, ...],
                              span: ast.Span) -> ExprValue:
        """max over axes (kept), through stop_gradient: the shift of softmax and log_softmax."""
        m = self.reduce("reduce_max", x, over, True, span)
        return ExprValue(self.builder.op_at(span, "stop_gradient", [m.value]))

    def _stable_max(self, x: ExprValue, over: tuple[int, ...], span: ast.Span) -> ExprValue:
        """The shift of logsumexp: max over axes (kept), without gradient, ±inf replaced by 0."""
        m = self._max_without_gradient(x, over, span)
        inf = self.constant(span, float("inf"), x.type.dtype, weak=True)
        magnitude = ExprValue(self.builder.op_at(span, "abs", [m.value]))
        is_inf = self.elementwise("eq", [magnitude, inf], span)
        zero = self.constant(span, 0.0, x.type.dtype, weak=False)
        zero = self.broadcast_all([zero, m], span)[0]
        return ExprValue(self.builder.op_at(span, "select", [is_inf.value, zero.value, m.value]))

    def logsumexp(self, x: ExprValue, over: tuple[int, ...], keep: bool,
                  span: ast.Span) -> ExprValue:
        """log(sum(exp(x))) over axes, shifted by the max for stability."""
        m = self._stable_max(x, over, span)
        shifted = self.elementwise("sub", [x, m], span)
        e = ExprValue(self.builder.op_at(span, "exp", [shifted.value]))
        total = self.reduce("reduce_sum", e, over, True, span)
        log_total = ExprValue(self.builder.op_at(span, "log", [total.value]))
        result = self.elementwise("add", [log_total, m], span)
        if not keep:
            shape = tuple(d for i, d in enumerate(x.type.shape) if i not in over)
            result = ExprValue(self.builder.op_at(span, "reshape", [result.value],
                                                  {"shape": shape}))
        return result

    def _reduction(self, call: ast.Call) -> ExprValue:
        """`sum`, `prod`, `max`, `min`, `mean`, `logsumexp` with `axis=` and `keepdims=`."""
        kws = signature(call, 1, {"axis", "keepdims"})
        x = self.tensor(call.args[0])
        x = self.convert_weak(x, None, call.span)
        over = axes(kws.get("axis"), x.type.rank)
        keep = keepdims(kws.get("keepdims"))
        if x.type.dtype == "bool":
            raise error_at(call.args[0].span, f"'{call.func}' needs numbers, got {x.type}")
        if call.func in REDUCTIONS:
            return self.reduce(REDUCTIONS[call.func], x, over, keep, call.span)
        x = self._float_operand(call.args[0], call.func)
        if call.func == "logsumexp":
            return self.logsumexp(x, over, keep, call.span)
        total = self.reduce("reduce_sum", x, over, keep, call.span)
        count = num_elements(tuple(x.type.shape[a] for a in over))
        size = ExprValue(self.builder.op_at(call.span, "dim", [], {"dim": count}), weak=True)
        return self.elementwise("div", [total, size], call.span)

    def _arg_reduction(self, call: ast.Call) -> ExprValue:
        """`argmax` and `argmin`, over one axis or the flattened tensor."""
        kws = signature(call, 1, {"axis", "keepdims"})
        x = self.convert_weak(self.tensor(call.args[0]), None, call.span)
        axis_node = kws.get("axis")
        chosen = None if axis_node is None else axis(axis_node, x.type.rank)
        result = ExprValue(self.builder.op_at(call.span, call.func, [x.value], {"axis": chosen}))
        if keepdims(kws.get("keepdims")):
            over = tuple(range(x.type.rank)) if chosen is None else (chosen,)
            shape = kept_shape(x.type.shape, over)
            result = ExprValue(self.builder.op_at(call.span, "reshape", [result.value],
                                                  {"shape": shape}))
        return result

    def _softmax(self, call: ast.Call) -> ExprValue:
        """`softmax` and `log_softmax` along one axis (the last by default)."""
        kws = signature(call, 1, {"axis"})
        x = self._float_operand(call.args[0], call.func)
        axis_node = kws.get("axis")
        over = (x.type.rank - 1,) if axis_node is None else (axis(axis_node, x.type.rank),)
        if x.type.rank == 0:
            raise error_at(call.args[0].span, f"'{call.func}' needs at least one axis")
        m = self._max_without_gradient(x, over, call.span)
        shifted = self.elementwise("sub", [x, m], call.span)
        e = ExprValue(self.builder.op_at(call.span, "exp", [shifted.value]))
        total = self.reduce("reduce_sum", e, over, True, call.span)
        if call.func == "log_softmax":
            log_total = ExprValue(self.builder.op_at(call.span, "log", [total.value]))
            return self.elementwise("sub", [shifted, log_total], call.span)
        return self.elementwise("div", [e, total], call.span)

    # ------------------------------------------------------------ shapes

    def _transpose(self, call: ast.Call) -> ExprValue:
        """`transpose(x)` reverses the axes; `transpose(x, (1, 0, 2))` permutes them."""
        signature(call, (1, 2), set())
        x = self.tensor(call.args[0])
        if len(call.args) == 1:
            perm = list(reversed(range(x.type.rank)))
        else:
            node = call.args[1]
            items = node.elements if isinstance(node, ast.TupleExpr) else [node]
            perm = [axis(item, x.type.rank) for item in items]
        if sorted(perm) != list(range(x.type.rank)):
            raise error_at(call.span,
                           f"{tuple(perm)} is not a permutation of the axes of {x.type}")
        return ExprValue(self.builder.op_at(call.span, "transpose", [x.value], {"perm": perm}),
                         x.weak)

    def _reshape(self, call: ast.Call) -> ExprValue:
        """`reshape(x, (N, M))`, the new shape written as dimension expressions."""
        signature(call, 2, set())
        x = self.tensor(call.args[0])
        node = call.args[1]
        items = node.elements if isinstance(node, ast.TupleExpr) else [node]
        shape = tuple(static_dim(item, self.dim_map) for item in items)
        return ExprValue(self.builder.op_at(call.span, "reshape", [x.value], {"shape": shape}),
                         x.weak)

    def _roll(self, call: ast.Call) -> ExprValue:
        """`roll(x, shift, axis=a)`; without an axis a tensor of rank > 1 rolls flattened."""
        kws = signature(call, 2, {"axis"})
        x = self.tensor(call.args[0])
        shift = self.try_static_dim(call.args[1])
        if shift is None:
            raise error_at(call.args[1].span, "a roll shift must be an integer constant or a "
                                              "dimension expression")
        if "axis" in kws or x.type.rank == 1:
            chosen = axis(kws["axis"], x.type.rank) if "axis" in kws else 0
            attrs = {"shift": shift, "axis": chosen}
            return ExprValue(self.builder.op_at(call.span, "roll", [x.value], attrs), x.weak)
        flat = self.builder.op_at(call.span, "reshape", [x.value],
                                  {"shape": (num_elements(x.type.shape),)})
        rolled = self.builder.op_at(call.span, "roll", [flat], {"shift": shift, "axis": 0})
        return ExprValue(self.builder.op_at(call.span, "reshape", [rolled],
                                            {"shape": x.type.shape}), x.weak)

    def _concat(self, call: ast.Call) -> ExprValue:
        """`concat((a, b, ...), axis=a)`."""
        kws = signature(call, 1, {"axis"})
        node = call.args[0]
        if not isinstance(node, ast.TupleExpr) or not node.elements:
            raise error_at(node.span,
                           "concat takes a tuple of tensors, e.g. concat((a, b), axis=0)")
        parts, weak = self.unify([self.tensor(e) for e in node.elements], call.span)
        rank = parts[0].type.rank
        chosen = axis(kws["axis"], rank) if "axis" in kws else 0
        return ExprValue(self.builder.op_at(call.span, "concat", [p.value for p in parts],
                                            {"axis": chosen}), weak)

    # ------------------------------------------------------------ elementwise

    def _where(self, call: ast.Call) -> ExprValue:
        """`where(cond, a, b)`, broadcasting all three."""
        signature(call, 3, set())
        cond = self.tensor(call.args[0])
        if cond.type.dtype != "bool":
            raise error_at(call.args[0].span,
                           f"the condition of 'where' must be bool, got {cond.type}")
        (a, b), weak = self.unify([self.tensor(e) for e in call.args[1:]], call.span)
        cond, a, b = self.broadcast_all([cond, a, b], call.span)
        return ExprValue(self.builder.op_at(call.span, "select", [cond.value, a.value, b.value]),
                         weak)

    def _cast(self, call: ast.Call) -> ExprValue:
        """`f32(x)`, `i64(x)`, `float(x)`...; a cast literal is folded to a constant."""
        signature(call, 1, set())
        dtype = self.default_float if call.func == "float" else call.func
        x = self.tensor(call.args[0])
        if x.weak and x.value.op is not None and x.value.op.name == "const":
            value = x.value.op.attrs["value"]
            if dtype in INT_DTYPES and isinstance(value, float):  # the run-time rule, for literals
                value = cast_array(np.array(value), NUMPY_DTYPES[dtype]).item()
            return self.constant(call.span, value, dtype, weak=False)
        if x.type.dtype == dtype:
            return ExprValue(x.value)
        return ExprValue(self.builder.op_at(call.span, "cast", [x.value], {"dtype": dtype}))

    def _unary(self, call: ast.Call) -> ExprValue:
        """A unary elementwise built-in: `abs` and `sign` take any number, the rest floats."""
        signature(call, 1, set())
        if call.func in ("abs", "sign"):
            x = self.tensor(call.args[0])
            if x.type.dtype == "bool":
                raise error_at(call.args[0].span, f"'{call.func}' needs numbers, got bool")
        else:
            x = self._float_operand(call.args[0], call.func)
        return ExprValue(self.builder.op_at(call.span, call.func, [x.value]), x.weak)

    def _integer_constant(self, node: ast.Expr, least: int | None, message: str) -> int:
        """The integer constant `node`, at least `least` (None: any); else the CompileError
        `message` at it (an op attribute given as a built-in's argument)."""
        value = self.try_static_dim(node)
        if value is None or not value.is_const or (least is not None and value.value < least):
            raise error_at(node.span, message)
        return value.value

    def _multigammaln(self, call: ast.Call) -> ExprValue:
        """`multigammaln(x, d)`: d a positive integer constant (the op's attribute)."""
        signature(call, 2, set())
        x = self._float_operand(call.args[0], call.func)
        d = self._integer_constant(call.args[1], 1, "the dimension d of 'multigammaln(x, d)' "
                                                    "must be a positive integer constant, e.g. 3")
        return ExprValue(self.builder.op_at(call.span, "multigammaln", [x.value], {"d": d}),
                         x.weak)

    def _polygamma(self, call: ast.Call) -> ExprValue:
        """`polygamma(n, x)` = ψ⁽ⁿ⁾(x) (SciPy's order of arguments): n a non-negative integer
        constant; digamma for n = 0, else the op `polygamma {order = n}`."""
        signature(call, 2, set())
        n = self._integer_constant(call.args[0], 0, "the order n of 'polygamma(n, x)' must be "
                                                    "a non-negative integer constant, e.g. 2")
        x = self._float_operand(call.args[1], call.func)
        if n == 0:
            return ExprValue(self.builder.op_at(call.span, "digamma", [x.value]), x.weak)
        return ExprValue(self.builder.op_at(call.span, "polygamma", [x.value], {"order": n}),
                         x.weak)

    def _real_constant(self, node: ast.Expr, message: str) -> float:
        """A float literal (negated too) or an integer constant (a constant size too); else
        the CompileError `message` at it (a real op attribute given as an argument)."""
        literal, sign = node, 1
        if isinstance(node, ast.UnaryOp) and node.op == "-":
            literal, sign = node.operand, -1
        if isinstance(literal, ast.FloatLit):
            return sign * float(literal.value)
        return float(self._integer_constant(node, None, message))

    def _integral_order(self, node: ast.Expr, message: str) -> int:
        """An integer constant, or a float literal of integral value (SciPy's jn(2.0, x),
        which rv.trace writes); else the CompileError `message` at it."""
        value = self._real_constant(node, message)
        if not value.is_integer():
            raise error_at(node.span, message)
        return int(value)

    def _bessel_integer_order(self, call: ast.Call) -> ExprValue:
        """`jn(n, x)`, `yn(n, x)`: Bessel functions of integer order n (SciPy's order of
        arguments), n an integer constant of either sign (2.0 too)."""
        signature(call, 2, set())
        n = self._integral_order(call.args[0], f"the order n of '{call.func}(n, x)' must be "
                                               f"an integer constant, e.g. 2 or 2.0")
        x = self._float_operand(call.args[1], call.func)
        return self._integer_order_op(call, call.func[0], n, x)

    def _integer_order_op(self, call: ast.Call, kind: str, n: int, x: ExprValue) -> ExprValue:
        """Jₙ(x) or Yₙ(x) (`kind` "j" or "y"): j0, j1, y0, y1 or the op `jn`/`yn {order =
        |n|}`, negated for odd negative n."""
        order = abs(n)
        name, attrs = (f"{kind}{order}", None) if order < 2 else (f"{kind}n", {"order": order})
        value = self.builder.op_at(call.span, name, [x.value], attrs)
        if n < 0 and order % 2:                                   # Z₋ₙ = (−1)ⁿ Zₙ
            value = self.builder.op_at(call.span, "neg", [value])
        return ExprValue(value, x.weak)

    def _bessel_real_order(self, call: ast.Call) -> ExprValue:
        """`iv(v, x)`, `ive(v, x)`, `jv(v, x)` (SciPy's order of arguments): v a real
        constant, the op's attribute `{order = v}`; jv of an integral v is jn's."""
        signature(call, 2, set())
        v = self._real_constant(call.args[0], f"the order v of '{call.func}(v, x)' must be a "
                                              f"constant, e.g. 2.5 or -1 (derivatives are "
                                              f"taken in x only, not in v)")
        if abs(v) > MAX_ORDER:
            raise error_at(call.args[0].span, f"the order v of '{call.func}(v, x)' must be at "
                                              f"most {MAX_ORDER:g} in magnitude, got {v:g}")
        x = self._float_operand(call.args[1], call.func)
        if call.func == "jv" and v.is_integer():
            return self._integer_order_op(call, "j", int(v), x)
        return ExprValue(self.builder.op_at(call.span, call.func, [x.value], {"order": v}),
                         x.weak)

    def _betainc(self, call: ast.Call) -> ExprValue:
        """`betainc(a, b, x)`, broadcasting all three (SciPy's order of arguments)."""
        signature(call, 3, set())
        return self.elementwise("betainc", [self.tensor(e) for e in call.args], call.span)

    def _stop_gradient(self, call: ast.Call) -> ExprValue:
        """`stop_gradient(x)`: x, through which no gradient flows."""
        signature(call, 1, set())
        x = self.tensor(call.args[0])
        return ExprValue(self.builder.op_at(call.span, "stop_gradient", [x.value]), x.weak)

    def _binary(self, call: ast.Call) -> ExprValue:
        """`pow(a, b)`, `arctan2(y, x)`, ..., and `max(a, b)` / `min(a, b)` elementwise."""
        signature(call, 2, set())
        a, b = (self.tensor(e) for e in call.args)
        return self.elementwise(BINARY_BUILTINS[call.func], [a, b], call.span)


BUILTINS: dict[str, Callable[[BuiltinLowering, ast.Call], ExprValue]] = {
    **{name: BuiltinLowering._unary for name in UNARY_BUILTINS},
    **{name: BuiltinLowering._cast for name in CASTS},
    **{name: BuiltinLowering._binary for name in BINARY_BUILTINS if name not in ("max", "min")},
    # not max and min: `lower_builtin_call` makes them elementwise with two arguments
    **{name: BuiltinLowering._reduction for name in REDUCTIONS if name not in BINARY_BUILTINS},
    "mean": BuiltinLowering._reduction, "logsumexp": BuiltinLowering._reduction,
    "argmax": BuiltinLowering._arg_reduction, "argmin": BuiltinLowering._arg_reduction,
    "softmax": BuiltinLowering._softmax, "log_softmax": BuiltinLowering._softmax,
    "transpose": BuiltinLowering._transpose, "reshape": BuiltinLowering._reshape,
    "roll": BuiltinLowering._roll, "concat": BuiltinLowering._concat,
    "where": BuiltinLowering._where, "stop_gradient": BuiltinLowering._stop_gradient,
    "multigammaln": BuiltinLowering._multigammaln, "polygamma": BuiltinLowering._polygamma,
    "jn": BuiltinLowering._bessel_integer_order, "yn": BuiltinLowering._bessel_integer_order,
    **dict.fromkeys(("iv", "ive", "jv"), BuiltinLowering._bessel_real_order),
    "betainc": BuiltinLowering._betainc,
    **SCAN_BUILTINS, **LINALG_BUILTINS,
}
