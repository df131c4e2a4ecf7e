"""The op table: every tensor IR op, its shape rule and its NumPy reference semantics.

Each `OpDef` says what an op means once: `infer` types its results from its operand types
and attributes (raising `ShapeError` when they do not fit), `evaluate` runs it on NumPy
arrays (the reference interpreter is a loop over this table). The other per-op rules live
in tables keyed by the same names: reverse mode (`transforms/reverse_rules.py`) and the
code generators. A missing rule there is a `CompileError` naming the op.

Groups, with an IR example each:
- constants         `%0 = const {value = 2.0} : f32`, `%1 = dim {dim = N} : i64`
- elementwise       `%2 = tanh %x : f32[N]`, `%3 = add %a, %b : f32[N]` (operands same shape)
- broadcast & cast  `%4 = broadcast %b {shape = [N, D]} : f32[N, D]`, `cast {dtype = f64}`
- reductions        `%5 = reduce_sum %x {axes = [1]} : f32[N]`, `argmax {axis = 0}`
- linear algebra    `%6 = matmul %a, %b : f32[N, M]` (2-D only; the front end reshapes 1-D)
- shape ops         in `ops_shape.py`: transpose, reshape, slice, pad, concat, roll, ...
- structured/loops  in `ops_structured.py`: generic (index notation), read, for
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .types import FLOAT_DTYPES, INT_DTYPES, NUMPY_DTYPES, ShapeError, TensorType, scalar

if TYPE_CHECKING:
    from .core import Block, Op

Infer = Callable[[list[TensorType], dict[str, Any], list["Block"]], list[TensorType]]
Evaluate = Callable[[Any, list[np.ndarray], "Op"], list[np.ndarray]]


@dataclass(frozen=True)
class OpDef:
    """One op: its name, group, shape rule and NumPy semantics."""

    name: str
    kind: str
    infer: Infer
    evaluate: Evaluate
    doc: str


OPS: dict[str, OpDef] = {}


def register(name: str, kind: str, infer: Infer, evaluate: Evaluate, doc: str) -> None:
    """Add an op to the table (each name once)."""
    assert name not in OPS, f"op {name} registered twice"
    OPS[name] = OpDef(name, kind, infer, evaluate, doc)


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


def _infer_const(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("const", ops, 0)
    return [scalar(attrs["dtype"])]


def _eval_const(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.array(op.attrs["value"], dtype=NUMPY_DTYPES[op.attrs["dtype"]])]


register("const", "constant", _infer_const, _eval_const,
         "A scalar literal: `%0 = const {value = 0.5, dtype = f32} : f32`.")


def _infer_dim(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("dim", ops, 0)
    return [scalar("i64")]


def _eval_dim(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [np.array(op.attrs["dim"].evaluate(ctx.dims), dtype=np.int64)]


register("dim", "constant", _infer_dim, _eval_dim,
         "The run-time size of a dimension expression: `%0 = dim {dim = N - 1} : i64`.")


# ---------------------------------------------------------------- elementwise


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])

# name -> (NumPy function, operand dtype classes allowed)
UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[str, ...]]] = {
    "neg": (np.negative, ("float", "int")),
    "abs": (np.abs, ("float", "int")),
    "sign": (np.sign, ("float", "int")),
    "exp": (np.exp, ("float",)),
    "expm1": (np.expm1, ("float",)),
    "log": (np.log, ("float",)),
    "log1p": (np.log1p, ("float",)),
    "sqrt": (np.sqrt, ("float",)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), ("float",)),
    "sin": (np.sin, ("float",)),
    "cos": (np.cos, ("float",)),
    "tan": (np.tan, ("float",)),
    "tanh": (np.tanh, ("float",)),
    "sigmoid": (_sigmoid, ("float",)),
    "relu": (lambda x: np.maximum(x, np.zeros_like(x)), ("float",)),
    "softplus": (lambda x: np.logaddexp(np.zeros_like(x), x), ("float",)),
    "erf": (lambda x: _erf(x).astype(x.dtype), ("float",)),
    "floor": (np.floor, ("float",)),
    "ceil": (np.ceil, ("float",)),
    "not": (np.logical_not, ("bool",)),
    "stop_gradient": (lambda x: x, ("float", "int", "bool")),
}

# name -> (NumPy function, operand dtype classes allowed, result dtype or None for same)
BinaryFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
BINARY: dict[str, tuple[BinaryFn, tuple[str, ...], str | None]] = {
    "add": (np.add, ("float", "int"), None),
    "sub": (np.subtract, ("float", "int"), None),
    "mul": (np.multiply, ("float", "int"), None),
    "div": (np.divide, ("float",), None),
    "floordiv": (np.floor_divide, ("float", "int"), None),
    "mod": (np.mod, ("float", "int"), None),
    "pow": (np.power, ("float",), None),
    "maximum": (np.maximum, ("float", "int"), None),
    "minimum": (np.minimum, ("float", "int"), None),
    "lt": (np.less, ("float", "int"), "bool"),
    "le": (np.less_equal, ("float", "int"), "bool"),
    "gt": (np.greater, ("float", "int"), "bool"),
    "ge": (np.greater_equal, ("float", "int"), "bool"),
    "eq": (np.equal, ("float", "int", "bool"), "bool"),
    "ne": (np.not_equal, ("float", "int", "bool"), "bool"),
    "and": (np.logical_and, ("bool",), None),
    "or": (np.logical_or, ("bool",), None),
}


def _check_classes(name: str, t: TensorType, allowed: tuple[str, ...]) -> None:
    if dtype_class(t.dtype) not in allowed:
        wanted = " or ".join(allowed)
        raise ShapeError(f"'{name}' needs {wanted} operands, got {t.dtype}")


def _unary_infer(name: str) -> Infer:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 1)
        _check_classes(name, ops[0], UNARY[name][1])
        return [ops[0]]

    return infer


def _unary_eval(name: str) -> Evaluate:
    fn = UNARY[name][0]
    return lambda ctx, args, op: [fn(args[0])]


def _binary_infer(name: str) -> Infer:
    def infer(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
        expect_arity(name, ops, 2)
        a, b = ops
        if a.dtype != b.dtype:
            raise ShapeError(f"'{name}' operands have different dtypes {a.dtype} and {b.dtype}")
        if a.shape != b.shape:
            raise ShapeError(f"'{name}' operands have different shapes {a} and {b}")
        _check_classes(name, a, BINARY[name][1])
        result = BINARY[name][2]
        return [a.with_dtype(result) if result else a]

    return infer


def _binary_eval(name: str) -> Evaluate:
    fn = BINARY[name][0]
    return lambda ctx, args, op: [fn(args[0], args[1])]


for _name in UNARY:
    register(_name, "elementwise", _unary_infer(_name), _unary_eval(_name),
             f"Elementwise {_name}: `%1 = {_name} %x : f32[N]`.")
for _name in BINARY:
    register(_name, "elementwise", _binary_infer(_name), _binary_eval(_name),
             f"Elementwise {_name} of equal-shaped operands: `%2 = {_name} %a, %b : f32[N]`.")


def _infer_select(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("select", ops, 3)
    cond, a, b = ops
    if cond.dtype != "bool":
        raise ShapeError(f"the condition of 'where' must be bool, got {cond.dtype}")
    if a.dtype != b.dtype:
        raise ShapeError(f"'where' branches have different dtypes {a.dtype} and {b.dtype}")
    if not (cond.shape == a.shape == b.shape):
        raise ShapeError(f"'where' operands have different shapes {cond}, {a}, {b}")
    return [a]


register("select", "elementwise", _infer_select,
         lambda ctx, args, op: [np.where(args[0], args[1], args[2])],
         "Pick from a where cond holds, else b: `%3 = select %c, %a, %b : f32[N]`.")


def _infer_cast(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("cast", ops, 1)
    return [ops[0].with_dtype(attrs["dtype"])]


def cast_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x.astype(dtype)`, float → int giving INT_MIN for NaN, ±inf and values out of range
    (NumPy's x86 result) on every platform and without warnings (docs/language.md §6)."""
    if x.dtype.kind != "f" or dtype.kind != "i":
        return x.astype(dtype)
    limit = 2.0 ** (8 * dtype.itemsize - 1)
    fits = (x >= -limit) & (x < limit)
    return np.where(fits, np.where(fits, x, 0).astype(dtype), np.iinfo(dtype).min).astype(dtype)


def _eval_cast(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    return [cast_array(np.asarray(args[0]), NUMPY_DTYPES[op.attrs["dtype"]])]


register("cast", "elementwise", _infer_cast, _eval_cast,
         "Convert the element type: `%1 = cast %x {dtype = f64} : f64[N]`.")


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
         "NumPy broadcast to a shape: `%1 = broadcast %b {shape = [N, D]} : f32[N, D]`.")


# ---------------------------------------------------------------- reductions

REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "reduce_sum": np.sum,
    "reduce_prod": np.prod,
    "reduce_max": np.max,
    "reduce_min": np.min,
}


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


def _reduce_eval(name: str) -> Evaluate:
    fn = REDUCTIONS[name]

    def evaluate(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
        x = args[0]
        axes = tuple(op.attrs["axes"])
        if name in ("reduce_sum", "reduce_prod") and x.dtype == np.float32:
            return [fn(x.astype(np.float64), axis=axes).astype(np.float32)]
        if name in ("reduce_max", "reduce_min"):
            info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
            empty = -np.inf if x.dtype.kind == "f" else info.min
            if name == "reduce_min":
                empty = np.inf if x.dtype.kind == "f" else info.max
            return [fn(x, axis=axes, initial=empty)]
        return [fn(x, axis=axes)]

    return evaluate


for _name in REDUCTIONS:
    register(_name, "reduction", _infer_reduce(_name), _reduce_eval(_name),
             f"Reduce over axes: `%1 = {_name} %x {{axes = [1]}} : f32[N]`.")


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


register("argmax", "reduction", _infer_arg("argmax"), _arg_eval(np.argmax),
         "Index of the first largest element: `%1 = argmax %x {axis = 1} : i64[N]`.")
register("argmin", "reduction", _infer_arg("argmin"), _arg_eval(np.argmin),
         "Index of the first smallest element: `%1 = argmin %x {axis = None} : i64`.")


# ---------------------------------------------------------------- linear algebra


def _infer_matmul(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("matmul", ops, 2)
    a, b = ops
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"matmul needs 2-D operands, got {a} and {b}")
    if a.dtype != b.dtype or a.dtype == "bool":
        raise ShapeError(f"matmul operands must share a numeric dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ShapeError(f"matmul inner dimensions differ: {a.shape[1]} and {b.shape[0]}")
    return [TensorType(a.dtype, (a.shape[0], b.shape[1]))]


register("matmul", "linalg", _infer_matmul,
         lambda ctx, args, op: [np.matmul(args[0], args[1])],
         "Matrix product of 2-D operands: `%2 = matmul %a, %b : f32[N, M]`.")

from . import ops_adjoint, ops_shape, ops_structured  # noqa: E402,F401  (the other groups)
