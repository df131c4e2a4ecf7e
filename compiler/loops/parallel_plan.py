"""Which loops of a program may run in parallel: a conservative analysis of the loop IR.

`parallel_plans(program)` finds the `Loop`s whose iterations are independent, and says how
their chunks are combined and what they take from around them. Code generation
(`compiler/backend/parallel_loops.py`) splits such a loop's range into chunks that the worker
pool runs; every other loop runs serially where it stands. A planned loop sits in the kernel
body or in the body of a `for`, `while` or `if` (a time-stepping scan, W7's heat equation,
splits each step's loops); the loops nested in a planned loop run inside its chunks. A
`for` or `while` whose step multiplies matrices or sorts is left alone: such a step is a
recurrence whose elementwise loops cost O(n) beside the product's O(n^2) (which the matrix
kernel splits itself), and planning them would only add code to every step, and compile
time with it (benchmarks/README.md, "Threads: the worker pool").

A loop qualifies when its body (nested loops included)

- holds no bounds `Check`, `Matmul`, `Sort` (its scratch is shared), `LinalgCall`,
  `for`/`while` loop, or `ArgUpdate` of an outer value;
- uses only its own values, dimension sizes, and values defined before it in an enclosing
  block (its *captures*: a step's index, a scan's loop variable), never an accumulator's
  running value;
- writes each buffer only through a view covering that whole buffer, at an index whose
  first component is the loop variable itself, and never reads a buffer it writes (nor
  one that a loop state it writes may be): so iteration `i` writes row `i` and nothing
  another iteration reads;
- updates an accumulator declared outside it only with `Accumulate` (sum, prod, max, min of
  a number, never read in the loop): a *reduction*. Each chunk then accumulates its own
  partial from the identity, and the partials are combined with the outer value in chunk
  order, so for a given number of chunks the result is the same run to run (sums and
  products differ from the one-thread order by float reassociation only).
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.effects import reads
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulate,
    Accumulator,
    ArgUpdate,
    Buffer,
    Check,
    ExitUnless,
    ForLoop,
    Guarded,
    If,
    Let,
    LinalgCall,
    Load,
    Loop,
    Matmul,
    Program,
    Sort,
    Stmt,
    Store,
    Var,
    WhileLoop,
    walk,
)

REDUCIBLE = ("sum", "prod", "max", "min")
REDUCIBLE_DTYPES = ("f32", "f64", "i32", "i64")


@dataclass(frozen=True)
class Reduction:
    """An outer accumulator a parallel loop updates: `var = var <kind> ...`."""

    var: Var
    kind: str


@dataclass(frozen=True)
class ParallelPlan:
    """A loop whose chunks may run on different threads; `work` is the number of
    statements its body runs per iteration of the loop (`work_per_iteration`), a rough cost
    used with the trip count to decide whether splitting pays."""

    loop: Loop
    reductions: tuple[Reduction, ...]
    work: Dim
    captures: tuple[Var, ...] = ()  # values from around the loop, read by its body
    buffers: tuple[Buffer, ...] = ()  # every buffer its body reads or writes, in order
    nested: bool = False  # inside a `for` or `while` body: it may run many times

    @property
    def states(self) -> tuple[Buffer, ...]:
        """The loop-state buffers (a state's current or next) the body touches."""
        return tuple(buffer for buffer in self.buffers if buffer.role == "state")

    @property
    def innermost(self) -> bool:
        """Whether the body holds no loop (its chunks are then cut at whole vectors)."""
        return not any(isinstance(stmt, Loop) for stmt in walk(self.loop.body))


def parallel_plans(program: Program) -> dict[int, ParallelPlan]:
    """The plans of the program's parallel loops, keyed by `id()` of the `Loop`."""
    plans: dict[int, ParallelPlan] = {}
    _plan_block(program.body, _Scope({}, {}, _underlying_buffers(program), False), plans)
    return plans


@dataclass(frozen=True)
class _Scope:
    """What a loop may take from around it: the accumulators and the values (with their
    dtypes) defined before it in the enclosing blocks, and for each loop-state buffer the
    program buffers it may be (a state's current and next are distinct at any time)."""

    accumulators: dict[str, Var]
    values: dict[str, Var]
    underlying: dict[Buffer, frozenset[Buffer]]
    nested: bool  # inside a `for` or `while` body (an `if` within one too)


def _plan_block(block: list[Stmt], outer: _Scope, plans: dict[int, ParallelPlan]) -> None:
    """Plan the loops of `block` and, within its `for`, `while` and `if`, of their bodies."""
    scope = _Scope(dict(outer.accumulators), dict(outer.values), outer.underlying,
                   outer.nested)
    for stmt in block:
        if isinstance(stmt, Accumulator):
            scope.accumulators[stmt.var.name] = stmt.var
        elif isinstance(stmt, Let | Load | Guarded):
            scope.values[stmt.var.name] = stmt.var
        elif isinstance(stmt, Loop):
            plan = _plan(stmt, scope)
            if plan is not None:
                plans[id(stmt)] = plan
        elif isinstance(stmt, ForLoop | WhileLoop | If):
            values = dict(scope.values)
            if isinstance(stmt, ForLoop | WhileLoop):
                if any(isinstance(inner, Matmul | Sort | LinalgCall) for inner in walk(stmt.body)):
                    continue  # a recurrence around a product: see the module's docstring
                values[stmt.var] = Var(stmt.var, "i64")
            repeats = scope.nested or not isinstance(stmt, If)  # an `if` body runs once
            _plan_block(stmt.body, _Scope(scope.accumulators, values, scope.underlying, repeats),
                        plans)


def _underlying_buffers(program: Program) -> dict[Buffer, frozenset[Buffer]]:
    """For each loop state's current and next buffer, the buffers it may stand for: its
    state's first and second, and theirs in turn when those are states of an outer loop."""
    pairs = {}
    for stmt in program.walk():
        if isinstance(stmt, ForLoop | WhileLoop):
            for state in stmt.states:
                pairs[state.current] = pairs[state.next] = (state.first, state.second)
    underlying: dict[Buffer, frozenset[Buffer]] = {}

    def resolve(buffer: Buffer) -> frozenset[Buffer]:
        if buffer not in underlying:
            underlying[buffer] = frozenset()  # a cycle cannot occur; this ends one anyway
            found = set()
            for candidate in pairs.get(buffer, ()):
                found |= {candidate} | resolve(candidate)
            underlying[buffer] = frozenset(found)
        return underlying[buffer]

    return {buffer: resolve(buffer) for buffer in pairs}


def _defined(stmt: Stmt) -> list[str]:
    """Names a statement defines (values, accumulators, loop variables)."""
    if isinstance(stmt, Let | Load | Guarded | Accumulator):
        return [stmt.var.name]
    if isinstance(stmt, Loop):
        return [stmt.var]
    return []


def _plan(loop: Loop, scope: _Scope) -> ParallelPlan | None:
    body = walk(loop.body)
    if any(isinstance(s, Check | Matmul | Sort | LinalgCall | ForLoop | WhileLoop | ExitUnless)
           for s in body):
        return None
    defined = {loop.var} | {name for s in body for name in _defined(s)}
    # the values it reads from around it (index variables included; dimension names aside)
    captured = {name for s in body for name in reads(s)
                if name.startswith("%") and name not in defined}
    if not captured <= scope.values.keys():
        return None
    reductions: dict[str, Reduction] = {}
    for stmt in body:
        if isinstance(stmt, ArgUpdate) and stmt.best.name not in defined:
            return None
        if isinstance(stmt, Accumulate) and stmt.var.name not in defined:
            var = scope.accumulators.get(stmt.var.name)
            if (var is None or stmt.kind not in REDUCIBLE or var.dtype not in REDUCIBLE_DTYPES
                    or reductions.get(var.name, Reduction(var, stmt.kind)).kind != stmt.kind):
                return None
            reductions[var.name] = Reduction(var, stmt.kind)
    if not _rows_independent(loop, body, scope.underlying):
        return None
    buffers = {s.view.buffer: None for s in body if isinstance(s, Load | Store)}
    return ParallelPlan(loop, tuple(reductions.values()), work_per_iteration(loop.body),
                        tuple(scope.values[name] for name in sorted(captured)), tuple(buffers),
                        scope.nested)


def work_per_iteration(body: list[Stmt]) -> Dim:
    """The statements `body` runs, each nested loop's body counted once per trip: a nest
    `for n { for k { for d { 10 statements } } }` costs `K * (D * 10 + 1) + 1` per `n`.
    A nested loop whose bounds move with an enclosing index (a triangle) counts its body
    once: its trip count is not known before the loop runs."""
    work = Dim.const(0)
    for stmt in body:
        work = work + 1
        if isinstance(stmt, Loop):
            trips = stmt.hi - stmt.lo
            inner = work_per_iteration(stmt.body)
            moves = any(symbol.startswith("%") for symbol in trips.symbols())
            work = work + (inner if moves else trips * inner)
        elif isinstance(stmt, BLOCK_STMTS):
            work = work + work_per_iteration(stmt.body)
    return work


def _rows_independent(loop: Loop, body: list[Stmt],
                      underlying: dict[Buffer, frozenset[Buffer]]) -> bool:
    """Whether iteration `i` writes only row `i` of whole buffers that the loop never reads.
    A loop state's buffer is each buffer it may stand for (`_underlying_buffers`): reading
    `x` conflicts with writing a state that may be `x`, and the other way round (a state's
    own current and next never do: they are distinct at any time)."""
    row = Dim.sym(loop.var)
    written: set[Buffer] = set()
    for stmt in body:
        if isinstance(stmt, Store):
            view = stmt.view
            if not (view.covers(view.buffer) and stmt.index and stmt.index[0] == row):
                return False
            written.add(view.buffer)

    def conflicts(read: Buffer, write: Buffer) -> bool:
        return (read == write or read in underlying.get(write, ())
                or write in underlying.get(read, ()))

    return not any(conflicts(stmt.view.buffer, write) for stmt in body
                   if isinstance(stmt, Load) for write in written)
