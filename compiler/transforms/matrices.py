"""Matrix algebra on stacks of matrices `[..., M, N]`, as tensor IR built in a `Scope`.

The linear-algebra built-ins (`lower/linalg.py`) and their derivative rules
(`linalg_rules.py`) are written with these: products of stacks (`matmul` takes 2-D or
3-D operands, so the leading axes are folded into one), the transpose of the last two axes,
triangles, identities, diagonals, and the factorisation ops of `ir/ops_linalg.py`. Every
helper takes and returns stacks with the same leading axes.

    mm(s, a, b)          a @ b, batched               tril(s, x, -1)    strictly lower part
    t(s, x)              xᵀ of each matrix            eye_like(s, x)    identity of x's type
    diagonal(s, x)       [..., N] diagonal            diag(s, v)        [..., N, N] from v
    columns(s, x, 0, M)  x[..., :, :M]                 beside(s, a, b)   [a | b]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reverie.compiler.ir.core import Block, Value
from reverie.compiler.ir.dims import Dim, nonnegative, num_elements
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import TensorType, scalar

I64 = scalar("i64")
Body = Callable[[Scope, list[Value]], Value]


def generic(s: Scope, shape: Sequence[Dim], body: Body) -> Value:
    """A `generic` over `shape` (indices i0, i1, ...) yielding `body(scope, indices)`."""
    names = [f"i{a}" for a in range(len(shape))]
    params = [Value(I64, name=name) for name in names]
    block = Block(params=list(params))
    inner = s.child(block)
    block.results = [body(inner, params)]
    indices = tuple((n, Dim.const(0), d) for n, d in zip(names, shape, strict=True))
    return s.op("generic", inner.outer_operands(), {"indices": indices}, [block])


def read(s: Scope, x: Value, index: Sequence[Value]) -> Value:
    """x[index] inside a generic body."""
    return s.op("read", [x, *index], {"modes": ("direct",) * len(index), "label": "matrix"})


def reshape(s: Scope, x: Value, shape: Sequence[Dim]) -> Value:
    return x if tuple(shape) == x.type.shape else s.op("reshape", [x], {"shape": tuple(shape)})


def mm(s: Scope, a: Value, b: Value) -> Value:
    """a @ b for stacks [..., M, K] and [..., K, N] (the same leading axes)."""
    *batch, m, _ = a.type.shape
    n = b.type.shape[-1]
    if not batch:
        return s.op("matmul", [a, b])
    size = num_elements(tuple(batch))
    flat = s.op("matmul", [reshape(s, a, (size, *a.type.shape[-2:])),
                           reshape(s, b, (size, *b.type.shape[-2:]))])
    return reshape(s, flat, (*batch, m, n))


def t(s: Scope, x: Value) -> Value:
    """Each matrix transposed (the last two axes swapped)."""
    rank = x.type.rank
    return s.op("transpose", [x], {"perm": [*range(rank - 2), rank - 1, rank - 2]})


def _where(s: Scope, cond: Value, x: Value) -> Value:
    return s.select(cond, x, s.zeros(x.type))


def _compare(s: Scope, name: str, i: Value, j: Value, offset: int) -> Value:
    """i `name` j + offset, on the i64 indices of a generic body."""
    if offset:
        j = s.add(j, s.const(offset, I64))
    return s.op(name, [i, j])


def tril(s: Scope, x: Value, offset: int = 0) -> Value:
    """x where column <= row + offset, else 0 (NumPy's `tril(x, offset)`)."""
    return generic(s, x.type.shape, lambda b, p: _where(
        b, _compare(b, "le", p[-1], p[-2], offset), read(b, x, p)))


def triu(s: Scope, x: Value, offset: int = 0) -> Value:
    """x where column >= row + offset, else 0 (NumPy's `triu(x, offset)`)."""
    return generic(s, x.type.shape, lambda b, p: _where(
        b, _compare(b, "ge", p[-1], p[-2], offset), read(b, x, p)))


def eye_like(s: Scope, type: TensorType) -> Value:
    """Identity matrices of `type` ([..., N, N])."""
    one = TensorType(type.dtype, ())
    return generic(s, type.shape, lambda b, p: b.select(
        b.eq(p[-1], p[-2]), b.const(1, one), b.const(0, one)))


def diagonal(s: Scope, x: Value) -> Value:
    """The diagonals [..., K] of matrices [..., M, N] (K = the shorter side, given by
    `x.type.shape[-1]` when square)."""
    *batch, m, n = x.type.shape
    k = n - nonnegative(n - m)
    return generic(s, (*batch, k), lambda b, p: read(b, x, [*p, p[-1]]))


def diag(s: Scope, v: Value, rows: Dim | None = None, cols: Dim | None = None) -> Value:
    """Matrices [..., rows, cols] (default: square) with v [..., K] on the diagonal."""
    *batch, k = v.type.shape
    shape = (*batch, rows if rows is not None else k, cols if cols is not None else k)
    return generic(s, shape, lambda b, p: _where(b, b.eq(p[-1], p[-2]), read(b, v, p[:-1])))


def scale_columns(s: Scope, x: Value, v: Value) -> Value:
    """x · diag(v): column j of each matrix times v[..., j]."""
    return s.mul(x, s.op("broadcast", [reshape(s, v, (*v.type.shape[:-1], Dim.const(1),
                                                       v.type.shape[-1]))],
                         {"shape": x.type.shape}))


def scale_rows(s: Scope, x: Value, v: Value) -> Value:
    """diag(v) · x: row i of each matrix times v[..., i]."""
    return s.mul(x, s.op("broadcast", [reshape(s, v, (*v.type.shape, Dim.const(1)))],
                         {"shape": x.type.shape}))


def columns(s: Scope, x: Value, lo: Dim, hi: Dim) -> Value:
    """Columns lo..hi of each matrix."""
    rank = x.type.rank
    stops = (*x.type.shape[:-1], hi)
    return s.op("slice", [x], {"starts": (Dim.const(0),) * (rank - 1) + (lo,), "stops": stops,
                               "steps": (1,) * rank})


def beside(s: Scope, a: Value, b: Value) -> Value:
    """[a | b]: the columns of b after those of a."""
    return s.op("concat", [a, b], {"axis": a.type.rank - 1})


def sym(s: Scope, x: Value) -> Value:
    """(x + xᵀ) / 2."""
    return s.mul(s.add(x, t(s, x)), s.const(0.5, x.type))


def solve_tri(s: Scope, a: Value, b: Value, lower: bool, transpose: bool = False) -> Value:
    """op(T) X = B for the lower (upper) triangle T of a (`triangular_solve`)."""
    return s.op("triangular_solve", [a, b], {"lower": lower, "transpose": transpose,
                                             "unit_diagonal": False})


def solve_right(s: Scope, a: Value, b: Value, lower: bool, transpose: bool = False) -> Value:
    """X op(T) = B, as op(T)ᵀ Xᵀ = Bᵀ."""
    return t(s, solve_tri(s, a, t(s, b), lower, not transpose))


def batch_sum(s: Scope, x: Value, axes: Sequence[int]) -> Value:
    """x summed over `axes`."""
    return s.op("reduce_sum", [x], {"axes": tuple(axes)}) if axes else x
