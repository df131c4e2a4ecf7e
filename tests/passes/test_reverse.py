"""The pass `reverse` (compiler/transforms/reverse.py): `grad_function` and `vjp_function`
copy the primal ops, then emit each active op's adjoint in reverse order, summing the
contributions of a value used twice; a `for` loop keeps its states for the reverse sweep."""

from __future__ import annotations

import pytest

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.reverse import grad_function, vjp_function


def test_the_gradient_of_a_sum_of_tanh_is_one_minus_tanh_squared() -> None:
    fn = lowered("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }")
    filecheck(printed(grad_function(fn, [0])), """
        CHECK: func @f_grad(%x: f64[N], %w: f64[N]) -> (f64, f64[N])
        CHECK: %1 = tanh %0
        CHECK: %2 = reduce_sum %1
        CHECK: %5 = mul %1, %1
        CHECK-NEXT: %6 = sub %4, %5
        CHECK-NEXT: %x_bar = mul %6, %w
        CHECK-NOT: %w_bar
        CHECK: return %2, %x_bar
    """)


def test_a_vjp_takes_the_cotangent_as_a_parameter() -> None:
    fn = lowered("fn g(x: f64[N]) -> f64[N] { return exp(x); }")
    filecheck(printed(vjp_function(fn, [0])), """
        CHECK: func @g_vjp(%x: f64[N], %out_bar: f64[N]) -> (f64[N], f64[N])
        CHECK-NEXT: %0 = exp %x
        CHECK-NEXT: %x_bar = mul %out_bar, %0
        CHECK-NEXT: return %0, %x_bar
    """)


def test_contributions_of_a_value_used_twice_are_added() -> None:
    fn = lowered("fn f(x: f64[N]) -> f64 { return sum(x * x); }")
    filecheck(printed(grad_function(fn, [0])), """
        CHECK: reduce_sum
        CHECK-NEXT: %x_bar = add %x, %x
    """)


def test_a_non_differentiable_op_passes_no_gradient() -> None:
    fn = lowered("fn f(x: f64[N]) -> f64 { return sum(floor(x) * x); }")
    filecheck(printed(grad_function(fn, [0])), """
        CHECK: %x_bar = floor %x
        CHECK-NOT: floor
        CHECK: return %1, %x_bar
    """)


def test_a_for_loop_stores_its_states_and_is_swept_backwards() -> None:
    fn = lowered("fn f(x: f64[N], steps: i64) -> f64 {"
                 " var y = x; for t in 0..steps { y = sin(y); } return sum(y); }")
    filecheck(printed(grad_function(fn, [0])), """
        CHECK: %2, %3 = for_history %1, %0, %x {carried = 1, rows = max(steps, 0), stride = 1}
        CHECK-NEXT: %4 = sin %y
        CHECK-NEXT: yield %4
        CHECK-NEXT: } : f64[N], f64[max(steps, 0), N]
        CHECK: %x_bar = for %1, %0, %y_bar, %3
        CHECK: sub %10, %t_rev
        CHECK-NEXT: %12 = dynamic_index %7, %11 {axis = 0}
        CHECK-NEXT: %13 = cos %12
        CHECK-NEXT: %y_bar_2 = mul %y_bar_1, %13
        CHECK-NOT: sin
        CHECK: return %5, %x_bar
    """)


def test_an_integer_parameter_has_no_gradient() -> None:
    fn = lowered("fn f(x: f64[N], i: i64) -> f64 { return sum(x) * f64(i); }")
    with pytest.raises(ValueError, match="with respect to 'i': it is i64, not a float"):
        grad_function(fn, [1])
