"""The Reverie abstract syntax tree.

Consumes nothing; produced by `reverie.dsl.parser.parse` and consumed by the checker and by
`reverie.compiler.lower`. Every node is a frozen-ish dataclass carrying the `Span` of the
source text it came from, so any later stage can point a diagnostic at the user's code.

Dimension expressions in types (`f32[N + 1, 2 * K]`) reuse the expression nodes (`Name`,
`IntLit`, `BinOp`), as do loop bounds and index ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from reverie.dsl.span import NO_SPAN, Span

# ---------------------------------------------------------------- types


@dataclass
class TensorTypeExpr:
    """`f32` (scalar, dims is None) or `f32[N, D]`; dtype is one of f32 f64 i32 i64 bool float."""

    dtype: str
    dims: list[Expr] | None
    span: Span = NO_SPAN


@dataclass
class TupleTypeExpr:
    """`(f32, f32[N])`: only allowed as a return type."""

    elements: list[TensorTypeExpr]
    span: Span = NO_SPAN


TypeExpr = TensorTypeExpr | TupleTypeExpr


# ---------------------------------------------------------------- expressions


@dataclass
class Name:
    """A reference to a local value, a parameter, a dimension or an index variable."""

    id: str
    span: Span = NO_SPAN


@dataclass
class IntLit:
    value: int
    span: Span = NO_SPAN


@dataclass
class FloatLit:
    value: float
    span: Span = NO_SPAN


@dataclass
class BoolLit:
    value: bool
    span: Span = NO_SPAN


@dataclass
class BinOp:
    """`left op right`; op is one of + - * / // % ** @ < <= > >= == != and or."""

    op: str
    left: Expr
    right: Expr
    span: Span = NO_SPAN


@dataclass
class UnaryOp:
    """`-x` (op "-") or `not x` (op "not")."""

    op: str
    operand: Expr
    span: Span = NO_SPAN


@dataclass
class Keyword:
    """`axis=1` inside a call's argument list."""

    name: str
    value: Expr
    span: Span = NO_SPAN


@dataclass
class Call:
    """`name(args, kw=value)`: a built-in, a cast such as `f64(x)`, or a user function."""

    func: str
    args: list[Expr]
    keywords: list[Keyword] = field(default_factory=list)
    span: Span = NO_SPAN
    func_span: Span = NO_SPAN


@dataclass
class IndexVar:
    """An index variable `i`, optionally with an explicit range `i in lo..hi` (hi exclusive)."""

    name: str
    lo: Expr | None = None
    hi: Expr | None = None
    span: Span = NO_SPAN


@dataclass
class IndexReduce:
    """`sum[k](body)` / `prod[...]` / `max[...]` / `min[...]` in index notation (docs/language.md
    §10)."""

    op: str
    indices: list[IndexVar]
    body: Expr
    span: Span = NO_SPAN


@dataclass
class Slice:
    """`lo:hi:step` inside a subscript; a missing part is None."""

    lo: Expr | None
    hi: Expr | None
    step: Expr | None
    span: Span = NO_SPAN


@dataclass
class Subscript:
    """`value[items]`: slices, integer scalar subscripts, or (in index notation) index exprs."""

    value: Expr
    items: list[Expr | Slice]
    span: Span = NO_SPAN


@dataclass
class Attribute:
    """`value.attr`; the language has one attribute, `.T`."""

    value: Expr
    attr: str
    span: Span = NO_SPAN


@dataclass
class TupleExpr:
    """`(a, b)`: tuple returns, axis tuples, shapes and permutations."""

    elements: list[Expr]
    span: Span = NO_SPAN


Expr = (
    Name
    | IntLit
    | FloatLit
    | BoolLit
    | BinOp
    | UnaryOp
    | Call
    | IndexReduce
    | Subscript
    | Attribute
    | TupleExpr
)


# ---------------------------------------------------------------- statements


@dataclass
class Let:
    """`let name = value;`"""

    name: str
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class LetIndexed:
    """`let name[i, j in 0..N] = value;` (index notation, docs/language.md §10)."""

    name: str
    indices: list[IndexVar]
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class VarDecl:
    """`var name = value;` declares mutable loop state."""

    name: str
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class Assign:
    """`name = value;` reassigns a `var`."""

    name: str
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class Destructure:
    """`let (a, b) = value;` (kind "let"), `var (a, b) = ...;` ("var") or `(a, b) = ...;`
    ("assign", reassigning `var`s): one name per element of a tuple value."""

    kind: str
    names: list[str]
    value: Expr
    span: Span = NO_SPAN
    name_spans: list[Span] = field(default_factory=list)


@dataclass
class IndexedAssign:
    """`name[items] = value;`: a new value for `var` `name` with the subscripted part
    replaced (items as in a read: integer subscripts and slices)."""

    name: str
    items: list[Expr | Slice]
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class For:
    """`for var in lo..hi { body }` (hi exclusive)."""

    var: str
    lo: Expr
    hi: Expr
    body: list[Stmt]
    span: Span = NO_SPAN
    var_span: Span = NO_SPAN


@dataclass
class If:
    """`if cond { then } else { orelse }` (docs/language.md §11.1); `orelse` is empty without
    `else`."""

    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt]
    span: Span = NO_SPAN


@dataclass
class While:
    """`while cond { body }`: `cond` is evaluated before every iteration (docs/language.md
    §11.1)."""

    cond: Expr
    body: list[Stmt]
    span: Span = NO_SPAN


@dataclass
class Return:
    """`return value;` where value may be a TupleExpr for tuple returns."""

    value: Expr
    span: Span = NO_SPAN


Stmt = (Let | LetIndexed | VarDecl | Assign | Destructure | IndexedAssign | For | If | While
        | Return)


# ---------------------------------------------------------------- top level


@dataclass
class Param:
    name: str
    type: TensorTypeExpr
    span: Span = NO_SPAN


@dataclass
class FunctionDef:
    name: str
    params: list[Param]
    ret: TypeExpr | None
    body: list[Stmt]
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass
class Module:
    functions: list[FunctionDef]
    source: str = ""
    filename: str = "<source>"


# ---------------------------------------------------------------- traversal


def iter_children(node: object):
    """The AST nodes directly inside `node`, in field order."""
    for name in getattr(node, "__dataclass_fields__", {}):
        value = getattr(node, name)
        if isinstance(value, list):
            yield from (v for v in value if hasattr(v, "__dataclass_fields__"))
        elif hasattr(value, "__dataclass_fields__") and not isinstance(value, Span):
            yield value


def walk(node: object):
    """`node` and every node below it, depth first, without recursion."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(iter_children(current))))


def left_spine(node: BinOp, descend: Callable[[BinOp], bool] = lambda _: True) -> list[BinOp]:
    """`node` and the binary operations down its left operands, outermost first.

    `a + b - c` parses as `(a + b) - c`, so a long sum is a deep tree leaning left; passes
    that follow this spine in a loop (and recurse only into right operands) stay within the
    parser's nesting limit however many terms there are. `descend(left)` may stop the walk
    at a left operand that needs handling of its own.
    """
    spine = [node]
    while isinstance(spine[-1].left, BinOp) and descend(spine[-1].left):
        spine.append(spine[-1].left)
    return spine
