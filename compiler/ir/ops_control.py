"""Control-flow ops of the op table: `if` and `while` (SPEC §2.7).

Both carry state like `for` (`ops_structured.py`): their operands are the states and the
loop invariants (after `if`'s scalar bool condition), every region takes the states and
the invariants as parameters, and the results are the final states. Regions are isolated.

    %u2 = if %c, %u0, %w {carried = 1} ^(%u: f64, %w1: f64) {... yield %a}
                                       ^(%u: f64, %w1: f64) {... yield %b} : f64
    %v2 = while %v0, %w {carried = 1, limit = 1000000000}
          ^(%v: f64, %w1: f64) {... yield %c : bool}       # before each iteration
          ^(%v: f64, %w1: f64) {... yield %v3} : f64        # the body

`if` runs the first region when the condition is true, else the second. `while` evaluates
its condition region on the current states and runs the body while it yields true; an
iteration past `limit` raises RuntimeError (the run-time form of REVERIE_MAX_ITERATIONS).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .ops import ROOT, register
from .types import ShapeError, TensorType, scalar
from .views import IfOp, WhileOp

if TYPE_CHECKING:
    from .core import Block, Op

DEFAULT_MAX_ITERATIONS = 10**9


def max_iterations() -> int:
    """The iteration limit of a `while`: REVERIE_MAX_ITERATIONS, default 10^9."""
    text = os.environ.get("REVERIE_MAX_ITERATIONS", "").strip()
    if not text:
        return DEFAULT_MAX_ITERATIONS
    try:
        limit = int(text)
    except ValueError:
        raise ValueError(f"REVERIE_MAX_ITERATIONS must be a positive integer, got {text!r}") \
            from None
    if limit < 1:
        raise ValueError(f"REVERIE_MAX_ITERATIONS must be a positive integer, got {limit}")
    return limit


def limit_error(limit: int) -> str:
    """The message of the RuntimeError raised by a `while` that runs past `limit`."""
    return (f"a 'while' loop ran past {limit} iterations (REVERIE_MAX_ITERATIONS, or "
            "rv.compile(..., max_iterations=)); check its condition")


def _check_region(block: Block, params: list[TensorType], results: list[TensorType],
                  what: str) -> None:
    got = [p.type for p in block.params]
    if got != params:
        raise ShapeError(f"{what} region parameters {list(map(str, got))} "
                         f"should be {list(map(str, params))}")
    yielded = [v.type for v in block.results]
    if yielded != results:
        raise ShapeError(f"{what} must yield {list(map(str, results))}, "
                         f"not {list(map(str, yielded))}")


def _infer_control(ops: list[TensorType], attrs: dict, regions: list, name: str) -> list[TensorType]:
    leading = 1 if name == "if" else 0
    carried = attrs["carried"]
    if len(ops) < leading + carried or len(regions) != 2:
        raise ShapeError(f"{name} needs its initial states and two regions")
    if name == "if" and ops[0] != scalar("bool"):
        raise ShapeError(f"an 'if' condition must be a scalar bool, not {ops[0]}")
    states, params = list(ops[leading:leading + carried]), list(ops[leading:])
    first, second = regions
    if name == "if":
        _check_region(first, params, states, "the 'then' branch")
        _check_region(second, params, states, "the 'else' branch")
    else:
        _check_region(first, params, [scalar("bool")], "a 'while' condition")
        _check_region(second, params, states, "a 'while' body")
    return states


def _eval_if(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    branch = IfOp(op)
    (cond,), states, invariants = branch.split_operands(args)
    return ctx.run_block(branch.then if bool(cond) else branch.orelse, states + invariants)


def _eval_while(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    loop = WhileOp(op)
    _, states, invariants = loop.split_operands(args)
    iterations = 0
    while bool(ctx.run_block(loop.before, states + invariants)[0]):
        iterations += 1
        if iterations > loop.limit:
            raise RuntimeError(limit_error(loop.limit))
        states = ctx.run_block(loop.body, states + invariants)
    return states


register("if", "control", lambda ops, attrs, regions: _infer_control(ops, attrs, regions, "if"),
         _eval_if,
         "A branch on a scalar bool carrying state: `%u = if %c, %u0 {carried = 1} "
         "^(%u1: f64) {... yield %a} ^(%u1: f64) {... yield %b} : f64`.",
         attrs={"carried": int}, fusion=ROOT)
register("while", "control",
         lambda ops, attrs, regions: _infer_control(ops, attrs, regions, "while"), _eval_while,
         "A loop while a condition region yields true: `%u = while %u0 {carried = 1, "
         "limit = 1000000000} ^(%u1: f64) {... yield %c : bool} ^(%u1: f64) {... yield %u2} "
         ": f64`.", attrs={"carried": int, "limit": int}, fusion=ROOT)
