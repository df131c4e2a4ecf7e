"""Lowering of statements (`let`, `var`, assignment, `for`, `if`, `while`, `return`) of one
function body.

A `for` loop becomes a `for` op whose region takes the loop index, the carried state (the
`var`s assigned in the body) and, as captured parameters, every outer value the body uses.
`let (a, b) = ...` binds the elements of a tuple; `h[t] = e` replaces `var` h by its update
(`updates.py`). `if` and `while` (docs/language.md §11.1) become `if` and `while` ops the
same way as `for`: the state is the `var`s declared outside that a branch or the body
assigns, and every region of the op takes the states and then the values that any of its
regions captured. The values a body returns are checked against the function's declared result
types.

A statement that fails is reported and skipped (`LowererBase.recovering`), so one call
reports every independent mistake of a body, each statement's first (docs/language.md §13.1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from reverie.compiler.ir.core import Block, Value
from reverie.compiler.ir.scope import share_captures
from reverie.compiler.ir.types import scalar
from reverie.compiler.lower.builder import BlockBuilder
from reverie.compiler.lower.dim_expressions import return_types, type_of
from reverie.compiler.lower.index_notation import IndexLowering
from reverie.compiler.lower.updates import UpdateLowering
from reverie.compiler.lower.values import (
    ExprTuple,
    ExprValue,
    FailedBinding,
    Suppressed,
    VarBinding,
)
from reverie.dsl import ast
from reverie.dsl.diagnostics import TypeCheckError, diagnostic_at, did_you_mean, error_at

RETURN_IN_LOOP = ("'return' is only allowed at the end of a function, not inside a loop; "
                  "assign the result to a 'var' declared before the loop and return it after")
RETURN_IN_IF = ("'return' is only allowed at the end of a function, not inside the 'if' of "
                "line {line}; assign the result to a 'var' declared before the 'if' and return "
                "it after")


def _return_inside(stmt: ast.Return, owner: ast.For | ast.If | ast.While) -> TypeCheckError:
    """The error of a `return` in the body of `owner`: at the `return`, and for an `if`
    a note whose caret is on the `if` keyword, naming its line."""
    if not isinstance(owner, ast.If):
        return error_at(stmt.span, RETURN_IN_LOOP)
    start = owner.span
    keyword = ast.Span(start.line, start.column, start.line, start.column + 1)
    return TypeCheckError([diagnostic_at(stmt.span, RETURN_IN_IF.format(line=start.line)),
                           replace(diagnostic_at(keyword, "the 'if' that holds the 'return'"),
                                   severity="note")])


def _assigned_names(stmt: ast.Stmt) -> list[str]:
    """The `var`s statement `stmt` itself assigns (not those of a nested loop)."""
    match stmt:
        case ast.Assign() | ast.IndexedAssign():
            return [stmt.name]
        case ast.Destructure(kind="assign"):
            return stmt.names
    return []


def _assigned(body: list[ast.Stmt]) -> list[str]:
    """Names assigned anywhere in `body`, in first-assignment order."""
    names: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            names += [n for n in _assigned_names(node) if n not in names]
    return names


def _declared(stmt: ast.Stmt) -> list[tuple[str, ast.Span]]:
    """The names statement `stmt` binds, with their spans."""
    match stmt:
        case ast.Let() | ast.LetIndexed() | ast.VarDecl():
            return [(stmt.name, stmt.name_span)]
        case ast.Destructure(kind="let" | "var"):
            return list(zip(stmt.names, stmt.name_spans, strict=True))
    return []


class StatementLowering(IndexLowering, UpdateLowering):
    """Statements, loops, and the checking of returned values."""

    def lower_body(self) -> list[ExprValue]:
        """The function's body: statements, then exactly one final `return`. Raises every
        failed statement's diagnostics together."""
        body = self.fn.body
        results: list[ExprValue] = []
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return) and i != len(body) - 1:
                self.diagnostics.append(diagnostic_at(body[i + 1].span,
                                                      "unreachable code after 'return'"))
                break
            with self.recovering(_declared(stmt)):
                if isinstance(stmt, ast.Return):
                    value = self.lower_expr(stmt.value)
                    results = value.elements if isinstance(value, ExprTuple) else [value]
                else:
                    self.lower_stmt(stmt)
        if not any(isinstance(stmt, ast.Return) for stmt in body):
            self.diagnostics.append(diagnostic_at(
                self.fn.name_span, f"function '{self.fn.name}' must end with a 'return' statement"))
        self.raise_collected()
        return results

    def lower_block(self, body: list[ast.Stmt], owner: ast.For | ast.If | ast.While) -> None:
        """The statements of a loop body or `if` branch (of `owner`), in a scope of their
        own."""
        self.scopes.append({})
        try:
            for stmt in body:
                with self.recovering(_declared(stmt)):
                    if isinstance(stmt, ast.Return):
                        raise _return_inside(stmt, owner)
                    self.lower_stmt(stmt)
        finally:
            self.scopes.pop()

    def lower_stmt(self, stmt: ast.Stmt) -> None:
        """One statement other than `return`."""
        match stmt:
            case ast.Let():
                value = self.lower_expr(stmt.value)
                if (isinstance(value, ExprValue) and value.value.name is None
                        and value.value.op is not None):
                    value.value.name = stmt.name
                self.define(stmt.name, value, stmt.name_span)
            case ast.LetIndexed():
                value = self.lower_let_indexed(stmt)
                value.value.name = stmt.name
                self.define(stmt.name, value, stmt.name_span)
            case ast.VarDecl():
                self._declare_var(stmt.name, self.tensor(stmt.value), stmt.span, stmt.name_span)
            case ast.Assign():
                slot = self._var_slot(stmt.name, stmt.name_span)
                self._assign(slot, stmt.name, self.tensor(stmt.value), stmt.value.span)
            case ast.Destructure():
                self._destructure(stmt)
            case ast.IndexedAssign():
                self._assign_indexed(stmt)
            case ast.For():
                self._lower_for(stmt)
            case ast.If():
                self._lower_if(stmt)
            case ast.While():
                self._lower_while(stmt)
            case _:
                raise error_at(stmt.span, "this statement cannot be used here")

    def _declare_var(self, name: str, value: ExprValue, span: ast.Span,
                     name_span: ast.Span) -> None:
        """`var name = value;`: a `var` of the value's type (a weak value's default)."""
        value = self.convert_weak(value, None, span)
        self.define(name, VarBinding(value, span), name_span)

    def _destructure(self, stmt: ast.Destructure) -> None:
        """`let (a, b) = value;`, `var (a, b) = value;` or `(a, b) = value;`."""
        value = self.lower_expr(stmt.value)
        count = len(stmt.names)
        if not isinstance(value, ExprTuple):
            raise error_at(stmt.value.span, f"cannot take {value.type} apart into {count} "
                                            "names: it is a tensor, not a tuple")
        if len(value.elements) != count:
            raise error_at(stmt.value.span, f"cannot take a tuple of {len(value.elements)} "
                                            f"apart into {count} names")
        for name, span, element in zip(stmt.names, stmt.name_spans, value.elements, strict=True):
            if stmt.kind == "let":
                self.define(name, element, span)
            elif stmt.kind == "var":
                self._declare_var(name, element, stmt.span, span)
            else:
                self._assign(self._var_slot(name, span), name, element, stmt.value.span)

    def _var_slot(self, name: str, span: ast.Span) -> VarBinding:
        """The binding of `var` `name`, which a statement is about to change."""
        slot = self.lookup(name)
        if isinstance(slot, FailedBinding):
            raise Suppressed
        if not isinstance(slot, VarBinding):
            if slot is None:
                raise error_at(span, f"unknown name '{name}'"
                                     + did_you_mean(name, self.visible_names()))
            raise error_at(span, f"cannot assign to '{name}': it was declared "
                                 "with 'let'; declare it with 'var' to change it")
        return slot

    def _assign(self, slot: VarBinding, name: str, value: ExprValue,
                value_span: ast.Span) -> None:
        """`name = value;` for `var` `name` (its `slot`): the new value must keep its type."""
        value = self.convert_weak(value, slot.current.type.dtype, value_span)
        if value.type != slot.current.type:
            raise error_at(value_span, f"'{name}' has type {slot.current.type} but "
                                       f"the new value has type {value.type}")
        slot.current = value

    def _assign_indexed(self, stmt: ast.IndexedAssign) -> None:
        """`h[items] = value;` for a `var` h: h becomes its functional update."""
        slot = self._var_slot(stmt.name, stmt.name_span)
        if slot.current.type.rank == 0:
            raise error_at(stmt.name_span, f"'{stmt.name}' is a scalar ({slot.current.type}); "
                                           f"assign it whole: {stmt.name} = ...;")
        value = self.tensor(stmt.value)
        slot.current = self.updated(slot.current, stmt.items, value, stmt.span, stmt.value.span,
                                    stmt.name)

    def _lower_for(self, stmt: ast.For) -> None:
        """`for t in lo..hi { ... }` as a `for` op carrying the `var`s its body assigns."""
        lo, hi = self._loop_bound(stmt.lo), self._loop_bound(stmt.hi)
        slots = [(name, self.lookup(name)) for name in _assigned(stmt.body)]
        carried = [(name, slot) for name, slot in slots if isinstance(slot, VarBinding)]
        index = Value(scalar("i64"), name=stmt.var)
        block = Block(params=[index] + [Value(s.current.type, name=n) for n, s in carried])
        body = BlockBuilder(block, parent=self.builder)
        inits = [slot.current for _, slot in carried]
        for (_, slot), param in zip(carried, block.params[1:], strict=True):
            slot.current = ExprValue(param)
        self.scopes.append({})
        self.define(stmt.var, ExprValue(index, weak=True), stmt.var_span)
        try:
            with self.building(body):
                self.lower_block(stmt.body, stmt)
        finally:
            self.scopes.pop()
        block.results = [body.use(slot.current.value) for _, slot in carried]
        operands = [lo.value, hi.value] + [v.value for v in inits] + [o for o, _ in body.captures]
        results = self.builder.emit_at(stmt.span, "for", operands, {"carried": len(carried)},
                                       [block])
        for (name, slot), result in zip(carried, results, strict=True):
            result.name = name
            slot.current = ExprValue(result)

    # ------------------------------------------------------------ if and while

    def _lower_if(self, stmt: ast.If) -> None:
        """`if c { ... } else { ... }` as an `if` op carrying the `var`s either branch assigns."""
        cond = self._condition(stmt.cond, "an 'if' condition")
        carried = self._carried(stmt.then + stmt.orelse)
        regions = [self._state_region(carried, lambda body=body: self._yield_states(
            body, carried, stmt)) for body in (stmt.then, stmt.orelse)]
        self._emit_control(stmt.span, "if", [cond], carried, regions, {})  # no attributes

    def _lower_while(self, stmt: ast.While) -> None:
        """`while c { ... }` as a `while` op: a condition region and a body region."""
        carried = self._carried(stmt.body)
        before = self._state_region(carried, lambda: [
            self._condition(stmt.cond, "a 'while' condition")])
        body = self._state_region(carried, lambda: self._yield_states(stmt.body, carried, stmt))
        self._emit_control(stmt.span, "while", [], carried, [before, body],
                           {"carried": len(carried), "limit": self.specialisation.max_iterations})

    def _condition(self, node: ast.Expr, what: str) -> Value:
        """A scalar bool condition (`where` is the elementwise choice)."""
        value = self.tensor(node)
        if value.type != scalar("bool"):
            raise error_at(node.span, f"{what} must be a scalar bool, got {value.type}; for an "
                                      "elementwise choice use where(cond, a, b)")
        return value.value

    def _carried(self, body: list[ast.Stmt]) -> list[tuple[str, VarBinding]]:
        """The `var`s declared outside `body` that it assigns: the state of its op."""
        slots = [(name, self.lookup(name)) for name in _assigned(body)]
        return [(name, slot) for name, slot in slots if isinstance(slot, VarBinding)]

    def _yield_states(self, body: list[ast.Stmt], carried: list[tuple[str, VarBinding]],
                      owner: ast.If | ast.While) -> list[Value]:
        """Lower `body` (of `owner`); the carried states' values at its end."""
        self.lower_block(body, owner)
        return [slot.current.value for _, slot in carried]

    def _state_region(self, carried: list[tuple[str, VarBinding]],
                      lower: Callable[[], list[Value]]) -> tuple[Block, BlockBuilder]:
        """A region whose parameters start with the carried states, filled by `lower` (which
        returns the region's results); the `var`s keep their values from before it."""
        inits = [slot.current for _, slot in carried]
        block = Block(params=[Value(slot.current.type, name=name) for name, slot in carried])
        builder = BlockBuilder(block, parent=self.builder)
        for (_, slot), param in zip(carried, block.params, strict=True):
            slot.current = ExprValue(param)
        try:
            with self.building(builder):
                block.results = [builder.use(v) for v in lower()]
        finally:
            for (_, slot), init in zip(carried, inits, strict=True):
                slot.current = init
        return block, builder

    def _emit_control(self, span: ast.Span, name: str, leading: list[Value],
                      carried: list[tuple[str, VarBinding]],
                      regions: list[tuple[Block, BlockBuilder]], attrs: dict) -> None:
        """Emit `if`/`while` with the states and then the values any region captured as
        operands (`share_captures`); the `var`s are rebound to the results."""
        invariants = share_captures(regions, len(carried))
        inits = [slot.current.value for _, slot in carried]
        results = self.builder.emit_at(span, name, leading + inits + invariants, attrs,
                                       [block for block, _ in regions])
        for (var, slot), result in zip(carried, results, strict=True):
            result.name = var
            slot.current = ExprValue(result)

    def _loop_bound(self, node: ast.Expr) -> ExprValue:
        """A loop bound as an i64; one built from literals and dimensions (`N - 1`) is a single
        `dim` op, so its trip count is a dimension expression however long the bound is."""
        dim = None if isinstance(node, ast.IntLit | ast.Name) else self.try_static_dim(node)
        if dim is None:
            return self.int_scalar(node, "a loop bound")
        return ExprValue(self.builder.op_at(node.span, "dim", [], {"dim": dim}))

    def coerce_return(self, results: list[ExprValue], float_dtype: str) -> list[ExprValue]:
        """Check the returned values against the declared return type; settle weak dtypes."""
        fn = self.fn
        declared = return_types(fn.ret)
        span = fn.ret.span if fn.ret is not None else fn.span
        if fn.ret is not None and len(declared) != len(results):
            raise error_at(span, f"'{fn.name}' declares {len(declared)} result(s) but "
                                 f"returns {len(results)}")
        out = []
        for i, val in enumerate(results):
            if fn.ret is None:
                out.append(self.convert_weak(val, None, span))
                continue
            want = type_of(declared[i], float_dtype, dict(self.dim_map))
            got = self.convert_weak(val, want.dtype, span)
            if got.type != want:
                raise error_at(span, f"'{fn.name}' returns {got.type} where its signature "
                                     f"says {want}")
            out.append(got)
        return out
