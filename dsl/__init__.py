"""The Reverie front end: grammar, parser, AST, printer and diagnostics (docs/language.md).

`parser.parse(source, filename)` turns `.rv` text into an `ast.Module` or raises
`ParseError`; `check.check_module` checks its names; `source_printer.format_ast(module)`
renders the AST as indented text (what `module.ir("ast")` shows). This package imports
nothing of the compiler, and its `__init__` nothing at all, so `reverie.dsl.ast` alone
does not load the parser's tables.
"""
