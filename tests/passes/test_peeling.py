"""The loop pass `split_guarded_loops` (compiler/loops/peeling.py): a loop whose `in_bounds`
tests fail only near its ends (the adjoint of a slice, a fused pad) runs as its first edge,
an interior without the tests or their guarded values, and its last edge."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, reversed_
from passes.loop_passes import printed_program, program_of, run_loop_pass

NEIGHBOURS = "fn f(x: f64[N]) -> f64 { return sum(x[1:] * x[:N - 1]); }"


def test_a_neighbour_gradient_runs_its_interior_unguarded() -> None:
    program = run_loop_pass("split_guarded_loops", program_of(reversed_(NEIGHBOURS, ["x"])))
    filecheck(printed_program(program), """
        CHECK: store out0[] = %acc0
        CHECK-NEXT: %10 = minimum 1, N
        CHECK-NEXT: %11 = maximum N - 1, %10
        CHECK-NEXT: for %i1 in 0..%10 {
        CHECK-NEXT: in_bounds %i1, N - 1
        CHECK: for %i1 in %10..%11 {
        CHECK-NEXT: load x[%i1 + 1]
        CHECK-NEXT: load x[%i1 - 1]
        CHECK-NEXT: add
        CHECK-NEXT: store out1[%i1]
        CHECK-NEXT: }
        CHECK-NEXT: for %i1 in %11..N {
        CHECK-NEXT: in_bounds %i1, N - 1
    """)


def test_a_loop_without_bounds_tests_is_left_alone() -> None:
    program = program_of(lowered(NEIGHBOURS))
    before = printed_program(program)
    assert printed_program(run_loop_pass("split_guarded_loops", program)) == before


def test_a_short_constant_loop_stays_whole() -> None:
    fn = reversed_("fn f(x: f64[4]) -> f64 { return sum(x[1:] * x[:3]); }", ["x"])
    filecheck(printed_program(run_loop_pass("split_guarded_loops", program_of(fn))), """
        CHECK: for %i0 in 0..3 {
        CHECK: for %i1 in 0..4 {
        CHECK-NEXT: in_bounds
        CHECK-NOT: for %
    """)
