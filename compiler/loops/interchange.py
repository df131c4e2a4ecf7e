"""Loop interchange for reductions whose summed index is the strided one.

A loop pass, `Program -> Program`. A reducing generic lowers to its output
loops around an accumulator and the reduction loop. When the reduction runs over a
leading axis of what it reads (`mu_bar[k, i] = sum[n](x[n, k, i])`, reverse mode's
adjoint of a broadcast), every step of the inner loop jumps a whole row, and nothing
vectorises. Such a nest (sum or product, the accumulator of the output's own dtype)

    for %o... { %acc = init; for %r { body; %acc = sum %acc, %v }; store out[%o...] = %acc }

becomes an initialisation and the same nest with the reduction loop outermost, accumulating
in the output itself:

    for %o... { store out[%o...] = init }
    for %r { for %o... { body; %a = load out[%o...]; %b = add %a, %v; store out[%o...] = %b } }

Each element still adds its terms in the same order (r ascending), so results are
unchanged; the innermost loop now walks the rows contiguously. It fires only when some load
is contiguous in the innermost output index and none is contiguous in the reduction index,
the bounds do not depend on the loop indices, and the body neither reads the output nor
does anything but loads and scalar operations.
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.context import Context
from reverie.compiler.loops.ir import (
    Accumulate,
    Accumulator,
    Let,
    Load,
    Loop,
    Program,
    Stmt,
    Store,
    View,
)

COMBINE = {"sum": "add", "prod": "mul"}  # the reductions rewritten, as scalar ops


def interchange_reductions(program: Program) -> Program:
    """`program` with each strided reduction nest of its top level interchanged."""
    ctx = Context.of(program)
    body: list[Stmt] = []
    for stmt in program.body:
        nest = _strided_reduction(stmt)
        body += _interchanged(nest, ctx) if nest else [stmt]
    program.body = body
    return program


class _Nest:
    """The parts of a reduction nest: output loops, accumulator, reduction loop, store."""

    def __init__(self, outer: list[Loop], accumulator: Accumulator, reduction: Loop,
                 store: Store) -> None:
        self.outer, self.accumulator, self.reduction, self.store = \
            outer, accumulator, reduction, store


def _strided_reduction(stmt: Stmt) -> _Nest | None:
    outer: list[Loop] = []
    while isinstance(stmt, Loop):
        outer.append(stmt)
        if len(stmt.body) != 1:
            break
        stmt = stmt.body[0]
    if not outer or len(outer[-1].body) != 3:
        return None
    accumulator, reduction, store = outer[-1].body
    if not (isinstance(accumulator, Accumulator) and isinstance(reduction, Loop)
            and isinstance(store, Store) and store.value == accumulator.var):
        return None
    nest = _Nest(outer, accumulator, reduction, store)
    return nest if _rewritable(nest) and _profitable(nest) else None


def _rewritable(nest: _Nest) -> bool:
    variables = {loop.var for loop in nest.outer} | {nest.reduction.var}
    if any((loop.lo.symbols() | loop.hi.symbols()) & variables
           for loop in (*nest.outer, nest.reduction)):
        return False
    if nest.store.index != tuple(Dim.sym(loop.var) for loop in nest.outer):
        return False
    if nest.accumulator.var.dtype != nest.store.view.buffer.dtype:
        return False
    updates = [s for s in nest.reduction.body if isinstance(s, Accumulate)]
    if len(updates) != 1 or updates[0].var != nest.accumulator.var or \
            updates[0].kind not in COMBINE:
        return False
    output, total = nest.store.view.buffer, nest.accumulator.var
    return all((isinstance(s, Let) and total not in s.args) or isinstance(s, Accumulate) or
               (isinstance(s, Load) and s.guard is None and s.view.buffer is not output)
               for s in nest.reduction.body)


def _profitable(nest: _Nest) -> bool:
    loads = [s for s in nest.reduction.body if isinstance(s, Load)]
    one = Dim.const(1)
    inner = nest.outer[-1].var
    return any(s.view.step(s.index, inner) == one for s in loads) and \
        not any(s.view.step(s.index, nest.reduction.var) == one for s in loads)


def _interchanged(nest: _Nest, ctx: Context) -> list[Stmt]:
    view, index = nest.store.view, nest.store.index
    init = _wrap(nest.outer, [Store(view, index, nest.accumulator.init)])
    body: list[Stmt] = []
    for stmt in nest.reduction.body:
        if isinstance(stmt, Accumulate):
            body += _accumulate_in_memory(view, index, stmt, ctx)
        else:
            body.append(stmt)
    main = replace(nest.reduction, body=[_wrap(nest.outer, body)])
    return [init, main]


def _accumulate_in_memory(view: View, index: tuple[Dim, ...], update: Accumulate,
                          ctx: Context) -> list[Stmt]:
    """`view[index] = view[index] <kind> value`."""
    dtype = update.var.dtype
    old, new = ctx.var(dtype), ctx.var(dtype)
    return [Load(old, view, index), Let(new, COMBINE[update.kind], (old, update.value)),
            Store(view, index, new)]


def _wrap(loops: list[Loop], body: list[Stmt]) -> Loop:
    """The loops (outermost first) around `body`, as new Loop statements."""
    for loop in reversed(loops):
        body = [replace(loop, body=body)]
    return body[0]  # type: ignore[return-value]
