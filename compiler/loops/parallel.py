"""Which loops of a program may run in parallel: a conservative analysis of the loop IR.

`parallel_plans(program)` finds the top-level `Loop`s (directly in the kernel body, so not
inside a `for`/`while`/`if`) whose iterations are independent, and says how their chunks
are combined. Code generation (`compiler/codegen/parallel.py`) splits such a loop's range
into chunks that the worker pool runs; every other loop runs as before.

A loop qualifies when its body (nested loops included)

- holds no bounds `Check`, `Matmul`, `Sort` (its scratch is shared), `for`/`while` loop,
  or `ArgUpdate` of an outer value;
- uses no value defined outside it (only dimension sizes and its own values);
- writes each buffer only through a view covering that whole buffer, at an index whose
  first component is the loop variable itself, and never reads a buffer it writes: so
  iteration `i` writes row `i` and nothing another iteration reads;
- updates an accumulator declared outside it only with `Accumulate` (sum, prod, max, min of
  a number, never read in the loop): a *reduction*. Each chunk then accumulates its own
  partial from the identity, and the partials are combined with the outer value in chunk
  order, so for a given number of chunks the result is the same run to run (sums and
  products differ from the one-thread order by float reassociation only).
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.dims import Dim

from .ir import (
    BLOCK_STMTS,
    Accumulate,
    Accumulator,
    ArgUpdate,
    Check,
    ExitUnless,
    ForLoop,
    Guarded,
    If,
    Let,
    Load,
    Loop,
    Matmul,
    Program,
    Sort,
    Stmt,
    Store,
    Var,
    WhileLoop,
    statement_dims,
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

    @property
    def innermost(self) -> bool:
        """Whether the body holds no loop (its chunks are then cut at whole vectors)."""
        return not any(isinstance(stmt, Loop) for stmt in walk(self.loop.body))


def parallel_plans(program: Program) -> dict[int, ParallelPlan]:
    """The plans of the program's parallel loops, keyed by `id()` of the `Loop`."""
    known = set(program.inputs) | set(program.outputs) | set(program.temps)
    outer: dict[str, Var] = {}
    plans: dict[int, ParallelPlan] = {}
    for stmt in program.body:
        if isinstance(stmt, Accumulator):
            outer[stmt.var.name] = stmt.var
        elif isinstance(stmt, Loop):
            plan = _plan(stmt, outer, known)
            if plan is not None:
                plans[id(stmt)] = plan
    return plans


def _defined(stmt: Stmt) -> list[str]:
    """Names a statement defines (values, accumulators, loop variables)."""
    if isinstance(stmt, Let | Load | Guarded | Accumulator):
        return [stmt.var.name]
    if isinstance(stmt, Loop):
        return [stmt.var]
    return []


def _used(stmt: Stmt) -> list[str]:
    """Names of the values a statement (not its body) reads, index variables included."""
    operands: list[object] = []
    if isinstance(stmt, Let):
        operands += stmt.args
    elif isinstance(stmt, Load):
        operands.append(stmt.guard)
    elif isinstance(stmt, Store | Accumulate | ArgUpdate):
        operands.append(stmt.value)
    elif isinstance(stmt, Guarded):
        operands += [stmt.cond, stmt.value]
    elif isinstance(stmt, If):
        operands.append(stmt.cond)
    names = [o.name for o in operands if isinstance(o, Var)]
    return names + [s for d in statement_dims(stmt) for s in d.symbols() if s.startswith("%")]


def _plan(loop: Loop, outer: dict[str, Var], known: set) -> ParallelPlan | None:
    body = walk(loop.body)
    if any(isinstance(s, Check | Matmul | Sort | ForLoop | WhileLoop | ExitUnless)
           for s in body):
        return None
    defined = {loop.var} | {name for s in body for name in _defined(s)}
    if any(name not in defined for s in body for name in _used(s)):
        return None
    reductions: dict[str, Reduction] = {}
    for stmt in body:
        if isinstance(stmt, ArgUpdate) and stmt.best.name not in defined:
            return None
        if isinstance(stmt, Accumulate) and stmt.var.name not in defined:
            var = outer.get(stmt.var.name)
            if (var is None or stmt.kind not in REDUCIBLE or var.dtype not in REDUCIBLE_DTYPES
                    or reductions.get(var.name, Reduction(var, stmt.kind)).kind != stmt.kind):
                return None
            reductions[var.name] = Reduction(var, stmt.kind)
    if not _rows_independent(loop, body, known):
        return None
    return ParallelPlan(loop, tuple(reductions.values()), work_per_iteration(loop.body))


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


def _rows_independent(loop: Loop, body: list[Stmt], known: set) -> bool:
    """Whether iteration `i` writes only row `i` of whole buffers that the loop never reads,
    and every buffer touched is one of the program's (not a loop state's)."""
    row = Dim.sym(loop.var)
    written = set()
    for stmt in body:
        if isinstance(stmt, Store):
            view = stmt.view
            if not (view.covers(view.buffer) and stmt.index and stmt.index[0] == row):
                return False
            written.add(id(view.buffer))
    for stmt in body:
        if isinstance(stmt, Load | Store) and stmt.view.buffer not in known:
            return False
        if isinstance(stmt, Load) and id(stmt.view.buffer) in written:
            return False
    return True
