"""Inputs of the pass tests: language source lowered to tensor IR, and its printed text.

`lowered(source)` runs the ladder (compiler/pipeline.py) to stage `lower` at f64, which
ends with `simplify`; `reversed_(source, wrt)` to stage `reverse`. The pass under test then
runs alone on the result:

    fn = lowered("fn f(x: f64[N]) -> f64 { return sum(tanh(x)); }")
    filecheck(printed(hoist_function(fn)), "CHECK: tanh")
"""

from __future__ import annotations

from collections.abc import Sequence

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.pipeline import Request, compile_source


def lowered(source: str, function: str | None = None) -> Function:
    """The typed, simplified tensor IR of `function` (None: the only one) at f64."""
    return compile_source(source, "lower", Request(function=function, dtype="f64"))


def reversed_(source: str, wrt: Sequence[str], function: str | None = None) -> Function:
    """The simplified gradient (a scalar result) or VJP of `function` with respect to `wrt`."""
    request = Request(function=function, dtype="f64", transform="reverse", wrt=tuple(wrt))
    return compile_source(source, "reverse", request)


def printed(fn: Function) -> str:
    """The tensor IR's text, as `module.ir("tensor")` and REVERIE_PRINT_IR print it."""
    return format_function(fn)
