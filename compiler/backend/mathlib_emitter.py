"""Scalar or vector LLVM IR arithmetic of one float format, used to write the math library.

`Emitter(builder, F64)` builds `double` values at the builder's position; `Emitter(builder,
F32, lanes=8)` builds `<8 x float>` values with the same methods (constants become splats,
intrinsics are overloaded on the vector type). `mathlib.py` writes its functions once against
this interface; `trig.py` also emits explicit vector versions of sin, cos and tan.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

from llvmlite import ir

from reverie.compiler.backend.irutil import intrinsic
from reverie.compiler.backend.mathlib_formats import F32, F64, INF, Format

Value = ir.Value



def in_f64(body: Callable[..., Value]) -> Callable[..., Value]:
    """`body` written for f64, applied to arguments of either format (f32 widened exactly,
    the result rounded once)."""
    def wrapped(e: Emitter, *args: Value) -> Value:
        d = e.wide()
        return d.narrow(body(d, *(d.extend(a) for a in args)), e.fmt)

    wrapped.__doc__ = body.__doc__
    return wrapped


class Emitter:
    """Builds IR of one float format (scalar, or `lanes` wide) at a builder's position."""

    def __init__(self, builder: ir.IRBuilder, fmt: Format, lanes: int = 1) -> None:
        self.b = builder
        self.fmt = fmt
        self.lanes = lanes
        self.float_type = self._of(fmt.float_type)
        self.int_type = self._of(fmt.int_type)

    def _of(self, element: ir.Type) -> ir.Type:
        """`element`, or a vector of `lanes` of them."""
        return element if self.lanes == 1 else ir.VectorType(element, self.lanes)

    def _splat(self, element: ir.Type, v: float | int) -> ir.Constant:
        """The constant `v` of type `element`, in every lane."""
        return ir.Constant(self._of(element), v if self.lanes == 1 else [v] * self.lanes)

    def wide(self) -> Emitter:
        """An emitter of the same class for f64, with as many lanes, at the same position."""
        return type(self)(self.b, F64, self.lanes)

    def value(self, v: Value | float) -> Value:
        """`v` itself, or a constant of this format for a Python number."""
        return v if isinstance(v, Value) else self._splat(self.fmt.float_type, float(v))

    def int_const(self, v: int) -> ir.Constant:
        """An integer constant as wide as this float format."""
        return self._splat(self.fmt.int_type, v)

    def extend(self, v: Value) -> Value:
        """`v` converted (exactly) to this format, which must be at least as wide."""
        return v if v.type == self.float_type else self.b.fpext(v, self.float_type)

    def narrow(self, v: Value, fmt: Format) -> Value:
        """`v` rounded to the format `fmt` (with as many lanes)."""
        target = self._of(fmt.float_type)
        return v if target == v.type else self.b.fptrunc(v, target)

    def add(self, a: Value | float, b: Value | float) -> Value:
        """a + b, correctly rounded."""
        return self.b.fadd(self.value(a), self.value(b))

    def sub(self, a: Value | float, b: Value | float) -> Value:
        """a - b, correctly rounded."""
        return self.b.fsub(self.value(a), self.value(b))

    def mul(self, a: Value | float, b: Value | float) -> Value:
        """a * b, correctly rounded."""
        return self.b.fmul(self.value(a), self.value(b))

    def div(self, a: Value | float, b: Value | float) -> Value:
        """a / b, correctly rounded."""
        return self.b.fdiv(self.value(a), self.value(b))

    def neg(self, a: Value) -> Value:
        """-a (flips the sign bit, also of 0 and NaN)."""
        return self.b.fneg(a)

    def intrinsic(self, name: str, *args: Value | float) -> Value:
        """Call the LLVM intrinsic `name` overloaded on this float format."""
        ty = self.float_type
        fn = intrinsic(self.b.module, name, ty, [ty] * len(args))
        return self.b.call(fn, [self.value(a) for a in args])

    def fma(self, a: Value | float, b: Value | float, c: Value | float) -> Value:
        """a*b + c, fused where the target makes that cheap (llvm.fmuladd)."""
        return self.intrinsic("llvm.fmuladd", a, b, c)

    def exact_fma(self, a: Value | float, b: Value | float, c: Value | float) -> Value:
        """a*b + c with a single rounding (llvm.fma)."""
        return self.intrinsic("llvm.fma", a, b, c)

    def poly(self, x: Value, coeffs: Sequence[Value | float]) -> Value:
        """c0 + c1 x + c2 x^2 + ... by Horner's rule."""
        acc = self.value(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    def fabs(self, a: Value) -> Value:
        """|a|."""
        return self.intrinsic("llvm.fabs", a)

    def rint(self, a: Value) -> Value:
        """a rounded to the nearest integer, ties to even."""
        return self.intrinsic("llvm.rint", a)

    def floor(self, a: Value) -> Value:
        """The largest integer <= a."""
        return self.intrinsic("llvm.floor", a)

    def copysign(self, magnitude: Value, sign: Value) -> Value:
        """|magnitude| with the sign bit of `sign`."""
        return self.intrinsic("llvm.copysign", magnitude, sign)

    def cmp(self, op: str, a: Value | float, b: Value | float) -> Value:
        """Ordered comparison (false when either side is NaN)."""
        return self.b.fcmp_ordered(op, self.value(a), self.value(b))

    def cmp_unordered(self, op: str, a: Value | float, b: Value | float) -> Value:
        """Unordered comparison (true when either side is NaN)."""
        return self.b.fcmp_unordered(op, self.value(a), self.value(b))

    def isnan(self, a: Value) -> Value:
        """Whether a is NaN."""
        return self.b.fcmp_unordered("uno", a, a)

    def isfinite(self, a: Value) -> Value:
        """Whether a is neither infinite nor NaN."""
        return self.cmp("<", self.fabs(a), INF)

    def select(self, cond: Value, a: Value | float, b: Value | float) -> Value:
        """cond ? a : b, without a branch."""
        return self.b.select(cond, self.value(a), self.value(b))

    def both(self, c1: Value, c2: Value) -> Value:
        """c1 and c2."""
        return self.b.and_(c1, c2)

    def either(self, c1: Value, c2: Value) -> Value:
        """c1 or c2."""
        return self.b.or_(c1, c2)

    def clamp(self, x: Value, lo: float, hi: float) -> Value:
        """x limited to [lo, hi]; NaN becomes hi."""
        below_hi = self.select(self.cmp("<", x, hi), x, hi)
        return self.select(self.cmp(">", below_hi, lo), below_hi, lo)

    def pow2(self, k: Value) -> Value:
        """2**k for an integral float k whose result is a normal number."""
        fmt = self.fmt
        bits = self.b.bitcast(self.add(k, fmt.magic), self.int_type)
        biased = self.b.add(bits, self.int_const(fmt.bias))
        exponent = self.b.shl(biased, self.int_const(fmt.mantissa_bits))
        return self.b.bitcast(exponent, self.float_type)

    def scale(self, v: Value, k: Value) -> Value:
        """v * 2**k in two steps, so that k may reach overflow and subnormal range."""
        half = self.floor(self.mul(k, 0.5))
        return self.mul(self.mul(v, self.pow2(half)), self.pow2(self.sub(k, half)))

    def split_exponent(self, v: Value) -> tuple[Value, Value]:
        """(e, m) with v = 2**e * m and sqrt(1/2) <= m < sqrt(2), for normal positive v."""
        fmt = self.fmt
        one_bits = fmt.bias << fmt.mantissa_bits
        sqrt_half_bits = _float_bits(math.sqrt(0.5), fmt)
        bits = self.b.add(self.b.bitcast(v, self.int_type),
                          self.int_const(one_bits - sqrt_half_bits))
        mantissa = self.b.and_(bits, self.int_const((1 << fmt.mantissa_bits) - 1))
        m = self.b.bitcast(self.b.add(mantissa, self.int_const(sqrt_half_bits)),
                           self.float_type)
        biased = self.b.lshr(bits, self.int_const(fmt.mantissa_bits))
        magic_bits = _float_bits(fmt.magic, fmt) - fmt.bias
        shifted = self.b.add(biased, self.int_const(magic_bits))
        e = self.sub(self.b.bitcast(shifted, self.float_type), fmt.magic)
        return e, m

    def two_sum_error(self, a: Value, b: Value, total: Value) -> Value:
        """The exact rounding error of total = a + b (Knuth's TwoSum)."""
        b_part = self.sub(total, a)
        a_part = self.sub(total, b_part)
        return self.add(self.sub(a, a_part), self.sub(b, b_part))

    def sign_bit_set(self, v: Value) -> Value:
        """Whether v's sign bit is set (true for -0.0)."""
        bits = self.b.bitcast(v, self.int_type)
        return self.b.icmp_signed("<", bits, self.int_const(0))


def _float_bits(v: float, fmt: Format) -> int:
    """The IEEE bit pattern of v in the format `fmt`."""
    code = "f" if fmt is F32 else "d"
    return int.from_bytes(struct.pack(f"<{code}", v), "little")
