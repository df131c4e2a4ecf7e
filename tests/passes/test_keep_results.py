"""The pass `keep_results` (compiler/pipeline.py's select stage): a transform's function
returning only the results a derived kernel keeps, renamed; the stage's closing `simplify`
then removes what only the dropped results read."""

from __future__ import annotations

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.pipeline import Request, climb

SOURCE = "fn g(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"


def kept(request: Request) -> tuple[str, str]:
    """The text after `keep_results` alone, and after the whole select stage."""
    grad = climb(lowered(SOURCE), Request(transform="reverse", wrt=[0, 1], dtype="f64"),
                 start="reverse", stop="reverse")["reverse"]
    after_pass = climb(grad, request, start="keep_results", stop="keep_results")
    after_stage = climb(grad, request, start="select", stop="select")["select"]
    return printed(after_pass["keep_results"]), printed(after_stage)


def test_the_kept_results_are_returned_under_the_name_asked_for() -> None:
    raw, simplified = kept(Request(wrt=[0, 1], results=[2], name="g_dw"))
    filecheck(raw, """
        CHECK: func @g_dw(%x: f64[N], %w: f64[N]) -> f64[N]
        CHECK: reduce_sum
        CHECK: return %w_bar
    """)
    filecheck(simplified, """
        CHECK: func @g_dw(%x: f64[N], %w: f64[N]) -> f64[N]
        CHECK-NOT: reduce_sum
        CHECK: tanh
        CHECK-NOT: x_bar
        CHECK: return %w_bar
    """)


def test_results_are_kept_in_the_order_asked_for() -> None:
    _, simplified = kept(Request(wrt=[0, 1], results=[2, 1]))
    filecheck(simplified, """
        CHECK: func @g_grad(%x: f64[N], %w: f64[N]) -> (f64[N], f64[N])
        CHECK: return %w_bar, %x_bar
    """)
