"""sin, cos and tan over the whole float range, as scalar and vector LLVM IR functions.

`call(builder, name, fmt, x)` emits a call to `rv.sincos.<f32|f64>`, which returns the pair
(sin x, cos x), and takes sin, cos or their quotient, tan. The function has vector versions
(`vector_variants.py`: the loop vectoriser calls them, inlined once it has), which return a
pair of vectors. The call reads no memory, so `sin x` and `cos x` of one `x` in a loop
(every gradient of sin or cos, W1's) are one call: one reduction, one pair of polynomials.

Each version reduces |x| = k pi/2 + r (sin x = sign(x) sin|x|, cos x = cos|x|). f32
arguments below F32_SHORT in magnitude (in every lane) are reduced in f32 with three pieces
of pi/2 (`_cody_waite_f32`); the others, and every f64, with the exact Cody-Waite step in
f64, which covers |x| < 2**26. If any lane is larger (and finite), a branch taken once per
vector, not per lane, sends those lanes through the scalar Payne-Hanek reduction of
`payne_hanek.py`. Then `sin r = r + r^3 S(r^2)` and `cos r = 1 - r^2/2 + r^4 C(r^2)` are
combined by the quadrant's two low bits: a select swaps them, xors of the sign bit negate
them. Ordinary inputs thus run branch-free SIMD code plus one compare and one (predicted)
branch per vector; NaN and inf take the wide path, whose r is NaN for them.
"""

from __future__ import annotations

import math

from llvmlite import ir

from reverie.compiler.backend.irutil import I32
from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_formats import F64, PIO2_PIECES, TWO_OVER_PI, Format
from reverie.compiler.backend.payne_hanek import rem_pio2_large
from reverie.compiler.backend.vector_variants import call_with_variants, every_lane, phi

NAMES = frozenset({"sin", "cos", "tan"})
LARGE = 2.0**26     # Cody-Waite is exact for |k| < 2**26; from here on, Payne-Hanek
F32_SHORT = 1024.0  # below, f32 arguments are reduced in f32 (`_cody_waite_f32`)
TWO_OVER_PI_F32 = 0.6366197466850281
# pi/2 as three f32 numbers, each the f32 nearest what the previous ones leave (1e-23 over)
PIO2_F32 = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15)
# |r| is at most pi/4 = 0.785398..., plus up to 5e-5 where the f32 product x * 2/pi (error
# up to half an ulp of 652) rounds to the wrong side of a tie
REACH = {"f32": 0.7855, "f64": 0.7854}


def call(builder: ir.IRBuilder, name: str, fmt: Format, x: Value) -> Value:
    """Emit `name(x)` for x of the format `fmt`, vectorisable through the vector versions."""
    instruction = call_with_variants(
        builder, f"rv.sincos.{fmt.name}",
        lambda module, lanes, symbol: _define(module, fmt, lanes, symbol), [x])
    if name == "tan":  # sin x / cos x = ±sin r / ±cos r (or ±cos r / ±sin r)
        return builder.fdiv(builder.extract_value(instruction, 0),
                            builder.extract_value(instruction, 1))
    return builder.extract_value(instruction, 0 if name == "sin" else 1)


def _define(module: ir.Module, fmt: Format, lanes: int, symbol: str) -> ir.Function:
    """The version of sincos for `lanes` lanes (1: the scalar function).

    It works on |x| (sin x = sign(x) sin|x|, cos x = cos|x|), so the quadrant is never
    negative and sin(-0) = -0 comes from the sign bit alone."""
    ty = fmt.float_type if lanes == 1 else ir.VectorType(fmt.float_type, lanes)
    fn = ir.Function(module, ir.FunctionType(ir.LiteralStructType([ty, ty]), [ty]), symbol)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b, fmt, lanes)
    x = fn.args[0]
    ax = e.fabs(x)
    if fmt is F64:
        quadrant, r = _reduce_wide(e, ax)
    else:  # f32: the f32 reduction where every lane allows it, else the f64 one
        short = fn.append_basic_block("short")
        wide = fn.append_basic_block("wide")
        join = fn.append_basic_block("join")
        b.cbranch(every_lane(b, e.cmp("<", ax, F32_SHORT), lanes),
                  short, wide).set_weights([1000, 1])
        b.position_at_end(short)
        reduced = [(_cody_waite_f32(e, ax), b.block)]
        b.branch(join)
        b.position_at_end(wide)
        reduced.append((_reduce_wide(e, ax), b.block))
        b.branch(join)
        b.position_at_end(join)
        quadrant, r = (phi(b, [(pair[k], block) for pair, block in reduced]) for k in (0, 1))
    pair = ir.Constant(fn.return_value.type, ir.Undefined)
    for k, value in enumerate(_finish(e, x, quadrant, r)):
        pair = b.insert_value(pair, value, k)
    b.ret(pair)
    return fn


def _reduce_wide(e: Emitter, ax: Value) -> tuple[Value, Value]:
    """(quadrant bits, r) for any ax = |x| (NaN too): Cody-Waite in f64, and if some lane is
    finite with ax >= 2**26, a branch (once per vector) to Payne-Hanek for those lanes.
    r is clamped to the polynomials' range, and NaN where ax is inf or NaN (so are sin, cos)."""
    b, fmt, lanes = e.b, e.fmt, e.lanes
    function = b.function
    large_block = function.append_basic_block("large")
    join = function.append_basic_block("reduced")
    finite = e.isfinite(ax)
    quadrant, r = _cody_waite(e, e.select(finite, ax, 0.0))
    large = e.both(finite, e.cmp(">=", ax, LARGE))
    any_large = large if lanes == 1 else b.icmp_unsigned(
        "!=", b.bitcast(large, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0))
    fast = b.block
    b.cbranch(any_large, large_block, join).set_weights([1, 1000])
    b.position_at_end(large_block)
    large_quadrant, large_r = _payne_hanek_lanes(b, fmt, lanes, ax, quadrant, r)
    large_quadrant = b.select(large, large_quadrant, quadrant)
    large_r = b.select(large, large_r, r)
    b.branch(join)
    b.position_at_end(join)
    quadrant = phi(b, [(quadrant, fast), (large_quadrant, large_block)])
    r = phi(b, [(r, fast), (large_r, large_block)])
    quadrant = e.narrow(quadrant, fmt)
    reach = REACH[fmt.name]
    r = e.select(finite, e.clamp(r, -reach, reach), math.nan)
    return _integer_bits(e, e.add(quadrant, fmt.magic)), r


def _cody_waite_f32(e: Emitter, ax: Value) -> tuple[Value, Value]:
    """(quadrant bits, r) with ax = k pi/2 + r in f32 arithmetic, for 0 <= ax < F32_SHORT:
    k = rint(ax 2/pi), by adding 1.5 * 2**23 (its low bits are then k's); pi/2 = P1 + P2 + P3
    (+ 1e-23); ax - k P1 is exact (a multiple of ulp(P1) below 1), and fused multiply-adds
    take off k P2 and k P3 with one rounding each. |r| <= REACH["f32"]: no clamp needed."""
    shifted = e.add(e.mul(ax, TWO_OVER_PI_F32), e.fmt.magic)
    k = e.sub(shifted, e.fmt.magic)
    r = ax
    for piece in PIO2_F32:
        r = e.exact_fma(k, -piece, r)
    return _integer_bits(e, shifted), r


def _payne_hanek_lanes(b: ir.IRBuilder, fmt: Format, lanes: int, x: Value, quadrant: Value,
                       r: Value) -> tuple[Value, Value]:
    """(quadrant, r) of every lane of x by the scalar Payne-Hanek function, lane by lane."""
    reduce_large = rem_pio2_large(b.module)
    scalar = Emitter(b, fmt)
    for lane in range(lanes):
        index = ir.Constant(I32, lane)
        x_lane = x if lanes == 1 else b.extract_element(x, index)
        reduced = b.call(reduce_large, [scalar.wide().extend(x_lane)])
        r_lane = scalar.narrow(b.extract_value(reduced, 0), fmt)
        quadrant_lane = b.extract_value(reduced, 1)
        if lanes == 1:
            return quadrant_lane, r_lane
        r = b.insert_element(r, r_lane, index)
        quadrant = b.insert_element(quadrant, quadrant_lane, index)
    return quadrant, r


def _cody_waite(e: Emitter, x: Value) -> tuple[Value, Value]:
    """(quadrant q in 0..3 as an f64, r) with x = k pi/2 + r, exact for finite |x| < 2**26."""
    d = e.wide()
    xd = d.extend(x)
    k = d.rint(d.mul(xd, TWO_OVER_PI))
    first, *middle, last = PIO2_PIECES
    r = d.fma(k, -first, xd)
    tail = d.value(0.0)
    for piece in middle:
        if e.fmt is F64:  # keep the rounding errors: r may be far smaller than k * piece
            product = d.mul(k, piece)
            head = d.sub(r, product)
            tail = d.add(tail, d.two_sum_error(r, d.neg(product), head))
            r = head
        else:
            r = d.fma(k, -piece, r)
    r = d.add(r, d.fma(k, -last, tail))
    quadrant = d.sub(k, d.mul(4.0, d.floor(d.mul(k, 0.25))))
    return quadrant, e.narrow(r, e.fmt)


def _finish(e: Emitter, x: Value, quadrant: Value, r: Value) -> tuple[Value, Value]:
    """(sin x, cos x) from |x|'s reduced argument r and quadrant (its two low bits, q):
    sin|x| = (sin r, cos r, -sin r, -cos r) for q = 0..3 and cos|x| = (cos r, -sin r, -cos r,
    sin r): odd q swaps the two, bit 1 of q (of q + 1 for cos) flips the sign, and sin takes
    x's sign. The swap is a select, the signs are xors of the sign bit."""
    z = e.mul(r, r)
    sin_r = e.fma(e.mul(r, z), e.poly(z, e.fmt.sin_poly), r)
    half_z = e.mul(0.5, z)
    w = e.sub(1.0, half_z)
    cos_r = e.add(w, e.fma(e.mul(z, z), e.poly(z, e.fmt.cos_poly),
                           e.sub(e.sub(1.0, w), half_z)))
    b, bits = e.b, e.fmt.int_type.width
    odd = b.icmp_unsigned("!=", b.and_(quadrant, e.int_const(1)), e.int_const(0))
    sign_bit = e.int_const(1 << (bits - 1))
    sin_sign = b.xor(b.shl(b.and_(quadrant, e.int_const(2)), e.int_const(bits - 2)),
                     b.and_(_integer_bits(e, x), sign_bit))
    cos_sign = b.shl(b.and_(b.add(quadrant, e.int_const(1)), e.int_const(2)),
                     e.int_const(bits - 2))
    return (_flip_sign(e, e.select(odd, cos_r, sin_r), sin_sign),
            _flip_sign(e, e.select(odd, sin_r, cos_r), cos_sign))


def _integer_bits(e: Emitter, v: Value) -> Value:
    """The bit pattern of the float v, as an integer of the same width."""
    return e.b.bitcast(v, e.int_type)


def _flip_sign(e: Emitter, v: Value, sign: Value) -> Value:
    """v with its sign bit xor-ed with that of the integer `sign` (its other bits are 0)."""
    return e.b.bitcast(e.b.xor(_integer_bits(e, v), sign), e.float_type)
