"""What a loop-IR statement touches: the buffers it reads and writes (at which element),
the variables it defines and uses, and whether it can stop (a check, a while loop's exit).

Consumed by the passes that move or merge statements (`loop_fusion.py`,
`outer_products.py`). The two buffers of a loop state and its current/next pointers are
one buffer here (`alias_groups`): they are the same memory at different iterations. The
code generator gives each such region its own alias scope (`alias_regions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulate,
    ArgUpdate,
    Buffer,
    Check,
    ExitUnless,
    ForLoop,
    Let,
    LinalgCall,
    Load,
    Loop,
    Matmul,
    Operand,
    Program,
    Sort,
    Stmt,
    Store,
    Var,
    WhileLoop,
    statement_dims,
    walk,
)
from reverie.compiler.loops.splitting import defined_names


def alias_groups(stmts: list[Stmt]) -> dict[int, int]:
    """For every buffer of a loop state (by id): one key shared by the state's buffers."""
    groups: dict[int, int] = {}
    for stmt in walk(stmts):
        if isinstance(stmt, ForLoop | WhileLoop):
            for state in stmt.states:
                for buffer in (state.current, state.next, state.first, state.second):
                    groups[id(buffer)] = id(state.first)
    return groups


# more regions than this get no alias scopes: each region's noalias list names all others
MAX_ALIAS_SCOPES = 64


def alias_regions(program: Program) -> dict[int, int] | None:
    """For every buffer of `program` (by id), its memory region: its own id, or for a loop
    state's buffers and pointers the key `alias_groups` gives them. Distinct regions never
    overlap where one is written: outputs and the workspace are fresh allocations of the
    call, temporaries disjoint windows of the workspace, and inputs are only read (two
    inputs may be the same array). None when there are more than MAX_ALIAS_SCOPES."""
    regions = {id(b): id(b) for b in [*program.inputs, *program.outputs, *program.temps]}
    regions.update(alias_groups(program.body))
    return regions if len(set(regions.values())) <= MAX_ALIAS_SCOPES else None


@dataclass(frozen=True)
class Access:
    """One read or write of a buffer: `flat` is its element offset, None for "anywhere"."""

    group: int
    write: bool
    flat: Dim | None


@dataclass
class Effects:
    """What one statement (with its body) reads, writes, defines and uses."""

    accesses: list[Access]
    defines: set[str]   # variables it defines or updates that outlive it
    uses: set[str]      # variables (and index symbols) it reads
    checks: bool        # whether it can stop with an error or leave a while loop
    exits: bool         # whether it can leave a while loop (nothing moves across it)
    nested: bool        # whether it holds a loop or a runtime call (never fused into)


def helper_buffers(s: Matmul | Sort | LinalgCall) -> list[tuple[Buffer, bool]]:
    """The buffers a helper call reads (False) and writes (True), whole."""
    if isinstance(s, Matmul):
        return [(s.a.buffer, False), (s.b.buffer, False), (s.out.buffer, True), (s.pack, True)]
    if isinstance(s, Sort):
        return [(s.keys.buffer, False), (s.out.buffer, True), (s.scratch, True)]
    # in place: every buffer read, then those it writes written
    return [(b, False) for b in s.buffers] + [(b, True) for b in s.written]


def effects(stmt: Stmt, groups: dict[int, int]) -> Effects:
    """The effects of `stmt` and its body (`groups`: from `alias_groups`)."""
    inner = walk([stmt])
    local = defined_names(stmt.body) if isinstance(stmt, BLOCK_STMTS) else set()
    if isinstance(stmt, Loop | ForLoop | WhileLoop):
        local.add(stmt.var)
    accesses: list[Access] = []
    uses: set[str] = set()
    defines: set[str] = set()

    def touch(buffer: Buffer, write: bool, flat: Dim | None) -> None:
        accesses.append(Access(groups.get(id(buffer), id(buffer)), write, flat))

    for s in inner:
        uses |= reads(s)
        if isinstance(s, Load):
            touch(s.view.buffer, False, s.view.flat(s.index))
        elif isinstance(s, Store):
            touch(s.view.buffer, True, s.view.flat(s.index))
        elif isinstance(s, Matmul | Sort | LinalgCall):
            for buffer, write in helper_buffers(s):
                touch(buffer, write, None)
        elif isinstance(s, ForLoop | WhileLoop):
            for state in s.states:
                touch(state.first, True, None)
        if isinstance(s, Accumulate):
            defines.add(s.var.name)
        elif isinstance(s, ArgUpdate):
            defines |= {s.best.name, s.best_index.name}
    defines = (defines | defined_names([stmt])) - local
    checks = any(isinstance(s, Check | ExitUnless) for s in inner)
    exits = any(isinstance(s, ExitUnless) for s in inner)
    nested = any(isinstance(s, Loop | ForLoop | WhileLoop | Matmul | Sort | LinalgCall)
                 for s in inner[1:])
    return Effects(accesses, defines, uses - local, checks, exits, nested)


def reads(stmt: Stmt) -> set[str]:
    """The names `stmt` (not its body) reads: its scalar operands' and the symbols of its
    index expressions (dimension names among them)."""
    return {o.name for o in operands(stmt) if isinstance(o, Var)} | \
        {s for d in statement_dims(stmt) for s in d.symbols()}


def operands(stmt: Stmt) -> list[Operand]:
    """The scalar operands `stmt` reads (not its nested body's)."""
    if isinstance(stmt, Let):
        return list(stmt.args)
    out: list[Operand] = []
    for name in ("value", "guard", "cond"):
        operand = getattr(stmt, name, None)
        if operand is not None:
            out.append(operand)
    return out


def can_move_above(mover: Effects, passed: Effects) -> bool:
    """Whether a statement may run before one it follows: nothing moves above a check (it
    may guard what follows) unless it only computes scalars or checks, and nothing moves
    across a while loop's exit (what runs before it in the last iteration may be recorded)."""
    if mover.exits or passed.exits or (passed.checks and (mover.accesses or mover.checks)):
        return False
    a, b = mover, passed
    if a.defines & (b.uses | b.defines) or b.defines & a.uses:
        return False
    return not any(x.group == y.group and (x.write or y.write)
                   for x in a.accesses for y in b.accesses)
