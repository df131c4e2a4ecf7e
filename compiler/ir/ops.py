"""The op table: every tensor IR op, one row each, and the shape of those rows.

Each `OpDef` says what an op is once: `attrs` declares its attributes and their types
(`attr_types.py`; the verifier checks every op against it), `infer` types its results from
its operand types and attributes (raising `ShapeError` when they do not fit), `evaluate`
runs it on NumPy
arrays (the reference interpreter is a loop over this table), and its attributes say how
the other levels treat it: its `fusion` class (a loop nest of its own, a strided view, or
fused into its consumer's loop), whether it is `cheap` enough to recompute in every nest,
and which per-op rule tables it needs no entry in (`exempt`, with the reason). The rules
themselves live with the level that applies them, each level in one `RuleTable`
(`rule_table.py`) keyed by op name: reverse and forward mode and batching
(`transforms/*_rules.py`), loop lowering (`to_loops/emitter.py`, `to_loops/lower_blocks.py`),
scalar code (`backend/scalar_ops.py`) and the MLIR export (`export/mlir_ops.py`).
Elementwise ops are declared once in `elementwise.py`, reductions in `reduce_kinds.py`, and
those tables take their entries from the declarations. `tests/unit/test_op_table.py` walks
this table and fails when a table lacks an op that is not exempt from it; at compile time a
missing rule is a `CompileError` naming the op and the table.

Groups, with an IR example each:
- constants         `%0 = const {value = 2.0} : f32`, `%1 = dim {dim = N} : i64`
- elementwise       in `elementwise.py`: `%2 = tanh %x : f32[N]`, `%3 = add %a, %b : f32[N]`
- broadcast         `%4 = broadcast %b {shape = [N, D]} : f32[N, D]`
- reductions        `%5 = reduce_sum %x {axes = [1]} : f32[N]`, `argmax {axis = 0}`
- linear algebra    `%6 = matmul %a, %b : f32[N, M]` (2-D, or 3-D batched; the front end
                    reshapes NumPy's 1-D and N-D operands to these)
- shape ops         in `ops_shape.py`: transpose, reshape, slice, pad, concat, roll, ...
- structured/loops  in `ops_structured.py`: generic (index notation), read, for
- adjoint-only      in `ops_adjoint.py`: generic_scatter, for_history, trip_dim
- control flow      in `ops_control.py`: if, while
- scans             in `ops_scan.py`: scan (cumulative sum and product)
- orderings         in `ops_sort.py`: argsort (stable, O(n log n))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.attr_types import DType, Schema
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS, REDUCE_OPS, ir_dtype
from reverie.compiler.ir.types import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMPY_DTYPES,
    ShapeError,
    TensorType,
    scalar,
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


def unary_builtins() -> tuple[str, ...]:
    """The elementwise ops users call by name, `f(x)` (`builtin` in their declaration)."""
    return tuple(name for name, op in OPS.items() if op.elementwise and op.elementwise.builtin)


def infer_types(
    name: str, operands: list[TensorType], attrs: dict[str, Any], regions: list[Block]
) -> list[TensorType]:
    """Result types of op `name` applied to `operands` (ShapeError if ill-typed)."""
    if name not in OPS:
        raise ShapeError(f"unknown op '{name}'")
    return OPS[name].infer(operands, attrs, regions)


def expect_arity(name: str, operands: list[TensorType], count: int) -> None:
    """ShapeError unless `operands` has `count` entries."""
    if len(operands) != count:
        raise ShapeError(f"{name} takes {count} operand(s), got {len(operands)}")


def dtype_class(dtype: str) -> str:
    """'float', 'int' or 'bool'."""
    return "float" if dtype in FLOAT_DTYPES else "int" if dtype in INT_DTYPES else "bool"


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


def cast_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x.astype(dtype)`, float → int giving INT_MIN for NaN, ±inf and values out of range
    (NumPy's x86 result) on every platform and without warnings (docs/language.md §6)."""
    if x.dtype.kind != "f" or dtype.kind != "i":
        return x.astype(dtype)
    limit = 2.0 ** (8 * dtype.itemsize - 1)
    fits = (x >= -limit) & (x < limit)
    return np.where(fits, np.where(fits, x, 0).astype(dtype), np.iinfo(dtype).min).astype(dtype)


# ---------------------------------------------------------------- broadcast


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


def reduce_array(kind: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """`x` reduced over `axes` by `kind` (sum, prod, max, min), with the accumulator dtype
    and identity of `reduce_kinds.py`; the result has x's dtype."""
    reduction, dtype = REDUCE_KINDS[kind], ir_dtype(x.dtype)
    work = x.astype(NUMPY_DTYPES[reduction.accumulator_dtype(dtype)], copy=False)
    # np.add and np.multiply know their identity; max and min get it, for empty reductions
    start = {} if reduction.widens_f32 else {"initial": reduction.identity(dtype)}
    out = reduction.ufunc.reduce(work, axis=axes, **start)
    return np.asarray(out).astype(x.dtype, copy=False)


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

# The other groups register their ops here: this list is the whole op table (the special
# functions are part of `elementwise`'s, which imports them).
from reverie.compiler.ir import (  # noqa: E402,F401
    elementwise,
    ops_adjoint,
    ops_control,
    ops_scan,
    ops_shape,
    ops_sort,
    ops_structured,
)
