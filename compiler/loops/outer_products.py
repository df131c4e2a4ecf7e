"""Outer products inside sequential loops are computed where they are read, not by a matmul.

A loop pass, `Program -> Program`. The reverse sweep of a recurrence
accumulates the adjoint of each weight matrix as a carried state, one outer product per
step (`wx_bar += xs[t]ᵀ @ z_bar`: a `[D, 1] @ [1, 4H]` product), lowered as a matmul
helper call into a temporary and then an elementwise loop adding it to the carry:

    matmul t40 = xs{offset = %51 * D, strides = [1, 0]} @ t38{strides = [0, 1]}
    for %i48 in 0..D { for %i49 in 0..4 * H {
        %135 = load s6.cur[%i48, %i49]; %136 = load t40[%i48, %i49]
        %137 = add %135, %136; store s6.next[%i48, %i49] = %137 } }

A product whose inner dimension is the constant 1 has one term per element, so in the
body of every `ForLoop` and `WhileLoop` each load `t40[i, j]` becomes `a[i, 0] * b[0, j]`,
read where the product would have been:

    for %i48 in 0..D { for %i49 in 0..4 * H {
        %135 = load s6.cur[%i48, %i49]; %a = load xs[%51, %i48]; %b = load t38[%i49]
        %136 = mul %a, %b; %137 = add %135, %136; store s6.next[%i48, %i49] = %136 } }

and the product's temporary, unread, goes with its matmul (`dead_code.py`). The helper
call (with its packing of both operands) and a `[D, 4H]` temporary written and read back
every step are gone: the accumulation is one fused loop over the carry. It applies when
the product is a whole temporary of rank 2, every load of it is a plain load of the whole
buffer in the statements after it in the same body, and nothing writes the product or
its operands in between (those statements included). The element is the one product
the matmul computes (the same rounding; only the sign of a zero sum may differ, as the
kernel starts each element from +0.0).
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.context import Context
from reverie.compiler.loops.effects import alias_groups, effects
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    ForLoop,
    Let,
    Load,
    Matmul,
    Program,
    Stmt,
    WhileLoop,
    walk,
)

ZERO, ONE = Dim.const(0), Dim.const(1)


def inline_outer_products(program: Program) -> Program:
    """`program` with the outer products of every sequential loop's body read in place."""
    ctx = Context.of(program)
    groups = alias_groups(program.body)
    loads = _loads_per_buffer(program.body)
    for stmt in program.walk():
        if isinstance(stmt, ForLoop | WhileLoop):
            _inline_in(stmt.body, groups, loads, ctx)
    return program


def _loads_per_buffer(stmts: list[Stmt]) -> dict[int, int]:
    """How many loads (anywhere) read each buffer, by id; matmul and sort operands count."""
    counts: dict[int, int] = {}
    for stmt in walk(stmts):
        read = [stmt.view.buffer] if isinstance(stmt, Load) else \
            [stmt.a.buffer, stmt.b.buffer] if isinstance(stmt, Matmul) else []
        for buffer in read:
            counts[id(buffer)] = counts.get(id(buffer), 0) + 1
    return counts


def _is_outer_product(stmt: Stmt) -> bool:
    return isinstance(stmt, Matmul) and len(stmt.a.shape) == 2 and stmt.a.shape[1] == ONE \
        and stmt.out.buffer.role == "temp" and stmt.out.covers(stmt.out.buffer)


def _inline_in(body: list[Stmt], groups: dict[int, int], loads: dict[int, int],
               ctx: Context) -> None:
    """Rewrite, in one body, the loads of each outer product that qualifies (see above)."""
    for k, product in enumerate(body):
        if not _is_outer_product(product):
            continue
        assert isinstance(product, Matmul)
        touched = {groups.get(id(v.buffer), id(v.buffer)) for v in (product.a, product.b,
                                                                      product.out)}
        found, last = 0, k
        for j in range(k + 1, len(body)):
            if any(a.write and a.group in touched for a in effects(body[j], groups).accesses):
                break
            here = _count_loads(body[j], product.out.buffer)
            if here is None:
                break
            found, last = found + here, j if here else last
        if found == 0 or found != loads.get(id(product.out.buffer)):
            continue
        body[k + 1:last + 1] = _rewritten(body[k + 1:last + 1], product, ctx)


def _count_loads(stmt: Stmt, buffer: object) -> int | None:
    """How many plain whole-buffer loads of `buffer` `stmt` holds (None: one it cannot
    rewrite, guarded or through another view)."""
    count = 0
    for s in walk([stmt]):
        if isinstance(s, Load) and s.view.buffer is buffer:
            if s.guard is not None or not s.view.covers(buffer):
                return None
            count += 1
    return count


def _rewritten(stmts: list[Stmt], product: Matmul, ctx: Context) -> list[Stmt]:
    """`stmts` with each load of the product's element [i, j] made `a[i, 0] * b[0, j]`."""
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, Load) and stmt.view.buffer is product.out.buffer:
            out += _element(stmt, product, ctx)
        elif isinstance(stmt, BLOCK_STMTS):
            out.append(replace(stmt, body=_rewritten(stmt.body, product, ctx)))
        else:
            out.append(stmt)
    return out


def _element(load: Load, product: Matmul, ctx: Context) -> list[Stmt]:
    """The loads of one term of the product and their product, into the load's variable."""
    row, column = load.index
    left, right = ctx.var(product.a.buffer.dtype), ctx.var(product.b.buffer.dtype)
    return [Load(left, product.a, (row, ZERO)), Load(right, product.b, (ZERO, column)),
            Let(load.var, "mul", (left, right))]

