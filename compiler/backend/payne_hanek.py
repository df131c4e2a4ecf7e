"""Payne-Hanek reduction of huge doubles modulo pi/2, as a scalar LLVM IR function.

`rem_pio2_large(module)` defines (once per module) the internal function
`{double r, double q} @rv.rem_pio2_large(double x)` with x = (4j + q) pi/2 + r, q in 0..3
and |r| <= pi/4 (r within about half an ulp), for every finite x with |x| >= 2**26 (other
inputs give meaningless values and read no memory out of bounds). `trig.py` calls it for the
rare lanes whose argument is too large for the Cody-Waite reduction.

Method (Payne and Hanek 1983; the integer form of fdlibm's `__kernel_rem_pio2`): write
x = M 2**e with M a 53-bit integer. In x * 2/pi = M * sum_i b_i 2**(e-i) the bits b_i of 2/pi
with i <= e - 2 only add multiples of 4, so only the 192 bits b_(e-1) ... b_(e+190) are
needed: the 192-bit integer W they form gives x 2/pi = M W 2**-190 (mod 4) up to 2**-137.
The product M W mod 2**192 is three 64x64 -> 128-bit multiplications; its top two bits are
the quadrant, the next 128 bits the fraction, which is rounded to the nearest multiple of
pi/2 (fraction in [-1/2, 1/2)), normalised with a leading-zero count and multiplied by
pi/2 in double-double arithmetic. The fraction of a double is never below 2**-62 (the
closest approach of a double to a multiple of pi/2), so 128 bits keep 66 significant bits.

The bits of 2/pi are computed here from Machin's formula in integer arithmetic (once per
process, on the first module that needs them; nothing at import) and stored
as a constant global array of 64-bit words, preceded by one zero word so that exponents
e >= -26 need no special case.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from reverie.compiler.backend.irutil import F64, I64, intrinsic

I128 = ir.IntType(128)
TABLE_WORDS = 20                 # one zero word, then 1216 bits of 2/pi
MIN_EXPONENT, MAX_EXPONENT = -62, 971   # e of x = M 2**e (clamped: keeps loads in bounds)
PIO2_HI, PIO2_LO = 1.5707963267948966, 6.123233995736766e-17
RESULT = ir.LiteralStructType([F64, F64])


def _arctan_inverse(m: int, one: int) -> int:
    """atan(1/m) * one by its Taylor series in integers (within a few units)."""
    total, power, k = 0, one // m, 0
    while power:
        term = power // (2 * k + 1)
        total += -term if k % 2 else term
        power //= m * m
        k += 1
    return total


def two_over_pi_bits(count: int) -> int:
    """floor(2/pi * 2**count): the first `count` bits of 2/pi after the binary point."""
    guard = 64
    one = 1 << (count + guard)
    pi = 16 * _arctan_inverse(5, one) - 4 * _arctan_inverse(239, one)
    return (one << (count + 1)) // pi


@functools.cache
def table_words() -> tuple[int, ...]:
    """The table: a zero word, then 2/pi's bits in 64-bit words, most significant first."""
    bits = two_over_pi_bits(64 * (TABLE_WORDS - 1))
    return tuple((bits >> (64 * (TABLE_WORDS - 1 - i))) & (2**64 - 1) for i in range(TABLE_WORDS))


def rem_pio2_large(module: ir.Module) -> ir.Function:
    """The function `rv.rem_pio2_large` of `module`, defined on first use."""
    existing = module.globals.get("rv.rem_pio2_large")
    if existing is not None:
        return existing
    table_type = ir.ArrayType(I64, TABLE_WORDS)
    table = ir.GlobalVariable(module, table_type, "rv.two_over_pi_bits")
    table.linkage, table.global_constant = "internal", True
    table.initializer = ir.Constant(table_type, table_words())
    fn = ir.Function(module, ir.FunctionType(RESULT, [F64]), name="rv.rem_pio2_large")
    fn.linkage = "internal"
    # optnone: optimising this rarely run i128 code would cost LLVM time in every
    # module with sin, cos or tan
    for attribute in ("nounwind", "readnone", "noinline", "optnone"):
        fn.attributes.add(attribute)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    quadrant, below, normalised, scale = _reduce(b, table, b.bitcast(x, I64))
    hi, lo = _times_pio2(b, normalised)
    r = b.fmul(b.fadd(hi, lo), scale)
    negative = b.fcmp_ordered("<", x, ir.Constant(F64, 0.0))
    r = b.select(b.xor(negative, below), b.fneg(r), r)
    quadrant = b.and_(b.select(negative, b.neg(quadrant), quadrant), _i64(3))
    result = b.insert_value(ir.Constant(RESULT, ir.Undefined), r, 0)
    b.ret(b.insert_value(result, b.uitofp(quadrant, F64), 1))
    return fn


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _i128(v: int) -> ir.Constant:
    return ir.Constant(I128, v)


def _reduce(b: ir.IRBuilder, table: ir.GlobalVariable,
            bits: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """(q, f < 0, n, s) for |x| = (4j + q + f) pi/2, -1/2 <= f < 1/2: n = |f| 2**(128 + z)
    as an i128 with its top bit set (z leading zeros shifted out), s = 2**(-53 - z)."""
    biased = b.and_(b.lshr(bits, _i64(52)), _i64(0x7FF))
    exponent = b.sub(biased, _i64(1075))
    exponent = b.call(intrinsic(b.module, "llvm.smax", I64, [I64, I64]),
                      [exponent, _i64(MIN_EXPONENT)])
    exponent = b.call(intrinsic(b.module, "llvm.smin", I64, [I64, I64]),
                      [exponent, _i64(MAX_EXPONENT)])
    mantissa = b.or_(b.and_(bits, _i64(2**52 - 1)), _i64(2**52))
    position = b.add(exponent, _i64(62))     # bit b_(e-1), after the zero word
    word, shift = b.lshr(position, _i64(6)), b.and_(position, _i64(63))
    words = [b.load(b.gep(table, [_i64(0), b.add(word, _i64(k))], inbounds=True,
                          source_etype=table.value_type), typ=I64) for k in range(4)]
    funnel = intrinsic(b.module, "llvm.fshl", I64, [I64, I64, I64])
    window = [b.call(funnel, [words[k], words[k + 1], shift]) for k in range(3)]

    def product(a: ir.Value) -> ir.Value:
        return b.mul(b.zext(mantissa, I128), b.zext(a, I128))

    def high(v: ir.Value) -> ir.Value:
        return b.trunc(b.lshr(v, _i128(64)), I64)

    low_product, middle_product = product(window[2]), product(window[1])
    middle = b.add(b.zext(high(low_product), I128), b.zext(b.trunc(middle_product, I64), I128))
    top = b.add(b.add(high(middle_product), b.mul(mantissa, window[0])), high(middle))
    fraction = b.or_(b.or_(b.shl(b.zext(b.and_(top, _i64(2**62 - 1)), I128), _i128(66)),
                           b.shl(b.zext(b.trunc(middle, I64), I128), _i128(2))),
                     b.zext(b.lshr(b.trunc(low_product, I64), _i64(62)), I128))
    rounds_up = b.trunc(b.lshr(fraction, _i128(127)), I64)
    quadrant = b.add(b.lshr(top, _i64(62)), rounds_up)
    below = b.icmp_signed("<", fraction, _i128(0))
    magnitude = b.select(below, b.neg(fraction), fraction)
    ctlz = intrinsic(b.module, "llvm.ctlz", I128, [I128, ir.IntType(1)])
    zeros = b.call(ctlz, [magnitude, ir.Constant(ir.IntType(1), 0)])
    zeros = b.select(b.icmp_unsigned("<", zeros, _i128(127)), zeros, _i128(127))
    normalised = b.shl(magnitude, zeros)
    scale_bits = b.shl(b.sub(_i64(1023 - 53), b.trunc(zeros, I64)), _i64(52))
    return quadrant, below, normalised, b.bitcast(scale_bits, F64)


def _times_pio2(b: ir.IRBuilder, normalised: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(hi, lo) ~ (a + c 2**-64) pi/2, a = the top 53 bits of `normalised`, c the next 64."""
    a = b.uitofp(b.trunc(b.lshr(normalised, _i128(75)), I64), F64)
    c = b.uitofp(b.trunc(b.lshr(b.shl(normalised, _i128(53)), _i128(64)), I64), F64)
    fma = intrinsic(b.module, "llvm.fma", F64, [F64, F64, F64])
    hi = b.fmul(a, ir.Constant(F64, PIO2_HI))
    error = b.call(fma, [a, ir.Constant(F64, PIO2_HI), b.fneg(hi)])
    tail = b.fadd(b.fmul(a, ir.Constant(F64, PIO2_LO)),
                  b.fmul(b.fmul(c, ir.Constant(F64, 2.0**-64)), ir.Constant(F64, PIO2_HI)))
    return hi, b.fadd(error, tail)
