"""`rv.trace`: record a NumPy-style Python function as a Reverie module (SPEC §3.7).

(The module is `tracing`, not `trace`: a submodule of that name would shadow the function
`rv.trace` once imported.)

    def loss(x, w):
        return np.sum(np.tanh(x @ w) ** 2)

    m = rv.trace(loss, np.ones((8, 3)), np.ones(3))
    m.loss.grad()(x, w)           # every transform of SPEC §3.2 applies
    print(m.ir("ast"))            # the recorded program, as Reverie source

The function runs once on `Traced` stand-ins. Each operation on a stand-in appends one
`let` statement to the recording, so the result is ordinary Reverie source (kept as
`module.source`, each line commented with the Python line that made it), compiled by
`rv.compile`: tracing adds no second compiler, only a second way to write the input.

Dimensions are named per axis of the example arguments (`X0, X1` for `x`'s axes): axes of
equal size share one name, so `x @ w` type-checks; an axis of size 1 stays the literal `1`
so that it broadcasts. Each stand-in knows its concrete example shape (to resolve
`reshape(-1)` and NumPy's axis arithmetic) beside the dimension expression of each axis.

What cannot be recorded gets a `TraceError` naming the Python line: a Python `if`,
`while`, `bool()`, `float()` or `len()`-driven decision on a traced value (the recording
has no value to decide with: use `rv.where` for an elementwise choice, or write the kernel
in the Reverie language, whose `if`/`while` are recorded as control flow).
"""

from __future__ import annotations

import inspect
import linecache
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.module import Module

# NumPy dtypes and their Reverie names (SPEC §2.1).
DTYPE_NAMES = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32",
               np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.bool_): "bool"}
FLOAT_NAMES = ("f32", "f64")

# The elementwise built-ins of §2.3, read from the op table: the language name of each
# (`relu`), and the NumPy ufuncs that mean the same (`np.exp` is `exp`).
UNARY_BUILTINS = tuple(sorted(name for name, row in ELEMENTWISE.items()
                              if row.builtin and row.arity == 1))
NUMPY_UNARY = {"absolute": "abs", "fabs": "abs", "negative": "neg", "positive": None,
               "reciprocal": None, "square": None,
               **{name: name for name in UNARY_BUILTINS}}
NUMPY_BINARY = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/",
                "true_divide": "/", "power": "**", "matmul": "@", "less": "<",
                "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
                "not_equal": "!=", "logical_and": "and", "logical_or": "or",
                "maximum": "max", "minimum": "min"}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
REDUCTIONS = ("sum", "mean", "prod", "max", "min", "logsumexp", "argmax", "argmin")


class TraceError(TypeError):
    """A Python construct that cannot be recorded; the message names the Python line."""


@dataclass(frozen=True)
class Axis:
    """One axis of a traced value: its size in the example and its dimension expression."""

    size: int
    dim: str


RECORDER_FILES = {__file__}  # frames of the recorders, skipped when naming the user's line


def _user_line() -> str:
    """`file:line: source` of the innermost frame outside the recorders (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in RECORDER_FILES:
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}: {code}"


class Recording:
    """The statements recorded so far and the names they bind."""

    def __init__(self, literal_dims: bool = False) -> None:
        self.literal_dims = literal_dims  # every dimension its example size (rv.fx)
        self.params: list[str] = []
        self.lines: list[str] = []
        self.dims: dict[int, str] = {}
        self.origin: Callable[[], str] = _user_line  # what each statement's comment names
        self._count = 0

    def dim_for(self, size: int, name: str) -> str:
        """The dimension of an example axis: `1` for size 1 (it broadcasts) and every size
        with `literal_dims`, else the name given to the first axis of that size."""
        if size == 1 or self.literal_dims:
            return str(size)
        return self.dims.setdefault(size, name)

    def param(self, name: str, value: Any) -> Traced:
        """A parameter shaped like the example `value` (an array or a number)."""
        array = np.asarray(value)
        return self.param_like(name, array.shape, array.dtype)

    def param_like(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Traced:
        """A parameter of this shape and NumPy dtype: `x: f64[X0, X1]`."""
        element = DTYPE_NAMES.get(np.dtype(dtype))
        if element is None:
            raise TraceError(f"argument '{name}' has dtype {np.dtype(dtype)}; Reverie takes "
                             f"{', '.join(DTYPE_NAMES.values())}")
        axes = tuple(Axis(n, self.dim_for(n, f"{name.upper()}{i}"))
                     for i, n in enumerate(shape))
        self.params.append(f"{name}: {element}{_shape_text(axes)}")
        return Traced(self, name, axes, element)

    def let(self, expr: str, axes: tuple[Axis, ...], dtype: str, index: str = "") -> Traced:
        """Bind `expr` to a fresh name: `let t3 = exp(t2);  # model.py:14: ...` (with
        `index`, an index-notation statement: `let t4[g0] = x[idx[g0]];`)."""
        self._count += 1
        name = f"t{self._count}"
        self.lines.append(f"    let {name}{index} = {expr};  # {self.origin()}")
        return Traced(self, name, axes, dtype)


def _shape_text(axes: tuple[Axis, ...]) -> str:
    return f"[{', '.join(a.dim for a in axes)}]" if axes else ""


def broadcast(a: tuple[Axis, ...], b: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """NumPy broadcasting of two shapes, keeping the non-1 axis of each pair."""
    width = max(len(a), len(b))
    a = (Axis(1, "1"),) * (width - len(a)) + a
    b = (Axis(1, "1"),) * (width - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x.size != y.size and 1 not in (x.size, y.size):
            raise TraceError(f"shapes do not broadcast: {x.size} against {y.size} "
                             f"at {_user_line()}")
        out.append(y if x.size == 1 else x)
    return tuple(out)


def normal_axes(axis: Any, rank: int) -> tuple[int, ...]:
    axes = range(rank) if axis is None else (axis,) if isinstance(axis, int) else axis
    return tuple(sorted(a % rank for a in axes))


class Traced:
    """A symbolic stand-in for an array argument or intermediate of a traced function."""

    __array_priority__ = 1000  # NumPy defers binary operators to this class

    def __init__(self, recording: Recording, name: str, axes: tuple[Axis, ...],
                 dtype: str) -> None:
        self.recording = recording
        self.name = name
        self.axes = axes
        self.dtype = dtype

    # ------------------------------------------------------------ what NumPy users read
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def T(self) -> Traced:  # noqa: N802 (NumPy's name)
        return self.recording.let(f"{self.name}.T", self.axes[::-1], self.dtype)

    def __repr__(self) -> str:
        return f"Traced({self.name}: {self.dtype}{_shape_text(self.axes)})"

    # ------------------------------------------------------------ refusals
    def _refuse(self, what: str) -> TraceError:
        return TraceError(
            f"cannot trace {what} of a traced value at {_user_line()}: the recording has "
            f"no value to decide with. Use rv.where(cond, a, b) for an elementwise choice, "
            f"or write the kernel in the Reverie language, whose `if`/`while` are compiled "
            f"as control flow (SPEC §2.7).")

    def __bool__(self) -> bool:
        raise self._refuse("a Python `if`, `while`, `and`/`or` or bool()")

    def __float__(self) -> float:
        raise self._refuse("float()")

    def __int__(self) -> int:
        raise self._refuse("int()")

    def __index__(self) -> int:
        raise self._refuse("use as a Python integer")

    def __iter__(self):
        """Iteration over the first axis, as NumPy's: `for row in x` records `x[i]`."""
        return (self[i] for i in range(len(self)))

    def __len__(self) -> int:
        if not self.axes:
            raise TraceError(f"len() of a 0-d traced value at {_user_line()}")
        return self.axes[0].size

    # ------------------------------------------------------------ operators
    def _binary(self, op: str, other: Any, reverse: bool = False) -> Traced:
        other = operand(self.recording, other, self.dtype)
        left, right = (other, self) if reverse else (self, other)
        if op == "@":
            return _matmul(left, right)
        dtype = "bool" if op in COMPARISONS or op in ("and", "or") else left.dtype
        axes = broadcast(left.axes, right.axes)
        expr = (f"{op}({left.name}, {right.name})" if op in ("max", "min")
                else f"{left.name} {op} {right.name}")
        return self.recording.let(expr, axes, dtype)

    def __add__(self, o): return self._binary("+", o)
    def __radd__(self, o): return self._binary("+", o, True)
    def __sub__(self, o): return self._binary("-", o)
    def __rsub__(self, o): return self._binary("-", o, True)
    def __mul__(self, o): return self._binary("*", o)
    def __rmul__(self, o): return self._binary("*", o, True)
    def __truediv__(self, o): return self._binary("/", o)
    def __rtruediv__(self, o): return self._binary("/", o, True)
    def __pow__(self, o): return self._binary("**", o)
    def __rpow__(self, o): return self._binary("**", o, True)
    def __matmul__(self, o): return self._binary("@", o)
    def __rmatmul__(self, o): return self._binary("@", o, True)
    def __lt__(self, o): return self._binary("<", o)
    def __le__(self, o): return self._binary("<=", o)
    def __gt__(self, o): return self._binary(">", o)
    def __ge__(self, o): return self._binary(">=", o)
    def __eq__(self, o): return self._binary("==", o)  # type: ignore[override]
    def __ne__(self, o): return self._binary("!=", o)  # type: ignore[override]
    def __and__(self, o): return self._binary("and", o)
    def __or__(self, o): return self._binary("or", o)
    __hash__ = object.__hash__

    def __neg__(self) -> Traced:
        return self.recording.let(f"-{self.name}", self.axes, self.dtype)

    def __pos__(self) -> Traced:
        return self

    def __invert__(self) -> Traced:
        return self.recording.let(f"not {self.name}", self.axes, self.dtype)

    def __abs__(self) -> Traced:
        return self._call("abs")

    def _call(self, builtin: str) -> Traced:
        return self.recording.let(f"{builtin}({self.name})", self.axes, self.dtype)

    __reverie_builtin__ = _call  # `rv.exp(t)` on a stand-in records `exp(t)`

    # ------------------------------------------------------------ shapes
    def __getitem__(self, key: Any) -> Traced:
        return _subscript(self, key if isinstance(key, tuple) else (key,))

    def reshape(self, *shape: Any) -> Traced:
        target = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        return _reshape(self, tuple(int(n) for n in target))

    def transpose(self, *axes: Any) -> Traced:
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], tuple | list) else axes
        order = tuple(order) if order else tuple(reversed(range(self.ndim)))
        text = ", ".join(str(a % self.ndim) for a in order)
        return self.recording.let(f"transpose({self.name}, ({text},))",
                                  tuple(self.axes[a] for a in order), self.dtype)

    def along(self, builtin: str, axis: int) -> Traced:
        """A built-in that keeps the shape, applied along one axis: `softmax(t, axis=1)`."""
        return self.recording.let(f"{builtin}({self.name}, axis={axis % self.ndim})",
                                  self.axes, self.dtype)

    def astype(self, dtype: Any) -> Traced:
        target = DTYPE_NAMES[np.dtype(dtype)]
        return self.recording.let(f"{target}({self.name})", self.axes, target)

    # ------------------------------------------------------------ reductions
    def _reduce(self, kind: str, axis: Any = None, keepdims: bool = False) -> Traced:
        reduced = normal_axes(axis, self.ndim)
        kept = tuple(Axis(1, "1") if i in reduced else a for i, a in enumerate(self.axes)
                     if keepdims or i not in reduced)
        keywords = ""
        if axis is not None:
            keywords += f", axis=({', '.join(map(str, reduced))},)"
        if keepdims:
            keywords += ", keepdims=true"
        dtype = "i64" if kind in ("argmax", "argmin") else self.dtype
        return self.recording.let(f"{kind}({self.name}{keywords})", kept, dtype)

    def sum(self, axis=None, keepdims=False): return self._reduce("sum", axis, keepdims)
    def mean(self, axis=None, keepdims=False): return self._reduce("mean", axis, keepdims)
    def prod(self, axis=None, keepdims=False): return self._reduce("prod", axis, keepdims)
    def max(self, axis=None, keepdims=False): return self._reduce("max", axis, keepdims)
    def min(self, axis=None, keepdims=False): return self._reduce("min", axis, keepdims)

    def argmax(self, axis=None):
        return self._reduce("argmax", axis)

    def argmin(self, axis=None):
        return self._reduce("argmin", axis)

    # ------------------------------------------------------------ NumPy protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any):
        """`np.exp(t)`, `np.add(a, t)`, `np.maximum(t, 0)`: recorded as the built-in of
        the same meaning; other ufuncs and methods (`reduce`, `out=`) are refused."""
        if method != "__call__" or kwargs:
            raise TraceError(f"np.{ufunc.__name__}.{method} with {sorted(kwargs)} cannot "
                             f"be traced ({_user_line()})")
        name = ufunc.__name__
        if len(inputs) == 1 and name in NUMPY_UNARY:
            return _unary_ufunc(inputs[0], name)
        if len(inputs) == 2 and name in NUMPY_BINARY:
            first = inputs[0] if isinstance(inputs[0], Traced) else None
            if first is not None:
                return first._binary(NUMPY_BINARY[name], inputs[1])
            return inputs[1]._binary(NUMPY_BINARY[name], inputs[0], reverse=True)
        raise TraceError(f"np.{name} has no Reverie counterpart ({_user_line()})")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any):
        """`np.sum(t, axis=1)`, `np.where`, `np.transpose`, `np.reshape`,
        `np.concatenate`, `np.dot`: the functions with a Reverie counterpart."""
        handler = ARRAY_FUNCTIONS.get(func.__name__)
        if handler is None:
            raise TraceError(f"np.{func.__name__} cannot be traced ({_user_line()}); "
                             f"traceable: {', '.join(sorted(ARRAY_FUNCTIONS))}")
        return handler(*args, **kwargs)


for _name in UNARY_BUILTINS:  # `t.exp()`, `t.tanh()`, ... one method per built-in
    setattr(Traced, _name, lambda self, _builtin=_name: self._call(_builtin))


def operand(recording: Recording, value: Any, dtype: str) -> Traced:
    """A traced value, or a Python number as a weakly typed literal (SPEC §2.3)."""
    if isinstance(value, Traced):
        return value
    if isinstance(value, bool | np.bool_):
        return Traced(recording, "true" if value else "false", (), "bool")
    if isinstance(value, int | float | np.integer | np.floating):
        number = float(value) if dtype in FLOAT_NAMES else value
        if isinstance(number, float) and not math.isfinite(number):
            raise TraceError(f"the constant {number} cannot be written in Reverie source "
                             f"({_user_line()})")
        return Traced(recording, repr(number) if isinstance(number, float) else
                      str(int(number)), (), dtype)
    raise TraceError(f"a {type(value).__name__} constant cannot be traced "
                     f"({_user_line()}): pass it as an argument of the traced function")


def _unary_ufunc(x: Traced, name: str) -> Traced:
    builtin = NUMPY_UNARY[name]
    if name == "positive":
        return x
    if name == "negative":
        return -x
    if name == "square":
        return x * x
    if name == "reciprocal":
        return 1.0 / x
    return x._call(builtin)


def _matmul(a: Traced, b: Traced) -> Traced:
    """NumPy `matmul` shapes for 1-D and 2-D operands (SPEC §2.3)."""
    if a.ndim not in (1, 2) or b.ndim not in (1, 2):
        raise TraceError(f"@ takes 1-D or 2-D operands, got {a.shape} and {b.shape} "
                         f"({_user_line()})")
    if a.axes[-1].size != b.axes[0 if b.ndim == 1 else -2].size:
        raise TraceError(f"@ of shapes {a.shape} and {b.shape}: inner sizes differ "
                         f"({_user_line()})")
    axes = a.axes[:-1] + (b.axes[-1:] if b.ndim == 2 else ())
    return a.recording.let(f"{a.name} @ {b.name}", axes, a.dtype)


def _subscript(x: Traced, key: tuple[Any, ...]) -> Traced:
    """Basic indexing with integers and slices (with an `...`), and integer-array
    indexing of the first axis by a traced integer vector (a gather)."""
    if len(key) == 1 and isinstance(key[0], Traced):
        return _gather(x, key[0])
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - len(key) + 1) + key[at + 1:]
    if len(key) > x.ndim:
        raise TraceError(f"too many subscripts ({len(key)}) for shape {x.shape} "
                         f"({_user_line()})")
    parts, axes = [], []
    for k, axis in zip(key + (slice(None),) * (x.ndim - len(key)), x.axes, strict=True):
        if isinstance(k, int | np.integer):
            index = int(k) % axis.size if -axis.size <= k < axis.size else None
            if index is None:
                raise TraceError(f"index {k} is out of range for size {axis.size} "
                                 f"({_user_line()})")
            parts.append(str(index))
        elif isinstance(k, slice):
            text, kept = _slice(k, axis)
            parts.append(text)
            axes.append(kept)
        else:
            raise TraceError(f"subscript {k!r} cannot be traced ({_user_line()}): "
                             f"use integers, slices, or one integer-array subscript")
    return x.recording.let(f"{x.name}[{', '.join(parts)}]", tuple(axes), x.dtype)


def _slice(k: slice, axis: Axis) -> tuple[str, Axis]:
    """A slice as Reverie source (negative bounds count from the end, as in NumPy and in
    Reverie), with its result axis: `x[1:]` of `X0` is `X0 - 1`."""
    start, stop, step = k.indices(axis.size)
    if step <= 0:
        raise TraceError(f"slices with a negative step cannot be traced ({_user_line()})")
    if (start, stop, step) == (0, axis.size, 1):
        return ":", axis
    size = len(range(start, stop, step))
    text = (f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
            + (f":{step}" if step != 1 else ""))
    if axis.dim.isdigit():
        return text, Axis(size, str(size))
    low = _bound(k.start, axis, 0)
    high = _bound(k.stop, axis, axis.size)
    length = high if low == "0" else f"{high} - {low}"
    return text, Axis(size, length if step == 1 else f"({length} + {step - 1}) // {step}")


def _bound(bound: int | None, axis: Axis, default: int) -> str:
    """A slice bound as a dimension expression: `None` is the default end, a negative
    bound counts back from the axis's dimension."""
    if bound is None:
        return axis.dim if default else "0"
    if bound < 0:
        return f"{axis.dim} - {-bound}"
    return axis.dim if bound >= axis.size else str(bound)


def _gather(x: Traced, index: Traced) -> Traced:
    """`x[idx]` with a traced integer vector: index notation, `let g[i, ...] = x[idx[i], ...]`."""
    if index.dtype not in ("i32", "i64") or index.ndim != 1:
        raise TraceError(f"an array subscript must be a 1-D integer vector, got "
                         f"{index!r} ({_user_line()})")
    names = [f"g{i}" for i in range(x.ndim)]
    rhs = ", ".join([f"{index.name}[g0]", *names[1:]])
    return x.recording.let(f"{x.name}[{rhs}]", index.axes + x.axes[1:], x.dtype,
                           index=f"[{', '.join(names)}]")


def _reshape(x: Traced, target: tuple[int, ...]) -> Traced:
    """`reshape` to example sizes: each size is named by the input axes whose product it
    is (`(N, D)` to `(N * D,)`), or by the dimension of that size, or kept as a literal."""
    total = math.prod(x.shape)
    if target.count(-1) > 1:
        raise TraceError(f"reshape takes at most one -1 ({_user_line()})")
    if -1 in target:
        known = math.prod(n for n in target if n != -1)
        target = tuple(total // known if n == -1 else n for n in target)
    if math.prod(target) != total:
        raise TraceError(f"cannot reshape {x.shape} to {target} ({_user_line()})")
    axes = tuple(_reshaped_axis(x, n) for n in target)
    dims = ", ".join(a.dim for a in axes)
    return x.recording.let(f"reshape({x.name}, ({dims},))", axes, x.dtype)


def _reshaped_axis(x: Traced, size: int) -> Axis:
    for start in range(x.ndim):
        for stop in range(start + 1, x.ndim + 1):
            run = x.axes[start:stop]
            if math.prod(a.size for a in run) == size and all(a.dim != "1" for a in run):
                return Axis(size, " * ".join(_factor(a.dim) for a in run))
    named = x.recording.dims.get(size)
    return Axis(size, named if named else str(size))


def _factor(dim: str) -> str:
    """A dimension expression as a factor of a product: `(N - 1)`, `D`, `3`."""
    return dim if dim.isidentifier() or dim.isdigit() else f"({dim})"


def where(cond: Any, a: Any, b: Any) -> Traced:
    traced = next(v for v in (cond, a, b) if isinstance(v, Traced))
    recording = traced.recording
    dtype = next((v.dtype for v in (a, b) if isinstance(v, Traced)), "f64")
    c, x, y = (operand(recording, cond, "bool"), operand(recording, a, dtype),
               operand(recording, b, dtype))
    axes = broadcast(broadcast(c.axes, x.axes), y.axes)
    return recording.let(f"where({c.name}, {x.name}, {y.name})", axes, dtype)


def concatenate(values: Sequence[Traced], axis: int = 0) -> Traced:
    first = values[0]
    axis %= first.ndim
    size = sum(v.shape[axis] for v in values)
    dim = " + ".join(v.axes[axis].dim for v in values)
    axes = first.axes[:axis] + (Axis(size, dim),) + first.axes[axis + 1:]
    names = ", ".join(v.name for v in values)
    return first.recording.let(f"concat(({names},), axis={axis})", axes, first.dtype)


def _reduction(kind: str) -> Callable[..., Traced]:
    def reduce(x: Traced, axis: Any = None, keepdims: bool = False, **_: Any) -> Traced:
        return x._reduce(kind, axis, keepdims)

    return reduce


ARRAY_FUNCTIONS: dict[str, Callable[..., Traced]] = {
    **{kind: _reduction(kind) for kind in ("sum", "mean", "prod", "max", "min", "argmax",
                                           "argmin")},
    "amax": _reduction("max"),
    "amin": _reduction("min"),
    "where": where,
    "transpose": lambda x, axes=None: x.transpose(*(axes or ())),
    "reshape": lambda x, shape, **_: x.reshape(shape),
    "concatenate": concatenate,
    "dot": lambda a, b: a @ b,
}


class TracedModule(Module):
    """A module recorded by `trace`: stage "ast" prints the recorded Reverie source."""

    def ir(self, stage: str, *args: Any, **kwargs: Any) -> str:
        if stage == "ast":
            return self.source
        return super().ir(stage, *args, **kwargs)


def trace(fn: Callable[..., Any], *example_args: Any) -> TracedModule:
    """The Reverie module recorded from `fn` run on stand-ins shaped like `example_args`
    (SPEC §3.7); its function is named `fn.__name__`."""
    recording = Recording()
    names = _parameter_names(fn, len(example_args))
    stand_ins = [recording.param(n, a) for n, a in zip(names, example_args, strict=True)]
    result = fn(*stand_ins)
    outputs = list(result) if isinstance(result, tuple) else [result]
    name = fn.__name__ if fn.__name__.isidentifier() else "traced"
    return compile_recording(recording, name, outputs, tuple_return=isinstance(result, tuple))


def compile_recording(recording: Recording, name: str, outputs: Sequence[Any],
                      tuple_return: bool = False) -> TracedModule:
    """The module of one function `name` holding `recording` and returning `outputs`."""
    returned = [operand(recording, r, "f64") for r in outputs]
    if any(r.name in ("true", "false") or not r.name.isidentifier() for r in returned):
        raise TraceError(f"{name} returns a constant, not a value computed from its "
                         f"arguments")
    value = ", ".join(r.name for r in returned)
    source = "\n".join([f"# Traced from {name} by rv.trace.",
                        f"fn {name}({', '.join(recording.params)}) {{",
                        *recording.lines,
                        f"    return {f'({value})' if tuple_return else value};",
                        "}", ""])
    return TracedModule(source, name=name)


def _parameter_names(fn: Callable[..., Any], count: int) -> list[str]:
    """The Python parameter names of `fn` (`x`, `w`), or `a0, a1, ...` for `*args`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    names += [f"a{i}" for i in range(len(names), count)]
    return names
