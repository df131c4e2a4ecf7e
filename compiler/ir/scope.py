"""`Scope`: a block under construction, for passes that build IR.

Regions are isolated from above, so a pass emitting ops into a region needs every outer
value as a region parameter. A Scope does that bookkeeping: `use(v)` returns `v` itself
when it is defined in this block, re-emits constants and dimension sizes here (so they can
fold), and otherwise captures `v` as a new block parameter, recursively through enclosing
scopes. The op that owns the region then passes `outer_operands()` as its operands.

    body = Scope(Block(params=[t]), parent=scope)
    y = body.op("mul", [x_outer, x_outer])   # x_outer becomes a parameter of body
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverie.compiler.ir.core import Block, Builder, Op, Value
from reverie.compiler.ir.types import TensorType
from reverie.dsl.span import Span


class Scope:
    """A block being built; values of enclosing scopes are captured as new parameters."""

    def __init__(self, block: Block, parent: Scope | None = None, span: Span | None = None):
        self.block = block
        self.parent = parent
        self.span = span if span is not None or parent is None else parent.span
        self.defined: set[Value] = set(block.params)
        self.captures: list[tuple[Value, Value]] = []
        self._captured: dict[Value, Value] = {}

    def child(self, block: Block) -> Scope:
        """A scope for a region whose op will be emitted into this scope."""
        return Scope(block, self)

    def use(self, value: Value) -> Value:
        """`value` as seen from this block, capturing it if it is defined outside (constants
        and dimension sizes are re-emitted here instead, so they can fold)."""
        if value in self.defined:
            return value
        if value not in self._captured and value.op is not None and value.op.name in (
                "const", "dim"):
            self._captured[value] = self.op(value.op.name, [], dict(value.op.attrs))
        if value not in self._captured:
            assert self.parent is not None, "a value escaped its block"
            outer = self.parent.use(value)
            param = Value(value.type, name=value.name)
            self.block.params.append(param)
            self.defined.add(param)
            self.captures.append((outer, param))
            self._captured[value] = param
        return self._captured[value]

    def outer_operands(self) -> list[Value]:
        """The enclosing-scope values this region captured, in parameter order."""
        return [outer for outer, _ in self.captures]

    def emit(self, name: str, operands: Sequence[Value], attrs: dict[str, Any] | None = None,
             regions: Sequence[Block] = (), span: Span | None = None) -> Op:
        """Append op `name` (operands captured as needed; source span `span`, else the
        scope's) and return it."""
        builder = Builder(self.block, span or self.span)
        builder.emit(name, [self.use(v) for v in operands], attrs, regions)
        op = self.block.ops[-1]
        self.defined.update(op.results)
        return op

    def op(self, name: str, operands: Sequence[Value], attrs: dict[str, Any] | None = None,
           regions: Sequence[Block] = ()) -> Value:
        """Append a one-result op and return its result."""
        return self.emit(name, operands, attrs, regions).result

    def const(self, value: float | int | bool, type: TensorType) -> Value:
        """`value` as a tensor of `type` (a scalar const, broadcast if needed)."""
        kind = float if type.is_float else int if type.is_int else bool
        c = self.op("const", [], {"value": kind(value), "dtype": type.dtype})
        return c if not type.shape else self.op("broadcast", [c], {"shape": type.shape})

    def zeros(self, type: TensorType) -> Value:
        """A tensor of zeros."""
        return self.const(0, type)

    def clone(self, body: Block, args: Sequence[Value]) -> list[Value]:
        """Emit a copy of `body`'s ops with its parameters bound to `args`; its results."""
        values = dict(zip(body.params, args, strict=True))
        for op in body.ops:
            new = self.emit(op.name, [values[v] for v in op.operands], dict(op.attrs),
                            [copy_block(r) for r in op.regions], op.span)
            values.update(zip(op.results, new.results, strict=True))
        return [values[v] for v in body.results]

    # Short names for the elementwise arithmetic rules are written in.
    def add(self, a: Value, b: Value) -> Value:
        return self.op("add", [a, b])

    def sub(self, a: Value, b: Value) -> Value:
        return self.op("sub", [a, b])

    def mul(self, a: Value, b: Value) -> Value:
        return self.op("mul", [a, b])

    def div(self, a: Value, b: Value) -> Value:
        return self.op("div", [a, b])

    def neg(self, a: Value) -> Value:
        return self.op("neg", [a])

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.op("select", [cond, a, b])

    def eq(self, a: Value, b: Value) -> Value:
        return self.op("eq", [a, b])


def share_captures(regions: Sequence[tuple[Block, Scope]], fixed: int) -> list[Value]:
    """Give the regions of one op (`if`, `while`) the same parameters: after the first
    `fixed` ones, one per value that any of them captured (in first-capture order, an
    unused parameter where a region did not capture it). Returns those outer values, the
    op's operands for the parameters."""
    outers: list[Value] = []
    for _, scope in regions:
        outers += [outer for outer, _ in scope.captures if outer not in outers]
    for block, scope in regions:
        mine = dict(scope.captures)
        block.params = block.params[:fixed] + [
            mine.get(outer) or Value(outer.type, name=outer.name) for outer in outers]
    return outers


def copy_block(block: Block) -> Block:
    """A deep copy of a region (regions are isolated, so the copy is self-contained)."""
    params = [Value(p.type, name=p.name) for p in block.params]
    new = Block(params=params)
    new.results = Scope(new).clone(block, params)
    return new
