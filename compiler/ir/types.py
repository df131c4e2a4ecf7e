"""Element types and tensor types of the IR.

A `TensorType` is a dtype plus a symbolic shape; a scalar has shape `()`. Printed the way
users write them in source: `f32`, `f64[N, D]`, `i64[N + 1]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.dims import Dim, Shape, shape_str
from reverie.compiler.ir.dtypes import (
    DTYPES as DTYPES,  # the element types, re-exported (see dtypes.py)
)
from reverie.compiler.ir.dtypes import FLOAT_DTYPES as FLOAT_DTYPES
from reverie.compiler.ir.dtypes import INT_DTYPES as INT_DTYPES
from reverie.compiler.ir.dtypes import NUMPY_DTYPES as NUMPY_DTYPES


class ShapeError(Exception):
    """An op's operands do not fit its shape or dtype rule; the lowering adds the span."""


@dataclass(frozen=True)
class TensorType:
    dtype: str
    shape: Shape = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def is_int(self) -> bool:
        return self.dtype in INT_DTYPES

    def with_shape(self, shape: Shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        return self.dtype + (shape_str(self.shape) if self.shape else "")


def scalar(dtype: str) -> TensorType:
    """The scalar type of `dtype`."""
    return TensorType(dtype, ())


def one_float_element(types: tuple[TensorType, ...] | list[TensorType]) -> bool:
    """Whether `types` is one float result of one element, which `grad` differentiates
    like a scalar (as torch and HIPS autograd do): a scalar, or a tensor whose every
    dimension is the literal 1 (`f32[1, 1]`; `f32[N]` is not, whatever N binds to)."""
    return (len(types) == 1 and types[0].is_float
            and all(d.is_const and d.value == 1 for d in types[0].shape))


def const_shape(*sizes: int) -> Shape:
    """A shape of literal sizes."""
    return tuple(Dim.const(s) for s in sizes)
