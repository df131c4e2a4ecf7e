"""Contractions to matrix products: a `generic` that sums a product over indices becomes a
(batched) `matmul`, so it runs in the matrix kernel whatever order its indices were written in.

Contract: `contract_function(fn)` returns a function computing the same values (up to float
rounding order) in which every profitable contraction at the top level of the body is
rewritten; it runs before fusion (pipeline stage `fuse`, REVERIE_PRINT_IR pass `contract`).

A contraction is a sum-reducing float `generic` whose body yields a product of factors,
each factor a scalar expression of some of the loop indices (a `read`, `exp(read)`, ...):

    y[o...] = sum[r...](prod_f  f(idx_f))       idx_f ⊆ o ∪ r

The factors that use no reduction index are "post" factors (multiplied in afterwards); the
others are split into two groups A and B such that every reduction index r is used by both.
Writing the output indices of both groups as batch (b), of A only as rows (m), of B only as
columns (n), and the reduction indices as c:

    y[o] = post(o) · P[b, m, n],   P[b, m, n] = sum_c A[b, m, c] · B[b, c, n]

A and B are materialised in that layout by two plain `generic`s (transposes with the
factors of each group multiplied in), reshaped to 3-D (or 2-D without batch indices) and
multiplied by `matmul`; one more `generic` reads P back in the output's index order. The
split chosen is the one whose larger group uses the fewest indices (then the fewest in
all). Only true matrix products are rewritten: both A and B need an output index of their
own (m and n non-empty); sums of squares, dot products and matrix-vector products stay
loop nests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from itertools import product

from reverie.compiler.ir.core import Block, Function, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import GenericOp, LoopNestOp
from reverie.compiler.print_ir import show

PASS_NAME = "contract"


@dataclass(frozen=True)
class _Factor:
    """One factor of a contraction body: the body value and the loop indices it uses
    (positions in the generic's ranges)."""

    value: Value
    indices: frozenset[int]


@dataclass(frozen=True)
class _Plan:
    """How one contraction becomes a matrix product: index positions per role."""

    a: tuple[_Factor, ...]
    b: tuple[_Factor, ...]
    post: tuple[_Factor, ...]
    batch: tuple[int, ...]
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    contracted: tuple[int, ...]


def contract_function(fn: Function) -> Function:
    """`fn` with its body's contractions rewritten as matrix products and its identity
    generics replaced by their operand (itself when there are neither)."""
    copies = {op: source for op in fn.body.ops if op.name == "generic"
              and (source := _identity_source(GenericOp(op))) is not None}
    plans = {op: plan for op in fn.body.ops if op.name == "generic"
             and (plan := _plan(GenericOp(op))) is not None}
    replacements: dict[Op, Replacement] = {
        op: lambda scope, values, op=op: values[op.operands[copies[op]]] for op in copies}
    replacements.update({
        op: lambda scope, values, op=op: _rewrite(scope, GenericOp(op), plans[op], values)
        for op in plans})
    rewritten = replace_ops(fn, replacements)
    show(PASS_NAME, f"@{fn.name}", lambda: format_function(rewritten))
    return rewritten


Replacement = Callable[[Scope, dict[Value, Value]], Value]


def replace_ops(fn: Function, replacements: dict[Op, Replacement]) -> Function:
    """`fn` (itself when `replacements` is empty) with each top-level op in `replacements`
    replaced by the value its function emits (given the scope and the new value of every
    earlier value); the other ops copied."""
    if not replacements:
        return fn
    params = [Value(p.type, name=p.name) for p in fn.params]
    block = Block(params=params)
    scope = Scope(block)
    values: dict[Value, Value] = dict(zip(fn.params, params, strict=True))
    for op in fn.body.ops:
        if op in replacements:
            values[op.result] = replacements[op](scope, values)
            continue
        new = scope.emit(op.name, [values[v] for v in op.operands], dict(op.attrs),
                         [copy_block(r) for r in op.regions], op.span)
        values.update(zip(op.results, new.results, strict=True))
    block.results = [values[v] for v in fn.body.results]
    return fn.derive(fn.name, block)


# ---------------------------------------------------------------- recognising


def factors_of(nest: LoopNestOp, yielded: Value) -> list[_Factor] | None:
    """The factors of `yielded`, a value of the nest's body, or None when it is not a
    product of region-free scalar expressions."""
    body = nest.body
    position = {p: k for k, p in enumerate(nest.index_params)}
    defining = {r: op for op in body.ops for r in op.results}

    def uses(value: Value) -> frozenset[int]:
        if value in position:
            return frozenset({position[value]})
        op = defining.get(value)
        if op is None:
            return frozenset()
        if op.regions:
            raise _NotAContraction
        return frozenset().union(*(uses(v) for v in op.operands))

    def split(value: Value) -> list[Value]:
        op = defining.get(value)
        if op is not None and op.name == "mul":
            return split(op.operands[0]) + split(op.operands[1])
        return [value]

    try:
        return [_Factor(v, uses(v)) for v in split(yielded)]
    except _NotAContraction:
        return None


class _NotAContraction(Exception):
    """A body op the rewrite cannot copy (one with regions)."""


def _plan(generic: GenericOp) -> _Plan | None:
    """The best matrix-product plan for a contraction, or None."""
    result = generic.op.result
    if generic.reduce != "sum" or not result.type.is_float:
        return None
    factors = factors_of(generic, generic.body.results[0])
    if factors is None or any(lo != Dim.const(0) for _, lo, _ in generic.ranges):
        return None
    return best_split(factors, frozenset(range(len(generic.indices))),
                      frozenset(range(len(generic.indices), len(generic.ranges))))


def best_split(factors: list[_Factor], outputs: frozenset[int],
               reductions: frozenset[int]) -> _Plan | None:
    """The best way to multiply `factors` summed over `reductions` as one matrix product
    (None: not a true matrix product)."""
    post = tuple(f for f in factors if not f.indices & reductions)
    summed = [f for f in factors if f.indices & reductions]
    if len(summed) < 2:
        return None
    best: tuple[tuple[int, int], _Plan] | None = None
    for sides in product((0, 1), repeat=len(summed) - 1):
        groups = ([summed[0]], [])
        for factor, side in zip(summed[1:], sides, strict=True):
            groups[side].append(factor)
        a, b = (frozenset().union(*(f.indices for f in g)) for g in groups)
        if not groups[1] or not reductions <= a & b:
            continue
        rows, cols = sorted((a - b) & outputs), sorted((b - a) & outputs)
        if not rows or not cols:
            continue
        if cols[0] < rows[0]:  # the product's rows come first in the output: read in order
            groups, rows, cols = (groups[1], groups[0]), cols, rows
        cost = (max(len(a), len(b)), len(a) + len(b))
        if best is None or cost < best[0]:
            best = cost, _Plan(tuple(groups[0]), tuple(groups[1]), post,
                               tuple(sorted(a & b & outputs)), tuple(rows), tuple(cols),
                               tuple(sorted(reductions)))
    return best[1] if best else None


def _identity_source(generic: GenericOp) -> int | None:
    """The operand position when `generic` is a copy of one operand (it yields the operand
    read at its own indices, in order, over its whole shape), else None. Reverse mode makes
    such copies (a cotangent passed through unchanged); as an operand of a matrix product
    or another generic each would be materialised, a whole extra pass over memory."""
    ops = generic.body.ops
    if generic.reduce or len(ops) != 1 or generic.body.results[0] is not ops[0].result:
        return None
    whole = _whole_read(generic, (_Factor(ops[0].result, frozenset()),))
    if whole is None or whole[1] != list(range(len(generic.indices))):
        return None
    operand, _ = whole
    return operand if generic.op.operands[operand].type == generic.op.result.type else None


# ---------------------------------------------------------------- rewriting


def _rewrite(scope: Scope, generic: GenericOp, plan: _Plan, values: dict[Value, Value]) -> Value:
    """Emit A, B, their product and the output generic; the value replacing the result."""
    operands = [values[v] for v in generic.op.operands]
    a = _materialise(scope, generic, operands, plan.a, plan.batch + plan.rows + plan.contracted)
    b = _materialise(scope, generic, operands, plan.b, plan.batch + plan.contracted + plan.cols)
    sizes = [hi for _, _, hi in generic.ranges]
    batch, rows, cols, inner = (_size(sizes, axes) for axes in
                                (plan.batch, plan.rows, plan.cols, plan.contracted))
    flat = ((batch,) if plan.batch else ())
    a = _reshape(scope, a, (*flat, rows, inner))
    b = _reshape(scope, b, (*flat, inner, cols))
    layout = plan.batch + plan.rows + plan.cols
    matrix = _reshape(scope, scope.op("matmul", [a, b]), tuple(sizes[k] for k in layout))
    return _output(scope, generic, operands, plan.post, matrix, layout)


def _reshape(scope: Scope, value: Value, shape: tuple[Dim, ...]) -> Value:
    """`value` reshaped to `shape` (itself when it has that shape)."""
    if value.type.shape == shape:
        return value
    return scope.op("reshape", [value], {"shape": shape})


def _size(sizes: list[Dim], axes: tuple[int, ...]) -> Dim:
    return reduce(lambda total, k: total * sizes[k], axes, Dim.const(1))


def nest_block(generic: LoopNestOp, axes: tuple[int, ...]) -> tuple[Block, list[Value | None]]:
    """A region whose index parameters are the generic's indices `axes`, in that order;
    the index parameter standing for each of the generic's indices (None: not looped)."""
    old = generic.index_params
    params = [Value(scalar("i64"), name=old[k].name) for k in axes]
    by_position: list[Value | None] = [None] * len(old)
    for k, param in zip(axes, params, strict=True):
        by_position[k] = param
    return Block(params=params), by_position


def _materialise(scope: Scope, generic: GenericOp, operands: list[Value],
                 factors: tuple[_Factor, ...], axes: tuple[int, ...]) -> Value:
    """The product of `factors` laid out over the generic's indices `axes` (in that order):
    a transpose of the operand when it is one whole-tensor read, else a generic."""
    whole = _whole_read(generic, factors)
    if whole is not None:
        operand, subscripts = whole
        perm = tuple(subscripts.index(k) for k in axes)
        value = operands[operand]
        if perm == tuple(range(len(perm))):
            return value
        return scope.op("transpose", [value], {"perm": perm})
    block, index = nest_block(generic, axes)
    body = scope.child(block)
    block.results = [_product(body, generic, operands, factors, index)]
    ranges = [generic.ranges[k] for k in axes]
    return scope.op("generic", body.outer_operands(), {"indices": ranges}, [block])


def _whole_read(generic: GenericOp, factors: tuple[_Factor, ...]) \
        -> tuple[int, list[int]] | None:
    """(operand position, the index position of each axis) when `factors` is one read of a
    whole operand, each axis subscripted by its own loop index over the axis' full range."""
    if len(factors) != 1 or factors[0].value.op is None:
        return None
    op = factors[0].value.op
    if op.name != "read" or op.operands[0] not in generic.operand_params:
        return None
    position = {p: k for k, p in enumerate(generic.index_params)}
    subscripts = [position.get(v) for v in op.operands[1:]]
    if None in subscripts or len(set(subscripts)) != len(subscripts):
        return None
    shape = op.operands[0].type.shape
    if any(generic.ranges[k][2] != size for k, size in zip(subscripts, shape, strict=True)):
        return None
    return generic.operand_params.index(op.operands[0]), subscripts  # type: ignore[return-value]


def _output(scope: Scope, generic: GenericOp, operands: list[Value], post: tuple[_Factor, ...],
            matrix: Value, layout: tuple[int, ...]) -> Value:
    """generic over the output indices: the matrix product (laid out `layout`) times the
    post factors."""
    outputs = tuple(range(len(generic.indices)))
    if not post and sorted(layout) == list(outputs):  # a permutation: a view, no copy
        perm = tuple(layout.index(k) for k in outputs)
        if perm == outputs:
            return matrix
        return scope.op("transpose", [matrix], {"perm": perm})
    block, index = nest_block(generic, outputs)
    body = scope.child(block)
    read = body.op("read", [matrix, *(index[k] for k in layout)],
                   {"modes": ("direct",) * len(layout), "label": "contraction"})
    factor = _product(body, generic, operands, post, index)
    block.results = [read if factor is None else body.mul(factor, read)]
    return scope.op("generic", body.outer_operands(), {"indices": generic.indices}, [block])


def _product(body: Scope, generic: LoopNestOp, operands: list[Value],
             factors: tuple[_Factor, ...], index: list[Value | None]) -> Value | None:
    """The factors recomputed in `body` (None: no factors), with the original index
    parameters bound to `index` and operand parameters to the outer `operands`."""
    copy = copier(body, generic, operands, index)
    result = None
    for factor in factors:
        value = copy(factor.value)
        result = value if result is None else body.mul(result, value)
    return result


def copier(body: Scope, nest: LoopNestOp, operands: list[Value],
           index: list[Value | None]) -> Callable[[Value], Value]:
    """A function recomputing values of the nest's body in `body`, its index parameters
    bound to `index` and its operand parameters to the outer `operands`."""
    bound = {param: value for param, value in zip(nest.index_params, index, strict=True)
             if value is not None}
    outer = dict(zip(nest.operand_params, operands, strict=True))
    defining = {r: op for op in nest.body.ops for r in op.results}

    def copy(value: Value) -> Value:
        if value not in bound and value in outer:
            bound[value] = body.use(outer[value])
        if value not in bound:
            op = defining[value]
            new = body.emit(op.name, [copy(v) for v in op.operands], dict(op.attrs),
                            span=op.span)
            bound.update(zip(op.results, new.results, strict=True))
        return bound[value]

    return copy
