"""FileCheck-style matching of printed IR, as LLVM's FileCheck, xDSL and MLIR's Toy do it.

`filecheck(ir, checks)` reads the directives of `checks`, one a line, and matches them in
order against the lines of `ir`; each pattern is a substring of the line it matches:

    CHECK: pat        the first line at or after the last match that contains `pat`
    CHECK-NEXT: pat   the line right after the last match contains `pat`
    CHECK-NOT: pat    no line between the last match and the next one (or the end of the
                      IR, when no directive follows) contains `pat`

A line of `checks` without the word CHECK is a comment; a line with it that is no directive
above (a typo such as `CHECK-NXT:`) is an error, so a check cannot be skipped silently.
A failure is an AssertionError naming the directive and showing the IR, its lines numbered
and the line where the search began marked with `>`:

    filecheck(format_function(fn), '''
        CHECK: func @f
        CHECK-NEXT: %0 = tanh %x
        CHECK-NOT: exp
    ''')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DIRECTIVE = re.compile(r"^\s*(?://|#)?\s*(CHECK(?:-NEXT|-NOT)?):(.*)$")
KINDS = ("CHECK", "CHECK-NEXT", "CHECK-NOT")


@dataclass(frozen=True)
class Directive:
    """One directive: its kind (one of KINDS), its pattern and its line in the checks."""

    kind: str
    pattern: str
    line: int

    def __str__(self) -> str:
        return f"{self.kind}: {self.pattern} (check line {self.line})"


def parse_directives(checks: str) -> list[Directive]:
    """The directives of `checks`, in order (ValueError for a malformed one)."""
    directives = []
    for number, line in enumerate(checks.splitlines(), start=1):
        if "CHECK" not in line:
            continue
        match = DIRECTIVE.match(line)
        if match is None or not match.group(2).strip():
            raise ValueError(f"check line {number} is not a directive ({', '.join(KINDS)} "
                             f"followed by a pattern): {line.strip()!r}")
        directives.append(Directive(match.group(1), match.group(2).strip(), number))
    if not directives:
        raise ValueError("no CHECK directive: nothing would be checked")
    return directives


def filecheck(ir: str, checks: str) -> None:
    """Match the directives of `checks` against the lines of `ir` (see the module docstring)."""
    lines = ir.splitlines()
    start = 0  # the first line a CHECK may match
    excluded: list[Directive] = []  # CHECK-NOTs waiting for the next match to bound them
    for directive in parse_directives(checks):
        if directive.kind == "CHECK-NOT":
            excluded.append(directive)
            continue
        found = _find(directive, lines, start)
        if found is None:
            raise AssertionError(_failure(f"{directive} did not match", ir, start))
        _check_absent(excluded, lines, start, found, ir)
        excluded = []
        start = found + 1
    _check_absent(excluded, lines, start, len(lines), ir)


def _find(directive: Directive, lines: list[str], start: int) -> int | None:
    """The line `directive` matches at or after `start`, or None."""
    if directive.kind == "CHECK-NEXT":
        if start == 0:
            raise ValueError(f"{directive} has no match before it to follow")
        return start if start < len(lines) and directive.pattern in lines[start] else None
    return next((k for k in range(start, len(lines)) if directive.pattern in lines[k]), None)


def _check_absent(excluded: list[Directive], lines: list[str], start: int, stop: int,
                  ir: str) -> None:
    """Fail if a CHECK-NOT pattern occurs in lines[start:stop]."""
    for directive in excluded:
        for k in range(start, stop):
            if directive.pattern in lines[k]:
                raise AssertionError(_failure(f"{directive} matched line {k + 1}", ir, start))


def _failure(what: str, ir: str, start: int) -> str:
    """The message of a failed directive: what failed, then the IR with its lines numbered."""
    numbered = [f"{'>' if k == start else ' '} {k + 1:3} | {line}"
                for k, line in enumerate(ir.splitlines())]
    return "\n".join([what, f"searching from line {start + 1} (marked >) of the IR:", *numbered])
