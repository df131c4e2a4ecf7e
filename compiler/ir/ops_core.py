"""The core ops of the tensor IR: constants, `dim`, `broadcast`, the reductions and
arg-reductions, and `matmul` (the other groups have their own modules; `ops.py` lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import DType, Schema
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.op_defs import (
    BATCH,
    JVP,
    ROOT,
    VIEW,
    VJP,
    Evaluate,
    Infer,
    broadcast_shapes,
    expect_arity,
    no_derivative,
    reduce_array,
    register,
)
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS, REDUCE_OPS
from reverie.compiler.ir.types import NUMPY_DTYPES, ShapeError, TensorType, scalar

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op

# ---------------------------------------------------------------- constants

_NO_OPERANDS = "it has no operands"


def _infer_const(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("const", ops, 0)
    return [scalar(attrs["dtype"])]


def _eval_const(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.array(op.attrs["value"], dtype=NUMPY_DTYPES[op.attrs["dtype"]])]


register("const", "constant", _infer_const, _eval_const,
         "A scalar literal: `%0 = const {value = 0.5, dtype = f32} : f32`.",
         attrs={"value": bool | int | float, "dtype": DType},
         exempt={VJP: _NO_OPERANDS, JVP: _NO_OPERANDS, BATCH: _NO_OPERANDS})


def _infer_dim(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("dim", ops, 0)
    return [scalar("i64")]


def _eval_dim(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.array(op.attrs["dim"].evaluate(ctx.dims), dtype=np.int64)]


register("dim", "constant", _infer_dim, _eval_dim,
         "The run-time size of a dimension expression: `%0 = dim {dim = N - 1} : i64`.",
         attrs={"dim": Dim},
         exempt={VJP: _NO_OPERANDS, JVP: _NO_OPERANDS, BATCH: _NO_OPERANDS})


# ---------------------------------------------------------------- casts


# ---------------------------------------------------------------- broadcast


def _infer_broadcast(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("broadcast", ops, 1)
    shape = tuple(attrs["shape"])
    if broadcast_shapes(ops[0].shape, shape) != shape:
        raise ShapeError(f"cannot broadcast {ops[0]} to shape {list(map(str, shape))}")
    return [ops[0].with_shape(shape)]


def _eval_broadcast(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    shape = tuple(d.evaluate(ctx.dims) for d in op.attrs["shape"])
    return [np.broadcast_to(args[0], shape)]


register("broadcast", "broadcast", _infer_broadcast, _eval_broadcast,
         "NumPy broadcast to a shape: `%1 = broadcast %b {shape = [N, D]} : f32[N, D]`.",
         attrs={"shape": Sequence[Dim]}, fusion=VIEW, same_type_is_identity=True)


# ---------------------------------------------------------------- reductions


def _infer_reduce(name: str) -> Infer:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 1)
        (x,) = ops
        axes = tuple(attrs["axes"])
        if any(not 0 <= a < x.rank for a in axes) or len(set(axes)) != len(axes):
            raise ShapeError(f"axes {list(axes)} are invalid for a rank-{x.rank} operand")
        if x.dtype == "bool":
            raise ShapeError(f"'{name}' needs a numeric operand, got bool")
        return [x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in axes))]

    return infer


for _kind in REDUCE_KINDS.values():
    register(_kind.op, "reduction", _infer_reduce(_kind.op),
             lambda ctx, args, op: [reduce_array(REDUCE_OPS[op.name].name, args[0],
                                                 tuple(op.attrs["axes"]))],
             f"Reduce over axes: `%1 = {_kind.op} %x {{axes = [1]}} : f32[N]`.",
             attrs={"axes": Sequence[int]}, fusion=ROOT)


def _infer_arg(name: str) -> Infer:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 1)
        (x,) = ops
        axis = attrs["axis"]
        if x.dtype == "bool":
            raise ShapeError(f"'{name}' needs a numeric operand, got bool")
        if axis is None:
            return [scalar("i64")]
        if not 0 <= axis < x.rank:
            raise ShapeError(f"axis {axis} is out of range for a rank-{x.rank} operand")
        return [TensorType("i64", tuple(d for i, d in enumerate(x.shape) if i != axis))]

    return infer


def _arg_eval(fn: Callable[..., np.ndarray]) -> Evaluate:
    def evaluate(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
        x = args[0]
        if x.size == 0:
            raise IndexError("argmax/argmin of an empty tensor")
        return [np.asarray(fn(x, axis=op.attrs["axis"]), dtype=np.int64)]

    return evaluate


_INDEX = no_derivative("its result is an integer index")
_ARG_ATTRS: Schema = {"axis": int | None}
register("argmax", "reduction", _infer_arg("argmax"), _arg_eval(np.argmax),
         "Index of the first largest element: `%1 = argmax %x {axis = 1} : i64[N]`.",
         attrs=_ARG_ATTRS, fusion=ROOT, exempt=_INDEX)
register("argmin", "reduction", _infer_arg("argmin"), _arg_eval(np.argmin),
         "Index of the first smallest element: `%1 = argmin %x {axis = None} : i64`.",
         attrs=_ARG_ATTRS, fusion=ROOT, exempt=_INDEX)


# ---------------------------------------------------------------- linear algebra


def _infer_matmul(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("matmul", ops, 2)
    a, b = ops
    if a.rank != b.rank or a.rank not in (2, 3):
        raise ShapeError(f"matmul needs 2-D operands (3-D: batched), got {a} and {b}")
    if a.dtype != b.dtype or a.dtype == "bool":
        raise ShapeError(f"matmul operands must share a numeric dtype, got {a.dtype} and {b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul inner dimensions differ: {a.shape[-1]} and {b.shape[-2]}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"matmul batch dimensions differ: {a} and {b}")
    return [TensorType(a.dtype, (*a.shape[:-1], b.shape[-1]))]


register("matmul", "linalg", _infer_matmul,
         lambda ctx, args, op: [np.matmul(args[0], args[1])],
         "Matrix product of 2-D operands: `%2 = matmul %a, %b : f32[N, M]`, or of 3-D ones "
         "[B, N, K] @ [B, K, M]: one product per batch row (the front end's `@` on N-D "
         "operands, and the back end's contraction pass).", attrs={},
         fusion=ROOT)
