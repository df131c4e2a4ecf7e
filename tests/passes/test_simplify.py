"""The pass `simplify` (compiler/transforms/simplify.py): constant folding, identities that
are bitwise exact, common subexpressions merged and dead ops removed. The input is built op
by op, since lowering already ends with `simplify`."""

from __future__ import annotations

from collections.abc import Callable

from passes.filecheck import filecheck
from passes.inputs import printed
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import TensorType, scalar
from reverie.compiler.transforms.simplify import simplify

N = Dim.sym("N")
F64 = scalar("f64")


def function(body: Callable[[Scope, Value], list[Value]]) -> Function:
    """`f(x: f64[N])` returning what `body` emits into its block."""
    x = Value(TensorType("f64", (N,)), name="x")
    scope = Scope(Block(params=[x]))
    scope.block.results = body(scope, x)
    return Function("f", scope.block, ["x"], ["N"])


def filled(s: Scope, value: float) -> Value:
    """`value` broadcast to [N]."""
    return s.op("broadcast", [s.const(value, F64)], {"shape": (N,)})


def simplified(body: Callable[[Scope, Value], list[Value]]) -> str:
    """The printed IR of `function(body)` after `simplify`."""
    return printed(simplify(function(body)))


def test_times_one_is_x_but_times_zero_stays() -> None:
    text = simplified(lambda s, x: [s.add(s.mul(x, filled(s, 1.0)), s.mul(x, filled(s, 0.0)))])
    filecheck(text, """
        CHECK-NOT: 1.0
        CHECK: value = 0.0
        CHECK: mul %x
        CHECK: add %x, %
    """)


def test_the_same_op_on_the_same_operands_is_computed_once() -> None:
    text = simplified(lambda s, x: [s.add(s.op("exp", [x]), s.op("exp", [x]))])
    filecheck(text, """
        CHECK: %0 = exp %x
        CHECK-NOT: exp
        CHECK: %1 = add %0, %0
    """)


def test_an_unused_op_is_removed() -> None:
    def body(s: Scope, x: Value) -> list[Value]:
        s.op("log", [x])
        return [s.op("tanh", [x])]
    filecheck(simplified(body), """
        CHECK-NOT: log
        CHECK: tanh %x
        CHECK-NEXT: return %0
    """)


def test_constants_fold_unless_the_arithmetic_would_warn() -> None:
    def body(s: Scope, x: Value) -> list[Value]:
        return [x, s.add(s.const(2.0, F64), s.const(3.0, F64)),
                s.div(s.const(1.0, F64), s.const(0.0, F64))]
    filecheck(simplified(body), """
        CHECK: value = 5.0
        CHECK-NOT: add
        CHECK: div
        CHECK: return %x
    """)


def test_a_transpose_of_a_transpose_is_the_value() -> None:
    def body(s: Scope, x: Value) -> list[Value]:
        matrix = s.op("reshape", [x], {"shape": (N, Dim.const(1))})
        twice = s.op("transpose", [s.op("transpose", [matrix], {"perm": (1, 0)})],
                     {"perm": (1, 0)})
        return [s.op("exp", [twice])]
    filecheck(simplified(body), """
        CHECK: reshape %x
        CHECK-NOT: transpose
        CHECK: exp
    """)
