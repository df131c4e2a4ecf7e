"""Vectorisable transcendental functions for f32 and f64, emitted as LLVM IR with llvmlite.

Consumes an `llvmlite.ir.Module`. `MathLib(module).call(builder, name, args)` emits, once per
module, an internal `alwaysinline` function `rv.<name>.<f32|f64>` and returns a call to it.
After inlining, a loop that calls these functions holds only arithmetic, selects and bit
operations, so LLVM's loop vectoriser turns it into SIMD code. No libm call and no
`llvm.exp.*`-style intrinsic is emitted (the backend would split those into scalar calls);
sqrt, floor, ceil and abs map to LLVM intrinsics that vectorise natively. Sin, cos and tan
are the exception: they come from `trig.py` as functions with explicit vector versions,
which the vectoriser calls instead (a rare branch per vector handles huge arguments).

The bodies live by family: `mathlib_elementary.py` (exp, log, tanh, pow, ...),
`mathlib_exponential.py` (sinh, cosh, exp2, log2, log10, logaddexp, hypot, sinc, ...),
`mathlib_inverse.py` (arctan, arctan2, arcsin, arccos, arcsinh, arccosh, arctanh),
`mathlib_special.py` (erf, lgamma, ...), `mathlib_gamma.py` (gamma, beta, betaln),
`mathlib_error_function.py` (erfc, erfinv, erfcinv), `mathlib_bessel.py` (i0, i1, j0, j1,
y0, y1, jn, yn), `mathlib_bessel_real.py` (iv, ive, jv), `mathlib_incomplete_gamma.py`
(gammainc, gammaincc) and `mathlib_incomplete_beta.py` (betainc); a function added to one
of their `BODIES` tables is supported here. `NEUTRAL` holds the bodies that the MLIR export
writes out as well. A function with attributes (`polygamma`, order n; `iv`, a real order
v) takes them as keywords and gets one internal function per value:
`rv.polygamma.order2.f64`, `rv.iv.order-2.5.f64`. Method and measured error bounds:
docs/mathlib.md.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from reverie.compiler.backend import (
    mathlib_bessel,
    mathlib_bessel_real,
    mathlib_elementary,
    mathlib_error_function,
    mathlib_exponential,
    mathlib_gamma,
    mathlib_incomplete_beta,
    mathlib_incomplete_gamma,
    mathlib_inverse,
    mathlib_special,
    trig,
)
from reverie.compiler.backend.mathlib_emitter import Emitter, Value
from reverie.compiler.backend.mathlib_formats import F32, F64, Format

_BODIES: dict[str, Callable[..., Value]] = {**mathlib_elementary.BODIES,
                                            **mathlib_exponential.BODIES,
                                            **mathlib_inverse.BODIES,
                                            **mathlib_special.BODIES,
                                            **mathlib_gamma.BODIES,
                                            **mathlib_error_function.BODIES,
                                            **mathlib_bessel.BODIES,
                                            **mathlib_bessel_real.BODIES,
                                            **mathlib_incomplete_gamma.BODIES,
                                            **mathlib_incomplete_beta.BODIES}
# the bodies written only against the operations `MathEmitter` shares with the MLIR
# export's `MlirArith`, which writes them out for ops that MLIR lacks
NEUTRAL: dict[str, Callable[..., Value]] = {**mathlib_exponential.NEUTRAL,
                                            **mathlib_special.NEUTRAL,
                                            **mathlib_gamma.NEUTRAL,
                                            **mathlib_error_function.NEUTRAL,
                                            **mathlib_bessel.NEUTRAL,
                                            **mathlib_bessel_real.NEUTRAL,
                                            **mathlib_incomplete_gamma.NEUTRAL,
                                            **mathlib_incomplete_beta.NEUTRAL}
_NATIVE_INTRINSICS = {"sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil",
                      "abs": "llvm.fabs"}
SUPPORTED: frozenset[str] = frozenset(_BODIES) | frozenset(_NATIVE_INTRINSICS) | trig.NAMES
BINARY = frozenset({"pow", "arctan2", "hypot", "logaddexp", "logaddexp2", "beta", "betaln",
                    "gammainc", "gammaincc"})
TERNARY = frozenset({"betainc"})


class MathEmitter(Emitter):
    """The emitter the bodies get: `Emitter` plus `log`, `log1p`, `exp`, `exp2`, `sqrt`,
    `pow`, `sin` and `cos` (the backend-neutral bodies of `NEUTRAL` use them besides
    arithmetic and selects)."""

    def exp(self, x: Value) -> Value:
        return mathlib_elementary.exp_core(self, x)

    def exp2(self, x: Value) -> Value:
        return mathlib_exponential.exp2_core(self, x)

    def sqrt(self, x: Value) -> Value:
        return self.intrinsic("llvm.sqrt", x)

    def pow(self, x: Value, y: Value) -> Value:
        return mathlib_elementary.BODIES["pow"](self, x, y)

    def sin(self, x: Value) -> Value:
        return trig.call(self.b, "sin", self.fmt, x)

    def cos(self, x: Value) -> Value:
        return trig.call(self.b, "cos", self.fmt, x)

    def log(self, x: Value) -> Value:
        return mathlib_elementary.BODIES["log"](self, x)

    def log1p(self, x: Value) -> Value:
        return mathlib_elementary.BODIES["log1p"](self, x)


class MathLib:
    """Emits the math functions a module needs, each once, and calls to them."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module

    def call(self, builder: ir.IRBuilder, name: str, args: list[Value],
             **attrs: float) -> Value:
        """Emit `name(*args)`; the argument type (float or double) selects f32 or f64;
        `attrs` are the function's attributes (`order=2`, `order=2.5`)."""
        if name not in SUPPORTED:
            raise ValueError(f"unknown math function {name!r}; supported: {sorted(SUPPORTED)}")
        arity = 3 if name in TERNARY else 2 if name in BINARY else 1
        if len(args) != arity or any(a.type != args[0].type for a in args):
            raise ValueError(f"{name} takes {arity} argument(s) of one float type")
        fmt = _format_of(args[0].type)
        if name in _NATIVE_INTRINSICS:
            return Emitter(builder, fmt).intrinsic(_NATIVE_INTRINSICS[name], *args)
        if name in trig.NAMES:
            return trig.call(builder, name, fmt, args[0])
        return builder.call(self._function(name, fmt, arity, attrs), args)

    def _function(self, name: str, fmt: Format, arity: int,
                  attrs: dict[str, float]) -> ir.Function:
        """The internal function `rv.<name>[.<attr><value>...].<fmt>`, defined on first use."""
        suffix = "".join(f".{key}{value}" for key, value in sorted(attrs.items()))
        symbol = f"rv.{name}{suffix}.{fmt.name}"
        existing = self.module.globals.get(symbol)
        if existing is not None:
            return existing
        ty = fmt.float_type
        fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), name=symbol)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        builder.ret(_BODIES[name](MathEmitter(builder, fmt), *fn.args, **attrs))
        return fn


def _format_of(ty: ir.Type) -> Format:
    """The format of a float or double type."""
    for fmt in (F32, F64):
        if ty == fmt.float_type:
            return fmt
    raise TypeError(f"math functions take float or double values, not {ty}")
