"""Dead-temporary and dead-scalar elimination: what nothing reads is not computed.

A loop pass, `Program -> Program`. A temporary that is written (by `Store`s, a
`Matmul` or a `Sort`) but never read (no `Load`, matmul operand, sort key or `LinalgCall`
buffer, which its helper reads in place, anywhere, inside sequential loops included) is
dropped with every statement writing it. The typical
one is a `for_history` record of a state that the reverse sweep never reads (the LSTM's
`hs` carry copied whole into a `[T, T, H]` history every step, then its unused rows
zeroed: two loop nests and O(T²·H) stores for nothing).

Then the scalar statements whose variable is used nowhere (`Let`, `Load`, `Guarded`, an
`Accumulator` with its `Accumulate`s) go, and the `Loop`s and `If`s left empty with them,
repeatedly, since a removed store can leave a load and the values it fed unused, and their
temporary then unread. Checks, the states of sequential loops (`first`/`second` buffers
and `cur`/`next`), inputs and outputs always stay: only what cannot be observed is removed.
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.loops.effects import reads
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulate,
    Accumulator,
    ArgUpdate,
    Buffer,
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
    WhileLoop,
    walk,
)


def remove_dead_code(program: Program) -> Program:
    """`program` without its unread temporaries and unused scalar statements."""
    while True:
        dead = _unread_temps(program)
        removed: list[Stmt] = []
        program.body = _without(program.body, dead, _used_names(program.body), removed)
        program.temps = [t for t in program.temps if t not in dead]
        if not dead and not removed:
            return program


def _unread_temps(program: Program) -> set[Buffer]:
    """The temporaries nothing reads (and no loop carries)."""
    live: set[int] = set()
    for stmt in program.walk():
        if isinstance(stmt, Load):
            live.add(id(stmt.view.buffer))
        elif isinstance(stmt, Matmul):
            live |= {id(stmt.a.buffer), id(stmt.b.buffer), id(stmt.pack)}
        elif isinstance(stmt, Sort):
            live |= {id(stmt.keys.buffer), id(stmt.scratch)}
        elif isinstance(stmt, LinalgCall):   # reads every buffer it writes
            live |= {id(b) for b in stmt.buffers}
        if isinstance(stmt, ForLoop | WhileLoop):
            live |= {id(b) for s in stmt.states for b in (s.first, s.second)}
    return {t for t in program.temps if id(t) not in live}


def _used_names(stmts: list[Stmt]) -> set[str]:
    """Every variable name some statement reads (an accumulator's own update aside)."""
    used: set[str] = set()
    for stmt in walk(stmts):
        used |= reads(stmt)
        if isinstance(stmt, ArgUpdate):
            used |= {stmt.best.name, stmt.best_index.name}
    return used


def _without(stmts: list[Stmt], dead: set[Buffer], used: set[str],
             removed: list[Stmt]) -> list[Stmt]:
    """`stmts` without the writes of `dead` buffers, the unused scalars and the loops and
    ifs left empty (each appended to `removed`); block statements with a changed body are
    copies, so statements shared with other programs are not mutated."""
    out: list[Stmt] = []
    for stmt in stmts:
        if _is_dead(stmt, dead, used):
            removed.append(stmt)
            continue
        if isinstance(stmt, BLOCK_STMTS):
            before = len(removed)
            body = _without(stmt.body, dead, used, removed)
            if not body and isinstance(stmt, Loop | If):
                removed.append(stmt)
                continue
            if len(removed) > before:
                stmt = replace(stmt, body=body)
        out.append(stmt)
    return out


def _is_dead(stmt: Stmt, dead: set[Buffer], used: set[str]) -> bool:
    """Whether `stmt` writes a dead buffer or defines (or updates) an unused variable."""
    if isinstance(stmt, Store):
        return stmt.view.buffer in dead
    if isinstance(stmt, Matmul | Sort):
        return stmt.out.buffer in dead
    if isinstance(stmt, Let | Load | Guarded | Accumulator | Accumulate):
        return stmt.var.name not in used
    return False
