"""Lowering of statements (`let`, `var`, assignment, `for`, `if`, `while`, `return`) of one
function body.

A `for` loop becomes a `for` op whose region takes the loop index, the carried state (the
`var`s assigned in the body) and, as captured parameters, every outer value the body uses.
`if` and `while` (SPEC §2.7) become `if` and `while` ops the same way: the state is the
`var`s declared outside that a branch or the body assigns, and every region of the op
takes the states and then the values that any of its regions captured.
The values a body returns are checked against the function's declared result types.
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.dsl import ast
from reverie.dsl.diagnostics import did_you_mean, error_at

from ..ir.core import Block, Value
from ..ir.scope import share_captures
from ..ir.types import scalar
from .builder import BlockBuilder
from .dims import return_types, type_of
from .index_notation import IndexLowering
from .values import ExprTuple, ExprValue, VarBinding


def _assigned(body: list[ast.Stmt]) -> list[str]:
    """Names assigned anywhere in `body`, in first-assignment order."""
    names: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and node.name not in names:
                names.append(node.name)
    return names


class StatementLowering(IndexLowering):
    """Statements, loops, and the checking of returned values."""

    def lower_body(self) -> list[ExprValue]:
        """The function's body: statements, then exactly one final `return`."""
        body = self.fn.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if i != len(body) - 1:
                    raise error_at(body[i + 1].span, "unreachable code after 'return'")
                value = self.lower_expr(stmt.value)
                return value.elements if isinstance(value, ExprTuple) else [value]
            self.lower_stmt(stmt)
        raise error_at(self.fn.name_span,
                       f"function '{self.fn.name}' must end with a 'return' statement")

    def lower_block(self, body: list[ast.Stmt]) -> None:
        """The statements of a loop body, in a scope of their own."""
        self.scopes.append({})
        try:
            for stmt in body:
                if isinstance(stmt, ast.Return):
                    raise error_at(stmt.span, "'return' is only allowed at the end of a function")
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
                value = self.convert_weak(self.tensor(stmt.value), None, stmt.span)
                self.define(stmt.name, VarBinding(value, stmt.span), stmt.name_span)
            case ast.Assign():
                self._assign(stmt)
            case ast.For():
                self._lower_for(stmt)
            case ast.If():
                self._lower_if(stmt)
            case ast.While():
                self._lower_while(stmt)
            case _:
                raise error_at(stmt.span, "this statement cannot be used here")

    def _assign(self, stmt: ast.Assign) -> None:
        """`x = value;` for a `var` x: the new value must keep x's type."""
        slot = self.lookup(stmt.name)
        if not isinstance(slot, VarBinding):
            if slot is None:
                raise error_at(stmt.name_span, f"unknown name '{stmt.name}'"
                                               + did_you_mean(stmt.name, self.visible_names()))
            raise error_at(stmt.name_span, f"cannot assign to '{stmt.name}': it was declared "
                                           "with 'let'; declare it with 'var' to change it")
        value = self.tensor(stmt.value)
        value = self.convert_weak(value, slot.current.type.dtype, stmt.value.span)
        if value.type != slot.current.type:
            raise error_at(stmt.value.span, f"'{stmt.name}' has type {slot.current.type} but "
                                            f"the new value has type {value.type}")
        slot.current = value

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
                self.lower_block(stmt.body)
        finally:
            self.scopes.pop()
        block.results = [body.use(slot.current.value) for _, slot in carried]
        operands = [lo.value, hi.value] + [v.value for v in inits] + [o for o, _ in body.captures]
        results = self.builder.emit_at(stmt.span, "for", operands, {"carried": len(carried)},
                                       [block])
        for (name, slot), result in zip(carried, results, strict=True):
            result.name = name
            slot.current = ExprValue(result)

    # ------------------------------------------------------------ if and while (SPEC §2.7)

    def _lower_if(self, stmt: ast.If) -> None:
        """`if c { ... } else { ... }` as an `if` op carrying the `var`s either branch assigns."""
        cond = self._condition(stmt.cond, "an 'if' condition")
        carried = self._carried(stmt.then + stmt.orelse)
        regions = [self._state_region(carried, lambda body=body: self._yield_states(body, carried))
                   for body in (stmt.then, stmt.orelse)]
        self._emit_control(stmt.span, "if", [cond], carried, regions, {})  # no attributes

    def _lower_while(self, stmt: ast.While) -> None:
        """`while c { ... }` as a `while` op: a condition region and a body region."""
        carried = self._carried(stmt.body)
        before = self._state_region(carried, lambda: [
            self._condition(stmt.cond, "a 'while' condition")])
        body = self._state_region(carried, lambda: self._yield_states(stmt.body, carried))
        self._emit_control(stmt.span, "while", [], carried, [before, body],
                           {"carried": len(carried), "limit": self.specialisation.max_iterations})

    def _condition(self, node: ast.Expr, what: str) -> Value:
        """A scalar bool condition (SPEC §2.7: `where` is the elementwise choice)."""
        value = self.tensor(node)
        if value.type != scalar("bool"):
            raise error_at(node.span, f"{what} must be a scalar bool, got {value.type}; for an "
                                      "elementwise choice use where(cond, a, b)")
        return value.value

    def _carried(self, body: list[ast.Stmt]) -> list[tuple[str, VarBinding]]:
        """The `var`s declared outside `body` that it assigns: the state of its op."""
        slots = [(name, self.lookup(name)) for name in _assigned(body)]
        return [(name, slot) for name, slot in slots if isinstance(slot, VarBinding)]

    def _yield_states(self, body: list[ast.Stmt], carried: list[tuple[str, VarBinding]]
                      ) -> list[Value]:
        """Lower `body`; the carried states' values at its end."""
        self.lower_block(body)
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
