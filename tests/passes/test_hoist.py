"""The pass `hoist` (compiler/transforms/hoist.py): an expensive value of a `generic` body
that reads a strict subset of the nest's indices moves into a `generic` over just those,
which the body reads back; cheap values and values over every index stay."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.hoist import hoist_function


def test_exp_of_a_row_vector_is_computed_once_per_column() -> None:
    fn = lowered("fn f(s: f64[K], x: f64[N, K]) -> f64[N, K] {"
                 " let y[n, k] = exp(s[k]) * x[n, k]; return y; }")
    filecheck(printed(hoist_function(fn)), """
        CHECK: %exp = generic %s {indices = [k in 0..K]}
        CHECK: exp
        CHECK: } : f64[K]
        CHECK: %y = generic %x, %exp {indices = [n in 0..N, k in 0..K]}
        CHECK: read %exp_1
        CHECK-NOT: exp %
        CHECK: return %y
    """)


def test_a_reduction_index_counts_like_an_output_index() -> None:
    fn = lowered("fn f(s: f64[K], x: f64[N, K]) -> f64[N] {"
                 " let y[n] = sum[k](tanh(s[k]) * x[n, k]); return y; }")
    filecheck(printed(hoist_function(fn)), """
        CHECK: generic %s {indices = [k in 0..K]}
        CHECK-NEXT: read
        CHECK-NEXT: tanh
        CHECK: reduce = sum
        CHECK-NOT: = tanh
    """)


def test_cheap_work_and_work_over_every_index_stay_in_place() -> None:
    for source in ("fn f(s: f64[K], x: f64[N, K]) -> f64[N, K] {"
                   " let y[n, k] = s[k] * 2.0 * x[n, k]; return y; }",
                   "fn f(x: f64[N, K]) -> f64[N, K] { let y[n, k] = exp(x[n, k]); return y; }"):
        fn = lowered(source)
        assert hoist_function(fn) is fn  # nothing hoisted: the function itself


def test_a_checked_read_is_not_evaluated_where_the_nest_might_not_reach() -> None:
    fn = lowered("fn f(s: f64[K], i: i64[K], x: f64[N, K]) -> f64[N, K] {"
                 " let y[n, k] = exp(s[i[k]]) * x[n, k]; return y; }")
    filecheck(printed(fn), """
        CHECK: read %s_1, %0 {modes = [checked]}
        CHECK-NEXT: exp %1
    """)
    assert hoist_function(fn) is fn  # the exp stays in the nest, after its checked read
