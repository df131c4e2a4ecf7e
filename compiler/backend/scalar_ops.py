"""LLVM IR for one scalar operation of the loop IR, with NumPy's semantics.

Consumes an op name (the tensor-IR elementwise names, plus the loop IR's own `in_bounds`,
`bits` and `from_bits`), its operands as llvmlite values and the operand/result dtypes;
produces the result value. Each op's code is its rule in `RULES`, keyed by op and operand
dtype class; the float rules of the op table's `math` ops (`ir/elementwise.py`) call the
math library, generated from the declarations. An op without a rule for its dtype is a
CompileError naming it, raised while the module is generated, before anything is compiled.
Choices that matter:

- floats: no `fast`/`nnan` flags, so NaN and infinities behave as in NumPy; `contract` lets
  LLVM fuse multiply-adds. Transcendentals come from `MathLib` (vectorisable inline code).
- `maximum`/`minimum` propagate NaN like NumPy: `a >= b or isnan(a) ? a : b`.
- integers wrap; `//` and `%` follow Python's floor semantics and give 0 when dividing by
  zero (NumPy's result) and never trap (also not for INT_MIN // -1).
- float → int casts truncate towards zero; NaN, ±inf and values outside the target's
  range give its smallest value (INT_MIN, NumPy's result on x86), never poison.
- bf16/f16 values are f32s holding their values (`storage_conversions.py`): a cast to one
  rounds, a cast from one reads the f32; any other op still typed bf16/f16 (the widening
  pass leaves none) computes in f32 and has its result rounded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from reverie.compiler.backend.irutil import FLOATS, I1, MEMORY, REGISTER, constant, intrinsic
from reverie.compiler.backend.storage_conversions import StorageConversions
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE, Elementwise
from reverie.compiler.ir.op_defs import dtype_class
from reverie.compiler.ir.rule_table import RuleTable

FLAGS = ("contract",)
COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# bf16/f16 results needing no rounding
EXACT_ON_STORAGE = ("cast", "select", "stop_gradient", "from_bits")


@dataclass
class Call:
    """One scalar op being emitted: its operands, their dtype (the branches' for `select`,
    the source's for `cast`) and the result dtype."""

    ops: ScalarOps
    b: ir.IRBuilder
    args: list[ir.Value]
    dtype: str
    result: str

    @property
    def x(self) -> ir.Value:
        return self.args[0]

    @property
    def y(self) -> ir.Value:
        return self.args[1]


Rule = Callable[[Call], ir.Value]
# (op, dtype class) -> how to emit it
RULES: RuleTable[tuple[str, str], Rule] = RuleTable("the native backend's scalar code")


def rule(classes: tuple[str, ...], *names: str) -> Callable[[Rule], Rule]:
    """The decorator registering its function as the rule of ops `names` on operands of
    each dtype class in `classes`."""
    return RULES.register(*((name, kind) for name in names for kind in classes))


class ScalarOps:
    """Emits scalar ops into a builder; `math` supplies the vector-friendly transcendentals."""

    def __init__(self, module: ir.Module, math: object) -> None:
        self.module = module
        self.math = math
        self.storage = StorageConversions(module)

    def emit(self, b: ir.IRBuilder, op: str, args: list[ir.Value], arg_dtypes: list[str],
             dtype: str) -> ir.Value:
        """The value of `op(args)`; `dtype` is the result dtype (a CompileError naming the
        op when no rule covers its operand dtype)."""
        operand = arg_dtypes[1] if op == "select" else arg_dtypes[0] if arg_dtypes else dtype
        found = RULES.lookup((op, dtype_class(operand)), detail=f" for {operand}")
        value = found(Call(self, b, args, operand, dtype))
        if dtype in STORAGE_DTYPES and op not in EXACT_ON_STORAGE:
            value = self.storage.round(b, value, "f32", dtype)
        return value

    # ------------------------------------------------------------ floats

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

    # ------------------------------------------------------------ integers

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

    # ------------------------------------------------------------ casts

    def cast(self, b: ir.IRBuilder, x: ir.Value, source: str, target: str) -> ir.Value:
        """Convert between dtypes as NumPy's astype does (float → int: see `_float_to_int`;
        to bf16/f16: `StorageConversions.round`)."""
        if source == target:
            return x
        if target in STORAGE_DTYPES:
            return self.storage.round(b, x, source, target)
        if source in STORAGE_DTYPES:  # its register holds the value as an f32
            source = "f32"
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



# ---------------------------------------------------------------- the rules

FLOAT, INT, BOOL, ALL = ("float",), ("int",), ("bool",), ("float", "int", "bool")

rule(ALL, "stop_gradient")(lambda c: c.x)
rule(ALL, "select")(lambda c: c.b.select(c.args[0], c.args[1], c.args[2]))
rule(ALL, "cast")(lambda c: c.ops.cast(c.b, c.x, c.dtype, c.result))
rule(INT, "in_bounds")(lambda c: c.b.icmp_unsigned("<", c.x, c.y))  # loop IR: 0 <= x < y
# loop IR: a bf16/f16 value's 16 bits as an i64, and the value of 16 bits (loops/tabulation.py)
rule(FLOAT, "bits")(lambda c: c.b.zext(c.ops.storage.store(c.b, c.x, c.dtype), REGISTER["i64"]))
rule(INT, "from_bits")(lambda c: c.ops.storage.load(c.b, c.b.trunc(c.x, MEMORY["bf16"]),
                                                       c.result))


def _comparison(name: str) -> Rule:
    """Ordered float comparisons (`ne` unordered: NaN != NaN), signed integers, bools."""
    symbol = COMPARISONS[name]

    def emit(c: Call) -> ir.Value:
        if c.dtype in FLOATS:
            return c.b.fcmp_unordered(symbol, c.x, c.y) if name == "ne" else \
                c.b.fcmp_ordered(symbol, c.x, c.y)
        if c.dtype == "bool":
            return c.b.icmp_unsigned(symbol, c.x, c.y)
        return c.b.icmp_signed(symbol, c.x, c.y)

    return emit


for _name in COMPARISONS:
    rule(ALL, _name)(_comparison(_name))


def _math_function(row: Elementwise) -> Rule:
    """A call of the math library's function of the op's name; attributes arrive as
    trailing constant operands (`polygamma %x, 2`, `iv %x, 2.5`) and are passed on by name
    (an f64 one as a float)."""
    def emit(c: Call) -> ir.Value:
        attrs = {a: v.constant if isinstance(v.constant, float) else int(v.constant)
                 for a, v in zip(row.attrs, c.args[row.arity:], strict=True)}
        return c.ops.math.call(c.b, row.name, c.args[:row.arity], **attrs)

    return emit


for _row in ELEMENTWISE.values():
    if _row.math:
        rule(FLOAT, _row.name)(_math_function(_row))

rule(FLOAT, "add")(lambda c: c.b.fadd(c.x, c.y, flags=FLAGS))
rule(FLOAT, "sub")(lambda c: c.b.fsub(c.x, c.y, flags=FLAGS))
rule(FLOAT, "mul")(lambda c: c.b.fmul(c.x, c.y, flags=FLAGS))
rule(FLOAT, "div")(lambda c: c.b.fdiv(c.x, c.y, flags=FLAGS))
rule(FLOAT, "maximum")(lambda c: c.ops._float_extreme(c.b, c.x, c.y, ">="))
rule(FLOAT, "minimum")(lambda c: c.ops._float_extreme(c.b, c.x, c.y, "<="))
rule(FLOAT, "floordiv")(lambda c: c.ops._float_divmod(c.b, c.x, c.y, c.dtype)[0])
rule(FLOAT, "mod")(lambda c: c.ops._float_divmod(c.b, c.x, c.y, c.dtype)[1])
rule(FLOAT, "neg")(lambda c: c.b.fneg(c.x))
rule(FLOAT, "rsqrt")(lambda c: c.b.fdiv(constant(c.dtype, 1.0),
                                        c.ops.math.call(c.b, "sqrt", [c.x])))


@rule(FLOAT, "relu")
def _relu(c: Call) -> ir.Value:
    zero = constant(c.dtype, 0.0)
    return c.b.select(c.b.fcmp_ordered("<", c.x, zero), zero, c.x)


@rule(FLOAT, "sign")
def _float_sign(c: Call) -> ir.Value:
    """-1, 0 or 1; NaN stays NaN (and -0 gives 0)."""
    b, x, zero = c.b, c.x, constant(c.dtype, 0.0)
    sign = b.select(b.fcmp_ordered("<", x, zero), constant(c.dtype, -1.0), zero)
    sign = b.select(b.fcmp_ordered(">", x, zero), constant(c.dtype, 1.0), sign)
    return b.select(b.fcmp_unordered("uno", x, x), x, sign)


rule(INT, "neg")(lambda c: c.b.sub(ir.Constant(REGISTER[c.dtype], 0), c.x))
rule(INT, "add")(lambda c: c.b.add(c.x, c.y))
rule(INT, "sub")(lambda c: c.b.sub(c.x, c.y))
rule(INT, "mul")(lambda c: c.b.mul(c.x, c.y))
rule(INT, "floordiv")(lambda c: c.ops._int_divmod(c.b, c.x, c.y, REGISTER[c.dtype])[0])
rule(INT, "mod")(lambda c: c.ops._int_divmod(c.b, c.x, c.y, REGISTER[c.dtype])[1])


def _int_intrinsic(name: str, *extra: ir.Constant) -> Rule:
    """A call of the LLVM integer intrinsic `name` on the operands (and `extra`)."""
    def emit(c: Call) -> ir.Value:
        type_ = REGISTER[c.dtype]
        types = [type_] * len(c.args) + [e.type for e in extra]
        return c.b.call(intrinsic(c.ops.module, name, type_, types), [*c.args, *extra])

    return emit


rule(INT, "abs")(_int_intrinsic("llvm.abs", ir.Constant(I1, 0)))
rule(INT, "maximum")(_int_intrinsic("llvm.smax"))
rule(INT, "minimum")(_int_intrinsic("llvm.smin"))


@rule(INT, "sign")
def _int_sign(c: Call) -> ir.Value:
    b, type_ = c.b, REGISTER[c.dtype]
    zero = ir.Constant(type_, 0)
    positive = b.zext(b.icmp_signed(">", c.x, zero), type_)
    return b.sub(positive, b.zext(b.icmp_signed("<", c.x, zero), type_))


rule(BOOL, "not")(lambda c: c.b.not_(c.x))
rule(BOOL, "and")(lambda c: c.b.and_(c.x, c.y))
rule(BOOL, "or")(lambda c: c.b.or_(c.x, c.y))
