"""Unit tests for reverie.dsl.parser: each construct of docs/language.md, precedence, spans,
limits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reverie.dsl import ast
from reverie.dsl.diagnostics import CompileError, ParseError
from reverie.dsl.parser import KEYWORDS, MAX_NESTING, parse
from reverie.dsl.source_printer import format_expr

GOLDEN_PROGRAMS = sorted((Path(__file__).parents[1] / "golden" / "ast").glob("*.rv"))


def body_of(statements: str) -> list[ast.Stmt]:
    """The statements of `fn f() { <statements> }`."""
    return parse(f"fn f() {{ {statements} }}").functions[0].body


def expr_of(text: str) -> ast.Expr:
    """The expression in `return <text>;`."""
    return body_of(f"return {text};")[0].value


def sexpr(text: str) -> str:
    """The printed s-expression of one expression."""
    return format_expr(expr_of(text))


def parse_error(source: str) -> ParseError:
    """The ParseError raised for `source`."""
    with pytest.raises(ParseError) as info:
        parse(source, "bad.rv")
    return info.value


def text_at(source: str, span: ast.Span) -> str:
    """The source text covered by a single-line span."""
    assert span.line == span.end_line
    return source.splitlines()[span.line - 1][span.column - 1 : span.end_column]


# ------------------------------------------------------------------ module and functions


@pytest.mark.parametrize("source", ["", "   \n\n", "# just a comment\n", "# a\n\n# b"])
def test_empty_module_is_valid(source: str) -> None:
    module = parse(source, "empty.rv")
    assert module.functions == []
    assert module.source == source
    assert module.filename == "empty.rv"


def test_function_header() -> None:
    module = parse("fn loss(x: f32[N, D], w: f32[D]) -> f32 { return sum(x @ w); }")
    (function,) = module.functions
    assert function.name == "loss"
    assert [param.name for param in function.params] == ["x", "w"]
    assert function.params[0].type.dtype == "f32"
    assert [format_expr(dim) for dim in function.params[0].type.dims] == ["N", "D"]
    assert function.ret == ast.TensorTypeExpr("f32", None, function.ret.span)
    assert isinstance(function.body[0], ast.Return)


def test_return_type_is_optional_and_params_may_be_empty() -> None:
    (function,) = parse("fn nothing() {}").functions
    assert function.params == [] and function.ret is None and function.body == []


def test_trailing_commas_everywhere() -> None:
    source = "fn f(x: f32[N, D,], y: f32,) -> (f32, f32,) { return (g(x, axis=(0, 1,),), y,); }"
    (function,) = parse(source).functions
    assert len(function.params) == 2
    assert len(function.params[0].type.dims) == 2
    assert len(function.ret.elements) == 2
    value = function.body[0].value
    assert isinstance(value, ast.TupleExpr) and len(value.elements) == 2
    assert format_expr(value.elements[0]) == "(call g x axis=(tuple 0 1))"


def test_several_functions_keep_their_order() -> None:
    module = parse("fn a() {}\nfn b() {}\n# end\nfn c() {}")
    assert [function.name for function in module.functions] == ["a", "b", "c"]


# ------------------------------------------------------------------ types


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32", "i64", "bool", "float"])
def test_every_dtype_is_accepted(dtype: str) -> None:
    (function,) = parse(f"fn f(x: {dtype}, y: {dtype}[N]) -> {dtype} {{ return x; }}").functions
    assert [param.type.dtype for param in function.params] == [dtype, dtype]
    assert function.params[0].type.dims is None
    assert function.ret.dtype == dtype


def test_dimension_expressions() -> None:
    (function,) = parse("fn f(x: f32[N + 1, 2 * K, K // 2, (N - 1) * 3, 7]) {}").functions
    dims = [format_expr(dim) for dim in function.params[0].type.dims]
    assert dims == ["(+ N 1)", "(* 2 K)", "(// K 2)", "(* (- N 1) 3)", "7"]


def test_tuple_and_parenthesised_return_types() -> None:
    pair = parse("fn f() -> (f32, f32[N]) {}").functions[0].ret
    assert isinstance(pair, ast.TupleTypeExpr)
    assert [element.dtype for element in pair.elements] == ["f32", "f32"]
    single = parse("fn f() -> (f64,) {}").functions[0].ret
    assert isinstance(single, ast.TupleTypeExpr) and len(single.elements) == 1
    plain = parse("fn f() -> (f64) {}").functions[0].ret
    assert isinstance(plain, ast.TensorTypeExpr) and plain.dtype == "f64"


# ------------------------------------------------------------------ statements


def test_let_var_assign_return() -> None:
    let, var, assign, ret = body_of("let x = 1; var u = x; u = u + 1; return u;")
    assert isinstance(let, ast.Let) and let.name == "x"
    assert let.value == ast.IntLit(1, let.value.span)
    assert isinstance(var, ast.VarDecl) and var.name == "u"
    assert isinstance(assign, ast.Assign) and format_expr(assign.value) == "(+ u 1)"
    assert isinstance(ret, ast.Return) and format_expr(ret.value) == "u"


def test_let_indexed_with_ranged_indices() -> None:
    (stmt,) = body_of("let y[b, i in 0..L - 1] = x[b, i];")
    assert isinstance(stmt, ast.LetIndexed) and stmt.name == "y"
    b, i = stmt.indices
    assert (b.name, b.lo, b.hi) == ("b", None, None)
    assert (i.name, format_expr(i.lo), format_expr(i.hi)) == ("i", "0", "(- L 1)")
    assert format_expr(stmt.value) == "(index x b i)"


def test_for_loop_with_expression_bounds_and_nested_body() -> None:
    (loop,) = body_of("for t in 1..T - 1 { for s in 0..3 { u = u + s; } u = u * t; }")
    assert isinstance(loop, ast.For) and loop.var == "t"
    assert (format_expr(loop.lo), format_expr(loop.hi)) == ("1", "(- T 1)")
    inner, assign = loop.body
    assert isinstance(inner, ast.For) and inner.var == "s" and len(inner.body) == 1
    assert isinstance(assign, ast.Assign)


def test_range_lexes_as_int_dotdot_name() -> None:
    (loop,) = body_of("for t in 0..T { }")
    assert loop.lo == ast.IntLit(0, loop.lo.span) and loop.hi == ast.Name("T", loop.hi.span)
    (loop,) = body_of("for t in 0..10 { }")
    assert loop.hi.value == 10


def test_tuple_return() -> None:
    value = body_of("return (a, b * 2);")[0].value
    assert isinstance(value, ast.TupleExpr)
    assert [format_expr(element) for element in value.elements] == ["a", "(* b 2)"]


# ------------------------------------------------------------------ expressions


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a + b * c", "(+ a (* b c))"),
        ("a * b + c", "(+ (* a b) c)"),
        ("a - b - c", "(- (- a b) c)"),
        ("a / b / c", "(/ (/ a b) c)"),
        ("a // b % c @ d", "(@ (% (// a b) c) d)"),
        ("a @ b + c", "(+ (@ a b) c)"),
        ("-x ** 2", "(- (** x 2))"),
        ("2 ** -1", "(** 2 (- 1))"),
        ("a ** b ** c", "(** a (** b c))"),
        ("-a * b", "(* (- a) b)"),
        ("- - a", "(- (- a))"),
        ("+a", "a"),
        ("a + +b", "(+ a b)"),
        ("a < b + c", "(< a (+ b c))"),
        ("a + b == c * d", "(== (+ a b) (* c d))"),
        ("not a < b", "(not (< a b))"),
        ("not not a", "(not (not a))"),
        ("a and b or c and d", "(or (and a b) (and c d))"),
        ("a or b or c", "(or (or a b) c)"),
        ("not a and b", "(and (not a) b)"),
        ("a <= b and c >= d and e != f", "(and (and (<= a b) (>= c d)) (!= e f))"),
        ("(a + b) * c", "(* (+ a b) c)"),
        ("((a))", "a"),
        ("-x.T", "(- (attr x T))"),
        ("-f(x)[0] ** 2", "(- (** (index (call f x) 0) 2))"),
        ("x.T.T", "(attr (attr x T) T)"),
    ],
)
def test_precedence_and_associativity(source: str, expected: str) -> None:
    assert sexpr(source) == expected


@pytest.mark.parametrize(
    ("source", "value"),
    [("12", 12), ("0", 0), ("007", 7), ("9223372036854775807", 2**63 - 1)],
)
def test_int_literals(source: str, value: int) -> None:
    literal = expr_of(source)
    assert isinstance(literal, ast.IntLit) and literal.value == value


@pytest.mark.parametrize(
    ("source", "value"),
    [("2.5", 2.5), ("1e-3", 1e-3), ("1.5e+3", 1500.0), ("1E5", 1e5), (".5", 0.5), ("0.0", 0.0)],
)
def test_float_literals(source: str, value: float) -> None:
    literal = expr_of(source)
    assert isinstance(literal, ast.FloatLit) and literal.value == value


def test_bool_literals() -> None:
    assert expr_of("true") == ast.BoolLit(True, expr_of("true").span)
    assert expr_of("false").value is False


def test_calls_with_positional_and_keyword_arguments() -> None:
    call = expr_of("sum(x, axis=(0, 1), keepdims=true)")
    assert isinstance(call, ast.Call) and call.func == "sum"
    assert [format_expr(arg) for arg in call.args] == ["x"]
    assert [(kw.name, format_expr(kw.value)) for kw in call.keywords] == [
        ("axis", "(tuple 0 1)"),
        ("keepdims", "true"),
    ]
    assert sexpr("f32(x)") == "(call f32 x)"
    assert sexpr("my_fn()") == "(call my_fn)"
    assert sexpr("where(a > 0, a, 0.0)") == "(call where (> a 0) a 0.0)"


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_index_reductions(op: str) -> None:
    reduce = expr_of(f"{op}[k in 0..K, j](a[k] * b[j])")
    assert isinstance(reduce, ast.IndexReduce) and reduce.op == op
    k, j = reduce.indices
    assert (k.name, format_expr(k.lo), format_expr(k.hi)) == ("k", "0", "K")
    assert (j.name, j.lo, j.hi) == ("j", None, None)
    assert format_expr(reduce.body) == "(* (index a k) (index b j))"


def test_max_and_min_stay_calls_without_brackets() -> None:
    assert sexpr("max(a, b)") == "(call max a b)"
    assert sexpr("min(x, axis=0)") == "(call min x axis=0)"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x[1:]", "(index x (slice 1 _ _))"),
        ("x[:, 0]", "(index x (slice _ _ _) 0)"),
        ("x[:N-1]", "(index x (slice _ (- N 1) _))"),
        ("x[::2]", "(index x (slice _ _ 2))"),
        ("x[1:N:2]", "(index x (slice 1 N 2))"),
        ("x[a:b,]", "(index x (slice a b _))"),
        ("xs[t]", "(index xs t)"),
        ("x[b, i + j - K // 2]", "(index x b (- (+ i j) (// K 2)))"),
        ("z[n, labels[n]]", "(index z n (index labels n))"),
        ("x[i][j]", "(index (index x i) j)"),
    ],
)
def test_subscripts_and_slices(source: str, expected: str) -> None:
    assert sexpr(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("(a, b)", "(tuple a b)"),
        ("(a,)", "(tuple a)"),
        ("(a, b,)", "(tuple a b)"),
        ("()", "(tuple)"),
        ("(a)", "a"),
        ("((a, b), c)", "(tuple (tuple a b) c)"),
    ],
)
def test_tuples(source: str, expected: str) -> None:
    assert sexpr(source) == expected


def test_comments_and_whitespace_are_ignored() -> None:
    source = (
        "# header\nfn f(x: f32) -> f32 {  # trailing\n"
        "\treturn x; # done\n}\r\n# (unclosed ( in comment\n"
    )
    assert format_expr(parse(source).functions[0].body[0].value) == "x"


def test_non_ascii_is_allowed_in_comments() -> None:
    assert parse("# σ is the standard deviation — ok\nfn f() {}").functions[0].name == "f"


@pytest.mark.parametrize("name", ["letter", "format", "index", "inner", "fn_x", "true_value", "_"])
def test_names_that_start_with_keywords(name: str) -> None:
    assert body_of(f"let {name} = 1;")[0].name == name


@pytest.mark.parametrize("keyword", sorted(KEYWORDS))
def test_keywords_cannot_be_names(keyword: str) -> None:
    error = parse_error(f"fn f() {{ let {keyword} = 1; }}")
    assert error.diagnostics[0].column == 14


# ------------------------------------------------------------------ spans

SPAN_SOURCE = """fn loss(x: f32[N],
        w: f32[N]) -> f32 {
    let y = (x + w) * exp(x);
    for t in 0..3 { y = y[1:]; }
    return (sum[i](y[i]), y);
}
"""


def test_spans_of_selected_nodes() -> None:
    (function,) = parse(SPAN_SOURCE).functions
    assert function.span == ast.Span(1, 1, 6, 1)
    assert function.name_span == ast.Span(1, 4, 1, 7)
    assert function.params[1].span == ast.Span(2, 9, 2, 17)
    let, loop, ret = function.body
    assert let.span == ast.Span(3, 5, 3, 29)
    assert let.name_span == ast.Span(3, 9, 3, 9)
    product = let.value
    assert product.span == ast.Span(3, 13, 3, 28)
    assert product.left.span == ast.Span(3, 14, 3, 18)  # parentheses are not part of a + b
    assert product.right.span == ast.Span(3, 23, 3, 28)
    assert product.right.func_span == ast.Span(3, 23, 3, 25)
    assert loop.span == ast.Span(4, 5, 4, 32) and loop.var_span == ast.Span(4, 9, 4, 9)
    assign = loop.body[0]
    assert assign.value.items[0].span == ast.Span(4, 27, 4, 28)
    assert ret.span == ast.Span(5, 5, 5, 29)
    assert ret.value.span == ast.Span(5, 12, 5, 28)
    reduce = ret.value.elements[0]
    assert reduce.span == ast.Span(5, 13, 5, 24)
    assert reduce.indices[0].span == ast.Span(5, 17, 5, 17)


def _nodes_with_parents(node: object, parent: object = None):
    """Every AST node below `node`, paired with its parent."""
    yield node, parent
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        for child in value if isinstance(value, list) else [value]:
            if dataclasses.is_dataclass(child) and not isinstance(child, ast.Span):
                yield from _nodes_with_parents(child, node)


@pytest.mark.parametrize("path", GOLDEN_PROGRAMS, ids=lambda path: path.stem)
def test_spans_cover_the_right_text(path: Path) -> None:
    source = path.read_text()
    for function in parse(source).functions:
        for node, parent in _nodes_with_parents(function):
            span = node.span
            assert (span.line, span.column) <= (span.end_line, span.end_column)
            if parent is not None:
                outer = parent.span
                assert (outer.line, outer.column) <= (span.line, span.column)
                assert (span.end_line, span.end_column) <= (outer.end_line, outer.end_column)
            if isinstance(node, ast.Name):
                assert text_at(source, span) == node.id
            if isinstance(node, ast.Call):
                assert text_at(source, node.func_span) == node.func
            if isinstance(node, ast.Let | ast.LetIndexed | ast.VarDecl | ast.Assign):
                assert text_at(source, node.name_span) == node.name
            if isinstance(node, ast.Let | ast.VarDecl | ast.Return):
                assert text_at(source, span).endswith(";")


# ------------------------------------------------------------------ errors and limits


def test_parse_error_is_a_compile_error_with_caret() -> None:
    error = parse_error("fn f() {\n  let x = 1\n}\n")
    assert isinstance(error, CompileError)
    (diagnostic,) = error.diagnostics
    assert (diagnostic.line, diagnostic.column) == (2, 12)
    assert diagnostic.message == "expected ';' or an operator but found '}'"
    rendered = str(error).splitlines()
    assert rendered[0] == "bad.rv:2:12: error: expected ';' or an operator but found '}'"
    assert rendered[1] == "      let x = 1"
    assert rendered[2] == "    " + " " * 11 + "^"


@pytest.mark.parametrize(
    ("char", "shown"),
    [
        ("\x00", "U+0000"),
        ("\x07", "U+0007"),
        ("\x1b", "U+001B"),
        ("λ", "'λ' (U+03BB)"),
        ("`", "'`'"),
    ],
)
def test_bad_characters_are_reported_where_they_are(char: str, shown: str) -> None:
    error = parse_error(f"fn f() {{\n  let x = a{char};\n}}")
    diagnostic = error.diagnostics[0]
    assert (diagnostic.line, diagnostic.column) == (2, 12)
    assert diagnostic.message.startswith(f"unexpected character {shown}")


def test_control_character_inside_comment_is_rejected() -> None:
    error = parse_error("fn f() {} # comment \x00 here")
    assert (error.diagnostics[0].line, error.diagnostics[0].column) == (1, 21)


def test_unknown_dtype_without_close_match_lists_dtypes() -> None:
    error = parse_error("fn f(x: tensor) {}")
    assert "element types are f32, f64, bf16, f16, i32, i64, bool, float" in error.message


def test_integer_and_float_literal_limits() -> None:
    too_big = parse_error("fn f() { return 9223372036854775808; }")
    assert "does not fit in 64 bits" in too_big.message
    assert "too large" in parse_error("fn f() { return 1e400; }").message


def test_reduction_rejects_keywords_and_non_name_callees() -> None:
    assert "no keyword arguments" in parse_error("fn f() { return sum[k](x[k], a=1); }").message
    assert "only a function name" in parse_error("fn f() { return (a + b)(c); }").message


def test_bracket_nesting_limit() -> None:
    depth_ok = MAX_NESTING - 1  # the function body's brace is one level
    parse("fn f() { return " + "(" * depth_ok + "x" + ")" * depth_ok + "; }")
    too_deep = depth_ok + 1
    error = parse_error("fn f() { return " + "(" * too_deep + "x" + ")" * too_deep + "; }")
    assert "nested too deeply" in error.message
    assert error.diagnostics[0].column == 17 + depth_ok


def test_expression_depth_limit() -> None:
    parse("fn f() { return " + "- " * (MAX_NESTING - 10) + "a; }")
    error = parse_error("fn f() { return " + "- " * (MAX_NESTING + 10) + "a; }")
    assert "nested too deeply" in error.message
    assert "'let'" in error.message
    assert "nested too deeply" in parse_error("fn f() { return " + "a ** " * 300 + "a; }").message


@pytest.mark.parametrize("terms", [MAX_NESTING, 5000])
def test_long_chains_of_binary_operators_count_as_one_level(terms: int) -> None:
    for op in ("+", "*", "-", "and"):
        body = f" {op} ".join(["a"] * terms)
        (function,) = parse(f"fn f() {{ return {body}; }}").functions
        assert format_expr(function.body[0].value).count(f"({op} ") == terms - 1
    error = parse_error("fn f() { return " + "- " * 150 + "(" + "- " * 150 + "a + b); }")
    assert "nested too deeply" in error.message
