"""Unit tests for reverie.dsl.source_printer on hand-built ASTs (independent of the parser)."""

from __future__ import annotations

import pytest

from reverie.dsl import ast
from reverie.dsl.source_printer import format_ast, format_expr, format_type


def name(identifier: str) -> ast.Name:
    """A Name node without a span."""
    return ast.Name(identifier)


def test_module_layout() -> None:
    loop = ast.For(
        "t",
        ast.IntLit(0),
        name("T"),
        [ast.Assign("u", ast.BinOp("*", name("u"), ast.FloatLit(0.5)))],
    )
    first = ast.FunctionDef(
        "f",
        [ast.Param("x", ast.TensorTypeExpr("f32", [name("N"), ast.IntLit(3)]))],
        ast.TensorTypeExpr("f32", None),
        [ast.VarDecl("u", name("x")), loop, ast.Return(name("u"))],
    )
    second = ast.FunctionDef("g", [], None, [])
    assert format_ast(ast.Module([first, second])) == (
        "fn f(x: f32[N, 3]) -> f32\n"
        "  var u = x\n"
        "  for t in 0..T\n"
        "    u = (* u 0.5)\n"
        "  return u\n"
        "\n"
        "fn g()\n"
    )


def test_empty_module_prints_nothing() -> None:
    assert format_ast(ast.Module([])) == ""


def test_types() -> None:
    scalar = ast.TensorTypeExpr("f64", None)
    tensor = ast.TensorTypeExpr("i64", [ast.BinOp("//", name("K"), ast.IntLit(2))])
    assert format_type(scalar) == "f64"
    assert format_type(tensor) == "i64[(// K 2)]"
    assert format_type(ast.TupleTypeExpr([scalar, tensor])) == "(f64, i64[(// K 2)])"
    assert format_type(ast.TupleTypeExpr([scalar])) == "(f64,)"


def test_expression_forms() -> None:
    reduce = ast.IndexReduce(
        "max",
        [ast.IndexVar("k", ast.IntLit(0), name("K")), ast.IndexVar("j")],
        ast.Subscript(name("a"), [name("k"), ast.Slice(None, ast.IntLit(2), None)]),
    )
    assert format_expr(reduce) == "(max[k in 0..K, j] (index a k (slice _ 2 _)))"
    call = ast.Call("sum", [name("x")], [ast.Keyword("keepdims", ast.BoolLit(True))])
    assert format_expr(call) == "(call sum x keepdims=true)"
    assert format_expr(ast.UnaryOp("not", ast.BoolLit(False))) == "(not false)"
    assert format_expr(ast.Attribute(name("x"), "T")) == "(attr x T)"
    assert format_expr(ast.TupleExpr([])) == "(tuple)"
    assert format_expr(ast.FloatLit(1e-3)) == "0.001"


def test_let_indexed_statement() -> None:
    stmt = ast.LetIndexed("y", [ast.IndexVar("i", ast.IntLit(1), name("N"))], name("x"))
    module = ast.Module([ast.FunctionDef("f", [], None, [stmt])])
    assert format_ast(module) == "fn f()\n  let y[i in 1..N] = x\n"


def test_non_expression_is_rejected() -> None:
    with pytest.raises(TypeError, match="not an expression"):
        format_expr(ast.Slice(None, None, None))
