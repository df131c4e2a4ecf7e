"""Simplification: common-subexpression elimination and dead-code elimination.

Consumes and produces a `Function` (rewritten in place and returned). CSE merges ops with
the same name, operands and attributes (ops with regions are left alone) and drops
reshapes, broadcasts and casts that do not change the type; DCE removes ops
whose results nobody uses, inside regions too. Ops are pure: an unused bounds-checked
subscript is removed like any other unused value.
"""

from __future__ import annotations

from ..ir.core import Block, Function, Value

IDENTITY_WHEN_SAME_TYPE = ("reshape", "broadcast", "cast")


def _cse_block(block: Block) -> None:
    seen: dict[tuple, list[Value]] = {}
    replace: dict[Value, Value] = {}
    kept = []
    for op in block.ops:
        op.operands = [replace.get(v, v) for v in op.operands]
        for region in op.regions:
            _cse_block(region)
        if op.regions:
            kept.append(op)
            continue
        if op.name in IDENTITY_WHEN_SAME_TYPE and op.result.type == op.operands[0].type:
            replace[op.result] = op.operands[0]
            continue
        key = (op.name, tuple(id(v) for v in op.operands), repr(sorted(op.attrs.items())))
        if key in seen:
            for old, new in zip(op.results, seen[key], strict=True):
                replace[old] = new
            continue
        seen[key] = op.results
        kept.append(op)
    block.ops = kept
    block.results = [replace.get(v, v) for v in block.results]


def _dce_block(block: Block) -> None:
    live: set[Value] = set(block.results)
    kept = []
    for op in reversed(block.ops):
        if not any(r in live for r in op.results):
            continue
        for region in op.regions:
            _dce_block(region)
        live.update(op.operands)
        kept.append(op)
    block.ops = kept[::-1]


def simplify(fn: Function) -> Function:
    """CSE then DCE."""
    _cse_block(fn.body)
    _dce_block(fn.body)
    return fn
