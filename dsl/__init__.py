"""The Reverie front end: grammar, parser, AST, printer and diagnostics (SPEC §2, §5).

`parse(source, filename)` turns `.rv` text into an `ast.Module` or raises `ParseError`;
`format_ast(module)` renders that AST as indented text (what `module.ir("ast")` shows).
"""

from __future__ import annotations

from typing import Any

__all__ = ["format_ast", "parse"]


def __getattr__(name: str) -> Any:
    """`parse` and `format_ast`, imported when first used (the parser's tables take a while
    to load, and `reverie.dsl.ast` alone is all most of Reverie needs)."""
    if name == "parse":
        from reverie.dsl.parser import parse

        return parse
    if name == "format_ast":
        from reverie.dsl.source_printer import format_ast

        return format_ast
    raise AttributeError(f"module 'reverie.dsl' has no attribute {name!r}")
