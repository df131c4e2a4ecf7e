"""Matrix products with an identity or diagonal operand, rewritten without the product.

Contract: `identity_product(op)` takes one `matmul` op (2-D, or 3-D batched) and, when one
operand is provably an identity or a diagonal matrix in its last two axes, returns the ops
that compute the same result without a matrix product and the value that replaces the
result; otherwise None. It is one of `simplify`'s rules (compiler/transforms/simplify.py).

    X @ I = X                          I @ Y = Y
    X @ diag(s) = X · s[None, :]       diag(s) @ Y = s[:, None] · Y

Where it comes from: a Jacobian seeds its batched JVP with an identity (`f.jacobian`,
compiler/transforms/jacobian.py), so the tangent of `A @ x` becomes `A @ I`, an n³ product
where n² multiplications do; a batched VJP over an identity meets `diag(1 - tanh²) @ A`.

An operand is diagonal when it is built from an "eye" `generic` (`select(i == j, 1, 0)`
over two index ranges of equal size, or `select(i == j, s[i], 0)`), through reshapes that
only add or drop size-1 axes, transposes, broadcasts, casts, and a multiplication by a
vector broadcast along one of the two diagonal axes (`diag(s) = I · s`). A `Diagonal`
records which two axes carry the diagonal and the vector `s` (None for the identity);
every other axis is one the value does not depend on.

Exactness: for finite operands the product with I or diag(s) adds only zeros to the one
term `x · 1` or `x · s`, so the rewrite is bitwise equal to the product, except that a −0
entry of X comes out −0 where the product's sum of zeros gives +0 (the same exception as
`x + 0`). An inf or NaN in X turns its whole row of `X @ I` into NaN (inf · 0); the
rewrite gives the entry itself, which is what the product means mathematically.
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.core import Block, Builder, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.views import GenericOp


@dataclass(frozen=True)
class Diagonal:
    """A value zero off the diagonal of axes `row` and `col`: element idx is
    [idx[row] == idx[col]] · scale[idx[row]] (scale None: 1), whatever its other axes."""

    row: int
    col: int
    scale: Value | None = None

    def on(self, axes: tuple[int, int]) -> bool:
        """Whether the diagonal lies in exactly these two axes (either order)."""
        return {self.row, self.col} == set(axes)


def identity_product(op: Op) -> tuple[list[Op], Value] | None:
    """The ops replacing `matmul` op `op` and the value standing for its result, when one
    operand is an identity or diagonal matrix in its last two axes; else None."""
    if op.name != "matmul":
        return None
    left, right = op.operands
    result = op.result
    matrix_axes = (result.type.rank - 2, result.type.rank - 1)
    right_diagonal, left_diagonal = diagonal_of(right), diagonal_of(left)
    if right_diagonal is not None and right_diagonal.on(matrix_axes) \
            and left.type == result.type:
        return _scaled(op, left, right_diagonal.scale, column=True)
    if left_diagonal is not None and left_diagonal.on(matrix_axes) \
            and right.type == result.type:
        return _scaled(op, right, left_diagonal.scale, column=False)
    return None


def _scaled(op: Op, other: Value, scale: Value | None,
            column: bool) -> tuple[list[Op], Value]:
    """`other` times `scale` along its last axis (`column`) or the one before (rows)."""
    if scale is None:
        return [], other
    builder = Builder(Block(params=[]), op.span)
    shape = other.type.shape
    if not column:
        scale = builder.op("reshape", [scale], {"shape": (scale.type.shape[0], Dim.const(1))})
    spread = builder.op("broadcast", [scale], {"shape": shape})
    product = builder.op("mul", [other, spread])
    return builder.block.ops, product


def diagonal_of(value: Value) -> Diagonal | None:
    """Where `value` is a diagonal matrix (see the module docstring), or None."""
    op = value.op
    if op is None:
        return None
    if op.name == "generic":
        return _eye(GenericOp(op))
    if op.name == "mul":
        return _times_vector(op)
    if op.name == "cast":
        inner = diagonal_of(op.operands[0])
        return inner if inner is not None and inner.scale is None else None
    if op.name in _VIEWS:
        inner = diagonal_of(op.operands[0])
        if inner is None:
            return None
        row, col = (_view_axis(op, axis) for axis in (inner.row, inner.col))
        return None if row is None or col is None else Diagonal(row, col, inner.scale)
    return None


def _eye(generic: GenericOp) -> Diagonal | None:
    """The diagonal of a generic yielding `select(i == j, v, 0)`, with v the constant 1 (the
    identity) or `s[i]` / `s[j]` for a vector operand s (diag(s))."""
    if generic.reduce or any(lo != Dim.const(0) for _, lo, _ in generic.ranges):
        return None
    defining = {r: op for op in generic.body.ops for r in op.results}
    choice = defining.get(generic.body.results[0])
    if choice is None or choice.name != "select":
        return None
    condition, value, zero = (defining.get(v) for v in choice.operands)
    if condition is None or condition.name != "eq" or not _is_const(zero, 0):
        return None
    indices = generic.index_params
    first, second = condition.operands
    if first not in indices or second not in indices or first is second:
        return None
    row, col = indices.index(first), indices.index(second)
    size = generic.ranges[row][2]
    if generic.ranges[col][2] != size:
        return None
    if _is_const(value, 1):
        return Diagonal(row, col)
    scale = _diagonal_read(generic, value, {row, col}, size)
    return None if scale is None else Diagonal(row, col, scale)


def _diagonal_read(generic: GenericOp, read: Op | None, axes: set[int],
                   size: Dim) -> Value | None:
    """The vector operand s when `read` is `s[i]` with i one of the diagonal's indices."""
    if read is None or read.name != "read" or len(read.operands) != 2 \
            or read.operands[0] not in generic.operand_params:
        return None
    tensor, index = read.operands
    if index not in generic.index_params or generic.index_params.index(index) not in axes:
        return None
    vector = generic.op.operands[generic.operand_params.index(tensor)]
    return vector if vector.type.shape == (size,) else None


def _is_const(op: Op | None, number: int) -> bool:
    """Whether `op` is a numeric `const` equal to `number`."""
    if op is None or op.name != "const":
        return False
    value = op.attrs["value"]
    return not isinstance(value, bool) and value == number


def _times_vector(op: Op) -> Diagonal | None:
    """`I · w` with w a vector spread along one of I's diagonal axes: diag(w)."""
    if any(v.type.shape != op.result.type.shape for v in op.operands):
        return None
    for eye, other in (op.operands, op.operands[::-1]):
        diagonal = diagonal_of(eye)
        found = _axis_vector(other)
        if diagonal is not None and diagonal.scale is None and found is not None \
                and found[0] in (diagonal.row, diagonal.col):
            return Diagonal(diagonal.row, diagonal.col, found[1])
    return None


def _axis_vector(value: Value) -> tuple[int, Value] | None:
    """(axis, v) when element idx of `value` is v[idx[axis]] for a 1-D v, else None."""
    if value.type.rank == 1:
        return 0, value
    op = value.op
    if op is None or op.name not in _VIEWS:
        return None
    inner = _axis_vector(op.operands[0])
    if inner is None:
        return None
    axis = _view_axis(op, inner[0])
    return None if axis is None else (axis, inner[1])


_VIEWS = ("reshape", "transpose", "broadcast")


def _view_axis(op: Op, axis: int) -> int | None:
    """Where axis `axis` of a view's operand is in its result, when the view keeps that
    axis whole (a reshape that only adds or drops size-1 axes, a transpose, a broadcast
    that does not stretch it); else None."""
    source, target = op.operands[0].type.shape, op.result.type.shape
    if source[axis] == Dim.const(1):
        return None
    if op.name == "transpose":
        return list(op.attrs["perm"]).index(axis)
    if op.name == "broadcast":
        return axis + len(target) - len(source)
    kept_source, kept_target = _non_unit_axes(source), _non_unit_axes(target)
    if [source[k] for k in kept_source] != [target[k] for k in kept_target]:
        return None
    return kept_target[kept_source.index(axis)]


def _non_unit_axes(shape: tuple[Dim, ...]) -> list[int]:
    """The axes of `shape` whose size is not the constant 1."""
    return [k for k, size in enumerate(shape) if size != Dim.const(1)]
