"""The pass `fuse` (compiler/to_loops/fusion_plan.py): the decision for each op of a block,
printed after it as stage `fuse` shows them: a chain consumed in one nest is inlined, a value
a matmul reads or an expanding broadcast repeats is a root with a buffer, and reductions
over one shape share a sibling nest."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered
from reverie.compiler.pipeline import Fused, format_fusion
from reverie.compiler.to_loops.fusion_plan import plan_block


def planned(source: str) -> str:
    """The function's text with each op's fusion decision, as stage `fuse` prints it."""
    fn = lowered(source)
    return format_fusion(Fused(fn, plan_block(fn.body)))


def test_an_elementwise_chain_is_inlined_into_its_reduction() -> None:
    filecheck(planned("fn f(x: f64[N]) -> f64 { return sum(tanh(x) * sin(x)); }"), """
        CHECK: tanh %x : f64[N]  // inline
        CHECK-NEXT: sin %x : f64[N]  // inline
        CHECK-NEXT: mul %0, %1 : f64[N]  // inline
        CHECK-NEXT: reduce_sum %2 {axes = [0]} : f64  // root
    """)


def test_matmul_operands_need_memory() -> None:
    filecheck(planned("fn f(a: f64[M, N], x: f64[N]) -> f64[M] {"
                      " return (a * 2.0) @ exp(x); }"), """
        CHECK: mul %a, %1 : f64[M, N]  // root
        CHECK-NEXT: exp %x : f64[N]  // root
        CHECK-NEXT: reshape %3 {shape = [N, 1]} : f64[N, 1]  // view
        CHECK-NEXT: matmul %2, %4 : f64[M, 1]  // root
    """)


def test_an_expanding_broadcast_of_a_computed_value_materialises_it() -> None:
    filecheck(planned("fn f(x: f64[N], z: f64[M, N]) -> f64[M, N] {"
                      " let y = exp(x); return z * y; }"), """
        CHECK: %y = exp %x : f64[N]  // root
        CHECK-NEXT: broadcast %y {shape = [M, N]} : f64[M, N]  // view
        CHECK-NEXT: mul %z, %0 : f64[M, N]  // inline
    """)


def test_a_reduction_and_a_result_of_one_shape_share_a_sibling_nest() -> None:
    filecheck(planned("fn f(x: f64[N], w: f64[N]) -> (f64, f64[N]) {"
                      " let y = tanh(x * w); return (sum(y), y * w); }"), """
        CHECK: %y = tanh %0 : f64[N]  // inline
        CHECK-NEXT: reduce_sum %y {axes = [0]} : f64  // root, sibling nest 0
        CHECK-NEXT: mul %y, %w : f64[N]  // inline
        CHECK-NOT: root
    """)
