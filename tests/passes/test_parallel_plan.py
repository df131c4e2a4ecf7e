"""The analysis `parallel_plans` (compiler/loops/parallel_plan.py): which loops may run in
chunks on the worker pool. Each loop of the program is listed as a line, `for %i0 in 0..N:
parallel` (with its reductions, `nested` inside a `for` body) or `serial`, and the lines are
checked FileCheck style."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from passes.loop_passes import program_of
from reverie.compiler.loops.ir import Loop
from reverie.compiler.loops.parallel_plan import parallel_plans


def planned_loops(source: str) -> str:
    """One line per loop of `source`'s loop program, in program order, with its plan."""
    program = program_of(lowered(source))
    plans = parallel_plans(program)
    lines = []
    for loop in (stmt for stmt in program.walk() if isinstance(stmt, Loop)):
        plan = plans.get(id(loop))
        header = f"for {loop.var} in {loop.lo}..{loop.hi}:"
        if plan is None:
            lines.append(f"{header} serial")
            continue
        reductions = "".join(f", {r.kind} {r.var.name}" for r in plan.reductions)
        lines.append(f"{header} parallel{reductions}{', nested' if plan.nested else ''}")
    return "\n".join(lines)


def test_a_sum_is_a_parallel_reduction() -> None:
    filecheck(planned_loops("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"),
              "CHECK: for %i0 in 0..N: parallel, sum %acc0")


def test_a_nest_is_planned_at_its_outer_loop_only() -> None:
    filecheck(planned_loops("fn f(x: f64[N, K]) -> f64[N] {"
                            " let y[n] = sum[k](x[n, k]); return y; }"), """
        CHECK: for %i0 in 0..N: parallel
        CHECK-NEXT: for %i1 in 0..K: serial
    """)


def test_a_bounds_checked_gather_stays_serial() -> None:
    filecheck(planned_loops("fn f(x: f64[N], i: i64[M]) -> f64[M] {"
                            " let y[m] = x[i[m]]; return y; }"), """
        CHECK: for %i0 in 0..M: serial
        CHECK-NOT: parallel
    """)


def test_the_loops_of_a_scan_step_are_nested_plans() -> None:
    filecheck(planned_loops("fn f(x: f64[H], a: f64[H]) -> f64[H] {"
                            " var h = x; for t in 0..4 { h = tanh(h * a); } return h; }"), """
        CHECK: for %i0 in 0..H: parallel
        CHECK-NEXT: for %i2 in 0..H: parallel, nested
        CHECK-NEXT: for %i3 in 0..H: parallel
        CHECK-NOT: nested
    """)
