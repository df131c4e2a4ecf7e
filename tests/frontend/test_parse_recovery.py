"""Error recovery (issue 36 item 5): syntax errors are recovered per statement, not only
per function, and the type errors of the functions that parsed are reported with them in
one CompileError; a `return` inside an `if` names the `if`, with a caret on it.

Each error is checked by message and by caret position (line, column and the rendered
caret under the source line).
"""

from __future__ import annotations

import pytest

import reverie as rv
from reverie.dsl.diagnostics import CompileError, ParseError
from reverie.dsl.parser import parse

THREE_FUNCTIONS = """\
fn a(x: f64) -> f64 {
    let y = x * ;
    return y;
}
fn b(x: f64) -> f64 {
    let s = x $ 2.0;
    return s;
}
fn c(x: f64[N]) -> f64 {
    let q = x + true;
    return a(sum(x)) + b(1.0);
}
"""


def positions(error: CompileError) -> list[tuple[int, int, str]]:
    return [(d.line, d.column, d.severity) for d in error.diagnostics]


def caret_column(error: CompileError, index: int) -> int:
    """The column of the caret under the source line of diagnostic `index` (1-based)."""
    lines = str(error).splitlines()
    caret = lines[3 * index + 2]
    return caret.index("^") - 4 + 1


def test_two_syntax_errors_and_a_type_error_in_one_compile_error() -> None:
    with pytest.raises(ParseError) as info:
        rv.compile(THREE_FUNCTIONS, name="three.rv")
    error = info.value
    assert positions(error) == [(2, 17, "error"), (6, 15, "error"), (10, 13, "error")]
    messages = [d.message for d in error.diagnostics]
    assert messages[0] == "expected an expression but found ';'"
    assert messages[1] == "unexpected character '$'"
    assert messages[2].startswith("'+' needs numbers, got bool")
    rendered = str(error)
    for line, column, _ in positions(error):
        assert f"three.rv:{line}:{column}: error: " in rendered
    assert [caret_column(error, i) for i in range(3)] == [17, 15, 13]
    # the calls of a and b (which hold syntax errors) are no "unknown function" errors
    assert "unknown function" not in rendered


def test_parse_alone_reports_the_syntax_errors_and_keeps_the_functions_that_parsed() -> None:
    with pytest.raises(ParseError) as info:
        parse(THREE_FUNCTIONS, "three.rv")
    assert positions(info.value) == [(2, 17, "error"), (6, 15, "error")]
    assert [f.name for f in info.value.partial.functions] == ["c"]
    assert info.value.broken == {"a", "b"}


def test_recovery_resumes_at_the_next_statement() -> None:
    source = ("fn f(x: f64[N]) -> f64 {\n"
              "    let a = x * ;\n"
              "    let b = x + 1.0;\n"
              "    let c = (x + ;\n"
              "    for t in 0..N {\n"
              "        let d = x @@ x;\n"
              "    }\n"
              "    let e = x\n"
              "    return sum(b);\n"
              "}\n")
    with pytest.raises(ParseError) as info:
        parse(source, "statements.rv")
    assert [(line, column) for line, column, _ in positions(info.value)] == [
        (2, 17), (4, 18), (6, 20), (8, 14)]
    assert info.value.diagnostics[3].message == "expected ';' or an operator but found 'return'"


def test_an_error_in_an_if_header_skips_the_whole_if_else() -> None:
    source = ("fn f(x: f64) -> f64 {\n"
              "    var u = x;\n"
              "    if x > { u = 1.0; } else { u = 2.0; }\n"
              "    let v = u ** ;\n"
              "    return u;\n"
              "}\n")
    with pytest.raises(ParseError) as info:
        parse(source, "if.rv")
    assert [(line, column) for line, column, _ in positions(info.value)] == [(3, 12), (4, 18)]


def test_an_error_in_a_header_resumes_at_the_next_function() -> None:
    source = ("fn f(x: f64[N) -> f64 {\n"
              "    let a = x * ;\n"
              "    return a;\n"
              "}\n"
              "fn g(x: f64) -> f64 {\n"
              "    return x +;\n"
              "}\n")
    with pytest.raises(ParseError) as info:
        parse(source, "header.rv")
    assert [(line, column) for line, column, _ in positions(info.value)] == [(1, 14), (6, 15)]


def test_a_type_error_alone_is_still_a_type_check_error() -> None:
    with pytest.raises(rv.TypeCheckError):
        rv.compile("fn f(x: f64) -> f64 { return x + true; }")


@pytest.mark.parametrize("branch", ["then", "else"])
def test_return_inside_an_if_names_the_if(branch: str) -> None:
    then, orelse = ("return u;", "u = 2.0;") if branch == "then" else ("u = 2.0;", "return u;")
    source = ("fn f(x: f64) -> f64 {\n"
              "    var u = x;\n"
              "    if x > 0.0 {\n"
              f"        {then}\n"
              "    } else {\n"
              f"        {orelse}\n"
              "    }\n"
              "    return u;\n"
              "}\n")
    with pytest.raises(rv.TypeCheckError) as info:
        rv.compile(source, name="ret.rv")
    error = info.value
    line = 4 if branch == "then" else 6
    assert positions(error) == [(line, 9, "error"), (3, 5, "note")]
    assert error.message == ("'return' is only allowed at the end of a function, not inside "
                             "the 'if' of line 3; assign the result to a 'var' declared "
                             "before the 'if' and return it after")
    assert error.diagnostics[1].message == "the 'if' that holds the 'return'"
    rendered = str(error).splitlines()
    assert rendered[3] == "ret.rv:3:5: note: the 'if' that holds the 'return'"
    assert rendered[5] == "    " + " " * 4 + "^^"  # the caret under `if`
    assert caret_column(error, 0) == 9


def test_return_inside_a_loop_keeps_its_message() -> None:
    source = ("fn f(x: f64) -> f64 {\n"
              "    var u = x;\n"
              "    for t in 0..3 { return u; }\n"
              "    return u;\n"
              "}\n")
    with pytest.raises(rv.TypeCheckError) as info:
        rv.compile(source)
    assert positions(info.value) == [(3, 21, "error")]
    assert "not inside a loop" in info.value.message
