"""Control-flow ops of the op table: `if` and `while` (docs/language.md §11.1).

`while` carries state like `for` (`ops_structured.py`): its operands are the states and
the loop invariants, both regions take the states and the invariants as parameters, and
the results are the final states (with `counted = true`, then the trip count). `if` takes
a scalar bool and the operands its regions' parameters are bound to; both regions yield
values of the same types, its results. Regions are isolated.

    %u2 = if %c, %u0, %w ^(%u: f64, %w1: f64) {... yield %a}
                         ^(%u: f64, %w1: f64) {... yield %b} : f64
    %v2 = while %v0, %w {carried = 1, limit = 1000000000}
          ^(%v: f64, %w1: f64) {... yield %c : bool}       # before each iteration
          ^(%v: f64, %w1: f64) {... yield %v3} : f64        # the body

`if` runs the first region when the condition is true, else the second. `while` evaluates
its condition region on the current states and runs the body while it yields true; an
iteration past `limit` raises RuntimeError (the run-time form of REVERIE_MAX_ITERATIONS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired

import numpy as np

from reverie.compiler.ir.iteration_limit import limit_error
from reverie.compiler.ir.op_defs import ROOT, register
from reverie.compiler.ir.types import ShapeError, TensorType, scalar
from reverie.compiler.ir.views import IfOp, WhileOp

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Block, Op

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


def _infer_if(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    if not ops or len(regions) != 2:
        raise ShapeError("if needs a condition and two regions")
    if ops[0] != scalar("bool"):
        raise ShapeError(f"an 'if' condition must be a scalar bool, not {ops[0]}")
    then, orelse = regions
    results = [v.type for v in then.results]
    _check_region(then, list(ops[1:]), results, "the 'then' branch")
    _check_region(orelse, list(ops[1:]), results, "the 'else' branch")
    return results


def _infer_while(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    carried = attrs["carried"]
    if len(ops) < carried or len(regions) != 2:
        raise ShapeError("while needs its initial states and two regions")
    states = list(ops[:carried])
    before, body = regions
    _check_region(before, list(ops), [scalar("bool")], "a 'while' condition")
    _check_region(body, list(ops), states, "a 'while' body")
    return states + ([scalar("i64")] if attrs.get("counted") else [])


def _eval_if(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    branch = IfOp(op)
    return ctx.run_block(branch.then if bool(args[0]) else branch.orelse, args[1:])


def _eval_while(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    loop = WhileOp(op)
    states, invariants = loop.split(args)
    iterations = 0
    while bool(ctx.run_block(loop.before, states + invariants)[0]):
        if iterations == loop.limit:
            raise RuntimeError(limit_error(loop.limit))
        iterations += 1
        states = ctx.run_block(loop.body, states + invariants)
    return states + ([np.int64(iterations)] if loop.counted else [])


register("if", "control", _infer_if, _eval_if,
         "A branch on a scalar bool: `%u = if %c, %u0 ^(%u1: f64) {... yield %a} "
         "^(%u1: f64) {... yield %b} : f64`.", attrs={}, fusion=ROOT)
register("while", "control", _infer_while, _eval_while,
         "A loop while a condition region yields true: `%u = while %u0 {carried = 1, "
         "limit = 1000000000} ^(%u1: f64) {... yield %c : bool} ^(%u1: f64) {... yield %u2} "
         ": f64`.", attrs={"carried": int, "limit": int, "counted": NotRequired[bool]}, fusion=ROOT)
