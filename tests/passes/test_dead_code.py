"""The loop pass `dead_code` (compiler/loops/dead_code.py): a temporary nothing reads goes
with every statement writing it (here the outer product `outer_products` left unread), and
then the scalars nothing uses; what is read, checks, states and outputs stay."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, reversed_
from passes.loop_passes import printed_program, program_of, run_loop_pass

RNN = ("fn f(xs: f64[T, D], h0: f64[H], w: f64[D, H]) -> f64 {"
       " var h = h0; for t in 0..T { h = tanh(xs[t] @ w + h); } return sum(h * h); }")


def test_an_unread_matmul_and_its_temporary_are_removed() -> None:
    program = run_loop_pass("outer_products", program_of(reversed_(RNN, ["w"])))
    filecheck(printed_program(program), """
        CHECK: temp t9: f64[D, H]
        CHECK: matmul t9 =
    """)
    filecheck(printed_program(run_loop_pass("dead_code", program)), """
        CHECK-NOT: t9
        CHECK: check 0 <= %12 < T
        CHECK: matmul t8 =
        CHECK-NOT: t9
        CHECK: store out1
    """)


def test_a_program_with_nothing_dead_is_unchanged() -> None:
    program = program_of(lowered("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"))
    before = printed_program(program)
    assert printed_program(run_loop_pass("dead_code", program)) == before


def test_the_history_of_a_state_the_sweep_never_reads_is_removed() -> None:
    fn = reversed_("fn f(x: f64[H], a: f64[H], T: i64) -> f64 { var h = x; var c = x;"
                   " for t in 0..T { c = c + h; h = tanh(h * a); } return sum(c); }", ["a"])
    program = program_of(fn)
    filecheck(printed_program(program), """
        CHECK: temp t4: f64[max(T, 0), H]
        CHECK-NEXT: temp t5: f64[max(T, 0), H]
        CHECK: store t4[%i2, %i3]
        CHECK: store t5[%i2, %i4]
    """)
    filecheck(printed_program(run_loop_pass("dead_code", program)), """
        CHECK-NOT: temp t4
        CHECK: temp t5: f64[max(T, 0), H]
        CHECK-NOT: store t4
    """)
