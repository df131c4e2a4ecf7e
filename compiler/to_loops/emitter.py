"""Building loop-IR statements: names, loop nests, and scalar code for fused values.

`Context` (`loops/context.py`) holds what is global to one program. An `Emitter` appends
statements to one statement list (a block or the body of an innermost loop) and remembers
what it has computed, so a value used twice in one nest is computed once.
`Evaluator.at(value, index)` is the heart of fusion: it returns the scalar value of a
tensor-IR value at an index, loading it when it lives in memory (`env` maps such values to
`View`s, and rank-0 values to scalar operands) and otherwise recomputing it from its op,
recursively:

    at(tanh(x) * s, [%i0])  ->  %0 = load x[%i0]; %1 = tanh %0; %2 = mul %1, %s

Each op's element rule is its entry in `FUSED_RULES` (every elementwise op shares one), and
each view op's strided view its entry in `VIEW_RULES`; an op a table lacks is a
`CompileError` naming it when a program using it is lowered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reverie.compiler.ir.core import Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import FUSED
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.views import GenericOp, LoopNestOp, ReadOp, WindowOp
from reverie.compiler.loops.context import Context
from reverie.compiler.loops.ir import (
    Check,
    Const,
    Guarded,
    Let,
    Load,
    Loop,
    Operand,
    Stmt,
    Store,
    Var,
    View,
    as_index,
    row_major_strides,
)
from reverie.compiler.to_loops.fusion_plan import ONE, is_unit_reshape

Binding = View | Var | Const | Dim


class LoweringError(Exception):
    """The tensor IR contains something the native backend cannot lower (names the op)."""


class Emitter:
    """Appends statements to one list and remembers values computed there."""

    def __init__(self, ctx: Context, stmts: list[Stmt]) -> None:
        self.ctx = ctx
        self.stmts = stmts
        self.memo: dict[tuple, Operand] = {}

    def let(self, op: str, args: tuple[Operand, ...], dtype: str) -> Var:
        var = self.ctx.var(dtype)
        self.stmts.append(Let(var, op, args))
        return var

    def load(self, view: View, index: tuple[Dim, ...], guard: Var | None = None) -> Var:
        var = self.ctx.var(view.buffer.dtype)
        self.stmts.append(Load(var, view, index, guard))
        return var

    def child(self, stmts: list[Stmt]) -> Emitter:
        """An emitter for a statement list nested here: it may reuse what this one computed,
        and what it computes stays inside."""
        inner = Emitter(self.ctx, stmts)
        inner.memo = dict(self.memo)
        return inner

    def index(self, operand: Operand) -> Dim:
        """An integer operand as an i64 index expression (casting i32/bool first)."""
        if isinstance(operand, Var) and operand.dtype != "i64":
            operand = self.let("cast", (operand,), "i64")
        return as_index(operand)

    def check(self, index: Dim, size: Dim, site: int) -> None:
        self.stmts.append(Check(index, size, site))

    def nest(self, ranges: list[tuple[Dim, Dim]]) -> tuple[tuple[Dim, ...], Emitter]:
        """Open loops over `ranges` (outermost first); the emitter of the innermost body."""
        stmts, index = self.stmts, []
        for lo, hi in ranges:
            loop = Loop(self.ctx.fresh("%i"), lo, hi)
            stmts.append(loop)
            stmts = loop.body
            index.append(Dim.sym(loop.var))
        return tuple(index), Emitter(self.ctx, stmts) if ranges else self

    def map_nest(self, view: View, value: Callable[[tuple[Dim, ...], Emitter], Operand]) -> None:
        """`view[i...] = value(i...)` for every index of the view's shape."""
        index, body = self.nest([(Dim.const(0), d) for d in view.shape])
        body.stmts.append(Store(view, index, value(index, body)))


# How each view op makes a strided view of its source
ViewRule = Callable[[Op, View, "Dim | None"], "View | None"]
VIEW_RULES: RuleTable[str, ViewRule] = RuleTable("the native backend's view lowering")


def view_of(op: Op, source: View, position: Dim | None = None) -> View | None:
    """The strided view a view op makes of `source` (`position`: the subscript of a
    dynamic_index), or None when it is not strided (reshaping a non-contiguous view)."""
    return VIEW_RULES.lookup(op.name, op.span)(op, source, position)


@VIEW_RULES.register("stop_gradient")
def _same_view(op: Op, source: View, position: Dim | None) -> View:
    return source


@VIEW_RULES.register("transpose")
def _transposed_view(op: Op, source: View, position: Dim | None) -> View:
    perm = op.attrs["perm"]
    return View(source.buffer, op.result.type.shape, source.offset,
                tuple(source.strides[p] for p in perm))


@VIEW_RULES.register("slice")
def _sliced_view(op: Op, source: View, position: Dim | None) -> View:
    offset = source.offset
    for start, stride in zip(WindowOp(op).starts, source.strides, strict=True):
        offset = offset + start * stride
    strides = tuple(s * step for s, step in zip(source.strides, WindowOp(op).steps, strict=True))
    return View(source.buffer, op.result.type.shape, offset, strides)


@VIEW_RULES.register("broadcast")
def _broadcast_view(op: Op, source: View, position: Dim | None) -> View:
    shape = op.result.type.shape
    lead = len(shape) - len(source.shape)
    strides = [Dim.const(0)] * lead + [
        Dim.const(0) if d == ONE and t != ONE else s
        for d, t, s in zip(source.shape, shape[lead:], source.strides, strict=True)]
    return View(source.buffer, shape, source.offset, tuple(strides))


@VIEW_RULES.register("dynamic_index")
def _indexed_view(op: Op, source: View, position: Dim | None) -> View:
    axis = op.attrs["axis"]
    offset = source.offset + position * source.strides[axis]
    strides = source.strides[:axis] + source.strides[axis + 1:]
    return View(source.buffer, op.result.type.shape, offset, strides)


@VIEW_RULES.register("reshape")
def _reshaped_view(op: Op, source: View, position: Dim | None) -> View | None:
    shape = op.result.type.shape
    if is_unit_reshape(source.shape, shape):
        kept = iter(s for d, s in zip(source.shape, source.strides, strict=True) if d != ONE)
        strides = tuple(Dim.const(0) if d == ONE else next(kept) for d in shape)
        return View(source.buffer, shape, source.offset, strides)
    if source.is_contiguous:
        return View(source.buffer, shape, source.offset, row_major_strides(shape))
    return None


def zero(dtype: str) -> Const:
    """The zero of a dtype."""
    return Const(False if dtype == "bool" else 0.0 if dtype in FLOAT_DTYPES else 0, dtype)


FusedRule = Callable[["Evaluator", Op, tuple[Dim, ...], Emitter], Operand]
# How each op's element at an index is computed inside a loop nest (fused, or when the op
# is materialised by a nest of its own, or in a generic body): the methods of `Evaluator`
# below that are registered here
FUSED_RULES: RuleTable[str, FusedRule] = RuleTable("the native backend's loop lowering")


class Evaluator:
    """Scalar code for tensor values at an index, given the values that live in memory."""

    def __init__(self, ctx: Context, env: dict[Value, Binding]) -> None:
        self.ctx = ctx
        self.env = env
        self.shifts: dict[Op, Dim] = {}  # each roll's shift mod n (set at block level)

    def at(self, value: Value, index: tuple[Dim, ...], em: Emitter) -> Operand:
        """The element of `value` at `index`, as an operand usable in `em`'s statements."""
        bound = self.env.get(value)
        if isinstance(bound, View):
            key = (bound, index)
            if key not in em.memo:
                em.memo[key] = em.load(bound, index)
            return em.memo[key]
        if bound is not None:
            return bound
        key = (value, index)
        if key not in em.memo:
            em.memo[key] = self._compute(value.op, index, em)
        return em.memo[key]

    def _compute(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        """The element of `op`'s result at `index`, by the op's rule in `FUSED_RULES`."""
        return FUSED_RULES.lookup(op.name, op.span)(self, op, index, em)

    # ------------------------------------------------------------ the rules of FUSED_RULES

    @FUSED_RULES.register(*(name for name, row in ELEMENTWISE.items() if row.fusion == FUSED))
    def _elementwise(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        """One scalar op on the operands' elements (attributes follow as constants, i64
        or f64: `polygamma %x, 2`, `iv %x, 2.5`)."""
        attrs = tuple(Const(op.attrs[a], "f64" if isinstance(op.attrs[a], float) else "i64")
                      for a in ELEMENTWISE[op.name].attrs)
        args = tuple(self.at(a, index, em) for a in op.operands)
        return em.let(op.name, args + attrs, op.result.type.dtype)

    @FUSED_RULES.register("stop_gradient")
    def _same_element(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        return self.at(op.operands[0], index, em)

    @FUSED_RULES.register("const")
    def _const(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        return Const(op.attrs["value"], op.attrs["dtype"])

    @FUSED_RULES.register("dim")
    def _dim(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        return op.attrs["dim"]

    @FUSED_RULES.register("broadcast")
    def _broadcast(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        source = op.operands[0].type.shape
        lead = len(index) - len(source)
        inner = tuple(Dim.const(0) if d == ONE and t != ONE else i for d, t, i in
                      zip(source, op.result.type.shape[lead:], index[lead:], strict=True))
        return self.at(op.operands[0], inner, em)

    @FUSED_RULES.register("transpose")
    def _transpose(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        inner = [Dim.const(0)] * len(index)
        for k, p in enumerate(op.attrs["perm"]):
            inner[p] = index[k]
        return self.at(op.operands[0], tuple(inner), em)

    @FUSED_RULES.register("slice")
    def _slice(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        inner = tuple(start + i * step for start, i, step in
                      zip(WindowOp(op).starts, index, WindowOp(op).steps, strict=True))
        return self.at(op.operands[0], inner, em)

    @FUSED_RULES.register("reshape")
    def _reshape(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        kept = iter(i for i, d in zip(index, op.result.type.shape, strict=True) if d != ONE)
        inner = tuple(Dim.const(0) if d == ONE else next(kept)
                      for d in op.operands[0].type.shape)
        return self.at(op.operands[0], inner, em)

    @FUSED_RULES.register("dynamic_index")
    def _dynamic_index(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        axis = op.attrs["axis"]
        position = em.index(self.at(op.operands[1], (), em))
        return self.at(op.operands[0], index[:axis] + (position,) + index[axis:], em)

    @FUSED_RULES.register("roll")
    def _roll(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        return self.at(op.operands[0], self._rolled(op, index, em), em)

    @FUSED_RULES.register("dynamic_scatter")
    def _dynamic_scatter(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        axis, dtype = op.attrs["axis"], op.result.type.dtype
        position = em.index(self.at(op.operands[1], (), em))
        hit = em.let("eq", (index[axis], position), "bool")
        value = self.at(op.operands[0], index[:axis] + index[axis + 1:], em)
        return em.let("select", (hit, value, zero(dtype)), dtype)

    @FUSED_RULES.register("generic")
    def _generic(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        generic = GenericOp(op)
        if generic.reduce:
            raise LoweringError("a reducing generic is a root, never fused into a consumer")
        starts = [lo for _, lo, _ in generic.indices]
        return self.generic_body(op, [lo + i for lo, i in zip(starts, index, strict=True)], em)

    def _rolled(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> tuple[Dim, ...]:
        """The source index of a roll: along its axis `i - shift` (shift taken mod n, NumPy's
        rule), plus n where that is negative; a compare and a select, no division."""
        axis = op.attrs["axis"]
        size = op.result.type.shape[axis]
        moved = index[axis] - self.shifts[op]
        wraps = em.let("lt", (moved, Dim.const(0)), "bool")
        wrapped = em.let("select", (wraps, moved + size, moved), "i64")
        return index[:axis] + (as_index(wrapped),) + index[axis + 1:]

    @FUSED_RULES.register("pad")
    def _pad(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        """A pad's element: inside its window the source element at `(i - start) / step`,
        else 0. The source is evaluated only inside, so its loads and checks stay in bounds."""
        source, dtype = op.operands[0], op.result.type.dtype
        inside: Var | None = None
        positions = []
        for i, start, step, size in zip(index, WindowOp(op).starts, WindowOp(op).steps,
                                        source.type.shape, strict=True):
            offset = i - start
            position = offset // step
            conditions = [em.let("in_bounds", (position, size), "bool")]
            if step != 1:
                conditions.append(em.let("eq", (offset, position * step), "bool"))
            for condition in conditions:
                inside = condition if inside is None else \
                    em.let("and", (inside, condition), "bool")
            positions.append(position)
        if inside is None:
            return self.at(source, (), em)
        body: list[Stmt] = []
        value = self.at(source, tuple(positions), em.child(body))
        var = self.ctx.var(dtype)
        em.stmts.append(Guarded(var, inside, body, value))
        return var

    def generic_body(self, op: Op, indices: list[Dim], em: Emitter) -> Operand:
        """The scalar a generic's body yields at `indices` (output then reduction indices)."""
        (value,) = self.generic_yields(op, indices, em)
        return value

    def generic_yields(self, op: Op, indices: list[Dim], em: Emitter) -> list[Operand]:
        """Everything the body of a generic or generic_scatter yields at `indices`."""
        nest = LoopNestOp(op)
        local: dict[Value, Binding | ComputedOperand] = dict(
            zip(nest.index_params, indices, strict=True))
        for param, outer in zip(nest.operand_params, op.operands, strict=True):
            if not outer.type.rank:
                local[param] = self.at(outer, (), em)
            else:  # a buffer, or a value fusion left to compute here (`reads_each_element_once`)
                bound = self.env.get(outer)
                local[param] = ComputedOperand(outer, self) if bound is None else bound
        scope = Evaluator(self.ctx, local)
        for inner in nest.body.ops:
            local[inner.result] = scope._compute(inner, (), em)
        return [_operand(local[v]) for v in nest.body.results]

    @FUSED_RULES.register("read")
    def _read(self, op: Op, index: tuple[Dim, ...], em: Emitter) -> Operand:
        """A `read` in a generic body: bounds checks (`checked`) or a guarded load (`zero`)."""
        source = self.env.get(op.operands[0])
        if not isinstance(source, View | ComputedOperand):
            return self.at(op.operands[0], (), em)
        index = tuple(em.index(self.at(v, (), em)) for v in op.operands[1:])
        if isinstance(source, ComputedOperand):  # direct subscripts, read once
            return source.evaluator.at(source.value, index, em)
        guard: Var | None = None
        read = ReadOp(op)
        for axis, (i, mode, size) in enumerate(zip(index, read.modes, source.shape, strict=True)):
            if mode == "checked":
                em.check(i, size, self.ctx.site("index", read.label, axis))
            elif mode == "zero":
                inside = em.let("in_bounds", (i, size), "bool")
                guard = inside if guard is None else em.let("and", (guard, inside), "bool")
        return em.load(source, index, guard)


@dataclass(frozen=True)
class ComputedOperand:
    """A generic's tensor operand that is not in memory: its elements are computed where the
    body reads them, by the evaluator of the nest around the generic."""

    value: Value
    evaluator: Evaluator


def _operand(binding: Binding) -> Operand:
    if isinstance(binding, View):
        raise LoweringError("a generic body yields a tensor")
    return binding

