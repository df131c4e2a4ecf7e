"""Shape ops of the op table: data movement without arithmetic.

Each comes with its adjoint partner so reverse mode stays inside the table:
transpose ↔ transpose, reshape ↔ reshape, slice ↔ pad, concat ↔ slice, roll ↔ roll,
dynamic_index ↔ dynamic_scatter. Sizes in attributes are symbolic `Dim`s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import Label
from reverie.compiler.ir.dims import Dim, num_elements, shape_str
from reverie.compiler.ir.op_defs import FUSED, ROOT, VIEW, expect_arity, register
from reverie.compiler.ir.types import ShapeError, TensorType
from reverie.compiler.ir.views import WindowOp

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op


def _concrete(shape: tuple[Dim, ...], ctx: Any) -> tuple[int, ...]:
    return tuple(d.evaluate(ctx.dims) for d in shape)


# ---------------------------------------------------------------- transpose, reshape


def _infer_transpose(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("transpose", ops, 1)
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(ops[0].rank)):
        raise ShapeError(f"{list(perm)} is not a permutation of the axes of {ops[0]}")
    return [ops[0].with_shape(tuple(ops[0].shape[p] for p in perm))]


register("transpose", "shape", _infer_transpose,
         lambda ctx, args, op: [np.transpose(args[0], op.attrs["perm"])],
         "Permute axes: `%1 = transpose %x {perm = [1, 0]} : f32[D, N]`.",
         attrs={"perm": Sequence[int]}, fusion=VIEW)


def _infer_reshape(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("reshape", ops, 1)
    shape = tuple(attrs["shape"])
    if num_elements(shape) != num_elements(ops[0].shape):
        raise ShapeError(
            f"cannot reshape {ops[0]} ({num_elements(ops[0].shape)} elements) to "
            f"{shape_str(shape)} ({num_elements(shape)} elements)"
        )
    return [ops[0].with_shape(shape)]


register("reshape", "shape", _infer_reshape,
         lambda ctx, args, op: [np.reshape(args[0], _concrete(op.attrs["shape"], ctx))],
         "Same elements, new shape: `%1 = reshape %x {shape = [N * D]} : f32[N * D]`.",
         attrs={"shape": Sequence[Dim]}, fusion=VIEW, same_type_is_identity=True)


# ---------------------------------------------------------------- slice and pad


def slice_extent(start: Dim, stop: Dim, step: int) -> Dim:
    """Number of elements in `start:stop:step` (assumes start <= stop)."""
    return stop - start if step == 1 else (stop - start + (step - 1)) // step


def _infer_slice(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("slice", ops, 1)
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    if not len(starts) == len(stops) == len(steps) == ops[0].rank:
        raise ShapeError(f"slice bounds do not match the rank of {ops[0]}")
    if any(s <= 0 for s in steps):
        raise ShapeError("slice steps must be positive")
    return [ops[0].with_shape(tuple(map(slice_extent, starts, stops, steps)))]


def _slices(op: Op, ctx: Any) -> tuple[slice, ...]:
    starts, stops, steps = op.attrs["starts"], op.attrs["stops"], op.attrs["steps"]
    return tuple(
        slice(a.evaluate(ctx.dims), b.evaluate(ctx.dims), s)
        for a, b, s in zip(starts, stops, steps, strict=True)
    )


register("slice", "shape", _infer_slice,
         lambda ctx, args, op: [args[0][_slices(op, ctx)]],
         "Strided window: `%1 = slice %x {starts = [1], stops = [N], steps = [1]} : f32[N - 1]`.",
         attrs={"starts": Sequence[Dim], "stops": Sequence[Dim], "steps": Sequence[int]},
         fusion=VIEW)


def _infer_pad(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("pad", ops, 1)
    shape, starts, steps = tuple(attrs["shape"]), attrs["starts"], attrs["steps"]
    if not len(shape) == len(starts) == len(steps) == ops[0].rank:
        raise ShapeError(f"pad bounds do not match the rank of {ops[0]}")
    return [ops[0].with_shape(shape)]


def _eval_pad(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x = args[0]
    out = np.zeros(_concrete(op.attrs["shape"], ctx), dtype=x.dtype)
    window = tuple(
        slice(a.evaluate(ctx.dims), a.evaluate(ctx.dims) + n * s, s)
        for a, n, s in zip(WindowOp(op).starts, x.shape, WindowOp(op).steps, strict=True)
    )
    out[window] = x
    return [out]


register("pad", "shape", _infer_pad, _eval_pad,
         "Place x at a strided window of zeros (the adjoint of slice): "
         "`%1 = pad %g {shape = [N], starts = [1], steps = [1]} : f32[N]`.",
         attrs={"shape": Sequence[Dim], "starts": Sequence[Dim], "steps": Sequence[int]},
         fusion=FUSED)


# ---------------------------------------------------------------- concat, roll


def _infer_concat(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    axis = attrs["axis"]
    if not ops:
        raise ShapeError("concat needs at least one operand")
    first = ops[0]
    if not 0 <= axis < first.rank:
        raise ShapeError(f"axis {axis} is out of range for {first}")
    total = Dim.const(0)
    for t in ops:
        if t.dtype != first.dtype:
            raise ShapeError(f"concat operands have different dtypes {first.dtype} and {t.dtype}")
        others = [d for i, d in enumerate(t.shape) if i != axis]
        if t.rank != first.rank or others != [d for i, d in enumerate(first.shape) if i != axis]:
            raise ShapeError(f"concat operands {first} and {t} differ off axis {axis}")
        total = total + t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [first.with_shape(tuple(shape))]


register("concat", "shape", _infer_concat,
         lambda ctx, args, op: [np.concatenate(args, axis=op.attrs["axis"])],
         "Join along an axis: `%2 = concat %a, %b {axis = 0} : f32[N + M]`.",
         attrs={"axis": int}, fusion=ROOT)


def _infer_roll(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("roll", ops, 1)
    if not 0 <= attrs["axis"] < ops[0].rank:
        raise ShapeError(f"axis {attrs['axis']} is out of range for {ops[0]}")
    return [ops[0]]


register("roll", "shape", _infer_roll,
         lambda ctx, args, op: [np.roll(args[0], op.attrs["shift"].evaluate(ctx.dims),
                                        axis=op.attrs["axis"])],
         "Cyclic shift (NumPy roll): `%1 = roll %u {shift = 1, axis = 0} : f64[N]`.",
         attrs={"shift": Dim, "axis": int}, fusion=FUSED)


# ---------------------------------------------------------------- dynamic index


def _infer_dynamic_index(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("dynamic_index", ops, 2)
    x, index = ops
    axis = attrs["axis"]
    if index.rank != 0 or not index.is_int:
        raise ShapeError(f"an integer subscript must be an integer scalar, got {index}")
    if not 0 <= axis < x.rank:
        raise ShapeError(f"cannot subscript axis {axis} of {x}")
    return [x.with_shape(tuple(d for i, d in enumerate(x.shape) if i != axis))]


def checked_index(index: np.ndarray, size: int, label: str, axis: int) -> int:
    """The integer `index` if 0 <= index < size, else IndexError naming tensor and bound."""
    i = int(index)
    if not 0 <= i < size:
        raise IndexError(f"index {i} is out of bounds for axis {axis} of '{label}' "
                         f"with size {size}")
    return i


def _eval_dynamic_index(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    x, index = args
    axis = op.attrs["axis"]
    i = checked_index(index, x.shape[axis], op.attrs["label"], axis)
    return [np.take(x, i, axis=axis)]


register("dynamic_index", "shape", _infer_dynamic_index, _eval_dynamic_index,
         "Bounds-checked integer subscript: `%2 = dynamic_index %xs, %t {axis = 0} : f32[D]`.",
         attrs={"axis": int, "label": Label}, fusion=VIEW)


def _infer_dynamic_scatter(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("dynamic_scatter", ops, 2)
    g, index = ops
    shape, axis = tuple(attrs["shape"]), attrs["axis"]
    if index.rank != 0 or not index.is_int:
        raise ShapeError(f"a scatter index must be an integer scalar, got {index}")
    if tuple(d for i, d in enumerate(shape) if i != axis) != g.shape:
        raise ShapeError(f"cannot scatter {g} into shape {shape_str(shape)} along axis {axis}")
    return [g.with_shape(shape)]


def _eval_dynamic_scatter(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    g, index = args
    shape, axis = _concrete(op.attrs["shape"], ctx), op.attrs["axis"]
    out = np.zeros(shape, dtype=g.dtype)
    i = checked_index(index, shape[axis], op.attrs["label"], axis)
    np.moveaxis(out, axis, 0)[i] = g
    return [out]


register("dynamic_scatter", "shape", _infer_dynamic_scatter, _eval_dynamic_scatter,
         "Zeros with g at an integer position (the adjoint of dynamic_index): "
         "`%2 = dynamic_scatter %g, %t {shape = [T, D], axis = 0} : f32[T, D]`.",
         attrs={"shape": Sequence[Dim], "axis": int, "label": Label}, fusion=FUSED)
