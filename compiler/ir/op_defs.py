"""How a tensor-IR op is declared: the `OpDef` row, `register`, the fusion classes, the
names of the rule tables an op may be exempt from, and the helpers the groups' typing and
evaluation rules share (`expect_arity`, `dtype_class`, `broadcast_shapes`, `reduce_array`).

`OPS` here fills as the group modules (`ops_core.py`, `elementwise.py`, `ops_shape.py`, ...)
register their ops; the complete table is `ops.OPS`, which imports every group. A group
imports this module, never `ops.py`, so the table has no import cycle.

    register("matmul", "linalg", infer, evaluate, "Matrix product ...", attrs={}, fusion=ROOT)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import Schema
from reverie.compiler.ir.dtypes import dtype_name
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.types import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMPY_DTYPES,
    ShapeError,
    TensorType,
)

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Block, Op
    from reverie.compiler.ir.elementwise import Elementwise

Infer = Callable[[list[TensorType], dict[str, Any], list["Block"]], list[TensorType]]
Evaluate = Callable[[Any, list[np.ndarray], "Op"], list[np.ndarray]]

# Fusion classes (how `to_loops/fusion_plan.py` plans an op):
FUSED = "fused"            # evaluated inside its consumers' loop nest (or materialised)
VIEW = "view"              # data movement: a strided view of a buffer, or an index mapping
ROOT = "root"              # always its own loop nest(s), writing a buffer
ROOT_WHEN_REDUCING = "root when reducing"   # `generic`: a root with a `reduce`, else fused
FUSION_CLASSES = (FUSED, VIEW, ROOT, ROOT_WHEN_REDUCING)

# Rule tables an op may be exempt from (`OpDef.exempt` maps these to the reason):
VJP, JVP, BATCH = "vjp", "jvp", "batch"


@dataclass(frozen=True)
class OpDef:
    """One op: its name, group, shape rule, NumPy semantics and how each level treats it."""

    name: str
    kind: str
    infer: Infer
    evaluate: Evaluate
    doc: str
    fusion: str = FUSED
    cheap: bool = False          # one instruction: recompute it in every nest that uses it
    same_type_is_identity: bool = False   # the result is the operand when the types agree
    exempt: Mapping[str, str] = field(default_factory=dict)
    elementwise: Elementwise | None = None   # the declaration of an elementwise op
    attrs: Schema | None = None   # each attribute's type (`attr_types.py`); None: undeclared

    @property
    def differentiable(self) -> bool:
        """Whether derivatives flow through the op (it has VJP and JVP rules)."""
        return not (VJP in self.exempt and JVP in self.exempt)


OPS: dict[str, OpDef] = {}


def register(name: str, kind: str, infer: Infer, evaluate: Evaluate, doc: str, *,
             attrs: Schema, **row: Any) -> OpDef:
    """Add an op to the table (each name once) with its attribute schema; `row` sets the
    other `OpDef` fields."""
    assert name not in OPS, f"op {name} registered twice"
    assert row.get("fusion", FUSED) in FUSION_CLASSES, f"{name}: unknown fusion class"
    OPS[name] = OpDef(name, kind, infer, evaluate, doc, attrs=attrs, **row)
    return OPS[name]


def no_derivative(reason: str) -> dict[str, str]:
    """The exemptions of an op that carries no derivative, for `reason`."""
    return {VJP: reason, JVP: reason}


def expect_arity(name: str, operands: list[TensorType], count: int) -> None:
    """ShapeError unless `operands` has `count` entries."""
    if len(operands) != count:
        raise ShapeError(f"{name} takes {count} operand(s), got {len(operands)}")


def dtype_class(dtype: str) -> str:
    """'float', 'int' or 'bool'."""
    return "float" if dtype in FLOAT_DTYPES else "int" if dtype in INT_DTYPES else "bool"


def cast_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x.astype(dtype)`, float → int giving INT_MIN for NaN, ±inf and values out of range
    (NumPy's x86 result) on every platform and without warnings (docs/language.md §6)."""
    if x.dtype.kind != "f" or dtype.kind != "i":
        return x.astype(dtype)
    limit = 2.0 ** (8 * dtype.itemsize - 1)
    fits = (x >= -limit) & (x < limit)
    return np.where(fits, np.where(fits, x, 0).astype(dtype), np.iinfo(dtype).min).astype(dtype)


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """NumPy broadcasting of two symbolic shapes (ShapeError when they do not fit)."""
    rank = max(len(a), len(b))
    a = (None,) * (rank - len(a)) + tuple(a)
    b = (None,) * (rank - len(b)) + tuple(b)
    out = []
    for da, db in zip(a, b, strict=True):
        if da is None or (da.is_const and da.value == 1):
            out.append(db if db is not None else da)
        elif db is None or (db.is_const and db.value == 1) or da == db:
            out.append(da)
        else:
            raise ShapeError(f"dimensions {da} and {db} do not broadcast")
    return tuple(out)


def reduce_array(kind: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """`x` reduced over `axes` by `kind` (sum, prod, max, min), with the accumulator dtype
    and identity of `reduce_kinds.py`; the result has x's dtype."""
    reduction, dtype = REDUCE_KINDS[kind], dtype_name(x.dtype)
    work = x.astype(NUMPY_DTYPES[reduction.accumulator_dtype(dtype)], copy=False)
    # np.add and np.multiply know their identity; max and min get it, for empty reductions
    start = {} if reduction.widens_f32 else {"initial": reduction.identity(dtype)}
    out = reduction.ufunc.reduce(work, axis=axes, **start)
    return np.asarray(out).astype(x.dtype, copy=False)
