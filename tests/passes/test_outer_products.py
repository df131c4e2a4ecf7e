"""The loop pass `outer_products` (compiler/loops/outer_products.py): in the body of a
sequential loop, a `[D, 1] @ [1, H]` matmul (the adjoint of a weight, accumulated each step
of a reverse sweep) is computed where it is read: each load of the product becomes the
product of two loads. The matmul, now unread, is left for `dead_code`."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import reversed_
from passes.loop_passes import printed_program, program_of, run_loop_pass

RNN = ("fn f(xs: f64[T, D], h0: f64[H], w: f64[D, H]) -> f64 {"
       " var h = h0; for t in 0..T { h = tanh(xs[t] @ w + h); } return sum(h * h); }")


def test_the_weight_adjoints_outer_product_is_read_as_a_product_of_loads() -> None:
    program = program_of(reversed_(RNN, ["w"]))
    filecheck(printed_program(program), """
        CHECK: matmul t9 = xs{offset = %12 * D, strides = [1, 0]} @ s1.next
        CHECK: load t9[%i12, %i13]
    """)
    filecheck(printed_program(run_loop_pass("outer_products", program)), """
        CHECK: matmul t9 =
        CHECK-NEXT: for %i12 in 0..D {
        CHECK-NEXT: for %i13 in 0..H {
        CHECK-NEXT: load s2.cur[%i12, %i13]
        CHECK-NEXT: load xs[%i12 + %12 * D]
        CHECK-NEXT: load s1.next[%i13]
        CHECK-NEXT: mul
        CHECK-NOT: load t9
    """)


def test_a_product_with_an_inner_dimension_above_one_stays_a_matmul() -> None:
    program = program_of(reversed_(RNN, ["w"]))
    filecheck(printed_program(run_loop_pass("outer_products", program)), """
        CHECK: matmul t8 = xs{offset = %12 * D, strides = [0, 1]} @ w
        CHECK: load t8[%i11]
    """)


def test_an_outer_product_outside_a_loop_stays_a_matmul() -> None:
    fn = reversed_("fn f(x: f64[D], w: f64[D, H]) -> f64 { return sum(tanh(x @ w)); }", ["w"])
    filecheck(printed_program(run_loop_pass("outer_products", program_of(fn))), """
        CHECK: matmul t0 = x
        CHECK: matmul out1 = x{offset = 0, strides = [1, 0]} @ t2
    """)
