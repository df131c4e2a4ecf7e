"""LLVM IR for one scalar operation of the loop IR, with NumPy's semantics.

Consumes an op name (the tensor-IR elementwise names, plus the loop IR's `in_bounds`), its
operands as llvmlite values and the operand/result dtypes; produces the result value.
Choices that matter:

- floats: no `fast`/`nnan` flags, so NaN and infinities behave as in NumPy; `contract` lets
  LLVM fuse multiply-adds. Transcendentals come from `MathLib` (vectorisable inline code).
- `maximum`/`minimum` propagate NaN like NumPy: `a >= b or isnan(a) ? a : b`.
- integers wrap; `//` and `%` follow Python's floor semantics and give 0 when dividing by
  zero (NumPy's result) and never trap (also not for INT_MIN // -1).
- float → int casts truncate towards zero; NaN, ±inf and values outside the target's
  range give its smallest value (INT_MIN, NumPy's result on x86), never poison.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from .irutil import FLOATS, I1, REGISTER, constant, intrinsic

FLAGS = ("contract",)
MATH_UNARY = ("abs", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh",
              "sigmoid", "softplus", "erf", "floor", "ceil")
COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class ScalarOps:
    """Emits scalar ops into a builder; `math` supplies the vector-friendly transcendentals."""

    def __init__(self, module: ir.Module, math: object) -> None:
        self.module = module
        self.math = math

    def emit(self, b: ir.IRBuilder, op: str, args: list[ir.Value], arg_dtypes: list[str],
             dtype: str) -> ir.Value:
        """The value of `op(args)`; `dtype` is the result dtype."""
        kind = arg_dtypes[0] if arg_dtypes else dtype
        if op == "cast":
            return self.cast(b, args[0], arg_dtypes[0], dtype)
        if op == "select":
            return b.select(args[0], args[1], args[2])
        if op == "stop_gradient":
            return args[0]
        if op == "in_bounds":
            return b.icmp_unsigned("<", args[0], args[1])
        if op in COMPARISONS:
            return self._compare(b, op, args[0], args[1], kind)
        if kind in FLOATS:
            return self._float(b, op, args, kind)
        if kind == "bool":
            return self._bool(b, op, args)
        return self._int(b, op, args, kind)

    # ------------------------------------------------------------ floats

    def _float(self, b: ir.IRBuilder, op: str, args: list[ir.Value], dtype: str) -> ir.Value:
        x = args[0]
        one, zero = constant(dtype, 1.0), constant(dtype, 0.0)
        if op in MATH_UNARY:
            return self.math.call(b, op, [x])
        binary: dict[str, Callable[[], ir.Value]] = {
            "add": lambda: b.fadd(x, args[1], flags=FLAGS),
            "sub": lambda: b.fsub(x, args[1], flags=FLAGS),
            "mul": lambda: b.fmul(x, args[1], flags=FLAGS),
            "div": lambda: b.fdiv(x, args[1], flags=FLAGS),
            "pow": lambda: self.math.call(b, "pow", [x, args[1]]),
            "maximum": lambda: self._float_extreme(b, x, args[1], ">="),
            "minimum": lambda: self._float_extreme(b, x, args[1], "<="),
            "floordiv": lambda: self._float_divmod(b, x, args[1], dtype)[0],
            "mod": lambda: self._float_divmod(b, x, args[1], dtype)[1],
        }
        if op in binary:
            return binary[op]()
        if op == "neg":
            return b.fneg(x)
        if op == "rsqrt":
            return b.fdiv(one, self.math.call(b, "sqrt", [x]))
        if op == "relu":
            return b.select(b.fcmp_ordered("<", x, zero), zero, x)
        if op == "sign":
            sign = b.select(b.fcmp_ordered("<", x, zero), constant(dtype, -1.0), zero)
            sign = b.select(b.fcmp_ordered(">", x, zero), one, sign)
            return b.select(b.fcmp_unordered("uno", x, x), x, sign)
        raise NotImplementedError(f"no float lowering for '{op}'")

    def _float_extreme(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value,
                       order: str) -> ir.Value:
        """NumPy maximum/minimum: NaN in either operand gives NaN."""
        keep = b.or_(b.fcmp_ordered(order, x, y), b.fcmp_unordered("uno", x, x))
        return b.select(keep, x, y)

    def _float_divmod(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value,
                      dtype: str) -> tuple[ir.Value, ir.Value]:
        """Python/NumPy floor division and modulo of floats (npy_divmod)."""
        zero = constant(dtype, 0.0)
        copysign = intrinsic(self.module, "llvm.copysign", REGISTER[dtype],
                             [REGISTER[dtype]] * 2)
        mod = b.frem(x, y)
        div = b.fdiv(b.fsub(x, mod), y)
        fix = b.and_(b.fcmp_unordered("!=", mod, zero),
                     b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
        mod = b.select(fix, b.fadd(mod, y), b.select(b.fcmp_ordered("==", mod, zero),
                                                     b.call(copysign, [zero, y]), mod))
        div = b.select(fix, b.fsub(div, constant(dtype, 1.0)), div)
        floor = self.math.call(b, "floor", [div])
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), constant(dtype, 0.5)),
                         b.fadd(floor, constant(dtype, 1.0)), floor)
        quotient = b.fdiv(x, y)
        floor = b.select(b.fcmp_ordered("==", div, zero), b.call(copysign, [zero, quotient]),
                         floor)
        by_zero = b.fcmp_ordered("==", y, zero)
        return b.select(by_zero, quotient, floor), mod

    # ------------------------------------------------------------ integers and bools

    def _int(self, b: ir.IRBuilder, op: str, args: list[ir.Value], dtype: str) -> ir.Value:
        x = args[0]
        type_ = REGISTER[dtype]
        zero = ir.Constant(type_, 0)
        if op == "neg":
            return b.sub(zero, x)
        if op == "abs":
            return b.call(intrinsic(self.module, "llvm.abs", type_, [type_, I1]),
                          [x, ir.Constant(I1, 0)])
        if op == "sign":
            positive = b.zext(b.icmp_signed(">", x, zero), type_)
            return b.sub(positive, b.zext(b.icmp_signed("<", x, zero), type_))
        y = args[1]
        if op in ("add", "sub", "mul"):
            return {"add": b.add, "sub": b.sub, "mul": b.mul}[op](x, y)
        if op in ("maximum", "minimum"):
            name = "llvm.smax" if op == "maximum" else "llvm.smin"
            return b.call(intrinsic(self.module, name, type_, [type_, type_]), [x, y])
        if op in ("floordiv", "mod"):
            return self._int_divmod(b, x, y, type_)[op == "mod"]
        raise NotImplementedError(f"no integer lowering for '{op}'")

    def _int_divmod(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value,
                    type_: ir.IntType) -> tuple[ir.Value, ir.Value]:
        """Floor division and modulo; y == 0 gives 0 and y == -1 never traps."""
        zero, minus_one = ir.Constant(type_, 0), ir.Constant(type_, -1)
        by_zero = b.icmp_signed("==", y, zero)
        by_minus_one = b.icmp_signed("==", y, minus_one)
        safe = b.select(b.or_(by_zero, by_minus_one), ir.Constant(type_, 1), y)
        quotient, remainder = b.sdiv(x, safe), b.srem(x, safe)
        signs_differ = b.icmp_signed("<", b.xor(remainder, y), zero)
        adjust = b.and_(b.icmp_signed("!=", remainder, zero), signs_differ)
        quotient = b.sub(quotient, b.zext(adjust, type_))
        remainder = b.add(remainder, b.select(adjust, y, zero))
        quotient = b.select(by_minus_one, b.sub(zero, x), quotient)
        return (b.select(by_zero, zero, quotient),
                b.select(b.or_(by_zero, by_minus_one), zero, remainder))

    def _bool(self, b: ir.IRBuilder, op: str, args: list[ir.Value]) -> ir.Value:
        if op == "not":
            return b.not_(args[0])
        if op == "and":
            return b.and_(args[0], args[1])
        if op == "or":
            return b.or_(args[0], args[1])
        raise NotImplementedError(f"no bool lowering for '{op}'")

    def _compare(self, b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value,
                 dtype: str) -> ir.Value:
        symbol = COMPARISONS[op]
        if dtype in FLOATS:
            return b.fcmp_unordered(symbol, x, y) if op == "ne" else \
                b.fcmp_ordered(symbol, x, y)
        if dtype == "bool":
            return b.icmp_unsigned(symbol, x, y)
        return b.icmp_signed(symbol, x, y)

    # ------------------------------------------------------------ casts

    def cast(self, b: ir.IRBuilder, x: ir.Value, source: str, target: str) -> ir.Value:
        """Convert between dtypes as NumPy's astype does (float → int: see `_float_to_int`)."""
        if source == target:
            return x
        to = REGISTER[target]
        if target == "bool":
            if source in FLOATS:
                return b.fcmp_unordered("!=", x, constant(source, 0.0))
            return b.icmp_signed("!=", x, ir.Constant(REGISTER[source], 0))
        if source == "bool":
            return b.uitofp(x, to) if target in FLOATS else b.zext(x, to)
        if source in FLOATS and target in FLOATS:
            return b.fpext(x, to) if target == "f64" else b.fptrunc(x, to)
        if target in FLOATS:
            return b.sitofp(x, to)
        if source in FLOATS:
            return self._float_to_int(b, x, source, to)
        return b.sext(x, to) if to.width > x.type.width else b.trunc(x, to)

    def _float_to_int(self, b: ir.IRBuilder, x: ir.Value, source: str,
                      to: ir.IntType) -> ir.Value:
        """Truncation towards zero where it fits `to`, else INT_MIN (NaN, ±inf, too large).

        Values in (INT_MIN - 1, INT_MIN) truncate to INT_MIN as well, so the exact bounds
        [-2**(w-1), 2**(w-1)) suffice; out-of-range lanes convert 0, so `fptosi` never
        sees a value it would turn into poison."""
        limit = float(2 ** (to.width - 1))
        fits = b.and_(b.fcmp_ordered(">=", x, constant(source, -limit)),
                      b.fcmp_ordered("<", x, constant(source, limit)))
        truncated = b.fptosi(b.select(fits, x, constant(source, 0.0)), to)
        return b.select(fits, truncated, ir.Constant(to, -(2 ** (to.width - 1))))
