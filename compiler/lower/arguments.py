"""Reading the arguments of a built-in call: positional count, keywords, axes, flags.

Pure functions of the AST: each checks one part of a built-in's signature and raises a
`TypeCheckError` at the offending argument.
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Dim
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


def signature(call: ast.Call, positional: int | tuple[int, int],
              keywords: set[str]) -> dict[str, ast.Expr]:
    """Check positional count and keyword names; return keywords by name."""
    lo, hi = (positional, positional) if isinstance(positional, int) else positional
    if not lo <= len(call.args) <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        raise error_at(call.span, f"'{call.func}' takes {count} positional argument(s), "
                                  f"got {len(call.args)}")
    found = {}
    for kw in call.keywords:
        if kw.name not in keywords:
            allowed = ", ".join(sorted(keywords)) or "none"
            raise error_at(kw.span, f"'{call.func}' has no keyword '{kw.name}' "
                                    f"(allowed: {allowed})")
        if kw.name in found:
            raise error_at(kw.span, f"keyword '{kw.name}' given twice")
        found[kw.name] = kw.value
    return found


def _int_literal(node: ast.Expr) -> int | None:
    """The value of an integer literal, possibly negated; None for anything else."""
    if isinstance(node, ast.IntLit):
        return node.value
    if isinstance(node, ast.UnaryOp) and node.op == "-" and isinstance(node.operand, ast.IntLit):
        return -node.operand.value
    return None


def axis(node: ast.Expr, rank: int) -> int:
    """One axis (negative counts from the end), checked against `rank`."""
    value = _int_literal(node)
    if value is None:
        raise error_at(node.span, "an axis must be an integer literal")
    if not -rank <= value < rank:
        raise error_at(node.span, f"axis {value} is out of range for a rank-{rank} tensor")
    return value % rank


def axes(node: ast.Expr | None, rank: int) -> tuple[int, ...]:
    """`axis=` as a sorted tuple; None means every axis."""
    if node is None:
        return tuple(range(rank))
    items = node.elements if isinstance(node, ast.TupleExpr) else [node]
    found = tuple(axis(item, rank) for item in items)
    if len(set(found)) != len(found):
        raise error_at(node.span, "repeated axis")
    return tuple(sorted(found))


def flag(node: ast.Expr | None, name: str) -> bool:
    """A keyword flag such as `keepdims=` or `descending=`: a bool literal, false when
    absent."""
    if node is None:
        return False
    if not isinstance(node, ast.BoolLit):
        raise error_at(node.span, f"{name} must be true or false")
    return node.value


def keepdims(node: ast.Expr | None) -> bool:
    """`keepdims=`: a bool literal, false when absent."""
    return flag(node, "keepdims")


def kept_shape(shape: tuple[Dim, ...], reduced: tuple[int, ...]) -> tuple[Dim, ...]:
    """`shape` with the `reduced` axes kept as size-1 dimensions."""
    return tuple(Dim.const(1) if i in reduced else d for i, d in enumerate(shape))
