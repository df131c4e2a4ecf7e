"""AST to text: the `ast` stage of `module.ir("ast")` and `reverie emit --stage ast`.

Consumes a `reverie.dsl.ast.Module` (or one expression / type); produces deterministic,
indented text. Function headers and statements read like the source, one statement per
line, with `for` bodies indented by two spaces. Expressions are written as
s-expressions so the tree structure (and therefore precedence) is explicit:

    fn loss(x: f32[N, D], w: f32[D], y: f32[N]) -> f32
      let e = (- (@ x w) y)
      return (call mean (* e e))

Expression forms: `(op a b)` for binary and `(- a)` / `(not a)` for unary operators,
`(call f a b axis=1)`, `(sum[k in 0..K, j] body)` for index reductions,
`(index x i (slice 1 _ _))` for subscripts (`_` marks a missing slice part),
`(attr x T)`, `(tuple a b)`, and plain names and literals. Spans are not printed.
Recursion depth follows the AST depth, which the parser caps (ast_builder.MAX_NESTING);
chains of binary operations are walked in a loop (`ast.left_spine`).
"""

from __future__ import annotations

from reverie.dsl import ast

INDENT = "  "


def format_ast(module: ast.Module) -> str:
    """The whole module as text, functions separated by a blank line."""
    return "\n".join(format_function(function) for function in module.functions)


def format_function(function: ast.FunctionDef) -> str:
    """`fn name(params) -> type` followed by the indented body, ending with a newline."""
    params = ", ".join(f"{param.name}: {format_type(param.type)}" for param in function.params)
    header = f"fn {function.name}({params})"
    if function.ret is not None:
        header += f" -> {format_type(function.ret)}"
    lines = [header]
    _format_block(function.body, 1, lines)
    return "\n".join(lines) + "\n"


def format_type(type_expr: ast.TypeExpr) -> str:
    """`f32`, `f32[N, (+ D 1)]` or `(f32, f32[N])`."""
    if isinstance(type_expr, ast.TupleTypeExpr):
        elements = [format_type(element) for element in type_expr.elements]
        trailing = "," if len(elements) == 1 else ""
        return "(" + ", ".join(elements) + trailing + ")"
    if type_expr.dims is None:
        return type_expr.dtype
    return f"{type_expr.dtype}[{', '.join(format_expr(dim) for dim in type_expr.dims)}]"


def format_expr(expr: ast.Expr) -> str:
    """One expression as an s-expression."""
    match expr:
        case ast.Name(id=name):
            return name
        case ast.BoolLit(value=value):
            return "true" if value else "false"
        case ast.IntLit(value=value) | ast.FloatLit(value=value):
            return repr(value)
        case ast.BinOp():
            spine = ast.left_spine(expr)
            opening = "".join(f"({link.op} " for link in spine)
            closing = "".join(f" {format_expr(link.right)})" for link in reversed(spine))
            return opening + format_expr(spine[-1].left) + closing
        case ast.UnaryOp(op=op, operand=operand):
            return f"({op} {format_expr(operand)})"
        case ast.Call(func=func, args=args, keywords=keywords):
            parts = [format_expr(arg) for arg in args]
            parts += [f"{keyword.name}={format_expr(keyword.value)}" for keyword in keywords]
            return _sexpr(f"call {func}", parts)
        case ast.IndexReduce(op=op, indices=indices, body=body):
            return f"({op}[{_format_index_vars(indices)}] {format_expr(body)})"
        case ast.Subscript(value=value, items=items):
            return _sexpr("index", [format_expr(value)] + [_format_item(item) for item in items])
        case ast.Attribute(value=value, attr=attr):
            return f"(attr {format_expr(value)} {attr})"
        case ast.TupleExpr(elements=elements):
            return _sexpr("tuple", [format_expr(element) for element in elements])
        case _:
            raise TypeError(f"not an expression node: {type(expr).__name__}")


def _sexpr(head: str, parts: list[str]) -> str:
    """`(head part part ...)`."""
    return "(" + " ".join([head, *parts]) + ")"


def _format_item(item: ast.Expr | ast.Slice) -> str:
    """A subscript item: an expression or `(slice lo hi step)`."""
    if isinstance(item, ast.Slice):
        parts = (item.lo, item.hi, item.step)
        return _sexpr("slice", ["_" if part is None else format_expr(part) for part in parts])
    return format_expr(item)


def _format_index_vars(indices: list[ast.IndexVar]) -> str:
    """`i, k in 0..K` as written on the left of `let y[...]` or in `sum[...]`."""
    parts = []
    for index in indices:
        if index.lo is None or index.hi is None:
            parts.append(index.name)
        else:
            parts.append(f"{index.name} in {format_expr(index.lo)}..{format_expr(index.hi)}")
    return ", ".join(parts)


def _format_block(statements: list[ast.Stmt], depth: int, lines: list[str]) -> None:
    """Append the statements, indented `depth` levels, to `lines`."""
    for stmt in statements:
        _format_statement(stmt, depth, lines)


def _format_statement(stmt: ast.Stmt, depth: int, lines: list[str]) -> None:
    """Append one statement (and the body of a `for`, `if` or `while`) to `lines`."""
    indent = INDENT * depth
    match stmt:
        case ast.Let(name=name, value=value):
            lines.append(f"{indent}let {name} = {format_expr(value)}")
        case ast.LetIndexed(name=name, indices=indices, value=value):
            target = f"{name}[{_format_index_vars(indices)}]"
            lines.append(f"{indent}let {target} = {format_expr(value)}")
        case ast.VarDecl(name=name, value=value):
            lines.append(f"{indent}var {name} = {format_expr(value)}")
        case ast.Assign(name=name, value=value):
            lines.append(f"{indent}{name} = {format_expr(value)}")
        case ast.Destructure(kind=kind, names=names, value=value):
            keyword = "" if kind == "assign" else f"{kind} "
            lines.append(f"{indent}{keyword}({', '.join(names)}) = {format_expr(value)}")
        case ast.IndexedAssign(name=name, items=items, value=value):
            target = f"{name}[{', '.join(_format_item(item) for item in items)}]"
            lines.append(f"{indent}{target} = {format_expr(value)}")
        case ast.For(var=var, lo=lo, hi=hi, body=body):
            lines.append(f"{indent}for {var} in {format_expr(lo)}..{format_expr(hi)}")
            _format_block(body, depth + 1, lines)
        case ast.If(cond=cond, then=then, orelse=orelse):
            lines.append(f"{indent}if {format_expr(cond)}")
            _format_block(then, depth + 1, lines)
            if orelse:
                lines.append(f"{indent}else")
                _format_block(orelse, depth + 1, lines)
        case ast.While(cond=cond, body=body):
            lines.append(f"{indent}while {format_expr(cond)}")
            _format_block(body, depth + 1, lines)
        case ast.Return(value=value):
            lines.append(f"{indent}return {format_expr(value)}")
        case _:
            raise TypeError(f"not a statement node: {type(stmt).__name__}")
