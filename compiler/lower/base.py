"""`LowererBase`: the state of one function's lowering, and the questions asked of it.

A `Lowerer` (see `lowerer.py`) is assembled from parts that each extend this class. It
holds the *environment* (the names in scope, the dimensions, the index variables of the
index-notation construct being lowered) and the *current block builder*, into which
every part emits ops. A part that lowers a nested block (a loop body, a `generic` body)
switches the builder with `building`, which restores it on the way out.

The one method every part needs and none defines is `lower_expr`, the expression
dispatch; it is declared here and defined by `Lowerer`, the top of the package.

Statements are lowered under `recovering`: a statement that fails records its diagnostics
and binds the names it declares to `FailedBinding`, and lowering goes on, so a function
reports every independent mistake (`raise_collected` raises them together).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from reverie.compiler.ir.dims import Dim
from reverie.compiler.lower.builder import BlockBuilder
from reverie.compiler.lower.dim_expressions import DIMENSION_OPS, dim_chain, dim_of, static_dim
from reverie.compiler.lower.values import (
    ExprTuple,
    ExprValue,
    FailedBinding,
    Suppressed,
    VarBinding,
)
from reverie.dsl import ast
from reverie.dsl.diagnostics import Diagnostic, TypeCheckError, error_at

Range = tuple[Dim, Dim]


@dataclass
class Specialisation:
    """What the lowerers of one specialisation share: the module's functions (callees are
    inlined), the size constraints recorded so far (checked at the call boundary), and
    the results of the calls inlined so far (see `Lowerer.lower_user_call`)."""

    functions: dict[str, ast.FunctionDef]
    max_iterations: int  # the iteration limit of every `while`
    constraints: list[tuple[Dim, str]] = field(default_factory=list)
    inlined: dict[tuple, list[ExprValue]] = field(default_factory=dict)


@dataclass
class IndexContext:
    """State shared by every generic body of one index-notation construct."""

    order: list[str]
    ranges: dict[str, Range]
    statement: BlockBuilder
    body: BlockBuilder
    hoisted: dict[int, ExprValue] = field(default_factory=dict)
    mentioning: dict[int, bool] = field(default_factory=dict)  # see `mentions_index`
    bounded: dict[str, ast.IndexVar] = field(default_factory=dict)  # triangular indices


Binding = ExprValue | ExprTuple | VarBinding | FailedBinding


class LowererBase(ABC):
    """Names visible while lowering one (possibly inlined) function body, and the block
    being filled."""

    def __init__(self, fn: ast.FunctionDef, specialisation: Specialisation, default_float: str,
                 dim_map: dict[str, Dim], builder: BlockBuilder) -> None:
        self.fn = fn
        self.specialisation = specialisation
        self.default_float = default_float
        self.dim_map = dim_map
        self.builder = builder
        self.scopes: list[dict[str, Binding]] = [{}]
        self.index_vars: dict[str, ExprValue] = {}
        self.index_ctx: IndexContext | None = None  # while lowering index notation
        self.diagnostics: list[Diagnostic] = []  # of the statements that failed so far

    @abstractmethod
    def lower_expr(self, node: ast.Expr) -> ExprValue | ExprTuple:
        """Lower any expression into the current block (defined by `Lowerer`)."""

    def tensor(self, node: ast.Expr) -> ExprValue:
        """Lower an expression that must be a single tensor (not a tuple)."""
        val = self.lower_expr(node)
        if isinstance(val, ExprTuple):
            if isinstance(node, ast.Name):
                raise error_at(node.span, f"'{node.id}' is a tuple; take an element with "
                                          f"{node.id}[0]")
            raise error_at(node.span, "a tuple cannot be used as a tensor here")
        return val

    @contextmanager
    def recovering(self, declared: list[tuple[str, ast.Span]]) -> Iterator[None]:
        """Lower one statement; if it fails, record its diagnostics and bind the names it
        `declared` (those it did not get to bind) to `FailedBinding`, so lowering goes on
        with the next statement and later uses of those names report nothing."""
        try:
            yield
        except (TypeCheckError, Suppressed) as error:
            if isinstance(error, TypeCheckError):
                self.diagnostics.extend(error.diagnostics)
            for name, span in declared:
                if self.lookup(name) is None:
                    self.scopes[-1][name] = FailedBinding(span)

    def raise_collected(self) -> None:
        """Raise every diagnostic recorded by `recovering`, if there is any."""
        if self.diagnostics:
            raise TypeCheckError(self.diagnostics)

    @contextmanager
    def building(self, builder: BlockBuilder) -> Iterator[None]:
        """Emit into `builder` for the duration of a `with` block."""
        saved, self.builder = self.builder, builder
        try:
            yield
        finally:
            self.builder = saved

    # ------------------------------------------------------------ names

    def lookup(self, name: str) -> Binding | None:
        """The binding of `name` in the innermost scope that has it, else None."""
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def define(self, name: str, binding: Binding, span: ast.Span) -> None:
        """Bind `name` in the innermost scope; rebinding a visible name is an error."""
        if self.lookup(name) is not None or name in self.dim_map:
            raise error_at(span, f"'{name}' is already defined; use 'var' for a value that "
                                 "changes, or choose another name")
        self.scopes[-1][name] = binding

    def define_dim_scalar(self, name: str, dim: Dim, span: ast.Span) -> None:
        """Bind parameter `name` as the value of dimension `dim` (a `dim` op), weak like
        every dimension value: `0.5 * p` is a float."""
        if self.lookup(name) is not None:
            raise error_at(span, f"'{name}' is already defined; choose another name")
        self.dim_map[name] = dim
        self.scopes[-1][name] = ExprValue(self.builder.op_at(span, "dim", [], {"dim": dim}),
                                          weak=True)

    def visible_names(self) -> list[str]:
        """Every name a user could have meant (for did-you-mean)."""
        names = [n for scope in self.scopes for n in scope] + list(self.dim_map)
        return names + list(self.index_vars) + list(self.specialisation.functions)

    # ------------------------------------------------------------ dimensions

    def try_static_dim(self, node: ast.Expr) -> Dim | None:
        """The Dim of `node` if it is built only from integers and dimension names, else None."""
        match node:
            case ast.IntLit():
                return static_dim(node, self.dim_map)
            case ast.Name(id=name):
                if name not in self.dim_map or name in self.index_vars:
                    return None
                binding = self.lookup(name)
                if binding is None or (isinstance(binding, ExprValue)
                                       and dim_of(binding) is not None):
                    return self.dim_map[name]
                return None
            case ast.UnaryOp(op="-"):
                inner = self.try_static_dim(node.operand)
                return None if inner is None else -inner
            case ast.BinOp(op="+" | "-" | "*" | "//"):
                spine = ast.left_spine(node, lambda left: left.op in DIMENSION_OPS)
                first = self.try_static_dim(spine[-1].left)
                return None if first is None else dim_chain(spine, first, self.try_static_dim)
        return None

    def require_nonnegative(self, size: Dim, span: ast.Span, reason: str) -> None:
        """Reject a provably negative size now; record a symbolic one for the call boundary."""
        if size.is_const:
            if size.value < 0:
                raise error_at(span, reason)
        else:
            self.specialisation.constraints.append((size, reason))
