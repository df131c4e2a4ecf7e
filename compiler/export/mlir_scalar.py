"""Scalar semantics of the elementwise ops in MLIR's `arith` and `math` dialects.

Consumes an elementwise op name, its operands as SSA scalars (register types: `f32`,
`f64`, `i32`, `i64`, `i1`) and their IR dtype; produces the SSA scalar of the result,
with the NumPy semantics of the op table (`compiler/ir/ops.py`). The MLIR op of each
elementwise op and dtype class is named by its declaration (`ir/elementwise.py`):

    scalar_op(w, "tanh", ["%x"], "f32")        # %1 = math.tanh %x : f32
    scalar_op(w, "lt", ["%a", "%b"], "i64")    # %2 = arith.cmpi slt, %a, %b : i64

Ops without a single MLIR counterpart are written out (`COMPOSITES`): `sigmoid` and
`softplus` in their overflow-free forms, float `floordiv`/`mod` as NumPy's `divmod`,
integer division guarded so that division by 0 gives 0 (as NumPy does) instead of
trapping, and float → int casts guarded so that NaN, ±inf and out-of-range values give
INT_MIN (`arith.fptosi` would give poison), as the native backend does. Ops that MLIR
lacks and the math library implements backend-neutrally (`backend/mathlib.NEUTRAL`)
are that same algorithm, written in arith/math ops by `MlirArith`.

The storage types bf16 and f16 (`ir/dtypes.py`) are computed on as f32: `cast` widens them
with `arith.extf` and rounds to them once, bit for bit as ml_dtypes and NumPy's `astype`
(`_round_to_storage`), and an op on them computes in f32 and rounds its float result back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reverie.compiler.backend.mathlib import NEUTRAL
from reverie.compiler.backend.mathlib_formats import F32, F64, Format
from reverie.compiler.export.mlir_writer import REGISTER, MlirWriter
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import dtype_class
from reverie.compiler.ir.rule_table import missing_rule

WIDTH = {"f32": 32, "f64": 64, "i32": 32, "i64": 64}


class Scalars:
    """Helpers that emit one arith/math op on scalars of one IR dtype."""

    def __init__(self, w: MlirWriter, dtype: str) -> None:
        self.w = w
        self.dtype = dtype
        self.type = REGISTER[dtype]

    def const(self, value: object) -> str:
        return self.w.typed_const(value, self.dtype)

    def op(self, name: str, *args: str) -> str:
        """`name args : type`, e.g. `arith.addf %a, %b : f32`; a name with a predicate
        puts a comma before the operands: `arith.cmpf olt, %a, %b : f32`."""
        separator = ", " if " " in name else " "
        return self.w.assign(f"{name}{separator}{', '.join(args)} : {self.type}")

    def cmp(self, predicate: str, a: str, b: str) -> str:
        kind = "arith.cmpf" if dtype_class(self.dtype) == "float" else "arith.cmpi"
        return self.op(f"{kind} {predicate}", a, b)

    def select(self, cond: str, a: str, b: str) -> str:
        if self.dtype not in STORAGE_DTYPES:
            return self.w.assign(f"arith.select {cond}, {a}, {b} : {self.type}")
        # on their 16 bits: without AVX512_BF16 LLVM computes a bfloat select in float and
        # narrows it back by calling `__truncsfbf2`, which the process lacks
        a, b = (self.w.assign(f"arith.bitcast {v} : {self.type} to i16") for v in (a, b))
        chosen = self.w.assign(f"arith.select {cond}, {a}, {b} : i16")
        return self.w.assign(f"arith.bitcast {chosen} : i16 to {self.type}")

    def logic(self, name: str, a: str, b: str) -> str:
        """`arith.andi`/`ori`/`xori` on two i1 values."""
        return self.w.assign(f"{name} {a}, {b} : i1")


# Ops that move bf16/f16 values without computing on them
EXACT_ON_STORAGE = ("select", "stop_gradient")


def scalar_op(w: MlirWriter, name: str, args: list[str], dtype: str,
              attrs: dict[str, Any] | None = None) -> str:
    """The result of elementwise op `name` on scalars `args` whose IR dtype is `dtype`: the
    MLIR op its declaration names, else a composite written here, else the math library's
    backend-neutral algorithm of that name (a CompileError names an op with none). On
    bf16/f16 operands it computes in f32 and rounds a float result back: the rule that
    `ir/widen_storage.py` writes out, here for what that pass keeps (the sums of a
    `generic_scatter`)."""
    if name == "cast":
        return cast(w, args[0], dtype, (attrs or {})["dtype"])
    row = ELEMENTWISE.get(name)
    if dtype in STORAGE_DTYPES and name not in EXACT_ON_STORAGE:
        wide = scalar_op(w, name, [cast(w, a, dtype, "f32") for a in args], "f32", attrs)
        return wide if row is not None and row.result else cast(w, wide, "f32", dtype)
    kind = dtype_class(dtype)
    if row is not None and kind in row.mlir:
        return Scalars(w, dtype).op(row.mlir[kind], *args)
    if (name, kind) in COMPOSITES:
        return COMPOSITES[name, kind](Scalars(w, dtype), *args)
    if row is not None and kind == "float" and name in NEUTRAL:
        keywords = {a: (attrs or {})[a] for a in row.attrs}
        return NEUTRAL[name](MlirArith(w, dtype), *args, **keywords)
    raise missing_rule(name, f"the MLIR export for {dtype}", w.span)


def has_rule(name: str, kind: str) -> bool:
    """Whether `scalar_op` can write op `name` on operands of dtype class `kind`."""
    row = ELEMENTWISE.get(name)
    return name == "cast" or (row is not None and kind in row.mlir) or \
        (name, kind) in COMPOSITES or (kind == "float" and name in NEUTRAL)


def cast(w: MlirWriter, x: str, source: str, target: str) -> str:
    """Convert a scalar between IR dtypes as NumPy's `astype` does (with ml_dtypes for bf16:
    from and to the storage types by `_widen` and `_round_to_storage`)."""
    if source == target:
        return x
    if source in STORAGE_DTYPES:
        return cast(w, _widen(w, x, source), "f32", target)
    if target in STORAGE_DTYPES:
        return _round_to_storage(w, x, source, target)
    src, dst = dtype_class(source), dtype_class(target)
    if dst == "bool":
        return Scalars(w, source).cmp("une" if src == "float" else "ne", x,
                                      w.typed_const(0, source))
    if src == "bool":
        op = "arith.uitofp" if dst == "float" else "arith.extui"
    elif src == dst:
        wider = WIDTH[target] > WIDTH[source]
        op = {"float": ("arith.truncf", "arith.extf"), "int": ("arith.trunci", "arith.extsi")}[
            src][wider]
    elif dst == "float":
        op = "arith.sitofp"
    else:
        return _float_to_int(w, x, source, target)
    return w.assign(f"{op} {x} : {REGISTER[source]} to {REGISTER[target]}")


def _widen(w: MlirWriter, x: str, storage: str) -> str:
    """A bf16/f16 scalar as f32, exactly (`arith-expand` writes bf16's as a 16-bit shift)."""
    return w.assign(f"arith.extf {x} : {storage} to f32")


def _round_to_storage(w: MlirWriter, x: str, source: str, target: str) -> str:
    """`x` rounded once to bf16/f16 (to nearest even, as ml_dtypes and NumPy do).

    A source wider than f32 reaches f32 by rounding to odd, which keeps the one rounding to
    16 bits exact (f32 has more than two bits beyond their precision). Integers reach f64
    exactly: i64 beyond 2**53 keeps its bits down to 2**12 and a sticky bit (`_sticky_i64`).
    """
    if dtype_class(source) != "float":
        x = _sticky_i64(w, x) if source == "i64" else x
        x, source = cast(w, x, source, "f64"), "f64"
    if source == "f64":
        x = _f64_to_f32_odd(w, x)
    rounded = w.assign(f"arith.truncf {x} : f32 to {target}")
    if target == "f16":
        return rounded                        # F16C's vcvtps2ph keeps a NaN's sign
    # arith-expand's bf16 truncf makes every NaN +NaN; ml_dtypes keeps the sign
    s, bf16 = Scalars(w, "f32"), Scalars(w, "bf16")
    nan = bf16.select(_negative_bits(s, x), bf16.const(-np.nan), bf16.const(np.nan))
    return bf16.select(s.cmp("uno", x, x), nan, rounded)


def _f64_to_f32_odd(w: MlirWriter, x: str) -> str:
    """`x` rounded to f32 towards zero, with the last bit set when that was inexact (round
    to odd): of the two f32 values around an inexact x, the odd one. NaN stays NaN."""
    d = Scalars(w, "f64")
    nearest = w.assign(f"arith.truncf {x} : f64 to f32")
    back = w.assign(f"arith.extf {nearest} : f32 to f64")
    bits = w.assign(f"arith.bitcast {nearest} : f32 to i32")
    i32 = Scalars(w, "i32")
    even = i32.cmp("eq", i32.op("arith.andi", bits, i32.const(1)), i32.const(0))
    inexact = d.cmp("one", x, back)
    above = d.cmp("ogt", d.op("math.absf", x), d.op("math.absf", back))
    neighbour = i32.select(above, i32.op("arith.addi", bits, i32.const(1)),
                           i32.op("arith.subi", bits, i32.const(1)))
    odd = i32.select(i32.logic("arith.andi", inexact, even), neighbour, bits)
    return w.assign(f"arith.bitcast {odd} : i32 to f32")


def _sticky_i64(w: MlirWriter, x: str) -> str:
    """`x` where |x| <= 2**53 (f64 holds it), else its bits above 2**12 and, at 2**11, a
    sticky bit for those below: f64 holds that exactly, and it rounds to 16 bits as x does
    (their rounding boundaries are multiples of 2**45 there)."""
    s = Scalars(w, "i64")
    low = s.op("arith.andi", x, s.const(0xFFF))
    sticky = s.select(s.cmp("ne", low, s.const(0)), s.const(0x800), s.const(0))
    compressed = s.op("arith.ori", s.op("arith.andi", x, s.const(~0xFFF)), sticky)
    large = s.logic("arith.ori", s.cmp("sgt", x, s.const(2 ** 53)),
                    s.cmp("slt", x, s.const(-2 ** 53)))
    return s.select(large, compressed, x)


def _negative_bits(s: Scalars, x: str) -> str:
    """i1: the sign bit of float `x` is set (NaN and -0 included)."""
    bits = f"i{WIDTH[s.dtype]}"
    as_int = s.w.assign(f"arith.bitcast {x} : {s.type} to {bits}")
    return s.w.assign(f"arith.cmpi slt, {as_int}, {s.w.const(0, bits)} : {bits}")


def _float_to_int(w: MlirWriter, x: str, source: str, target: str) -> str:
    """Truncation towards zero where it fits, else INT_MIN (NaN, ±inf, out of range), as
    the native backend does; `arith.fptosi` only sees in-range values (else poison)."""
    s = Scalars(w, source)
    limit = 2 ** (WIDTH[target] - 1)
    fits = s.logic("arith.andi", s.cmp("oge", x, s.const(-limit)), s.cmp("olt", x, s.const(limit)))
    safe = s.select(fits, x, s.const(0))
    truncated = w.assign(f"arith.fptosi {safe} : {REGISTER[source]} to {REGISTER[target]}")
    return Scalars(w, target).select(fits, truncated, w.typed_const(-limit, target))


# ---------------------------------------------------------------- float composites


def _rsqrt(s: Scalars, x: str) -> str:
    return s.op("arith.divf", s.const(1), s.op("math.sqrt", x))


def _sigmoid(s: Scalars, x: str) -> str:
    """e = exp(-|x|); x >= 0 ? 1 / (1 + e) : e / (1 + e)."""
    e = s.op("math.exp", s.op("arith.negf", s.op("math.absf", x)))
    denominator = s.op("arith.addf", s.const(1), e)
    positive = s.op("arith.divf", s.const(1), denominator)
    negative = s.op("arith.divf", e, denominator)
    return s.select(s.cmp("oge", x, s.const(0)), positive, negative)


def _relu(s: Scalars, x: str) -> str:
    return s.op("arith.maximumf", x, s.const(0))


def _softplus(s: Scalars, x: str) -> str:
    """log(1 + e^x) = max(x, 0) + log1p(exp(-|x|))."""
    tail = s.op("math.log1p", s.op("math.exp", s.op("arith.negf", s.op("math.absf", x))))
    return s.op("arith.addf", _relu(s, x), tail)


def _float_sign(s: Scalars, x: str) -> str:
    """1, -1, or x itself for 0 and NaN."""
    negative = s.select(s.cmp("olt", x, s.const(0)), s.const(-1), x)
    return s.select(s.cmp("ogt", x, s.const(0)), s.const(1), negative)


def _signed_zero(s: Scalars, like: str) -> str:
    """0 with the sign bit of `like` (copysign(0, like))."""
    return s.select(_negative_bits(s, like), s.const(-0.0), s.const(0.0))


def _float_divmod(s: Scalars, a: str, b: str) -> tuple[str, str]:
    """NumPy's floor division and remainder of floats (`npy_divmod`)."""
    zero, one = s.const(0), s.const(1)
    quotient = s.op("arith.divf", a, b)
    mod = s.op("arith.remf", a, b)
    div = s.op("arith.divf", s.op("arith.subf", a, mod), b)
    nonzero = s.cmp("une", mod, zero)
    signs_differ = s.logic("arith.xori", s.cmp("olt", b, zero), s.cmp("olt", mod, zero))
    adjust = s.logic("arith.andi", nonzero, signs_differ)
    mod = s.select(adjust, s.op("arith.addf", mod, b), mod)
    mod = s.select(nonzero, mod, _signed_zero(s, b))
    div = s.select(adjust, s.op("arith.subf", div, one), div)
    floor = s.op("math.floor", div)
    round_up = s.cmp("ogt", s.op("arith.subf", div, floor), s.const(0.5))
    floor = s.select(round_up, s.op("arith.addf", floor, one), floor)
    floor = s.select(s.cmp("une", div, zero), floor, _signed_zero(s, quotient))
    floor = s.select(s.cmp("oeq", b, zero), quotient, floor)
    return floor, mod


FLOAT_COMPOSITES: dict[str, Callable[..., str]] = {
    "rsqrt": _rsqrt,
    "sigmoid": _sigmoid,
    "relu": _relu,
    "softplus": _softplus,
    "sign": _float_sign,
    "floordiv": lambda s, a, b: _float_divmod(s, a, b)[0],
    "mod": lambda s, a, b: _float_divmod(s, a, b)[1],
}


# ---------------------------------------------------------------- integer composites


def _int_sign(s: Scalars, x: str) -> str:
    negative = s.select(s.cmp("slt", x, s.const(0)), s.const(-1), s.const(0))
    return s.select(s.cmp("sgt", x, s.const(0)), s.const(1), negative)


def _safe_divisor(s: Scalars, b: str) -> tuple[str, str, str]:
    """(b, or 1 where b is 0 or -1; b == 0; b == -1): no division traps or overflows."""
    is_zero = s.cmp("eq", b, s.const(0))
    is_minus_one = s.cmp("eq", b, s.const(-1))
    special = s.logic("arith.ori", is_zero, is_minus_one)
    return s.select(special, s.const(1), b), is_zero, is_minus_one


def _positive_constant(s: Scalars, b: str) -> bool:
    """Whether `b` is a constant above 0 (then division needs no guard)."""
    value = s.w.constant_values.get(b)
    return isinstance(value, int) and value > 0


def _int_floordiv(s: Scalars, a: str, b: str) -> str:
    """Floor division; a // -1 is -a (wrapping), a // 0 is 0 as in NumPy."""
    if _positive_constant(s, b):
        return s.op("arith.floordivsi", a, b)
    divisor, is_zero, is_minus_one = _safe_divisor(s, b)
    quotient = s.op("arith.floordivsi", a, divisor)
    quotient = s.select(is_minus_one, s.op("arith.subi", s.const(0), a), quotient)
    return s.select(is_zero, s.const(0), quotient)


def _int_mod(s: Scalars, a: str, b: str) -> str:
    """Remainder with the sign of the divisor; a % 0 is 0 as in NumPy."""
    if _positive_constant(s, b):
        rem = s.op("arith.remsi", a, b)
        negative = s.cmp("slt", rem, s.const(0))
        return s.select(negative, s.op("arith.addi", rem, b), rem)
    divisor, is_zero, _ = _safe_divisor(s, b)
    rem = s.op("arith.remsi", a, divisor)
    signs_differ = s.logic("arith.xori", s.cmp("slt", rem, s.const(0)),
                           s.cmp("slt", divisor, s.const(0)))
    adjust = s.logic("arith.andi", s.cmp("ne", rem, s.const(0)), signs_differ)
    rem = s.select(adjust, s.op("arith.addi", rem, divisor), rem)
    return s.select(is_zero, s.const(0), rem)


INT_COMPOSITES: dict[str, Callable[..., str]] = {
    "neg": lambda s, x: s.op("arith.subi", s.const(0), x),
    "abs": lambda s, x: s.select(s.cmp("slt", x, s.const(0)), s.op("arith.subi", s.const(0), x), x),
    "sign": _int_sign,
    "floordiv": _int_floordiv,
    "mod": _int_mod,
}
ANY_CLASS = ("float", "int", "bool")
# (op, dtype class) -> the op written out in arith/math ops
COMPOSITES: dict[tuple[str, str], Callable[..., str]] = {
    **{(name, "float"): fn for name, fn in FLOAT_COMPOSITES.items()},
    **{(name, "int"): fn for name, fn in INT_COMPOSITES.items()},
    ("not", "bool"): lambda s, x: s.logic("arith.xori", x, s.w.const(True, "i1")),
    **{("select", kind): Scalars.select for kind in ANY_CLASS},
    **{("stop_gradient", kind): lambda s, x: x for kind in ANY_CLASS},
}


# ---------------------------------------------------------------- the math library's algorithms


class MlirArith:
    """The operations of the math library's `Emitter` that its backend-neutral bodies use
    (`backend/mathlib.NEUTRAL`), writing arith/math ops on scalars of one float
    dtype: `MlirArith(w, "f64").fma(a, b, c)` is `math.fma %a, %b, %c : f64`. Conditions
    are i1 values; `log`, `log1p`, `exp`, `exp2`, `sqrt`, `pow`, `sin` and `cos` are the
    `math` ops (the MLIR backend makes the transcendental ones libm calls); `fma` is
    `math.fma`, one rounding, so it is `exact_fma` too."""

    def __init__(self, w: MlirWriter, dtype: str, arguments: str | None = None) -> None:
        self.w = w
        self.dtype = dtype
        self.arguments = arguments or dtype   # the dtype of the body's arguments
        self.fmt: Format = F32 if dtype == "f32" else F64
        self.s = Scalars(w, dtype)

    def value(self, v: str | float) -> str:
        """`v` itself, or a constant of this dtype for a Python number."""
        return v if isinstance(v, str) else self.w.const(float(v), REGISTER[self.dtype])

    def _op(self, name: str, *args: str | float) -> str:
        return self.s.op(name, *(self.value(a) for a in args))

    def wide(self) -> MlirArith:
        """The same writer for f64, whose `extend` converts values of this writer's dtype
        (a body's arguments; values of a wider body that calls another are f64 already)."""
        return MlirArith(self.w, "f64", self.dtype)

    def extend(self, v: str) -> str:
        """An argument converted (exactly) to this dtype."""
        if self.arguments == self.dtype:
            return v
        return self.w.assign(f"arith.extf {v} : {self.arguments} to {self.dtype}")

    def narrow(self, v: str, fmt: Format) -> str:
        """`v` rounded to the format `fmt`."""
        if fmt.name == self.dtype:
            return v
        return self.w.assign(f"arith.truncf {v} : {self.dtype} to {fmt.name}")

    def add(self, a: str | float, b: str | float) -> str:
        return self._op("arith.addf", a, b)

    def sub(self, a: str | float, b: str | float) -> str:
        return self._op("arith.subf", a, b)

    def mul(self, a: str | float, b: str | float) -> str:
        return self._op("arith.mulf", a, b)

    def div(self, a: str | float, b: str | float) -> str:
        return self._op("arith.divf", a, b)

    def neg(self, a: str) -> str:
        return self._op("arith.negf", a)

    def fma(self, a: str | float, b: str | float, c: str | float) -> str:
        return self._op("math.fma", a, b, c)

    def poly(self, x: str, coeffs: Sequence[str | float]) -> str:
        """c0 + c1 x + c2 x^2 + ... by Horner's rule."""
        acc = self.value(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    def fabs(self, a: str) -> str:
        return self._op("math.absf", a)

    def floor(self, a: str) -> str:
        return self._op("math.floor", a)

    def rint(self, a: str) -> str:
        return self._op("math.roundeven", a)

    def copysign(self, magnitude: str | float, sign: str) -> str:
        """|magnitude| with the sign bit of `sign` (a select on the bits: the MLIR backend's
        pipeline does not lower `math.copysign`)."""
        size = self.fabs(self.value(magnitude))
        bits = f"i{WIDTH[self.dtype]}"
        as_int = self.w.assign(f"arith.bitcast {sign} : {self.s.type} to {bits}")
        negative = self.w.assign(f"arith.cmpi slt, {as_int}, {self.w.const(0, bits)} : {bits}")
        return self.select(negative, self.neg(size), size)

    def log(self, x: str) -> str:
        return self._op("math.log", x)

    def log1p(self, x: str) -> str:
        return self._op("math.log1p", x)

    def exp(self, x: str) -> str:
        return self._op("math.exp", x)

    def exp2(self, x: str) -> str:
        return self._op("math.exp2", x)

    def sqrt(self, x: str) -> str:
        return self._op("math.sqrt", x)

    def pow(self, x: str, y: str | float) -> str:
        return self._op("math.powf", x, y)

    def sin(self, x: str) -> str:
        return self._op("math.sin", x)

    def cos(self, x: str) -> str:
        return self._op("math.cos", x)

    def exact_fma(self, a: str | float, b: str | float, c: str | float) -> str:
        return self.fma(a, b, c)

    def clamp(self, x: str, lo: float, hi: float) -> str:
        """x limited to [lo, hi]; NaN becomes hi."""
        below_hi = self.select(self.cmp("<", x, hi), x, hi)
        return self.select(self.cmp(">", below_hi, lo), below_hi, lo)

    def cmp(self, op: str, a: str | float, b: str | float) -> str:
        """Ordered comparison (false when either side is NaN)."""
        return self.s.cmp(ORDERED[op], self.value(a), self.value(b))

    def cmp_unordered(self, op: str, a: str | float, b: str | float) -> str:
        """Unordered comparison (true when either side is NaN)."""
        return self.s.cmp("u" + ORDERED[op][1:], self.value(a), self.value(b))

    def isnan(self, a: str) -> str:
        return self.s.cmp("uno", a, a)

    def select(self, cond: str, a: str | float, b: str | float) -> str:
        return self.s.select(cond, self.value(a), self.value(b))

    def both(self, c1: str, c2: str) -> str:
        return self.s.logic("arith.andi", c1, c2)

    def either(self, c1: str, c2: str) -> str:
        return self.s.logic("arith.ori", c1, c2)


ORDERED = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one"}
