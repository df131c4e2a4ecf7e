"""The tensor IR's data structures: values, ops, blocks, functions, modules.

The IR is SSA. A `Function` owns a `Block`: its parameters, an ordered list of `Op`s, and the
values it returns. An op consumes operand `Value`s and defines result `Value`s; ops that
contain code (`for`, `generic`) own region `Block`s that are isolated from above: everything
a region uses arrives through its parameters. Values carry no names of their own except
function parameters; the printer numbers the rest in order, so output is deterministic.

`Builder` appends ops to a block, running the op table's shape rule to type the results:

    b = Builder(block)
    y = b.op("exp", [x])          # %1 = exp %x : f32[N]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops import infer_types
from reverie.compiler.ir.types import TensorType
from reverie.dsl.span import Span


class Value:
    """An SSA value: the result of an op, or a parameter of a block."""

    __slots__ = ("type", "op", "index", "name")

    def __init__(
        self, type: TensorType, op: Op | None = None, index: int = 0, name: str | None = None
    ) -> None:
        self.type = type
        self.op = op
        self.index = index
        self.name = name

    def __repr__(self) -> str:
        return f"<Value {self.name or '?'}: {self.type}>"


@dataclass(eq=False)
class Op:
    """One operation: `results = name(operands) {attrs}` with optional region blocks."""

    name: str
    operands: list[Value]
    attrs: dict[str, Any]
    results: list[Value] = field(default_factory=list)
    regions: list[Block] = field(default_factory=list)
    span: Span | None = None

    @property
    def result(self) -> Value:
        """The single result of a one-result op."""
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]


@dataclass(eq=False)
class Block:
    """A straight-line list of ops with parameters and returned values."""

    params: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)

    def walk(self) -> Iterator[Op]:
        """Every op in this block and, depth first, in its regions."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()


@dataclass(eq=False)
class Function:
    """A typed function: named parameters, a body block, and its result types.

    `constraints` are sizes that must not be negative at run time, with the reason
    (e.g. `N - 1` for `x[1:]`); the call boundary checks them. `value_dims` names the
    dimensions bound by the value of an i64 scalar parameter (name, parameter index), so
    `for t in 0..steps` has a symbolic trip count. `cache_key` names a kernel
    specialisation in the whole-pipeline cache (`runtime/native/artifacts.py`); functions that
    passes derive have none.
    """

    name: str
    body: Block
    param_names: list[str]
    dim_names: list[str] = field(default_factory=list)
    span: Span | None = None
    constraints: list[tuple[Dim, str]] = field(default_factory=list)
    value_dims: list[tuple[str, int]] = field(default_factory=list)
    cache_key: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The fields, without what the run time caches on a function (call binders)."""
        return {name: value for name, value in self.__dict__.items()
                if name in self.__dataclass_fields__}

    @property
    def params(self) -> list[Value]:
        return self.body.params

    @property
    def result_types(self) -> list[TensorType]:
        return [v.type for v in self.body.results]

    def derive(self, name: str, body: Block, param_names: list[str] | None = None,
               new_dims: Sequence[str] = ()) -> Function:
        """A function built from this one by a pass: same dimensions (plus `new_dims`),
        source span, size constraints and value-bound dimensions."""
        return Function(name, body, list(param_names or self.param_names),
                        list(self.dim_names) + list(new_dims), self.span,
                        list(self.constraints), list(self.value_dims))


@dataclass(eq=False)
class Module:
    """Functions by name, in definition order."""

    functions: dict[str, Function] = field(default_factory=dict)


class Builder:
    """Appends ops to a block, typing their results with the op table's shape rules."""

    def __init__(self, block: Block, span: Span | None = None) -> None:
        self.block = block
        self.span = span

    def emit(
        self,
        name: str,
        operands: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        regions: Sequence[Block] = (),
    ) -> list[Value]:
        """Create op `name`, append it, and return its results (ShapeError if ill-typed)."""
        attrs = dict(attrs or {})
        types = infer_types(name, [v.type for v in operands], attrs, list(regions))
        op = Op(name, list(operands), attrs, regions=list(regions), span=self.span)
        op.results = [Value(t, op, i) for i, t in enumerate(types)]
        self.block.ops.append(op)
        return op.results

    def op(
        self,
        name: str,
        operands: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        regions: Sequence[Block] = (),
    ) -> Value:
        """Like `emit` for an op with exactly one result."""
        (result,) = self.emit(name, operands, attrs, regions)
        return result
