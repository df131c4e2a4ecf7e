"""Typed views of ops: the parts of a structured or multi-part op by name.

An `Op` keeps its operands, results and regions in flat lists and its attributes in a
dict; what each position means depends on the op. A view wraps one op and names its parts,
so a pass reads `ForOp(op).invariants` instead of `op.operands[2 + op.attrs["carried"]:]`.
A view holds nothing but the op: it reads through to it, and sees later edits. Its
constructor checks the op's name (TypeError for another op: a compiler bug).

    loop = ForOp(op)        # %u = for %lo, %hi, %u0, %w {carried = 1} ^(%t, %u1, %w1) {...}
    loop.inits              # [%u0]
    loop.invariant_params   # [%w1]

The attribute types are the op table's schemas (`OpDef.attrs`), which the verifier checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from reverie.compiler.ir.attr_types import Range
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.reduce_kinds import REDUCE_OPS

if TYPE_CHECKING:  # a view reads an op's lists; it builds none of core's classes
    from reverie.compiler.ir.core import Block, Op, Value

T = TypeVar("T")


class OpView:
    """A view of one op whose name is in `NAMES`."""

    NAMES: ClassVar[tuple[str, ...]] = ()
    __slots__ = ("op",)

    def __init__(self, op: Op) -> None:
        if op.name not in self.NAMES:
            raise TypeError(f"{type(self).__name__} is a view of "
                            f"{' or '.join(map(repr, self.NAMES))}, not of '{op.name}'")
        self.op = op

    @property
    def label(self) -> str:
        """The tensor named in index errors (`label` attribute; `tensor` when absent)."""
        return self.op.attrs.get("label", "tensor")


# ---------------------------------------------------------------- loops


class ForOp(OpView):
    """A counted loop carrying state (`for`, or `for_history`: `ForHistoryOp`).

        %u = for %lo, %hi, %u0, %w {carried = 1} ^(%t: i64, %u1: f64[N], %w1: f64[N]) {
          ... yield %u2
        } : f64[N]

    Operands: the bounds, the `carried` initial states, then the loop invariants. Region
    parameters: the iteration index, the states, the invariants. Results: the final states
    (for_history then adds one history per state).
    """

    NAMES = ("for", "for_history")

    @property
    def carried(self) -> int:
        """How many loop-carried states come first among the operands after the bounds."""
        return self.op.attrs["carried"]

    @property
    def lo(self) -> Value:
        return self.op.operands[0]

    @property
    def hi(self) -> Value:
        return self.op.operands[1]

    @property
    def inits(self) -> list[Value]:
        """The initial states (`%u0`)."""
        return self.split_operands(self.op.operands)[1]

    @property
    def invariants(self) -> list[Value]:
        """The loop invariants (`%w`): read by every iteration, never updated."""
        return self.split_operands(self.op.operands)[2]

    @property
    def body(self) -> Block:
        return self.op.regions[0]

    @property
    def index_param(self) -> Value:
        """The iteration index parameter (`%t`)."""
        return self.body.params[0]

    @property
    def state_params(self) -> list[Value]:
        """The region parameters bound to the current states (`%u1`)."""
        return self.split_params(self.body.params)[1]

    @property
    def invariant_params(self) -> list[Value]:
        """The region parameters bound to the invariants (`%w1`)."""
        return self.split_params(self.body.params)[2]

    @property
    def final_states(self) -> list[Value]:
        """The results holding the states after the last iteration."""
        return self.op.results[:self.carried]

    @property
    def histories(self) -> list[Value]:
        """The results after the final states: for_history's histories (none for `for`)."""
        return self.op.results[self.carried:]

    def first_invariant(self) -> int:
        """The operand position of the first invariant."""
        return 2 + self.carried

    def split_operands(self, items: Sequence[T]) -> tuple[list[T], list[T], list[T]]:
        """A list parallel to the operands (flags, tangents, ...) as (bounds, states,
        invariants)."""
        start = self.first_invariant()
        return list(items[:2]), list(items[2:start]), list(items[start:])

    def split_params(self, items: Sequence[T]) -> tuple[T, list[T], list[T]]:
        """A list parallel to the region parameters as (index, states, invariants)."""
        return items[0], list(items[1:1 + self.carried]), list(items[1 + self.carried:])


class ForHistoryOp(ForOp):
    """A `for` loop that also returns the states it passed through (`ops_adjoint.py`).

        %h, %hs = for_history %lo, %hi, %h0, %W {carried = 1, rows = T, stride = 1}
                  ^(%t: i64, %h1: f64[H], %W1: f64[H, H]) {...} : f64[H], f64[T, H]
    """

    NAMES = ("for_history",)

    @property
    def rows(self) -> Dim:
        """The capacity of each history: how many states it can hold."""
        return self.op.attrs["rows"]

    @property
    def stride(self) -> int:
        """Store the state every `stride` iterations (1: every state)."""
        return self.op.attrs["stride"]


# ---------------------------------------------------------------- control flow


class IfOp(OpView):
    """A two-way branch on a scalar bool (docs/language.md §11.1). Both regions take the
    operands after the condition and yield values of the same types, the op's results.

        %u2 = if %c, %u0, %w ^(%u: f64, %w1: f64) {... yield %a}
                             ^(%u: f64, %w1: f64) {... yield %b} : f64
    """

    NAMES = ("if",)

    @property
    def cond(self) -> Value:
        return self.op.operands[0]

    @property
    def inputs(self) -> list[Value]:
        """The operands the regions' parameters are bound to."""
        return self.op.operands[1:]

    @property
    def then(self) -> Block:
        return self.op.regions[0]

    @property
    def orelse(self) -> Block:
        return self.op.regions[1]


class WhileOp(OpView):
    """A loop that runs its body while its condition region yields true (docs/language.md §11.1).

        %u2 = while %u0, %w {carried = 1, limit = 1000000000}
              ^(%u: f64, %w1: f64) {... yield %c : bool}
              ^(%u: f64, %w1: f64) {... yield %u3} : f64

    Operands: the `carried` initial states, then the invariants; both regions take the
    states, then the invariants. Results: the final states, then (with `counted = true`,
    which reverse mode asks for) the trip count as an i64. Running more than `limit`
    iterations raises RuntimeError (REVERIE_MAX_ITERATIONS).
    """

    NAMES = ("while",)

    @property
    def carried(self) -> int:
        """How many states the loop carries."""
        return self.op.attrs["carried"]

    @property
    def limit(self) -> int:
        """The most iterations allowed."""
        return self.op.attrs["limit"]

    @property
    def counted(self) -> bool:
        """Whether the trip count is the last result."""
        return self.op.attrs.get("counted", False)

    @property
    def inits(self) -> list[Value]:
        return self.op.operands[:self.carried]

    @property
    def invariants(self) -> list[Value]:
        return self.op.operands[self.carried:]

    @property
    def before(self) -> Block:
        """The condition region: yields one scalar bool."""
        return self.op.regions[0]

    @property
    def body(self) -> Block:
        return self.op.regions[1]

    @property
    def final_states(self) -> list[Value]:
        return self.op.results[:self.carried]

    def split(self, items: Sequence[T]) -> tuple[list[T], list[T]]:
        """A list parallel to the operands or to a region's parameters as (states,
        invariants)."""
        return list(items[:self.carried]), list(items[self.carried:])


# ---------------------------------------------------------------- index notation


def nest_ranges(attrs: Mapping[str, Any]) -> list[Range]:
    """The index ranges of a loop nest's attributes: the `indices`, then a generic's
    reduction ranges (`over`)."""
    return list(attrs["indices"]) + list(attrs.get("over", ()))


class LoopNestOp(OpView):
    """A loop nest with a scalar body (`generic` or `generic_scatter`).

    Region parameters: one i64 per index variable (in `ranges` order), then one per operand.
    """

    NAMES = ("generic", "generic_scatter")

    @property
    def ranges(self) -> list[Range]:
        """Every index variable with its range, in region-parameter order."""
        return nest_ranges(self.op.attrs)

    @property
    def body(self) -> Block:
        return self.op.regions[0]

    @property
    def index_params(self) -> list[Value]:
        return self.body.params[:len(self.ranges)]

    @property
    def operand_params(self) -> list[Value]:
        """The region parameters bound to the operands, one each."""
        return self.body.params[len(self.ranges):]


class GenericOp(LoopNestOp):
    """Index notation: a loop nest whose body yields one scalar per point, optionally reduced.

        %y = generic %a, %b {indices = [i in 0..N], reduce = sum, over = [k in 0..K]}
             ^(%i: i64, %k: i64, %a1: f32[N, K], %b1: f32[K]) {... yield %v : f32} : f32[N]
    """

    NAMES = ("generic",)

    @property
    def indices(self) -> list[Range]:
        """The output index ranges (one per result axis)."""
        return list(self.op.attrs["indices"])

    @property
    def over(self) -> list[Range]:
        """The reduction index ranges (none without a reduction)."""
        return list(self.op.attrs.get("over", ()))

    @property
    def reduce(self) -> str | None:
        """The reduction kind (`sum`, `prod`, `max`, `min`), or None."""
        return self.op.attrs.get("reduce")


class GenericScatterOp(LoopNestOp):
    """Scatter-add over a loop nest: the body yields a position and a value per point.

        %xb = generic_scatter %yb {shape = [N], indices = [i in 0..N], modes = [zero]}
              ^(%i: i64, %yb1: f64[N]) {... yield %p, %v} : f64[N]
    """

    NAMES = ("generic_scatter",)

    @property
    def shape(self) -> tuple[Dim, ...]:
        return tuple(self.op.attrs["shape"])

    @property
    def modes(self) -> Sequence[str]:
        """One `read` mode per result axis: `zero` drops out-of-range writes."""
        return self.op.attrs["modes"]


class ReadOp(OpView):
    """One element of a tensor in a loop-nest body: `%v = read %x, %i, %j {modes = [...]}`."""

    NAMES = ("read",)

    @property
    def tensor(self) -> Value:
        return self.op.operands[0]

    @property
    def subscripts(self) -> list[Value]:
        return self.op.operands[1:]

    @property
    def modes(self) -> Sequence[str]:
        """Per axis: `direct` (in range), `zero` (out of range reads 0), `checked`."""
        return self.op.attrs["modes"]


# ---------------------------------------------------------------- reductions


class ReduceOp(OpView):
    """`%1 = reduce_sum %x {axes = [1]} : f32[N]` (every reduction of `reduce_kinds.py`)."""

    NAMES = tuple(REDUCE_OPS)

    @property
    def kind(self) -> str:
        """`sum`, `prod`, `max` or `min`."""
        return REDUCE_OPS[self.op.name].name

    @property
    def axes(self) -> tuple[int, ...]:
        return tuple(self.op.attrs["axes"])


class ArgReduceOp(OpView):
    """`%1 = argmax %x {axis = 1} : i64[N]` (or argmin; `axis = None`: the flat tensor)."""

    NAMES = ("argmax", "argmin")

    @property
    def axis(self) -> int | None:
        return self.op.attrs["axis"]


# ---------------------------------------------------------------- shape ops


class WindowOp(OpView):
    """A strided window: `slice` reads it, `pad` writes into it.

        %1 = slice %x {starts = [1], stops = [N], steps = [1]} : f32[N - 1]
        %2 = pad %g {shape = [N], starts = [1], steps = [1]} : f32[N]
    """

    NAMES = ("slice", "pad")

    @property
    def starts(self) -> Sequence[Dim]:
        return self.op.attrs["starts"]

    @property
    def steps(self) -> Sequence[int]:
        return self.op.attrs["steps"]

