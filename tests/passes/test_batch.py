"""The pass `batch` (compiler/transforms/batch.py): `batch_function` adds a leading batch
axis B to the chosen parameters and runs the whole batch in one function: an op on
unbatched values is copied, a batched one gets its rule's form (axes moved by one, a
subscript made a `generic` over the batch), and a batched condition becomes a `select`."""

from __future__ import annotations

import numpy as np

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.transforms.batch import batch_function


def test_an_unbatched_operand_is_broadcast_and_reduction_axes_move() -> None:
    fn = lowered("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }")
    filecheck(printed(batch_function(fn, [0])), """
        CHECK: func @f_batched(%x: f64[B, N], %w: f64[N]) -> f64[B]
        CHECK-NEXT: %0 = broadcast %w {shape = [B, N]}
        CHECK-NEXT: %1 = mul %x, %0 : f64[B, N]
        CHECK-NEXT: %2 = tanh %1 : f64[B, N]
        CHECK-NEXT: %3 = reduce_sum %2 {axes = [1]} : f64[B]
    """)


def test_a_batch_of_vectors_times_a_matrix_is_one_matmul() -> None:
    fn = lowered("fn f(a: f64[M, N], x: f64[N]) -> f64[M] { return a @ x; }")
    filecheck(printed(batch_function(fn, [1])), """
        CHECK: -> f64[B, M]
        CHECK: %3 = matmul %a, %2 : f64[M, B]
        CHECK-NOT: matmul
        CHECK: return %6
    """)


def test_a_batched_subscript_becomes_a_generic_over_the_batch() -> None:
    fn = lowered("fn f(x: f64[N], i: i64) -> f64 { return x[i]; }")
    filecheck(printed(batch_function(fn, [1])), """
        CHECK: func @f_batched(%x: f64[N], %i: i64[B]) -> f64[B]
        CHECK-NEXT: generic %x, %i {indices = [b in 0..B]}
        CHECK-NEXT: read %index, %b
        CHECK-NEXT: read %x_1, %1 {modes = [checked]}
    """)


def test_a_batched_condition_selects_between_both_branches() -> None:
    fn = lowered("fn f(x: f64[N], c: f64) -> f64 {"
                 " var y = 0.0; if c > 0.0 { y = sum(x); } else { y = c; } return y; }")
    filecheck(printed(batch_function(fn, [1])), """
        CHECK: gt %c, %1 : bool[B]
        CHECK-NOT: = if
        CHECK: select %2, %4, %c : f64[B]
    """)


def test_a_batched_condition_selects_even_between_unbatched_branches() -> None:
    fn = lowered("fn f(x: f64[N], c: f64) -> f64 {"
                 " var y = 0.0; if c > 0.0 { y = sum(x); } else { y = 1.0; } return y; }")
    batched = batch_function(fn, [1])
    filecheck(printed(batched), """
        CHECK: bool[B]
        CHECK: select
    """)
    (y,) = interpret(batched, [np.ones(5), np.array([1.0, -1.0, 2.0])], {"N": 5, "B": 3})
    np.testing.assert_array_equal(y, [5.0, 1.0, 5.0])
