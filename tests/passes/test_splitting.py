"""The loop pass `split_wrapping_loops` (compiler/loops/splitting.py): a fused `roll` reads at
`select(i - s < 0, i - s + n, i - s)`; the loop is split where the test changes, and each
half reads at an affine index with no select."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from passes.loop_passes import printed_program, program_of, run_loop_pass


def split(source: str) -> str:
    """The printed loop program of `source` after `split_wrapping_loops` alone."""
    return printed_program(run_loop_pass("split_wrapping_loops", program_of(lowered(source))))


def test_a_roll_is_two_loops_reading_at_affine_indices() -> None:
    filecheck(split("fn f(x: f64[N]) -> f64[N] { return roll(x, 1) * 2.0; }"), """
        CHECK: %0 = mod 1, N : i64
        CHECK-NEXT: maximum 0, %0
        CHECK-NEXT: minimum %5, N
        CHECK-NOT: select
        CHECK: for %i0 in 0..%6 {
        CHECK-NEXT: load x[-%0 + %i0 + N]
        CHECK: for %i0 in %6..N {
        CHECK-NEXT: load x[-%0 + %i0]
        CHECK-NOT: select
    """)


def test_two_rolls_split_the_loop_at_both_wrap_points() -> None:
    text = split("fn f(x: f64[N]) -> f64[N] { return roll(x, 1) + roll(x, -2); }")
    filecheck(text, """
        CHECK-NOT: select
        CHECK: for %i0 in
        CHECK: for %i0 in
        CHECK: for %i0 in
        CHECK-NOT: select
    """)


def test_a_loop_without_a_wrap_around_is_left_alone() -> None:
    source = "fn f(x: f64[N]) -> f64[N] { return x * 2.0; }"
    assert split(source) == printed_program(program_of(lowered(source)))
