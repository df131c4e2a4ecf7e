"""Golden type errors: every `tests/golden/errors/type/*.rv` parses but fails type checking.

Each file states what it gets wrong in its first comment line and the expected diagnostic
in a header line

    # expect: 3:12: cannot mix f32 and f64

(1-based line and column, then a substring of the message). The error must be an
`rv.TypeCheckError` whose rendering shows `file:line:col: error:`, the source line and a
caret under the column, like a modern compiler (docs/language.md §13). A file with several
independent mistakes has one header line for each, in source order: the error carries
exactly those diagnostics, no fewer (every mistake is reported) and no more (no cascades).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import reverie as rv
from reverie.dsl.parser import parse

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "errors" / "type"
FILES = sorted(GOLDEN.glob("*.rv"))
EXPECT = re.compile(r"^# expect: (\d+):(\d+): (.+)$", re.MULTILINE)


def _expectations(path: Path) -> list[tuple[int, int, str]]:
    """(line, column, message substring) from each of the file's `# expect:` headers."""
    matches = EXPECT.findall(path.read_text())
    assert matches, f"{path.name} has no '# expect: LINE:COL: message' header"
    return [(int(line), int(column), message.strip()) for line, column, message in matches]


def test_there_are_enough_golden_type_errors() -> None:
    assert len(FILES) >= 30


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_type_error(path: Path) -> None:
    source = path.read_text()
    expectations = _expectations(path)
    parse(source, path.name)
    with pytest.raises(rv.TypeCheckError) as info:
        rv.compile(source, name=path.name, backend="interp")
    error = info.value
    found = [(d.line, d.column, d.message) for d in error.diagnostics]
    assert len(found) == len(expectations), found
    rendered_lines = str(error).splitlines()
    for (line, column, message), diagnostic in zip(expectations, error.diagnostics, strict=True):
        assert message in diagnostic.message
        assert (diagnostic.line, diagnostic.column) == (line, column), diagnostic.message
        header = rendered_lines.index(
            f"{path.name}:{line}:{column}: {diagnostic.severity}: {diagnostic.message}")
        source_line = source.splitlines()[line - 1].expandtabs(4)
        assert rendered_lines[header + 1] == f"    {source_line}"
        assert rendered_lines[header + 2].startswith("    " + " " * (column - 1) + "^")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_type_error_is_a_compile_error_with_position(path: Path) -> None:
    with pytest.raises(rv.CompileError) as info:
        rv.load(path, backend="interp")
    assert not isinstance(info.value, rv.ParseError)
    assert str(path) in str(info.value)
    assert all(d.line >= 1 and d.column >= 1 for d in info.value.diagnostics)
