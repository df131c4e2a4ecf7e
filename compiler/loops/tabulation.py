"""Tabulation: a loop over a bf16/f16 array computes its expensive values once per possible
element (65,536 of them) instead of once per element.

A loop pass, `Program -> Program`. A bf16 or f16 element has only 2^16 values, so where a
loop nest's expensive work (`tanh`, `sin`, `exp`, ...: the math library's functions)
depends on one such element alone, that work is a function of 16 bits. For a nest of many
more iterations than that, computing the function once for every bit pattern, into a
table, then looking each element's result up costs less than computing it per element:
W9's gradient (`tanh(x) * sin(x) + exp(-x*x)` and its derivative over 10M bf16 values)
does four transcendentals per element where the lookups do two loads. The results are the
same bits: a table's entries are computed by the very statements they stand for, on the
very values (`from_bits(k)` is the bf16 value whose bits are `k`; an element whose bits
are `k` loads as that value, and `bits` gives its `k`).

    for %i0 in 0..N {                     %7 = ge N, 1048576
      %0 = load x[%i0]                    if %7 {
      %1 = cast %0 : f32                    for %i1 in 0..65536 {        # the table
      %2 = tanh %1 : f32                      %0 = from_bits %i1 : bf16
      %3 = sin %1 : f32                       %1 = cast %0 : f32
      %4 = mul %2, %3 : f32         ──▶       ... %2, %3, %4 ...
      %5 = cast %4 : bf16                     %5 = cast %4 : bf16
      store out0[%i0] = %5                    store t0[%i1] = %5
    }                                       }
                                            for %i0 in 0..N {            # the lookups
                                              %0 = load x[%i0]
                                              %6 = bits %0 : i64
                                              %5 = load t0[%6]
                                              store out0[%i0] = %5
                                            }
                                          }
                                          %8 = not %7
                                          if %8 { the loop as it was }

What is tabulated: the innermost body of a perfect nest (each loop's body the next loop;
the innermost's lets, unguarded loads, stores and accumulates only) may read one narrow
element, a load of a bf16/f16 buffer the body does not write. Its `Let`s computed from that
element and from values from outside the nest alone (no loop index, no other load, no
accumulator) form the element's set; a widening cast (f32 → f64, what a sum accumulates in)
stays out of it, so that the table holds the narrower value. The values of the set that
the rest of the body reads get a table where an expensive op went into them (the others,
casts of the element, are recomputed). The element chosen is the one with the most
expensive ops in its set, at least `MIN_EXPENSIVE` of them, else the nest stays as it was.
The tables cost 65,536 evaluations, many at inputs slower than typical data (a sin of 1e30
reduces its argument the long way; all 65,536 bf16 values cost about as much as 430,000
normally distributed ones), so the nest runs tabulated only when its trip count is at
least `MIN_TRIPS`, decided at run time; a smaller one runs as it was. A loop inside
another `Loop` is left alone: a table built per row of a parallel loop would be written by
all its threads at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.loops.context import Context, defined_names
from reverie.compiler.loops.effects import reads
from reverie.compiler.loops.ir import (
    Accumulate,
    Const,
    ForLoop,
    If,
    Let,
    Load,
    Loop,
    Program,
    Stmt,
    Store,
    Var,
    View,
    WhileLoop,
    perfect_nest,
    straight_line,
)

TABLE_SIZE = 1 << 16  # one entry per 16-bit pattern
MIN_TRIPS = 1 << 20  # smaller nests compute per element (the module docstring)
MIN_EXPENSIVE = 2  # a set with fewer expensive ops costs about what its lookups do
# math-library ops that x86 computes in one instruction: no cheaper looked up
ONE_INSTRUCTION = frozenset({"sqrt", "floor", "ceil", "deg2rad", "rad2deg"})


def tabulate_narrow_elements(program: Program) -> Program:
    """`program` with each nest whose expensive work depends on one bf16/f16 element alone
    computing it through tables when the nest is long (the module docstring)."""
    program.body = _rewrite(program.body, Context.of(program))
    return program


def _rewrite(stmts: list[Stmt], ctx: Context) -> list[Stmt]:
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            out.extend(_tabulated(stmt, ctx) or [stmt])
            continue
        if isinstance(stmt, ForLoop | WhileLoop | If):
            stmt.body = _rewrite(stmt.body, ctx)
        out.append(stmt)
    return out


def _tabulated(outer: Loop, ctx: Context) -> list[Stmt] | None:
    """The statements running `outer`'s nest through tables when it is long and as it is
    otherwise; None when its body has nothing worth a table."""
    nest = perfect_nest(outer)
    body = nest[-1].body
    if not straight_line(body):
        return None
    varying = defined_names(body) | {loop.var for loop in nest} | \
        {s.var.name for s in body if isinstance(s, Accumulate)}
    written = {id(s.view.buffer) for s in body if isinstance(s, Store)}
    elements: dict[tuple[int, View, tuple[Dim, ...]], list[Load]] = {}
    for stmt in body:
        if isinstance(stmt, Load) and stmt.view.buffer.dtype in STORAGE_DTYPES and \
                id(stmt.view.buffer) not in written:
            elements.setdefault((id(stmt.view.buffer), stmt.view, stmt.index), []).append(stmt)
    best = max((_element_set(body, loads, varying) for loads in elements.values()),
               key=lambda found: found.cost, default=None)
    if best is None or best.cost < MIN_EXPENSIVE:
        return None
    loads, computed = best.loads, best.computed
    tables = {let.var.name: ctx.temp(let.var.dtype, (Dim.const(TABLE_SIZE),))
              for let in _worth_a_table(body, best)}
    bits = ctx.var("i64")
    lookups: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, Let) and stmt.var.name in tables:
            lookups.append(Load(stmt.var, View.of(tables[stmt.var.name]), (Dim.sym(bits.name),)))
            continue
        lookups.append(stmt)
        if stmt is loads[0]:
            lookups.append(Let(bits, "bits", (stmt.var,)))
    lookups = _without_unread(lookups, {let.var.name for let in computed})
    entry_var = ctx.fresh("%i")
    entry = Dim.sym(entry_var)
    table_loop = Loop(entry_var, Dim.const(0), Dim.const(TABLE_SIZE), [
        *(Let(load.var, "from_bits", (entry,)) for load in loads), *computed,
        *(Store(View.of(table), (entry,), Var(name, table.dtype))
          for name, table in tables.items())])
    lookup_nest = replace(nest[-1], body=lookups)
    for loop in reversed(nest[:-1]):
        lookup_nest = replace(loop, body=[lookup_nest])
    trips = Dim.const(1)
    for loop in nest:
        trips = trips * (loop.hi - loop.lo)
    if trips.is_const:
        return [table_loop, lookup_nest] if trips.value >= MIN_TRIPS else None
    long, short = ctx.var("bool"), ctx.var("bool")
    return [Let(long, "ge", (trips, Const(MIN_TRIPS, "i64"))), If(long, [table_loop, lookup_nest]),
            Let(short, "not", (long,)), If(short, [outer])]


@dataclass
class _ElementSet:
    """What one narrow element's loads feed: `computed`, the `Let`s of the body computed
    from the element, constants and values from outside the nest alone, in order;
    `costly`, those of them an expensive op on the element went into, and `cost`, the
    number of such ops."""

    loads: list[Load]
    computed: list[Let]
    costly: set[str]
    cost: int


def _element_set(body: list[Stmt], loads: list[Load], varying: set[str]) -> _ElementSet:
    """The set of the element `loads` read (a widening cast to f64 left out of it)."""
    own = {load.var.name for load in loads}
    found = _ElementSet(loads, [], set(), 0)
    element = set(own)  # the values that depend on the element
    for stmt in body:
        if not isinstance(stmt, Let) or _widening(stmt):
            continue
        names = reads(stmt)
        if (names - own) & varying:
            continue
        own.add(stmt.var.name)
        found.computed.append(stmt)
        if names & element:
            element.add(stmt.var.name)
            found.cost += _expensive(stmt)
            if _expensive(stmt) or names & found.costly:
                found.costly.add(stmt.var.name)
    return found


def _worth_a_table(body: list[Stmt], found: _ElementSet) -> list[Let]:
    """The costly `Let`s of the element's set that the rest of the body reads (the others
    are recomputed where they are read)."""
    members = {let.var.name for let in found.computed}
    read = set().union(*(reads(stmt) for stmt in body
                         if not (isinstance(stmt, Let) and stmt.var.name in members)))
    return [let for let in found.computed if let.var.name in read & found.costly]


def _without_unread(body: list[Stmt], members: set[str]) -> list[Stmt]:
    """`body` without the `Let`s of `members` that nothing after them reads (a table
    stands for them now; the dead-code pass goes by name, and their names live on in the
    table's loop)."""
    kept: list[Stmt] = []
    read: set[str] = set()
    for stmt in reversed(body):
        if isinstance(stmt, Let) and stmt.var.name in members and stmt.var.name not in read:
            continue
        kept.append(stmt)
        read |= reads(stmt)
    return kept[::-1]


def _expensive(let: Let) -> bool:
    """Whether `let` is a math-library function (more than a few instructions)."""
    row = ELEMENTWISE.get(let.op)
    return row is not None and row.math and not row.cheap and let.op not in ONE_INSTRUCTION


def _widening(let: Let) -> bool:
    """Whether `let` widens an f32 to f64 (exact: a table holds the f32)."""
    return let.op == "cast" and let.var.dtype == "f64" and isinstance(let.args[0], Var) and \
        let.args[0].dtype == "f32"
