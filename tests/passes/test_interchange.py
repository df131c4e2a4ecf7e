"""The loop pass `interchange` (compiler/loops/interchange.py): a reduction over a strided
leading axis runs with its reduction loop outermost, accumulating in the output, so the
inner loop walks rows contiguously; a reduction over the contiguous axis keeps its
accumulator."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from passes.loop_passes import printed_program, program_of, run_loop_pass


def interchanged(source: str) -> str:
    """The printed loop program of `source` after `interchange` alone."""
    return printed_program(run_loop_pass("interchange", program_of(lowered(source))))


def test_a_column_sum_initialises_the_output_and_adds_row_by_row() -> None:
    filecheck(interchanged("fn f(x: f64[N, K]) -> f64[K] {"
                           " let m[k] = sum[n](x[n, k]); return m; }"), """
        CHECK: for %i0 in 0..K {
        CHECK-NEXT: store out0[%i0] = 0.0
        CHECK: for %i1 in 0..N {
        CHECK-NEXT: for %i0 in 0..K {
        CHECK-NEXT: load x[%i1, %i0]
        CHECK-NEXT: load out0[%i0]
        CHECK-NEXT: add
        CHECK-NEXT: store out0[%i0]
        CHECK-NOT: %acc
    """)


def test_a_row_sum_keeps_its_accumulator() -> None:
    filecheck(interchanged("fn f(x: f64[K, N]) -> f64[K] {"
                           " let m[k] = sum[n](x[k, n]); return m; }"), """
        CHECK: for %i0 in 0..K {
        CHECK-NEXT: %acc0: f64 = 0.0
        CHECK-NEXT: for %i1 in 0..N {
        CHECK-NOT: load out0
    """)


def test_an_f32_column_sum_keeps_its_f64_accumulator() -> None:
    filecheck(interchanged("fn f(x: f32[N, K]) -> f32[K] {"
                           " let m[k] = sum[n](x[n, k]); return m; }"), """
        CHECK: %acc0: f64 = 0.0
        CHECK-NOT: load out0
    """)
