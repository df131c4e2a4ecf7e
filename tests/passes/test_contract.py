"""The pass `contract` (compiler/transforms/contractions.py): a sum of products over indices
becomes a (batched) `matmul`, whatever order its indices were written in; sums that are not
true matrix products stay loop nests, and an identity generic is its operand."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, printed, reversed_
from reverie.compiler.transforms.contractions import contract_function


def test_a_matrix_product_written_with_indices_is_a_matmul() -> None:
    fn = lowered("fn f(a: f64[M, K], b: f64[K, N]) -> f64[M, N] {"
                 " let c[i, j] = sum[k](a[i, k] * b[k, j]); return c; }")
    filecheck(printed(contract_function(fn)), """
        CHECK-NOT: generic
        CHECK: %0 = matmul %a, %b : f64[M, N]
        CHECK-NEXT: return %0
    """)


def test_the_operands_are_swapped_when_the_output_is_the_transposed_product() -> None:
    fn = lowered("fn f(a: f64[K, M], b: f64[N, K]) -> f64[N, M] {"
                 " let c[j, i] = sum[k](a[k, i] * b[j, k]); return c; }")
    filecheck(printed(contract_function(fn)), """
        CHECK-NOT: transpose
        CHECK: %0 = matmul %b, %a : f64[N, M]
        CHECK-NEXT: return %0
    """)


def test_an_operand_summed_over_its_leading_axis_is_transposed() -> None:
    fn = lowered("fn f(a: f64[K, M], b: f64[K, N]) -> f64[M, N] {"
                 " let c[i, j] = sum[k](a[k, i] * b[k, j]); return c; }")
    filecheck(printed(contract_function(fn)), """
        CHECK: %0 = transpose %a {perm = [1, 0]} : f64[M, K]
        CHECK-NEXT: %1 = matmul %0, %b : f64[M, N]
        CHECK-NOT: generic
    """)


def test_a_shared_index_is_the_batch_of_a_batched_matmul() -> None:
    fn = lowered("fn f(a: f64[B, M, K], x: f64[B, K, N]) -> f64[B, M, N] {"
                 " let c[b, i, j] = sum[k](a[b, i, k] * x[b, k, j]); return c; }")
    filecheck(printed(contract_function(fn)), """
        CHECK-NOT: generic
        CHECK: %0 = matmul %a, %x : f64[B, M, N]
        CHECK-NEXT: return %0
    """)


def test_a_dot_product_and_a_matrix_vector_product_stay_loop_nests() -> None:
    for source in ("fn f(x: f64[N], y: f64[N]) -> f64 { return sum[i](x[i] * y[i]); }",
                   "fn f(a: f64[M, N], x: f64[N]) -> f64[M] {"
                   " let y[i] = sum[j](a[i, j] * x[j]); return y; }"):
        fn = lowered(source)
        filecheck(printed(contract_function(fn)), """
            CHECK: reduce = sum
            CHECK-NOT: matmul
        """)


def test_the_adjoints_of_a_matrix_product_are_matmuls() -> None:
    fn = reversed_("fn f(a: f64[M, K], b: f64[K, N]) -> f64 {"
                   " let c[i, j] = sum[k](a[i, k] * b[k, j]); return sum(c * c); }", ["a", "b"])
    filecheck(printed(contract_function(fn)), """
        CHECK: matmul %a, %b : f64[M, N]
        CHECK-NOT: generic
        CHECK: transpose %b {perm = [1, 0]}
        CHECK-NEXT: matmul
        CHECK-NOT: generic
        CHECK: transpose %a {perm = [1, 0]}
        CHECK-NEXT: matmul
        CHECK-NOT: generic
    """)
