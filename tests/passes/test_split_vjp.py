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
        CHECK: %w: f64[N], %residual0: f64[N], %out_bar: f64[N]) -> (f64[N], f64[N])
        CHECK-NOT: tanh
        CHECK: %1 = broadcast %0 {shape = [N]}
        CHECK-NEXT: %2 = mul %out_bar, %1
        CHECK-NEXT: %3 = mul %2, %residual0
        CHECK: return
    """)
    assert len(split.residual_types) == 1


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


def test_a_broadcast_constant_is_rebuilt_in_the_backward_not_saved() -> None:
    vjp = vjp_function(lowered("fn g(x: f64[N]) -> f64[N] { return x * x * 3.0; }"), [0])
    split = split_vjp(vjp, 1, 1)
    filecheck(printed(split.forward), """
        CHECK: func @g_vjp_forward(%x: f64[N]) -> f64[N] {
        CHECK: %2 = broadcast %1 {shape = [N]}
        CHECK-NEXT: %3 = mul %0, %2
        CHECK-NEXT: return %3
        CHECK-NOT: %2
    """)
    filecheck(printed(split.backward), """
        CHECK: func @g_vjp_backward(%x: f64[N], %out_bar: f64[N]) -> f64[N]
        CHECK-NEXT: %0 = const {value = 3.0, dtype = f64}
        CHECK-NEXT: %1 = broadcast %0 {shape = [N]}
        CHECK-NEXT: mul %out_bar, %1
    """)
    assert split.residual_types == ()


def test_views_of_parameters_and_an_index_ramp_are_rebuilt_and_exp_is_saved() -> None:
    source = """fn g(x: f64[B, H], w: f64[H, B], b: f64[H]) -> f64[B, H] {
        let ramp[i in 0..B, j in 0..H] = 1.0 * i - j;
        return exp(x) * b + w.T * x + ramp * x;
    }"""
    split = split_vjp(vjp_function(lowered(source), [0, 1, 2]), 3, 1)
    filecheck(printed(split.forward), """
        CHECK: -> (f64[B, H], f64[B, H]) {
        CHECK: %4 = exp %x
        CHECK: return %11, %4
    """)
    filecheck(printed(split.backward), """
        CHECK: %b: f64[H], %residual0: f64[B, H], %out_bar: f64[B, H])
        CHECK-NOT: exp
        CHECK: generic {indices = [i in 0..B, j in 0..H]}
        CHECK-NOT: exp
        CHECK: transpose %w {perm = [1, 0]}
        CHECK-NOT: exp
        CHECK: broadcast %b {shape = [B, H]}
        CHECK-NOT: exp
        CHECK: return
    """)
    assert len(split.residual_types) == 1


def test_a_cheap_product_of_parameters_is_still_saved() -> None:
    """Rebuilding `x * w` would read two tensors of parameters for the one it saves."""
    source = "fn g(x: f64[N], w: f64[N], y: f64[N]) -> f64[N] { return (x * w) * y; }"
    split = split_vjp(vjp_function(lowered(source), [2]), 3, 1)
    filecheck(printed(split.forward), """
        CHECK: %0 = mul %x, %w
        CHECK: return %1, %0
    """)
    filecheck(printed(split.backward), """
        CHECK: %residual0: f64[N], %out_bar: f64[N]) -> f64[N]
        CHECK-NEXT: mul %out_bar, %residual0
    """)


def test_a_broadcast_of_a_forward_value_saves_its_operand_and_sizes_are_rebuilt() -> None:
    source = """fn g(x: f64[B, H]) -> f64[B, H] {
        return x * rsqrt(mean(x * x, axis=1, keepdims=true) + 1e-5);
    }"""
    split = split_vjp(vjp_function(lowered(source), [0]), 1, 1)
    filecheck(printed(split.forward), """
        CHECK: func @g_vjp_forward(%x: f64[B, H]) -> (f64[B, H], f64[B, 1], f64[B, 1])
        CHECK: %10 = rsqrt %9
        CHECK-NEXT: %11 = broadcast %10 {shape = [B, H]}
        CHECK: return %12, %10, %17
    """)
    filecheck(printed(split.backward), """
        CHECK: (%x: f64[B, H], %residual0: f64[B, 1], %residual1: f64[B, 1], %out_bar
        CHECK-NEXT: broadcast %residual0 {shape = [B, H]}
        CHECK: dim {dim = H}
        CHECK-NEXT: cast
        CHECK-NEXT: broadcast
        CHECK-NEXT: div
    """)
