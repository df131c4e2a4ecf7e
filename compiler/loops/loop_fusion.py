"""Loop fusion inside sequential loops: same-extent loops of a scan body become one loop.

A loop pass, `Program -> Program`. Tensor-level fusion (`to_loops/fusion_plan.py`)
inlines a value into its consumer's nest only when every consumer is in one nest, so a
loop body (the step of a `for`, a reverse sweep) whose values feed several nests becomes
a row of elementwise loops over one extent, each writing a temporary the next reads at
the same index (the LSTM's reverse sweep: eight loops over `0..H` per step). In the body
of every `ForLoop` and `WhileLoop` this pass merges them:

    for %i1 in 0..H { ...; store t1[%i1] = %5 }        for %i1 in 0..H {
    check ...                                     ->      ...; store t1[%i1] = %5
    for %i2 in 0..H { %7 = load t1[%i2]; ... }            ...  (%7 is %5: no load)
                                                        }
                                                        check ...

Two loops `A` (earlier) and `B` with the same bounds and no nested loops merge when

- every buffer that one writes and the other touches is accessed by both at one element
  that moves with the loop index (offset `s * i + c` with `s` a nonzero constant or a
  dimension, `c` fixed for the loop): iteration `i` of `B` then reads exactly what
  iteration `i` of `A` wrote, and nothing that a later iteration of `A` writes. Any other
  overlap (another index, a reduction into a shared accumulator, an index computed inside
  the loop) keeps them apart;
- the merged loop writes few enough buffers (`ALIAS_BUDGET`: LLVM checks every pair of a
  buffer written and another one accessed for overlap before its vector loop);
- `A` checks nothing (`B`'s first iterations would run before `A`'s last checks), and
  the statements between them can all move above `A`, or `B` can move above all of them:
  no buffer one writes is touched by the other, no variable one defines is used by the
  other, and nothing that touches memory moves above a bounds check or a while loop's
  exit (a check moves earlier, never later, than what it guards).

The states of a loop (current, next and their two buffers) count as one buffer. In the
merged body a load of what the same iteration stored at the same element is that stored
value (LLVM cannot always see this: temporaries share one workspace), and a bounds check
that repeats one made earlier in the body (a reverse sweep checks `T - 1 - t` once per
array it indexes) is dropped first, so that it does not hold loops apart. Loop nests are
left alone (the nests of `interchange.py` keep their shape), as is the top level, whose
nests the tensor-level plan already fuses.
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.effects import Effects, alias_groups, can_move_above, effects
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Check,
    ForLoop,
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
    walk,
)
from reverie.compiler.loops.splitting import defined_names, rewritten

# LLVM cannot tell the temporaries of one workspace apart, so it vectorises a loop behind
# run-time overlap checks between each buffer written and each other one accessed: merging
# loops multiplies them. A merge making more than this many such pairs is not done (the
# budget that kept the LSTM gradient module's LLVM instructions at or below those of no
# merging: benchmarks/README.md, "Latency", fewer loops in scans).
ALIAS_BUDGET = 16


def fuse_sequential_loops(program: Program) -> Program:
    """`program` with the loops of every sequential loop's body fused where legal."""
    program.body = _visit(program.body, alias_groups(program.body))
    return program


def _visit(stmts: list[Stmt], groups: dict[int, int]) -> list[Stmt]:
    for stmt in stmts:
        if isinstance(stmt, BLOCK_STMTS):
            stmt.body = _visit(stmt.body, groups)
            if isinstance(stmt, ForLoop | WhileLoop):
                stmt.body = _fused(stmt.body, groups)
    return stmts


# ---------------------------------------------------------------- fusion


class _EffectsOf:
    """`effects` of the statements of one body, each computed once (the statements are
    not mutated while the body is fused; merging makes new ones)."""

    def __init__(self, groups: dict[int, int]) -> None:
        self.groups = groups
        self.known: dict[int, tuple[Stmt, Effects]] = {}  # by id, the statement kept alive

    def __call__(self, stmt: Stmt) -> Effects:
        if id(stmt) not in self.known:
            self.known[id(stmt)] = (stmt, effects(stmt, self.groups))
        return self.known[id(stmt)][1]


def _fused(stmts: list[Stmt], groups: dict[int, int]) -> list[Stmt]:
    """One body's statements with its same-extent loops merged (earliest first)."""
    out: list[Stmt] = []
    effects_of = _EffectsOf(groups)
    for stmt in _without_repeated_checks(stmts, effects_of):
        if not (isinstance(stmt, Loop) and _merge_backwards(out, stmt, effects_of)):
            out.append(stmt)
    return out


def _without_repeated_checks(stmts: list[Stmt], effects_of: _EffectsOf) -> list[Stmt]:
    """`stmts` without each check of a condition an earlier check of the list tested (its
    variables unchanged since): it cannot fail where that one passed."""
    out: list[Stmt] = []
    tested: set[tuple[Dim, Dim]] = set()
    for stmt in stmts:
        if isinstance(stmt, Check):
            if (stmt.index, stmt.size) in tested:
                continue
            tested.add((stmt.index, stmt.size))
        else:
            changed = effects_of(stmt).defines
            tested = {t for t in tested if not (t[0].symbols() | t[1].symbols()) & changed}
        out.append(stmt)
    return out


def _merge_backwards(out: list[Stmt], loop: Loop, effects_of: _EffectsOf) -> bool:
    """Merge `loop` into the latest loop of `out` with its bounds, if legal (`out` edited)."""
    loop_effects = effects_of(loop)
    if loop_effects.nested:
        return False
    for k in range(len(out) - 1, -1, -1):
        target = out[k]
        if not (isinstance(target, Loop) and target.lo == loop.lo and target.hi == loop.hi):
            continue
        target_effects = effects_of(target)
        if target_effects.nested or not _same_elements(target, target_effects, loop, loop_effects):
            continue
        if not _within_alias_budget(target_effects, loop_effects):
            continue
        between = [effects_of(s) for s in out[k + 1:]]
        if all(can_move_above(m, target_effects) for m in between):
            out[k:] = [*out[k + 1:], _merged(target, loop)]  # the rest moves above it
            return True
        if all(can_move_above(loop_effects, m) for m in between):
            out[k] = _merged(target, loop)  # `loop` moves above the rest
            return True
    return False


def _within_alias_budget(a: Effects, b: Effects) -> bool:
    """Whether the merged loop's pairs of a buffer written and another one accessed (what
    LLVM checks for overlap at run time) stay within ALIAS_BUDGET."""
    written = {x.group for x in a.accesses + b.accesses if x.write}
    accessed = {x.group for x in a.accesses + b.accesses}
    return len(written) * (len(accessed) - 1) <= ALIAS_BUDGET


def _same_elements(a: Loop, a_effects: Effects, b: Loop, b_effects: Effects) -> bool:
    """Whether every overlap of the two loops' accesses is at one element that moves with
    the index (see the module docstring); `b`'s accesses are read with `a`'s index. `a`
    may not check anything: `b`'s earlier iterations would run before its later checks."""
    if a_effects.checks:
        return False
    if a_effects.defines & (b_effects.uses | b_effects.defines) or \
            b_effects.defines & a_effects.uses:
        return False
    index = Dim.sym(a.var)
    inner = defined_names(a.body) | defined_names(b.body)
    for x in a_effects.accesses:
        for y in b_effects.accesses:
            if x.group != y.group or not (x.write or y.write):
                continue
            if x.flat is None or y.flat is None:
                return False
            flat = y.flat.substitute({b.var: index})
            if flat != x.flat or not _moves_with(flat, a.var, inner):
                return False
    return True


def _moves_with(flat: Dim, var: str, inner: set[str]) -> bool:
    """Whether `flat` is `s * var + c` with a nonzero constant or dimension `s` and `c`
    free of the loop's own variables: distinct iterations touch distinct elements."""
    if flat.symbols() & inner:
        return False
    step = flat.substitute({var: Dim.sym(var) + 1}) - flat
    if var in step.symbols():
        return False
    if step.is_const:
        return step.value != 0
    name = step.symbol()
    return name is not None and not name.startswith("%")


def _merged(a: Loop, b: Loop) -> Loop:
    """`a` followed, in each iteration, by `b`'s body (its index renamed to `a`'s), with the
    loads of what the same iteration stored replaced by the stored values."""
    renamed = _rewrite(b.body, {b.var: Dim.sym(a.var)})
    return replace(a, body=_forward_stores([*a.body, *renamed]))


def _rewrite(stmts: list[Stmt], values: dict[str, Operand]) -> list[Stmt]:
    return [rewritten(s, values, lambda body: _rewrite(body, values)) for s in stmts]


def _forward_stores(stmts: list[Stmt]) -> list[Stmt]:
    """Straight-line `stmts` where a load of an element stored earlier in the list (and not
    overwritten since: any other store to that buffer forgets it) is its stored value."""
    stored: dict[tuple[int, Dim], Var] = {}
    values: dict[str, Operand] = {}
    out: list[Stmt] = []
    for stmt in stmts:
        stmt = rewritten(stmt, values, lambda body: _rewrite(body, values))
        if isinstance(stmt, Load) and stmt.guard is None:
            key = (id(stmt.view.buffer), stmt.view.flat(stmt.index))
            if key in stored and stored[key].dtype == stmt.var.dtype:
                values[stmt.var.name] = stored[key]
                continue
        if isinstance(stmt, Store):
            buffer = id(stmt.view.buffer)
            stored = {k: v for k, v in stored.items() if k[0] != buffer}
            if isinstance(stmt.value, Var):  # a constant could not stand for a condition
                stored[(buffer, stmt.view.flat(stmt.index))] = stmt.value
        elif isinstance(stmt, BLOCK_STMTS) and _stores(stmt.body):
            stored = {}
        out.append(stmt)
    return out


def _stores(stmts: list[Stmt]) -> bool:
    return any(isinstance(s, Store | Matmul | Sort | LinalgCall) for s in walk(stmts))


