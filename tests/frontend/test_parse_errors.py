"""Golden parse errors: each tests/golden/errors/parse/*.rv is a malformed program whose
first line states the expected diagnostic as

    # expect: LINE:COLUMN: message substring

(line numbers count that header line). The test checks the position, the message and that
the rendered error shows `file:line:col`, the offending source line and a caret.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reverie.dsl.diagnostics import ParseError
from reverie.dsl.parser import parse

ERROR_DIR = Path(__file__).parents[1] / "golden" / "errors" / "parse"
CASES = sorted(ERROR_DIR.glob("*.rv"))
EXPECT = re.compile(r"# expect: (\d+):(\d+): (.+)")


def test_enough_error_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=lambda path: path.stem)
def test_parse_error_matches_expectation(case: Path) -> None:
    source = case.read_text(encoding="utf-8")
    header = EXPECT.fullmatch(source.splitlines()[0])
    assert header, f"{case.name}: first line must be '# expect: LINE:COLUMN: message'"
    line, column, message = int(header[1]), int(header[2]), header[3]

    with pytest.raises(ParseError) as info:
        parse(source, case.name)

    diagnostic = info.value.diagnostics[0]
    assert (diagnostic.line, diagnostic.column) == (line, column), diagnostic.message
    assert message in diagnostic.message
    rendered = str(info.value).splitlines()
    assert rendered[0].startswith(f"{case.name}:{line}:{column}: error: ")
    assert rendered[2].strip().startswith("^")
    assert rendered[2].index("^") - 4 == column - 1


def test_parsing_resumes_at_the_next_function_after_a_syntax_error() -> None:
    source = (
        "fn a(x: f32) -> f32 {\n"
        "    break;\n"
        "    return x;\n"
        "}\n"
        "fn b(x: f32) -> f32 {\n"
        "    return x;\n"
        "}\n"
        "fn c(x: f32) -> f32 {\n"
        "    let y = x $ 2;\n"
        "    return y;\n"
        "}\n"
        "fn d(x: f32) -> f32 {\n"
        "    return x\n"
    )
    with pytest.raises(ParseError) as info:
        parse(source, "several.rv")
    found = [(d.line, d.column, d.message) for d in info.value.diagnostics]
    assert [(line, column) for line, column, _ in found] == [(2, 5), (9, 15), (13, 13)]
    assert "no 'break'" in found[0][2]
    assert found[1][2] == "unexpected character '$'"
    assert found[2][2].endswith("the '{' at 12:21 is never closed")
    rendered = str(info.value)
    assert all(f"several.rv:{line}:{column}: error: " in rendered for line, column, _ in found)


def test_a_syntax_error_in_the_last_function_is_reported_once() -> None:
    with pytest.raises(ParseError) as info:
        parse("fn f(x: f32) -> f32 {\n    let y = x\n    return y;\n}\n", "one.rv")
    assert [(d.line, d.column) for d in info.value.diagnostics] == [(2, 14)]
