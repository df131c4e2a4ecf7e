"""The VJP split (compiler/transforms/residuals.py): `split_vjp` cuts a VJP where its
cotangents enter, into a forward that returns the results and the residuals the adjoint
reads, and a backward that starts from them and recomputes none of the forward's work."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.residuals import split_vjp
from reverie.compiler.transforms.reverse import vjp_function


def test_the_backward_reads_the_saved_exp_instead_of_recomputing_it() -> None:
    vjp = vjp_function(lowered("fn g(x: f64[N]) -> f64[N] { return exp(x); }"), [0])
    split = split_vjp(vjp, 1, 1)
    filecheck(printed(split.forward), """
        CHECK: func @g_vjp_forward(%x: f64[N]) -> (f64[N], f64[N])
        CHECK-NEXT: %0 = exp %x
        CHECK-NEXT: return %0, %0
    """)
    filecheck(printed(split.backward), """
        CHECK: func @g_vjp_backward(%x: f64[N], %residual0: f64[N], %out_bar: f64[N]) -> f64[N]
        CHECK-NOT: exp
        CHECK: mul %out_bar, %residual0
    """)


def test_the_forward_never_reads_a_cotangent_and_the_backward_never_runs_tanh() -> None:
    source = "fn g(x: f64[N], w: f64[N]) -> f64[N] { return tanh(x * w) * 2.0; }"
    split = split_vjp(vjp_function(lowered(source), [0, 1]), 2, 1)
    filecheck(printed(split.forward), """
        CHECK: func @g_vjp_forward(%x: f64[N], %w: f64[N])
        CHECK-NOT: out_bar
        CHECK: tanh
        CHECK-NOT: out_bar
    """)
    filecheck(printed(split.backward), """
        CHECK: %residual0: f64[N], %residual1: f64[N], %out_bar: f64[N]) -> (f64[N], f64[N])
        CHECK-NOT: tanh
        CHECK: mul %out_bar, %residual0
        CHECK: return
    """)
    assert len(split.residual_types) == 2


def test_a_backward_that_reads_only_parameters_saves_nothing() -> None:
    vjp = vjp_function(lowered("fn g(x: f64[N]) -> f64 { return sum(x * x); }"), [0])
    split = split_vjp(vjp, 1, 1)
    filecheck(printed(split.forward), """
        CHECK: func @g_vjp_forward(%x: f64[N]) -> f64 {
        CHECK: return %1
    """)
    filecheck(printed(split.backward), """
        CHECK: func @g_vjp_backward(%x: f64[N], %out_bar: f64) -> f64[N]
        CHECK-NEXT: broadcast %out_bar
        CHECK-NOT: reduce_sum
    """)
    assert split.residual_types == ()
