"""Index-set splitting: loops that test a wrap-around run as two loops that do not.

A loop pass, `Program -> Program`. A fused `roll` reads its source at
`select(i - s < 0, i - s + n, i - s)`: a data-dependent address, which LLVM does not
vectorise. When a loop's own body tests `%iK + rest < 0` with `rest` fixed for the loop,
the test holds exactly for `%iK < -rest`, so the loop becomes

    %c0 = maximum lo, -rest ; %c1 = minimum %c0, hi
    for %iK in lo..%c1 { body with the test true }
    for %iK in %c1..hi { body with the test false }

where each `select` the test decides is replaced by the index it picks, so each half reads
at affine addresses (`i - s + n`, then `i - s`). The copies keep their variable names:
each is complete and they run one after the other. A loop is split at most MAX_SPLITS
times (W7's stencil, two rolls, becomes four loops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.context import Context, defined_names
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulate,
    ArgUpdate,
    Check,
    Const,
    ExitUnless,
    ForLoop,
    Guarded,
    If,
    Let,
    Load,
    Loop,
    Operand,
    Program,
    Stmt,
    Store,
    Var,
    WhileLoop,
    all_dims,
    as_index,
)

MAX_SPLITS = 3
ZERO = Dim.const(0)
TRUE = Const(True, "bool")


def split_wrapping_loops(program: Program) -> Program:
    """`program` with every loop that tests a wrap-around of its variable split in two (a
    size only a decided `select` read is no longer passed to the kernel)."""
    program.body = _split_all(program.body, Context.of(program))
    used = {s for d in all_dims(program) for s in d.symbols()}
    program.symbols = [s for s in program.symbols if s in used]
    return program


def _split_all(stmts: list[Stmt], ctx: Context) -> list[Stmt]:
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, BLOCK_STMTS):
            stmt.body = _split_all(stmt.body, ctx)
        if isinstance(stmt, Loop):
            out.extend(_split(stmt, ctx, MAX_SPLITS))
        else:
            out.append(stmt)
    return out


def _split(loop: Loop, ctx: Context, budget: int) -> list[Stmt]:
    found = _wrap_test(loop) if budget else None
    if found is None:
        return [loop]
    test, rest = found
    low = Let(ctx.var("i64"), "maximum", (loop.lo, -rest))
    cut = Let(ctx.var("i64"), "minimum", (low.var, loop.hi))
    point = Dim.sym(cut.var.name)
    below = Loop(loop.var, loop.lo, point, _fixed(loop.body, test, True))
    above = Loop(loop.var, point, loop.hi, _fixed(loop.body, test, False))
    return [low, cut, *_split(below, ctx, budget - 1), *_split(above, ctx, budget - 1)]


def _wrap_test(loop: Loop) -> tuple[Let, Dim] | None:
    """The first `lt %iK + rest, 0` in the loop's own body with `rest` fixed for the loop
    (and the test's result never a condition), with `rest`; else None."""
    defined = defined_names(loop.body) | {loop.var}
    for stmt in loop.body:
        if not (isinstance(stmt, Let) and stmt.op == "lt" and stmt.args[1] == ZERO and
                isinstance(stmt.args[0], Dim)):
            continue
        rest = stmt.args[0] - Dim.sym(loop.var)
        if not rest.symbols() & defined and not _used_as_condition(loop.body, stmt.var):
            return stmt, rest
    return None


def _used_as_condition(stmts: list[Stmt], var: Var) -> bool:
    """Whether `var` is a guard or condition somewhere in `stmts` (where no constant fits)."""
    for stmt in stmts:
        if (isinstance(stmt, Load) and stmt.guard == var) or \
                (isinstance(stmt, If | Guarded | ExitUnless) and stmt.cond == var):
            return True
        if isinstance(stmt, BLOCK_STMTS) and _used_as_condition(stmt.body, var):
            return True
    return False


def _fixed(stmts: list[Stmt], test: Let, holds: bool,
           values: dict[str, Operand] | None = None) -> list[Stmt]:
    """A copy of `stmts` for one half: `test` gone, its variable the constant `holds`, and
    each `select` it decides replaced by the operand chosen (so indices become affine)."""
    if values is None:
        values = {test.var.name: Const(holds, "bool")}
    out: list[Stmt] = []
    for stmt in stmts:
        if stmt is test:
            continue
        if isinstance(stmt, Let) and stmt.op == "select" and stmt.args[0] == test.var:
            values[stmt.var.name] = substituted(stmt.args[1 if holds else 2], values)
            continue
        out.append(rewritten(stmt, values, lambda body: _fixed(body, test, holds, values)))
    return out


def substituted(value: Operand, values: dict[str, Operand]) -> Operand:
    """`value` with the variables fixed so far replaced."""
    if isinstance(value, Var):
        return values.get(value.name, value)
    if isinstance(value, Dim):
        return substituted_index(value, values)
    return value


def substituted_index(dim: Dim, values: dict[str, Operand]) -> Dim:
    """`dim` with the variables fixed so far replaced by their values as indices."""
    return dim.substitute({name: as_index(v) for name, v in values.items()
                           if name in dim.symbols()})


def rewritten(stmt: Stmt, values: dict[str, Operand],
              body: Callable[[list[Stmt]], list[Stmt]]) -> Stmt:
    """One statement with the variables of `values` replaced (a guard that became `true`
    dropped) and its body, if it has one, made by `body` (shared with `peeling.py`)."""
    def index(dims: tuple[Dim, ...]) -> tuple[Dim, ...]:
        return tuple(substituted_index(d, values) for d in dims)

    if isinstance(stmt, Let):
        return replace(stmt, args=tuple(substituted(a, values) for a in stmt.args))
    if isinstance(stmt, Load):
        guard = None if stmt.guard is None else substituted(stmt.guard, values)
        return replace(stmt, index=index(stmt.index), guard=None if guard == TRUE else guard)
    if isinstance(stmt, Store):
        return replace(stmt, index=index(stmt.index), value=substituted(stmt.value, values))
    if isinstance(stmt, Accumulate):
        return replace(stmt, value=substituted(stmt.value, values))
    if isinstance(stmt, ArgUpdate):
        return replace(stmt, value=substituted(stmt.value, values),
                       index=substituted_index(stmt.index, values))
    if isinstance(stmt, Check):
        return replace(stmt, index=substituted_index(stmt.index, values),
                       size=substituted_index(stmt.size, values))
    if isinstance(stmt, Guarded):
        return replace(stmt, cond=substituted(stmt.cond, values), body=body(stmt.body),
                       value=substituted(stmt.value, values))
    if isinstance(stmt, If):
        return replace(stmt, cond=substituted(stmt.cond, values), body=body(stmt.body))
    if isinstance(stmt, Loop | ForLoop):
        return replace(stmt, lo=substituted_index(stmt.lo, values),
                       hi=substituted_index(stmt.hi, values), body=body(stmt.body))
    if isinstance(stmt, WhileLoop):
        return replace(stmt, body=body(stmt.body))
    return stmt
