"""The loop pass `fuse_loops` (compiler/loops/loop_fusion.py): in the body of a sequential
loop, same-extent loops where the later one reads what the earlier one wrote at the same
element become one loop, and the load of a value stored in the same iteration is that
value; a read at another element keeps the loops apart."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from passes.loop_passes import printed_program, program_of, run_loop_pass


def fused(source: str) -> str:
    """The printed loop program of `source` after `fuse_loops` alone."""
    return printed_program(run_loop_pass("fuse_loops", program_of(lowered(source))))


def test_a_step_of_two_elementwise_loops_is_one_loop() -> None:
    filecheck(fused("fn f(x: f64[H], a: f64[H]) -> f64[H] { var h = x; var c = x;"
                    " for t in 0..4 { h = tanh(h * a); c = c + h; } return c; }"), """
        CHECK: for %i2 in 0..4 carry
        CHECK-NEXT: for %i3 in 0..H {
        CHECK: %5 = tanh %4
        CHECK-NEXT: store s0.next[%i3] = %5
        CHECK-NEXT: load s1.cur[%i3]
        CHECK-NOT: load s0.next
        CHECK-NEXT: add %6, %5
        CHECK-NEXT: store s1.next[%i3]
        CHECK-NEXT: }
        CHECK-NEXT: swap
    """)


def test_a_read_at_another_element_keeps_the_loops_apart() -> None:
    filecheck(fused("fn f(x: f64[H], a: f64[H]) -> f64[H] { var h = x; var c = x;"
                    " for t in 0..4 { h = tanh(h * a); c = c + roll(h, 1); } return c; }"), """
        CHECK: for %i2 in 0..4 carry
        CHECK-NEXT: for %i3 in 0..H {
        CHECK: store s0.next[%i3]
        CHECK-NEXT: }
        CHECK: for %i4 in 0..H {
        CHECK: select
    """)


def test_loops_at_the_top_level_are_left_to_the_fusion_plan() -> None:
    source = ("fn f(x: f64[N], m: f64[N, K]) -> (f64[N], f64[K]) {"
              " let y = exp(x); return (y * 2.0, y @ m); }")
    text = fused(source)
    filecheck(text, """
        CHECK: for %i0 in 0..N {
        CHECK: store t0[%i0]
        CHECK: matmul out1
        CHECK-NEXT: for %i1 in 0..N {
        CHECK-NEXT: load t0[%i1]
    """)
    assert text == printed_program(program_of(lowered(source)))
