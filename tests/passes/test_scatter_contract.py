"""The pass `scatter_contract` (compiler/transforms/scatter_contractions.py): a scatter
whose value is a product summed over indices its positions do not use (a convolution's
input adjoint) becomes that sum, a contraction, and a scatter of the sum alone."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import printed, reversed_
from reverie.compiler.transforms.scatter_contractions import split_scatter_contractions

CONV = ("fn f(x: f64[C, L], w: f64[O, C, K]) -> f64 {"
        " let y[o, i in 0..L - K + 1] = sum[c, k](x[c, i + k] * w[o, c, k]);"
        " return sum(y * y); }")


def test_a_convolutions_input_adjoint_sums_over_o_before_it_scatters() -> None:
    fn = reversed_(CONV, ["x"])
    filecheck(printed(fn), """
        CHECK: %x_bar = generic_scatter %w, %y_bar
        CHECK-NOT: reduce = sum, over = [o in 0..O]
    """)
    filecheck(printed(split_scatter_contractions(fn)), """
        CHECK: reduce = sum, over = [o in 0..O]
        CHECK: } : f64[-K + L + 1, C, K]
        CHECK-NEXT: generic_scatter
        CHECK-NOT: o in 0..O
        CHECK: } : f64[C, L]
    """)


def test_the_weight_adjoint_is_no_scatter_and_stays() -> None:
    fn = reversed_(CONV, ["w"])
    filecheck(printed(split_scatter_contractions(fn)), """
        CHECK: %w_bar = generic
        CHECK-NOT: generic_scatter
    """)


def test_a_scatter_of_a_plain_value_stays_one_scatter() -> None:
    fn = reversed_("fn f(x: f64[N], i: i64[M]) -> f64 {"
                   " let y[m] = x[i[m]]; return sum(y * y); }", ["x"])
    filecheck(printed(split_scatter_contractions(fn)), """
        CHECK: %x_bar = generic_scatter
        CHECK-NOT: reduce = sum, over
        CHECK: return
    """)
