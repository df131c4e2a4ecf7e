"""Simplification: constant folding, algebraic identities, CSE and DCE.

Consumes and produces a `Function` (rewritten in place and returned). One forward sweep
per block (regions too) folds and rewrites each op, then merges it with an earlier op of
the same name, operands and attributes (ops with regions are left alone); a backward
sweep removes ops whose results nobody uses, and region operands a region never reads.
Ops are pure: an unused bounds-checked subscript is removed like any other unused value.

Folding evaluates scalar elementwise ops whose operands are all constants with the op
table's NumPy semantics, and `dim` of a constant; it gives up on anything that raises a
floating-point warning (1/0, log(-1)), so folded code behaves like the original.

Identities keep IEEE semantics: a value is replaced only by one that is bitwise equal for
every input, including inf and NaN. So `x * 1`, `x / 1`, `x - 0`, `--x`, `max(x, x)`,
`select(c, a, a)`, reshape/broadcast/cast/transpose/reductions that change nothing, and
chains of reshapes, broadcasts or transposes are simplified, but `x * 0` is not (inf · 0
is NaN) and neither is `x - x`. `x + 0` → `x` is the one exception: it is exact except that
−0 + 0 is +0, a difference only the sign of a zero can see.

A matrix product with an identity or diagonal operand (`X @ I`, `diag(s) @ Y`, the seeds of
a Jacobian) becomes the other operand, scaled by `s` (compiler/transforms/
identity_products.py): bitwise equal to the product for finite operands; an inf or NaN
entry stays itself where the product would spread NaN (inf · 0) over its row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reverie.compiler.ir.core import Block, Function, Op, Value
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.reduce_kinds import REDUCE_OPS
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.ir.views import ForOp, LoopNestOp, WhileOp
from reverie.compiler.transforms.identity_products import identity_product


def constant_value(value: Value) -> Any:
    """The scalar every element of `value` equals, if it is a (broadcast) constant; else None."""
    op = value.op
    while op is not None and op.name in ("broadcast", "reshape"):
        op = op.operands[0].op
    if op is None or op.name != "const":
        return None
    return op.attrs["value"]


def _is(value: Value, number: float) -> bool:
    """Whether `value` is a numeric constant equal to `number`."""
    c = constant_value(value)
    return c is not None and not isinstance(c, bool) and c == number


def _fold(op: Op) -> None:
    """Turn a scalar op on constants into a `const` op, in place, when that is exact."""
    result = op.results[0] if len(op.results) == 1 else None
    if result is None or result.type.rank or op.regions:
        return
    if op.name == "dim" and op.attrs["dim"].is_const:
        value: Any = op.attrs["dim"].value
    elif OPS[op.name].kind == "elementwise" and op.operands and all(
            v.op is not None and v.op.name == "const" for v in op.operands):
        args = [np.array(v.op.attrs["value"], dtype=NUMPY_DTYPES[v.type.dtype])
                for v in op.operands]
        try:
            with np.errstate(all="raise"):
                (out,) = OPS[op.name].evaluate(None, args, op)
        except (FloatingPointError, ZeroDivisionError):
            return
        value = np.asarray(out).astype(NUMPY_DTYPES[result.type.dtype]).item()
    else:
        return
    op.name, op.operands, op.attrs = "const", [], {"value": value, "dtype": result.type.dtype}


def _compose(op: Op) -> None:
    """Skip an inner reshape, broadcast or transpose that the outer one makes redundant."""
    inner = op.operands[0].op if op.operands else None
    if inner is None or inner.regions:
        return
    source = inner.operands[0] if inner.operands else None
    if op.name == "reshape" and inner.name == "reshape":
        op.operands = [source]
    elif op.name == "transpose" and inner.name == "transpose":
        op.attrs = {**op.attrs, "perm": [inner.attrs["perm"][p] for p in op.attrs["perm"]]}
        op.operands = [source]
    elif op.name == "broadcast" and inner.name == "broadcast":
        op.operands = [source]
    elif op.name == "broadcast" and inner.name == "reshape" and \
            source.type.rank <= len(op.attrs["shape"]) and \
            _strip_ones(inner.result.type.shape) == _strip_ones(source.type.shape):
        op.operands = [source]


def _strip_ones(shape: tuple) -> tuple:
    """A shape without its leading size-1 dimensions (how broadcasting right-aligns)."""
    i = 0
    while i < len(shape) and shape[i].is_const and shape[i].value == 1:
        i += 1
    return tuple(shape[i:])


def _identity(op: Op) -> Value | None:
    """An existing value bitwise equal to `op`'s result, if an identity applies."""
    if len(op.results) != 1 or op.regions:
        return None
    args, result = op.operands, op.results[0]
    if OPS[op.name].same_type_is_identity and args[0].type == result.type:
        return args[0]
    if op.name == "transpose" and list(op.attrs["perm"]) == list(range(result.type.rank)):
        return args[0]
    if op.name in REDUCE_OPS and not op.attrs["axes"]:
        return args[0]
    if op.name == "neg" and args[0].op is not None and args[0].op.name == "neg":
        return args[0].op.operands[0]
    if op.name in ("maximum", "minimum") and args[0] is args[1]:
        return args[0]
    if op.name == "select" and args[1] is args[2]:
        return args[1]
    if op.name == "select" and constant_value(args[0]) is not None:
        return args[1] if constant_value(args[0]) else args[2]
    pairs = {"add": [(0, 1, 0.0), (1, 0, 0.0)], "sub": [(0, 1, 0.0)],
             "mul": [(0, 1, 1.0), (1, 0, 1.0)], "div": [(0, 1, 1.0)]}
    for keep, other, number in pairs.get(op.name, []):
        if _is(args[other], number):
            return args[keep]
    return None


def _simplify_block(block: Block) -> None:
    """Fold, rewrite and CSE one block and its regions (forward sweep)."""
    seen: dict[tuple, list[Value]] = {}
    replace: dict[Value, Value] = {}
    kept = []
    for op in block.ops:
        op.operands = [replace.get(v, v) for v in op.operands]
        for region in op.regions:
            _simplify_block(region)
        if op.regions:
            kept.append(op)
            continue
        _fold(op)
        _compose(op)
        same = _identity(op)
        if same is not None:
            replace[op.results[0]] = same
            continue
        product = identity_product(op)
        if product is not None:
            new_ops, replace[op.results[0]] = product
            kept += new_ops
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


def _first_removable_param(op: Op) -> int | None:
    """Where a region op's capturable operands start among its region's parameters."""
    if op.name in LoopNestOp.NAMES:
        return len(LoopNestOp(op).ranges)
    if op.name in ForOp.NAMES:
        return 1 + ForOp(op).carried
    if op.name == "if":
        return 0
    if op.name == "while":
        return WhileOp(op).carried
    return None


def _prune_operands(op: Op) -> None:
    """Drop operands whose region parameter is never used inside any of the op's regions
    (every region of an `if` or `while` has the same parameters)."""
    start = _first_removable_param(op)
    if start is None:
        return
    used: set[Value] = set()
    for region in op.regions:
        used.update(region.results)
        for inner in region.ops:
            used.update(inner.operands)
    count = len(op.regions[0].params)
    offset = len(op.operands) - count
    keep = [i for i in range(count)
            if i < start or any(region.params[i] in used for region in op.regions)]
    for region in op.regions:
        region.params = [region.params[i] for i in keep]
    op.operands = op.operands[:offset + start] + [
        op.operands[offset + i] for i in keep if i >= start]


def _without_history(op: Op) -> Op:
    """A `for_history` whose histories nobody reads, as a plain `for` (same loop)."""
    view = ForOp(op)
    loop = Op("for", op.operands, {"carried": view.carried}, view.final_states, op.regions,
              op.span)
    for result in loop.results:
        result.op = loop
    return loop


def _dce_block(block: Block) -> None:
    """Remove unused ops (backward sweep), and unread region operands."""
    live: set[Value] = set(block.results)
    kept = []
    for op in reversed(block.ops):
        if not any(r in live for r in op.results):
            continue
        if op.name == "for_history" and not any(r in live for r in ForOp(op).histories):
            op = _without_history(op)
        for region in op.regions:
            _dce_block(region)
        _prune_operands(op)
        live.update(op.operands)
        kept.append(op)
    block.ops = kept[::-1]


def simplify(fn: Function) -> Function:
    """Fold, rewrite and CSE, then DCE."""
    _simplify_block(fn.body)
    _dce_block(fn.body)
    return fn
