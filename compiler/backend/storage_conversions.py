"""The storage types bf16 and f16 in generated code: loads, stores and rounding (issue 37).

In a register a bf16 or f16 value is an f32 holding a value of that type (`irutil.REGISTER`),
so every op on it is f32 code; in memory it is its 16 bits (`irutil.MEMORY`: i16). What
moves between the two, and the rounding that makes an f32 (or f64, or integer) a bf16/f16:

    load    bf16: zext to i32, shl 16, bitcast (exact)
            f16:  bitcast to half, fpext (F16C's vcvtph2ps), else decoded in integer ops
    store   bf16: bitcast, lshr 16, trunc (exact: the value is a bf16's)
            f16:  fptrunc to half (exact: the value is an f16's), else encoded
    round   f32 → bf16: to nearest even, NaN → ±0x7FC0 (ml_dtypes' rule, bit for bit);
                  `vcvtneps2bf16` where the target has AVX512_BF16 (`storage_hardware.py`),
                  else `bits + 0x7FFF + ((bits >> 16) & 1)` in integer ops. The instruction
                  reads subnormal inputs as zero, so those are converted shifted by 2⁻¹²⁶
                  into the normal range and shifted back (`_converted`: exact), and it keeps
                  a NaN's payload, so NaNs are given the canonical bits; in a vectorised
                  loop only a vector holding either takes that path (`_define_bf16_bits`)
            f32 → f16: fptrunc to half and back (F16C's vcvtps2ph, round to nearest even;
                  NaN keeps its payload, quietened), else the same in integer ops
            f64 → bf16/f16: rounded to odd into f32, then as from f32: a single rounding
                  in all (round to odd keeps what a second, narrower rounding needs), as
                  NumPy's and ml_dtypes' direct conversions give
            i32 → bf16/f16: through f64 (exact); i64: through f64 rounded to odd

Nothing here calls a library: LLVM's `fptrunc` to bfloat or half without the instruction
would call compiler-rt's `__truncsfbf2`/`__truncsfhf2`, which this process lacks. The integer
forms need the default MXCSR (no flush-to-zero, no denormals-are-zero), as all code here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import llvmlite.binding as llvm
from llvmlite import ir

from reverie.compiler.backend.irutil import F32, F64, I16, I32, I64
from reverie.compiler.backend.storage_hardware import bf16_hardware, f16_hardware
from reverie.compiler.backend.vector_variants import any_lane, call_with_variants


class BFloatType(ir.types._BaseFloatType):
    """LLVM's `bfloat` (llvmlite has `half`, `float` and `double` only); used only as the
    type of `fptrunc`'s result, so it needs no constants."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"


BFloatType._create_instance()
BFLOAT, HALF = BFloatType(), ir.HalfType()
SIGN, ABS = 0x8000_0000, 0x7FFF_FFFF
F32_EXPONENT, F32_SMALLEST_NORMAL = 0x7F80_0000, 0x0080_0000
BF16_SMALLEST_NORMAL = 0x0080
BF16_QUIET_NAN = 0x7FC0
VFPCLASS_NAN, VFPCLASS_SUBNORMAL = 0x81, 0x20  # vfpclassps's tests: QNaN|SNaN, denormal
F16_INFINITY, F16_QUIET = 0x7C00, 0x0200
F16_OVERFLOW = (127 + 16) << 23     # |x| from here (65536) rounds to ±inf in f16
F16_SUBNORMAL = 113 << 23          # |x| below 2⁻¹⁴ is an f16 subnormal (or zero)
F16_SUBNORMAL_MAGIC = 126 << 23    # 0.5: x + 0.5 rounds x to a multiple of 2⁻²⁴
F16_REBIAS = ((15 - 127) << 23) + 0xFFF  # exponent rebias and the rounding half, less one


@functools.cache
def _host_features() -> dict[str, bool]:
    return dict(llvm.get_host_cpu_features())


def _i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


class StorageConversions:
    """Emits the conversions of bf16/f16 values (module docstring) into builders."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module
        features = _host_features()
        self.bf16_hardware = bf16_hardware(features)
        self.f16_hardware = f16_hardware(features)
        self.in_vector_loop = False  # (`vector_loop`)

    @contextlib.contextmanager
    def vector_loop(self, vectorises: bool) -> Iterator[None]:
        """Within: code for the body of a loop LLVM vectorises (`vectorises`) or not. In
        one, f32 → bf16 rounding calls `rv.bf16_bits`, whose vector versions branch per
        vector; elsewhere it is inline code (a call per element would cost more)."""
        outer, self.in_vector_loop = self.in_vector_loop, vectorises
        try:
            yield
        finally:
            self.in_vector_loop = outer

    # ------------------------------------------------------------ memory

    def load(self, b: ir.IRBuilder, raw: ir.Value, dtype: str) -> ir.Value:
        """The register value (f32) of the 16 bits `raw` of a `dtype` element."""
        if dtype == "f16":
            if self.f16_hardware:
                return b.fpext(b.bitcast(raw, HALF), F32)
            return f16_to_f32(b, b.zext(raw, I32))
        return bf16_to_f32(b, b.zext(raw, I32))

    def store(self, b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
        """The 16 bits (i16) of register value `value` (f32 holding a `dtype` value)."""
        if dtype == "f16":
            if self.f16_hardware:
                return b.bitcast(b.fptrunc(value, HALF), I16)
            return b.trunc(self._encode_f16(b, value), I16)
        return b.trunc(b.lshr(b.bitcast(value, I32), _i32(16)), I16)

    # ------------------------------------------------------------ rounding

    def round(self, b: ir.IRBuilder, x: ir.Value, source: str, target: str) -> ir.Value:
        """`x` (a register value of dtype `source`) rounded to storage dtype `target`, as
        the register value (f32) of the result."""
        if source == "bool":
            return b.uitofp(x, F32)  # 0 or 1: exact
        if x.type == I32:
            x = b.sitofp(x, F64)  # exact
        elif x.type == I64:
            x = self._i64_to_odd(b, x)
        if x.type == F64:
            x = self._round_to_odd(b, x)
        if target == "f16":
            if self.f16_hardware:
                return b.fpext(b.fptrunc(x, HALF), F32)
            return f16_to_f32(b, self._encode_f16(b, x))
        return bf16_to_f32(b, b.zext(self._bf16_bits(b, x), I32))

    def _bf16_bits(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """The bits (i16) of the bf16 nearest f32 `x` (ties to even; NaN → ±0x7FC0)."""
        if self.bf16_hardware and self.in_vector_loop:
            return call_with_variants(b, "rv.bf16_bits", _define_bf16_bits, [x])
        return _exact_bf16_bits(b, x, hardware=self.bf16_hardware)

    def _round_to_odd(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """The f32 nearest f64 `x` rounded to odd: truncated towards zero, its last bit set
        when inexact (overflow gives ±FLT_MAX's odd neighbour of inf, NaN stays NaN)."""
        nearest = b.fptrunc(x, F32)
        back = b.fpext(nearest, F64)
        inexact = b.fcmp_ordered("!=", back, x)
        fabs = self.module.declare_intrinsic("llvm.fabs", [F64])
        away = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [x]))
        bits = b.bitcast(nearest, I32)
        odd = b.or_(b.sub(bits, b.zext(away, I32)), _i32(1))
        return b.bitcast(b.select(inexact, odd, bits), F32)

    def _i64_to_odd(self, b: ir.IRBuilder, n: ir.Value) -> ir.Value:
        """The f64 nearest i64 `n` rounded to odd (exact below 2⁵³): the nearest, moved
        one step towards zero and its last bit set when it is not `n`."""
        nearest = b.sitofp(n, F64)
        top = b.fcmp_ordered(">=", nearest, ir.Constant(F64, 2.0 ** 63))  # only n > 2⁶³ - 2⁹
        back = b.fptosi(b.select(top, ir.Constant(F64, 0.0), nearest), I64)
        inexact = b.or_(top, b.icmp_signed("!=", back, n))
        over = b.icmp_signed(">", b.sub(back, n), ir.Constant(I64, 0))
        away = b.or_(top, b.xor(over, b.icmp_signed("<", n, ir.Constant(I64, 0))))
        bits = b.bitcast(nearest, I64)
        odd = b.or_(b.sub(bits, b.zext(away, I64)), ir.Constant(I64, 1))
        return b.bitcast(b.select(inexact, odd, bits), F64)

    # ------------------------------------------------------------ f16 without F16C

    def _encode_f16(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """The f16 nearest f32 `x` (ties to even; NaN quietened, payload kept as F16C
        does), in the low half of an i32 (F. Giesen's float_to_half_fast3_rtne)."""
        bits = b.bitcast(x, I32)
        magnitude = b.and_(bits, _i32(ABS))
        sign = b.lshr(b.and_(bits, _i32(SIGN)), _i32(16))
        nan = b.icmp_unsigned(">", magnitude, _i32(F32_EXPONENT))
        payload = b.and_(b.lshr(magnitude, _i32(13)), _i32(0x3FF))
        large = b.select(nan, b.or_(payload, _i32(F16_INFINITY | F16_QUIET)),
                         _i32(F16_INFINITY))
        magic = b.bitcast(_i32(F16_SUBNORMAL_MAGIC), F32)
        small = b.sub(b.bitcast(b.fadd(b.bitcast(magnitude, F32), magic), I32),
                      _i32(F16_SUBNORMAL_MAGIC))
        lowest_kept = b.and_(b.lshr(magnitude, _i32(13)), _i32(1))
        normal = b.lshr(b.add(b.add(magnitude, _i32(F16_REBIAS)), lowest_kept), _i32(13))
        result = b.select(b.icmp_unsigned("<", magnitude, _i32(F16_SUBNORMAL)), small, normal)
        result = b.select(b.icmp_unsigned(">=", magnitude, _i32(F16_OVERFLOW)), large, result)
        return b.or_(result, sign)


def _exact_bf16_bits(b: ir.IRBuilder, x: ir.Value, hardware: bool) -> ir.Value:
    """The bits (i16) of the bf16 nearest f32 `x` (ties to even; NaN → ±0x7FC0), by
    `vcvtneps2bf16` (`hardware`) or as `bits + 0x7FFF + ((bits >> 16) & 1)` in integer ops."""
    bits = b.bitcast(x, I32)
    if hardware:
        rounded = signed = _converted(b, x, bits)  # (the instruction keeps a NaN's sign)
    else:
        lowest_kept = b.and_(b.lshr(bits, _i32(16)), _i32(1))
        rounded = b.trunc(b.lshr(b.add(b.add(bits, _i32(0x7FFF)), lowest_kept), _i32(16)),
                          I16)
        signed = b.trunc(b.lshr(bits, _i32(16)), I16)
    nan = b.fcmp_unordered("uno", x, x)
    sign = b.and_(signed, ir.Constant(I16, 0x8000))
    return b.select(nan, b.or_(sign, ir.Constant(I16, BF16_QUIET_NAN)), rounded)


def _converted(b: ir.IRBuilder, x: ir.Value, bits: ir.Value) -> ir.Value:
    """`vcvtneps2bf16` of f32 `x` (bits `bits`), subnormals included: the instruction reads
    them as zero, so a subnormal x is converted as x ± 2⁻¹²⁶ (exact, and a normal number
    whose bf16 spacing, 2⁻¹³³, is that of the bf16 subnormals) and 2⁻¹²⁶ (0x0080) taken off
    its bits again."""
    subnormal = b.icmp_unsigned("==", b.and_(bits, _i32(F32_EXPONENT)), _i32(0))
    smallest_normal = b.bitcast(b.or_(b.and_(bits, _i32(SIGN)), _i32(F32_SMALLEST_NORMAL)),
                                F32)
    shifted = b.select(subnormal, b.fadd(x, smallest_normal), x)
    converted = b.bitcast(b.fptrunc(shifted, BFLOAT), I16)
    return b.select(subnormal, b.sub(converted, ir.Constant(I16, BF16_SMALLEST_NORMAL)),
                    converted)


def _define_bf16_bits(module: ir.Module, lanes: int, symbol: str) -> ir.Function:
    """`rv.bf16_bits` for `lanes` lanes (`vector_variants.py`): the scalar function is
    `_exact_bf16_bits`; a vector version converts the whole vector by one `vcvtneps2bf16`
    unless some lane is a NaN or subnormal (the instruction's two exceptions; a compare
    and a branch per vector), and such a rare vector lane by lane by the scalar function."""
    f32, i16 = (F32, I16) if lanes == 1 else (ir.VectorType(F32, lanes), ir.VectorType(I16, lanes))
    fn = ir.Function(module, ir.FunctionType(i16, [f32]), symbol)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    if lanes == 1:
        b.ret(_exact_bf16_bits(b, x, hardware=True))
        return fn
    # AVX-512's vfpclassps (every AVX512_BF16 host has AVX512DQ and VL; LLVM's generic
    # llvm.is.fpclass becomes five integer instructions instead)
    test = ir.Function(module, ir.FunctionType(ir.VectorType(ir.IntType(1), lanes), [f32, I32]),
                       f"llvm.x86.avx512.fpclass.ps.{32 * lanes}")
    special = b.call(test, [x, _i32(VFPCLASS_NAN | VFPCLASS_SUBNORMAL)])
    fast, slow = fn.append_basic_block("fast"), fn.append_basic_block("lane_by_lane")
    b.cbranch(any_lane(b, special, lanes), slow, fast).set_weights([1, 1000])
    b.position_at_end(fast)
    b.ret(b.bitcast(b.fptrunc(x, ir.VectorType(BFLOAT, lanes)), i16))
    b.position_at_end(slow)
    scalar = module.globals[symbol.rsplit(".v", 1)[0]]
    bits = ir.Constant(i16, ir.Undefined)
    for lane in range(lanes):
        bits = b.insert_element(bits, b.call(scalar, [b.extract_element(x, _i32(lane))]),
                                _i32(lane))
    b.ret(bits)
    return fn


def f16_to_f32(b: ir.IRBuilder, half: ir.Value) -> ir.Value:
    """The f32 of the f16 in the low half of i32 `half` (exact): the exponent and
    fraction shifted into place and scaled by 2¹¹² (subnormals included), inf and NaN
    given the f32 exponent."""
    shifted = b.shl(b.and_(half, _i32(0x7FFF)), _i32(13))
    scaled = b.bitcast(b.fmul(b.bitcast(shifted, F32), ir.Constant(F32, 2.0 ** 112)), I32)
    special = b.icmp_unsigned(">=", shifted, _i32(F16_INFINITY << 13))
    magnitude = b.select(special, b.or_(shifted, _i32(F32_EXPONENT)), scaled)
    sign = b.shl(b.and_(half, _i32(0x8000)), _i32(16))
    return b.bitcast(b.or_(magnitude, sign), F32)


def bf16_to_f32(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The f32 of the bf16 in the low half of i32 `bits` (exact: its upper half)."""
    return b.bitcast(b.shl(bits, _i32(16)), F32)
