"""Parse tree to AST: rebuilds Lark's tree for grammar.lark as `reverie.dsl.ast` nodes.

Consumes the Lark `Tree` produced by `reverie.dsl.parser` (LALR, propagate_positions on);
produces the list of `ast.FunctionDef` of a module, each node with its `Span`. The tree is
walked bottom-up with an explicit stack, so arbitrarily deep trees cannot overflow the
Python stack. The builder also rejects, with tailored `ParseError`s, shapes the grammar
accepts on purpose: chained comparisons, unknown dtypes, bad dimension expressions, calls
on non-names, `i in lo..hi` outside reductions, positional arguments after keywords,
repeated keywords and out-of-range literals. `check_tree` finally caps the AST depth at
MAX_NESTING (chains of binary operations count once), so the recursive passes that follow
(checker, lowering, printer) are safe.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from reverie.dsl import ast
from reverie.dsl.ast import Span
from reverie.dsl.diagnostics import ParseError, did_you_mean, error_at
from reverie.dsl.generated_parser import Meta, Token, Tree

MAX_NESTING = 200
DTYPES = ("f32", "f64", "bf16", "f16", "i32", "i64", "bool", "float")
REDUCTIONS = ("sum", "prod", "max", "min")
DIMENSION_OPS = ("+", "-", "*", "//")
INT64_MAX = 2**63 - 1

STRAY_RANGE = (
    "'name in lo..hi' is only allowed in the indices of sum[...], prod[...], max[...], "
    "min[...] and on the left of 'let name[...] ='"
)


def span_of(meta: Meta) -> Span:
    """The span of a parse-tree node (Lark's end column is exclusive, ours inclusive)."""
    return Span(meta.line, meta.column, meta.end_line, meta.end_column - 1)


def token_span(token: Token) -> Span:
    """The span of one token."""
    return Span(token.line, token.column, token.end_line, token.end_column - 1)


def _error(span: Span, message: str) -> ParseError:
    """A ParseError at `span` (raise the result)."""
    return error_at(span, message, ParseError)


def build_ast(tree: Tree) -> list[ast.FunctionDef]:
    """Rebuild the parse tree bottom-up with an explicit stack (no recursion)."""
    builder = _AstBuilder()
    postorder: list[Tree] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        postorder.append(node)
        pending.extend(child for child in node.children if isinstance(child, Tree))
    built: dict[int, object] = {}
    for node in reversed(postorder):
        children = [built.pop(id(c)) if isinstance(c, Tree) else c for c in node.children]
        built[id(node)] = getattr(builder, node.data)(node.meta, children)
    return built[id(tree)]


def check_tree(functions: list[ast.FunctionDef]) -> None:
    """Reject ASTs deeper than MAX_NESTING and `i in lo..hi` items in plain subscripts.

    Depth counts nesting, not width: the left operand of a binary operation is at its
    parent's depth, so `a + b + ... + z` (a left-leaning chain that every later pass walks
    with `ast.left_spine`, not by recursion) is as shallow as `a + b`.
    """
    stack = [(function, 1) for function in reversed(functions)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise _error(
                node.span,
                f"code is nested too deeply (more than {MAX_NESTING} levels); "
                "split long expressions into several 'let' statements",
            )
        if isinstance(node, ast.Subscript | ast.IndexedAssign):
            for item in node.items:
                if isinstance(item, ast.IndexVar):
                    raise _error(item.span, STRAY_RANGE)
        chained = node.left if isinstance(node, ast.BinOp) else None
        stack.extend((child, depth if child is chained else depth + 1)
                     for child in reversed(_ast_children(node)))


@functools.cache
def _field_names(node_type: type) -> tuple[str, ...]:
    """The dataclass field names of an AST node class."""
    return tuple(field.name for field in dataclasses.fields(node_type))


def _ast_children(node: object) -> list[object]:
    """The AST nodes directly inside `node` (spans and plain values excluded)."""
    children: list[object] = []
    for name in _field_names(type(node)):
        value = getattr(node, name)
        for item in value if isinstance(value, list) else [value]:
            if dataclasses.is_dataclass(item) and not isinstance(item, Span):
                children.append(item)
    return children


def _check_dimension(expr: ast.Expr) -> None:
    """Dimensions may only combine names and integers with + - * //."""
    pending = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.BinOp) and node.op in DIMENSION_OPS:
            pending += [node.left, node.right]
        elif not isinstance(node, ast.Name | ast.IntLit):
            raise _error(
                node.span,
                "a dimension must be a name, an integer, or a combination of them with + - * //",
            )


def _split_arguments(arguments: list) -> tuple[list[ast.Expr], list[ast.Keyword]]:
    """Positional arguments and keywords, checking their order and uniqueness."""
    positional: list[ast.Expr] = []
    keywords: list[ast.Keyword] = []
    for argument in arguments:
        if isinstance(argument, ast.Keyword):
            if any(keyword.name == argument.name for keyword in keywords):
                raise _error(argument.span, f"keyword argument '{argument.name}' is repeated")
            keywords.append(argument)
        elif keywords:
            raise _error(argument.span, "positional argument follows keyword argument")
        else:
            positional.append(argument)
    return positional, keywords


def _reduction_index(item: ast.Expr | ast.Slice | ast.IndexVar) -> ast.IndexVar:
    """An item of `sum[...]` as an IndexVar: `k` or `k in lo..hi`."""
    if isinstance(item, ast.IndexVar):
        return item
    if isinstance(item, ast.Name):
        return ast.IndexVar(item.id, span=item.span)
    raise _error(item.span, "a reduction index must be a name, optionally ranged: 'k in 0..K'")


def _index_reduce(
    callee: ast.Subscript, arguments: list[ast.Expr], keywords: list[ast.Keyword], span: Span
) -> ast.IndexReduce:
    """`sum[k in 0..K, j](body)` as an IndexReduce."""
    op = callee.value.id
    if keywords:
        raise _error(keywords[0].span, f"{op}[...](body) takes no keyword arguments")
    if len(arguments) != 1:
        raise _error(
            span, f"{op}[...](body) takes exactly one body expression, not {len(arguments)}"
        )
    indices = [_reduction_index(item) for item in callee.items]
    return ast.IndexReduce(op, indices, arguments[0], span)


class _AstBuilder:
    """One method per grammar rule or alias: (meta, built children) -> AST value."""

    def start(self, meta: Meta, functions: list) -> list[ast.FunctionDef]:
        """The module: its functions in order."""
        return functions

    def function(self, meta: Meta, children: list) -> ast.FunctionDef:
        """`fn name(params) -> ret { body }`."""
        name, params, ret, body = children
        return ast.FunctionDef(str(name), params or [], ret, body, span_of(meta), token_span(name))

    def params(self, meta: Meta, params: list) -> list[ast.Param]:
        """The parameter list."""
        return params

    def param(self, meta: Meta, children: list) -> ast.Param:
        """`name: type`."""
        name, type_expr = children
        return ast.Param(str(name), type_expr, span_of(meta))

    def tensor_type(self, meta: Meta, children: list) -> ast.TensorTypeExpr:
        """`f32` or `f32[dims]`, checking the dtype and the dimensions."""
        dtype, dims = children
        if dtype not in DTYPES:
            hint = did_you_mean(dtype, DTYPES) or "; element types are " + ", ".join(DTYPES)
            raise _error(token_span(dtype), f"unknown element type '{dtype}'{hint}")
        for dim in dims or []:
            _check_dimension(dim)
        return ast.TensorTypeExpr(str(dtype), dims, span_of(meta))

    def dims(self, meta: Meta, dims: list) -> list[ast.Expr]:
        """The dimension expressions of a tensor type."""
        return dims

    def tuple_type(self, meta: Meta, elements: list) -> ast.TupleTypeExpr:
        """`(f32, f32[N])`."""
        return ast.TupleTypeExpr(elements, span_of(meta))

    def block(self, meta: Meta, statements: list) -> list[ast.Stmt]:
        """`{ statements }`."""
        return statements

    def let(self, meta: Meta, children: list) -> ast.Let:
        """`let name = value;`."""
        name, value = children
        return ast.Let(str(name), value, span_of(meta), token_span(name))

    def let_indexed(self, meta: Meta, children: list) -> ast.LetIndexed:
        """`let name[indices] = value;`."""
        name, indices, value = children
        return ast.LetIndexed(str(name), indices, value, span_of(meta), token_span(name))

    def index_vars(self, meta: Meta, indices: list) -> list[ast.IndexVar]:
        """The indices on the left of `let name[...]`."""
        return indices

    def index_var(self, meta: Meta, children: list) -> ast.IndexVar:
        """`i` or `i in lo..hi` (also used for ranged reduction indices)."""
        name, lo, hi = children
        return ast.IndexVar(str(name), lo, hi, span_of(meta))

    index_range = index_var

    def var_decl(self, meta: Meta, children: list) -> ast.VarDecl:
        """`var name = value;`."""
        name, value = children
        return ast.VarDecl(str(name), value, span_of(meta), token_span(name))

    def assign(self, meta: Meta, children: list) -> ast.Assign:
        """`name = value;`."""
        name, value = children
        return ast.Assign(str(name), value, span_of(meta), token_span(name))

    def destructure(self, meta: Meta, children: list) -> ast.Destructure:
        """`let (a, b) = value;`, `var (a, b) = value;` or `(a, b) = value;`."""
        *keyword, names, value = children
        if len(set(map(str, names))) != len(names):
            repeated = next(n for i, n in enumerate(names) if n in names[:i])
            raise _error(token_span(repeated), f"'{repeated}' appears twice on the left of '='")
        kind = str(keyword[0]) if keyword else "assign"
        return ast.Destructure(kind, [str(n) for n in names], value, span_of(meta),
                               [token_span(n) for n in names])

    def name_tuple(self, meta: Meta, names: list) -> list[Token]:
        """The names of `(a, b)` on the left of `=`."""
        return names

    def assign_indexed(self, meta: Meta, children: list) -> ast.IndexedAssign:
        """`name[items] = value;`."""
        name, items, value = children
        return ast.IndexedAssign(str(name), items, value, span_of(meta), token_span(name))

    def for_loop(self, meta: Meta, children: list) -> ast.For:
        """`for name in lo..hi { body }`."""
        name, lo, hi, body = children
        return ast.For(str(name), lo, hi, body, span_of(meta), token_span(name))

    def if_stmt(self, meta: Meta, children: list) -> ast.If:
        """`if cond { then }`, with `else { ... }` or `else if ...` (a one-statement else)."""
        cond, then, *orelse = children  # the spliced `_else_branch` leaves no placeholder
        if orelse and isinstance(orelse[0], ast.If):
            return ast.If(cond, then, orelse, span_of(meta))
        return ast.If(cond, then, orelse[0] if orelse else [], span_of(meta))

    def while_loop(self, meta: Meta, children: list) -> ast.While:
        """`while cond { body }`."""
        cond, body = children
        return ast.While(cond, body, span_of(meta))

    def return_stmt(self, meta: Meta, children: list) -> ast.Return:
        """`return value;`."""
        return ast.Return(children[0], span_of(meta))

    def binop(self, meta: Meta, children: list) -> ast.BinOp:
        """`left op right` for every binary operator."""
        left, op, right = children
        return ast.BinOp(str(op), left, right, span_of(meta))

    def compare(self, meta: Meta, children: list) -> ast.BinOp:
        """`a < b`; a chain `a < b < c` is an error."""
        if len(children) > 3:
            raise _error(
                token_span(children[3]),
                "comparisons cannot be chained; combine them with 'and', as in 'a < b and b < c'",
            )
        return self.binop(meta, children)

    def unary_op(self, meta: Meta, children: list) -> ast.Expr:
        """`-x` or `not x`; unary plus is dropped."""
        op, operand = children
        if op == "+":
            return operand
        return ast.UnaryOp(str(op), operand, span_of(meta))

    def call(self, meta: Meta, children: list) -> ast.Call | ast.IndexReduce:
        """`f(args)`, or `sum[k](body)` as an IndexReduce; nothing else may be called."""
        callee, arguments = children
        positional, keywords = _split_arguments(arguments or [])
        if isinstance(callee, ast.Name):
            return ast.Call(callee.id, positional, keywords, span_of(meta), callee.span)
        if isinstance(callee, ast.Subscript) and isinstance(callee.value, ast.Name):
            if callee.value.id in REDUCTIONS:
                return _index_reduce(callee, positional, keywords, span_of(meta))
            raise _error(
                callee.span,
                f"'{callee.value.id}[...]' cannot be called: only sum, prod, max and min "
                "take index brackets before their body, as in 'sum[k](x[k])'",
            )
        raise _error(callee.span, "only a function name can be called, as in 'exp(x)'")

    def arguments(self, meta: Meta, arguments: list) -> list:
        """The arguments of a call, positional and keyword mixed."""
        return arguments

    def keyword(self, meta: Meta, children: list) -> ast.Keyword:
        """`name=value` in a call."""
        name, value = children
        return ast.Keyword(str(name), value, span_of(meta))

    def subscript(self, meta: Meta, children: list) -> ast.Subscript:
        """`value[items]`."""
        value, items = children
        return ast.Subscript(value, items, span_of(meta))

    def subscript_items(self, meta: Meta, items: list) -> list:
        """The items between the brackets of a subscript."""
        return items

    def slice(self, meta: Meta, children: list) -> ast.Slice:
        """`lo:hi:step`, missing parts None."""
        lo, hi, step = children
        return ast.Slice(lo, hi, step, span_of(meta))

    def attribute(self, meta: Meta, children: list) -> ast.Attribute:
        """`value.name`."""
        value, name = children
        return ast.Attribute(value, str(name), span_of(meta))

    def name(self, meta: Meta, children: list) -> ast.Name:
        """An identifier."""
        return ast.Name(str(children[0]), span_of(meta))

    def int_lit(self, meta: Meta, children: list) -> ast.IntLit:
        """An integer literal, which must fit in 64 bits."""
        digits = str(children[0]).lstrip("0") or "0"
        if len(digits) > 19 or int(digits) > INT64_MAX:
            raise _error(span_of(meta), "integer literal does not fit in 64 bits")
        return ast.IntLit(int(digits), span_of(meta))

    def float_lit(self, meta: Meta, children: list) -> ast.FloatLit:
        """A float literal, which must be finite."""
        value = float(children[0])
        if math.isinf(value):
            raise _error(span_of(meta), "float literal is too large")
        return ast.FloatLit(value, span_of(meta))

    def true_lit(self, meta: Meta, children: list) -> ast.BoolLit:
        """`true`."""
        return ast.BoolLit(True, span_of(meta))

    def false_lit(self, meta: Meta, children: list) -> ast.BoolLit:
        """`false`."""
        return ast.BoolLit(False, span_of(meta))

    def tuple(self, meta: Meta, elements: list) -> ast.TupleExpr:
        """`()`, `(a,)` or `(a, b)`."""
        return ast.TupleExpr(elements, span_of(meta))
