"""Compile-time errors shown like a modern compiler (docs/language.md §13).

A `Diagnostic` is one message at one source position. `CompileError` (and its subclasses
`ParseError`, `TypeCheckError`) carries a list of them; `str(error)` renders each as

    kernel.rv:3:12: error: unknown name 'xx'; did you mean 'x'?
        let y = xx * 2;
                ^^

Every stage raises these through `error_at`, so the renderer lives in one place.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from reverie.dsl.ast import Span


@dataclass(frozen=True)
class Diagnostic:
    """One message; `line`/`column` are 1-based, `end_column` bounds the caret underline."""

    line: int
    column: int
    message: str
    end_line: int = 0
    end_column: int = 0
    severity: str = "error"


class CompileError(Exception):
    """Any problem found while compiling Reverie source."""

    def __init__(
        self,
        diagnostics: list[Diagnostic],
        source: str = "",
        filename: str = "<source>",
    ) -> None:
        self.diagnostics = list(diagnostics)
        self.source = source
        self.filename = filename
        super().__init__(self.render())

    @property
    def message(self) -> str:
        """The first diagnostic's message, without position or source excerpt."""
        return self.diagnostics[0].message if self.diagnostics else ""

    def render(self) -> str:
        """All diagnostics as `file:line:col: error: msg`, the source line and a caret."""
        lines = self.source.splitlines()
        out = []
        for diag in self.diagnostics:
            where = f"{self.filename}:{diag.line}:{diag.column}"
            out.append(f"{where}: {diag.severity}: {diag.message}")
            if 1 <= diag.line <= len(lines):
                text = lines[diag.line - 1].expandtabs(4)
                out.append(f"    {text}")
                width = 1
                if diag.end_line == diag.line and diag.end_column >= diag.column:
                    width = diag.end_column - diag.column + 1
                width = max(1, min(width, len(text) - diag.column + 1))
                out.append("    " + " " * (diag.column - 1) + "^" * width)
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()

    def with_source(self, source: str, filename: str) -> CompileError:
        """Attach the source text so the rendering can show the offending line."""
        self.source = source
        self.filename = filename
        self.args = (self.render(),)
        return self


class ParseError(CompileError):
    """Source text that does not follow the grammar. `partial` is the module of the
    functions that hold no syntax error (an `ast.Module`, None where there is none), and
    `broken` the names of the others, so that the type errors of the first can be reported
    with the syntax errors (reverie/module.py)."""

    partial: object = None
    broken: frozenset[str] = frozenset()


class TypeCheckError(CompileError):
    """Well-formed source with a naming, dtype or shape problem."""


def diagnostic_at(span: Span, message: str) -> Diagnostic:
    """A diagnostic pointing at `span`."""
    return Diagnostic(span.line, span.column, message, span.end_line, span.end_column)


def error_at(span: Span, message: str, kind: type[CompileError] = TypeCheckError) -> CompileError:
    """An error of class `kind` with one diagnostic at `span` (raise the result)."""
    return kind([diagnostic_at(span, message)])


def in_source_order(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """`diagnostics` sorted by position, each note staying after the error it follows
    (`return` inside an `if`: the error at the `return`, then a note at the `if`)."""
    groups: list[list[Diagnostic]] = []
    for diag in diagnostics:
        if diag.severity == "note" and groups:
            groups[-1].append(diag)
        else:
            groups.append([diag])
    groups.sort(key=lambda group: (group[0].line, group[0].column))
    return [diag for group in groups for diag in group]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` for the closest candidate, or an empty string.

    A candidate with exactly the same letters (a transposition typo like `tahn`) wins over
    one that is merely similar (`tan`).
    """
    pool = sorted(set(candidates))
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.6)
    anagrams = [c for c in close if sorted(c) == sorted(name)]
    best = (anagrams or close)[:1]
    return f"; did you mean '{best[0]}'?" if best else ""
