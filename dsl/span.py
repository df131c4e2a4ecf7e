"""`Span`: where in the source text something came from (1-based lines and columns).

Every AST node and every IR op carries one, so any stage can point a diagnostic at the
user's code. It lives apart from the AST so that the IR (and IR loaded from the disk
cache) needs only this, not the AST's classes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A region of source text: 1-based line and column of its first and last character."""

    line: int
    column: int
    end_line: int
    end_column: int


NO_SPAN = Span(0, 0, 0, 0)
