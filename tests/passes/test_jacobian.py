"""The pass `jacobian` (compiler/transforms/jacobian.py): `jacobian_function` is a batched
JVP (forward) or VJP (reverse) over the columns or rows of an identity built in IR by a
`generic`; where the identity meets a matrix product, the final simplify removes both."""

from __future__ import annotations

import pytest

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.jacobian import jacobian_function

LAYER = "fn f(a: f64[M, N], x: f64[N]) -> f64[M] { return tanh(a @ x); }"


def test_the_identity_is_a_generic_comparing_row_and_column() -> None:
    fn = lowered("fn g(x: f64[N]) -> f64[N] { return exp(x); }")
    filecheck(printed(jacobian_function(fn, [0], "forward")), """
        CHECK: func @g_jacobian(%x: f64[N]) -> f64[N, N]
        CHECK-NEXT: generic {indices = [r in 0..N, c in 0..N]}
        CHECK: eq %r, %c
        CHECK-NEXT: select
        CHECK: exp %x
        CHECK: mul %6, %0 : f64[N, N]
    """)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_layers_jacobian_scales_the_matrix_without_an_identity_product(mode: str) -> None:
    filecheck(printed(jacobian_function(lowered(LAYER), [1], mode)), """
        CHECK: func @f_jacobian(%a: f64[M, N], %x: f64[N]) -> f64[M, N]
        CHECK-NOT: generic
        CHECK: matmul %a, %0 : f64[M, 1]
        CHECK-NOT: matmul
        CHECK: tanh
        CHECK-NOT: matmul
        CHECK: return
    """)


def test_the_reverse_jacobian_reads_the_matrix_transposed() -> None:
    filecheck(printed(jacobian_function(lowered(LAYER), [1], "reverse")), """
        CHECK: sub
        CHECK-NEXT: transpose %a {perm = [1, 0]} : f64[N, M]
        CHECK-NEXT: broadcast
        CHECK-NEXT: mul
    """)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        jacobian_function(lowered(LAYER), [1], "sideways")
