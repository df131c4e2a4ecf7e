"""sin, cos and tan over the whole float range, as scalar and vector LLVM IR functions.

`call(builder, name, fmt, x)` emits a call to `rv.<name>.<f32|f64>`, defined once per module
together with vector versions `rv.<name>.<fmt>.v<lanes>` (one f64 and one f32 register wide). The
call carries LLVM's `vector-function-abi-variant` attribute naming them, so the loop
vectoriser replaces it by a call to the version of its vector width; the versions are listed
in `@llvm.compiler.used` so that they survive until then.

Each version reduces x = k pi/2 + r with an exact Cody-Waite step (the f64 reduction that
`mathlib.py` always used, also for f32), which covers |x| < 2**26. If any lane is larger
(and finite), a branch taken once per vector, not per lane, sends those lanes through the
scalar Payne-Hanek reduction of `payne_hanek.py`. Then `sin r = r + r^3 S(r^2)` and
`cos r = 1 - r^2/2 + r^4 C(r^2)` are combined by quadrant. Ordinary inputs thus run the same
branch-free SIMD code as before plus one compare and one (predicted) branch per vector, at
the price of a call per vector (the variants are not inlined after vectorisation).
"""

from __future__ import annotations

import functools
import math

from llvmlite import ir

from .irutil import I32, PTR, vector_lanes
from .mathlib_emitter import Emitter, Value
from .mathlib_formats import F64, PIO2_PIECES, TWO_OVER_PI, Format
from .payne_hanek import rem_pio2_large

NAMES = frozenset({"sin", "cos", "tan"})
LARGE = 2.0**26     # Cody-Waite is exact for |k| < 2**26; from here on, Payne-Hanek


@functools.cache
def vector_widths() -> tuple[int, ...]:
    """The widths given a vector version: a register of f64 (the vectoriser's choice for f64
    and mixed loops) and of f32 (f32 loops, and the width that `llvm.py` asks of sums)."""
    return tuple(sorted({vector_lanes("f64"), vector_lanes("f32")}))


def call(builder: ir.IRBuilder, name: str, fmt: Format, x: Value) -> Value:
    """Emit `name(x)` for x of the format `fmt`, vectorisable through the vector versions."""
    symbol = f"rv.{name}.{fmt.name}"
    scalar = builder.module.globals.get(symbol)
    if scalar is None:
        scalar = _define(builder.module, name, fmt, 1, symbol)
        _keep_alive(builder.module, [_define(builder.module, name, fmt, lanes, symbol)
                                     for lanes in vector_widths()])
    instruction = builder.call(scalar, [x])
    mapping = ",".join(f"_ZGV_LLVM_N{lanes}v_{symbol}({symbol}.v{lanes})"
                       for lanes in vector_widths())
    # llvmlite only accepts a fixed list of attribute names; this one is a string attribute
    set.add(instruction.attributes, f'"vector-function-abi-variant"="{mapping}"')
    return instruction


def _define(module: ir.Module, name: str, fmt: Format, lanes: int, symbol: str) -> ir.Function:
    """The version of `name` for `lanes` lanes (1: the scalar function)."""
    ty = fmt.float_type if lanes == 1 else ir.VectorType(fmt.float_type, lanes)
    fn = ir.Function(module, ir.FunctionType(ty, [ty]),
                     name=symbol if lanes == 1 else f"{symbol}.v{lanes}")
    fn.linkage = "internal"
    for attribute in ("nounwind", "readnone", "noinline"):
        fn.attributes.add(attribute)
    entry, large_block, join = (fn.append_basic_block(s) for s in ("entry", "large", "join"))
    b = ir.IRBuilder(entry)
    e = Emitter(b, fmt, lanes)
    x = fn.args[0]
    finite = e.isfinite(x)
    quadrant, r = _cody_waite(e, e.select(finite, x, 0.0))
    large = e.both(finite, e.cmp(">=", e.fabs(x), LARGE))
    any_large = large if lanes == 1 else b.icmp_unsigned(
        "!=", b.bitcast(large, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0))
    b.cbranch(any_large, large_block, join).set_weights([1, 1000])
    b.position_at_end(large_block)
    large_quadrant, large_r = _payne_hanek_lanes(b, fmt, lanes, x, quadrant, r)
    large_quadrant = b.select(large, large_quadrant, quadrant)
    large_r = b.select(large, large_r, r)
    b.branch(join)
    b.position_at_end(join)
    merged = []
    for fast, slow in ((quadrant, large_quadrant), (r, large_r)):
        phi = b.phi(fast.type)
        phi.add_incoming(fast, entry)
        phi.add_incoming(slow, large_block)
        merged.append(phi)
    b.ret(_finish(e, name, x, *merged))
    return fn


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


def _finish(e: Emitter, name: str, x: Value, quadrant: Value, r: Value) -> Value:
    """sin, cos or tan of x from its quadrant and reduced argument r, special values patched."""
    d = e.wide()
    r = e.clamp(r, -0.7854, 0.7854)
    z = e.mul(r, r)
    sin_r = e.fma(e.mul(r, z), e.poly(z, e.fmt.sin_poly), r)
    half_z = e.mul(0.5, z)
    w = e.sub(1.0, half_z)
    cos_r = e.add(w, e.fma(e.mul(z, z), e.poly(z, e.fmt.cos_poly),
                           e.sub(e.sub(1.0, w), half_z)))
    odd = d.either(d.cmp("==", quadrant, 1.0), d.cmp("==", quadrant, 3.0))
    if name == "sin":
        result = e.select(odd, cos_r, sin_r)
        result = e.select(d.cmp(">=", quadrant, 2.0), e.neg(result), result)
    elif name == "cos":
        result = e.select(odd, sin_r, cos_r)
        flip = d.either(d.cmp("==", quadrant, 1.0), d.cmp("==", quadrant, 2.0))
        result = e.select(flip, e.neg(result), result)
    else:
        result = e.div(e.select(odd, e.neg(cos_r), sin_r), e.select(odd, sin_r, cos_r))
    if name != "cos":
        result = e.select(e.cmp("==", x, 0.0), x, result)
    return e.select(e.isfinite(x), result, math.nan)


def _keep_alive(module: ir.Module, functions: list[ir.Function]) -> None:
    """Add `functions` to the module's `@llvm.compiler.used` list (created on first use)."""
    used = module.globals.get("llvm.compiler.used")
    if used is None:
        used = ir.GlobalVariable(module, ir.ArrayType(PTR, 0), "llvm.compiler.used")
        used.linkage, used.section = "appending", "llvm.metadata"
        entries = []
    else:
        entries = list(used.initializer.constant)
    entries += [ir.FormattedConstant(PTR, fn.get_reference()) for fn in functions]
    used.value_type = ir.ArrayType(PTR, len(entries))
    used.initializer = ir.Constant(used.value_type, entries)
