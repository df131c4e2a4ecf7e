"""The pass `forward` (compiler/transforms/forward.py): `jvp_function` copies each primal op
and emits its tangent right after it, from the tangents of its operands; a value without a
tangent costs no IR, and a result's tangent is returned after the results."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.forward import jvp_function

SOURCE = "fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"


def test_each_tangent_follows_its_primal_op() -> None:
    filecheck(printed(jvp_function(lowered(SOURCE), [0])), """
        CHECK: func @f_jvp(%x: f64[N], %w: f64[N], %x_dot: f64[N]) -> (f64, f64)
        CHECK-NEXT: %0 = mul %x, %w
        CHECK-NEXT: %1 = mul %x_dot, %w
        CHECK-NEXT: %2 = tanh %0
        CHECK: %7 = mul %6, %1
        CHECK: %8 = reduce_sum %2
        CHECK-NEXT: %9 = reduce_sum %7
        CHECK-NEXT: return %8, %9
    """)


def test_a_parameter_not_differentiated_has_no_tangent() -> None:
    filecheck(printed(jvp_function(lowered(SOURCE), [1])), """
        CHECK: func @f_jvp(%x: f64[N], %w: f64[N], %w_dot: f64[N])
        CHECK-NOT: %x_dot
        CHECK: mul %x, %w_dot
    """)


def test_both_tangents_of_a_product_are_added() -> None:
    fn = lowered("fn f(x: f64[N], w: f64[N]) -> f64[N] { return x * w; }")
    filecheck(printed(jvp_function(fn, [0, 1])), """
        CHECK: %x_dot: f64[N], %w_dot: f64[N]) -> (f64[N], f64[N])
        CHECK-NEXT: %0 = mul %x, %w
        CHECK-NEXT: %1 = mul %x_dot, %w
        CHECK-NEXT: %2 = mul %x, %w_dot
        CHECK-NEXT: %3 = add %1, %2
        CHECK-NEXT: return %0, %3
    """)


def test_a_loop_carries_the_tangent_beside_its_state() -> None:
    fn = lowered("fn f(x: f64[N], steps: i64) -> f64[N] {"
                 " var y = x; for t in 0..steps { y = sin(y); } return y; }")
    filecheck(printed(jvp_function(fn, [0])), """
        CHECK: %2, %3 = for %1, %0, %x, %x_dot {carried = 2}
        CHECK-NEXT: %4 = sin %y
        CHECK-NEXT: %5 = cos %y
        CHECK-NEXT: %6 = mul %5, %y_dot
        CHECK-NEXT: yield %4, %6
        CHECK-NEXT: } : f64[N], f64[N]
        CHECK-NEXT: return %2, %3
    """)
