"""What lowering an expression produces, and how a `var` is bound.

An `ExprValue` is an IR value plus the one fact the IR type does not carry: whether its
dtype is still *weak* (a literal, a dimension or an index variable, which takes the dtype
of the other operand: docs/language.md §6). A tuple expression lowers to an `ExprTuple`. A `var`
is bound to a `VarBinding`, whose current value each assignment replaces. A name whose
statement failed to lower is bound to a `FailedBinding`: using it raises `Suppressed`, which
skips the using statement without a second diagnostic (no cascade of errors).
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.core import Value
from reverie.compiler.ir.types import TensorType
from reverie.dsl import ast


@dataclass
class ExprValue:
    """A lowered expression: an IR value, and whether its dtype is still weak."""

    value: Value
    weak: bool = False

    @property
    def type(self) -> TensorType:
        """The IR type of the value."""
        return self.value.type


@dataclass
class ExprTuple:
    """A tuple expression or the result of a tuple-returning call."""

    elements: list[ExprValue]


@dataclass
class VarBinding:
    """A `var`: its current value (replaced by each assignment) and its fixed type."""

    current: ExprValue
    declared_at: ast.Span


@dataclass
class FailedBinding:
    """A name whose defining statement failed (and was reported)."""

    declared_at: ast.Span


class Suppressed(Exception):
    """A statement uses a name whose definition failed: skip it without a diagnostic."""
