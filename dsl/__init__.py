"""The Reverie front end: grammar, parser, AST, printer and diagnostics (SPEC §2, §5).

`parse(source, filename)` turns `.rv` text into an `ast.Module` or raises `ParseError`;
`format_ast(module)` renders that AST as indented text (what `module.ir("ast")` shows).
"""

from .parser import parse
from .printer import format_ast

__all__ = ["format_ast", "parse"]
