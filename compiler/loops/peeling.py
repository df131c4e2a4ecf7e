"""Index-set splitting at bounds tests: a loop runs its interior without its `in_bounds` tests.

A loop pass, `Program -> Program`. A fused `pad` (the adjoint of a slice: W5's
`x[:N-1]`, `x[1:]`) and a `read` in `zero` mode guard their loads with `in_bounds(%iK + c, n)`
(`0 <= %iK + c < n`). Vectorised, each guarded load is a masked load and each guarded value
a select, on every iteration, though the test fails only at a few iterations near the ends.
When a loop's own body tests `in_bounds(%iK + c, n)` with `c` and `n` fixed for the loop,
the test holds exactly for `-c <= %iK < n - c`, so the loop becomes

    %a = min(max(lo, -c1, -c2, ...), hi)       # where every test holds: %a..%b
    %b = max(min(hi, n1 - c1, n2 - c2, ...), %a)
    for %iK in lo..%a { body }                 # the first edge, as before
    for %iK in %a..%b { body, every test true } # the interior: no guards, plain loads
    for %iK in %b..hi { body }                 # the last edge, as before

In the interior copy each test's variable is the constant `true`: `and` with it is its other
operand, a guarded value (`Guarded`) is its body followed by its value, a guarded load is a
plain load and an `if` on it is its body. Bounds whose order is known (their difference is a
constant, as in `max(0, 1)` or `min(N, N - 1)`) are folded; the others are `maximum`/`minimum`
statements before the loops. The copies keep their variable names: each is complete and they
run one after the other. Only tests in the loop's own body count (a nested loop is split at
its own variable's tests), so the code grows by at most two copies of each loop.
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.context import Context
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Guarded,
    If,
    Let,
    Loop,
    Operand,
    Program,
    Stmt,
)
from reverie.compiler.loops.splitting import TRUE, defined_names, rewritten, substituted

MIN_TRIPS = 16  # a loop of fewer (constant) iterations is left whole: too short to gain


def split_guarded_loops(program: Program) -> Program:
    """`program` with every loop whose body tests `in_bounds` of its variable split into
    its two edges and its interior (innermost loops first)."""
    program.body = _split_all(program.body, Context.of(program))
    return program


def _split_all(stmts: list[Stmt], ctx: Context) -> list[Stmt]:
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, BLOCK_STMTS):
            stmt.body = _split_all(stmt.body, ctx)
        if isinstance(stmt, Loop):
            out.extend(_split(stmt, ctx))
        else:
            out.append(stmt)
    return out


def _split(loop: Loop, ctx: Context) -> list[Stmt]:
    trips = loop.hi - loop.lo
    tests = [] if trips.is_const and trips.value < MIN_TRIPS else _bounds_tests(loop)
    if not tests:
        return [loop]
    before: list[Stmt] = []

    def bound(kind: str, candidates: list[Dim]) -> Dim:
        """The maximum (or minimum) of `candidates`: a Dim where their order is known, else
        a statement's variable."""
        folded = _fold(kind, candidates)
        for other in folded[1:]:
            step = Let(ctx.var("i64"), kind, (folded[0], other))
            before.append(step)
            folded[0] = Dim.sym(step.var.name)
        return folded[0]

    low = bound("maximum", [loop.lo, *(-c for _, c, _ in tests)])
    first = loop.lo if low == loop.lo else bound("minimum", [low, loop.hi])
    high = bound("minimum", [loop.hi, *(n - c for _, c, n in tests)])
    last = loop.hi if high == loop.hi else bound("maximum", [high, first])
    holding = {test.var.name: TRUE for test, _, _ in tests}
    pieces = [replace(loop, hi=first), Loop(loop.var, first, last, _holding(loop.body, holding)),
              replace(loop, lo=last)]
    return before + [p for p in pieces if not (p.hi - p.lo).is_const or (p.hi - p.lo).value > 0]


def _bounds_tests(loop: Loop) -> list[tuple[Let, Dim, Dim]]:
    """Each `in_bounds(%iK + c, n)` of the loop's own body with `c` and `n` fixed for the
    loop that fails only within a fixed number of iterations from either end (`-c - lo` and
    `hi - (n - c)` are constants), as (statement, c, n). A test that holds only on a short
    stretch (`in_bounds(%iK, 1)` in `0..N`) would leave no interior; it stays a test."""
    variable = Dim.sym(loop.var)
    defined = defined_names(loop.body) | {loop.var}
    tests = []
    for stmt in loop.body:
        if not (isinstance(stmt, Let) and stmt.op == "in_bounds"
                and all(isinstance(a, Dim) for a in stmt.args)):
            continue
        index, size = stmt.args
        offset = index - variable
        near_ends = (-offset - loop.lo).is_const and (loop.hi - (size - offset)).is_const
        if near_ends and not (offset.symbols() | size.symbols()) & defined:
            tests.append((stmt, offset, size))
    return tests


def _fold(kind: str, candidates: list[Dim]) -> list[Dim]:
    """`candidates` without those that cannot be the maximum (`kind` "maximum") or minimum:
    where two differ by a constant, the smaller (larger) one goes."""
    kept: list[Dim] = []
    for candidate in candidates:
        if any(_beats(kind, k, candidate) for k in kept):
            continue
        kept = [k for k in kept if not _beats(kind, candidate, k)] + [candidate]
    return kept


def _beats(kind: str, a: Dim, b: Dim) -> bool:
    """Whether `a` is known to be at least (for "maximum"; at most for "minimum") `b`."""
    difference = a - b
    if not difference.is_const:
        return False
    return difference.value >= 0 if kind == "maximum" else difference.value <= 0


def _holding(stmts: list[Stmt], values: dict[str, Operand]) -> list[Stmt]:
    """A copy of `stmts` where the variables of `values` are those operands (the tests:
    `true`), with what a true condition decides resolved."""
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, Let) and stmt.var.name in values:
            continue
        if isinstance(stmt, Let) and stmt.op == "and":
            args = [substituted(a, values) for a in stmt.args]
            if TRUE in args:
                values[stmt.var.name] = args[1] if args[0] == TRUE else args[0]
                continue
        if isinstance(stmt, Guarded) and substituted(stmt.cond, values) == TRUE:
            out += _holding(stmt.body, values)
            values[stmt.var.name] = substituted(stmt.value, values)
            continue
        if isinstance(stmt, If) and substituted(stmt.cond, values) == TRUE:
            out += _holding(stmt.body, values)
            continue
        out.append(rewritten(stmt, values, lambda body: _holding(body, values)))
    return out
