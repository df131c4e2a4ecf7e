"""The pass `loop_nests` (compiler/to_loops/lower_blocks.py, the first pass of the stage
`to_loops`): each root op of the fusion plan becomes a loop nest writing a buffer, the ops
inlined into it are computed inside it, views of buffers are index arithmetic, and an f64
sum accumulates in a scalar."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from passes.loop_passes import printed_program, program_of


def loops(source: str) -> str:
    """The printed loop program of `source`'s function, before any loop pass."""
    return printed_program(program_of(lowered(source)))


def test_a_fused_chain_is_one_loop_with_an_accumulator_and_no_temporary() -> None:
    filecheck(loops("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"), """
        CHECK: kernel @f(x: f64[N] input 0, w: f64[N] input 1, out0: f64 output 0)
        CHECK-NEXT: %acc0: f64 = 0.0
        CHECK-NEXT: for %i0 in 0..N {
        CHECK-NEXT: %0 = load x[%i0]
        CHECK-NEXT: %1 = load w[%i0]
        CHECK-NEXT: %2 = mul %0, %1 : f64
        CHECK-NEXT: %3 = tanh %2 : f64
        CHECK-NEXT: %acc0 = sum %acc0, %3
        CHECK-NOT: temp
        CHECK: store out0[] = %acc0
    """)


def test_a_reduction_over_a_leading_axis_is_an_inner_loop() -> None:
    filecheck(loops("fn f(x: f64[N, K]) -> f64[K] { let m[k] = sum[n](x[n, k]); return m; }"), """
        CHECK: for %i0 in 0..K {
        CHECK-NEXT: %acc0: f64 = 0.0
        CHECK-NEXT: for %i1 in 0..N {
        CHECK-NEXT: load x[%i1, %i0]
        CHECK: store out0[%i0] = %acc0
    """)


def test_a_slice_is_an_offset_index_not_a_copy() -> None:
    filecheck(loops("fn f(x: f64[N]) -> f64 { return sum(x[1:] * x[:N - 1]); }"), """
        CHECK: for %i0 in 0..N - 1 {
        CHECK-NEXT: load x[%i0 + 1]
        CHECK-NEXT: load x[%i0]
        CHECK-NOT: store t
    """)


def test_a_value_read_by_a_matmul_gets_a_temporary() -> None:
    filecheck(loops("fn f(a: f64[M, N], x: f64[N]) -> f64[M] { return a @ exp(x); }"), """
        CHECK: for %i0 in 0..N {
        CHECK: exp
        CHECK: store t0[%i0]
        CHECK: matmul
    """)
