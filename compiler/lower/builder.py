"""`BlockBuilder`: the block that lowering is filling, typed at source spans.

A `Scope` (see `ir/scope.py`) that emits each op at the span of the source expression it
comes from, so the op table's `ShapeError` for an ill-typed op becomes a `TypeCheckError`
with a caret under the user's code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverie.compiler.ir.core import Block, Value
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import ShapeError
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


class BlockBuilder(Scope):
    """A block being filled by the lowering: a `Scope` whose ops are typed at a source
    span, so an ill-typed op becomes a TypeCheckError pointing at the user's code."""

    def emit_at(self, span: ast.Span, name: str, operands: Sequence[Value],
                attrs: dict[str, Any] | None = None, regions: Sequence[Block] = ()) -> list[Value]:
        """Append an op; an ill-typed op becomes a TypeCheckError at `span`."""
        try:
            return self.emit(name, operands, attrs, regions, span).results
        except ShapeError as e:
            raise error_at(span, str(e)) from None

    def op_at(self, span: ast.Span, name: str, operands: Sequence[Value],
              attrs: dict[str, Any] | None = None, regions: Sequence[Block] = ()) -> Value:
        """`emit_at` for a one-result op."""
        (result,) = self.emit_at(span, name, operands, attrs, regions)
        return result
