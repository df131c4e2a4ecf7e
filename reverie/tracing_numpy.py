"""NumPy and SciPy as `rv.trace` takes them: their names mapped onto the language.

Elementwise functions are mapped by name (`ELEMENTWISE_NAMES`): each NumPy ufunc or
`scipy.special` ufunc names the built-ins that mean the same, and the first that the
language has when the function is traced is recorded (`np.arcsin(x)` is `arcsin(x)` or
`asin(x)`, `scipy.special.gammaln` is `lgamma`), so a built-in added to the language is
reached without editing this table. Some have a spelling in other built-ins while theirs
is missing (`COMPOSITES`: `log2(x)` as `log(x) / ln 2`); any other name whose built-in
does not exist raises `TraceError` naming it.

The NumPy functions (`np.var`, `np.stack`, `np.pad`, ...) are recorded by the functions
of this module and of `reverie.tracing_contract` (einsum, products, linear algebra),
registered in `ARRAY_FUNCTIONS` under their name in `numpy` (`"linalg.norm"`), where a
traced value's `__array_function__` finds them; those that are methods in NumPy are
methods of `Traced` too (`x.var(ddof=1)`).

`numpy_entry_points` binds, while a function is traced, the NumPy functions that NumPy
does not dispatch on the elements of a list (`np.array([x, 2 * x])`, `np.mean([a, b])`)
and the SciPy functions that are not NumPy-dispatched (`scipy.special.polygamma`,
`logsumexp`, `scipy.linalg.*`) to versions that record when an argument holds a traced
value and call the original otherwise.
"""

from __future__ import annotations

import math
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.lower.builtins import BINARY_BUILTINS, BUILTINS
from reverie.tracing_base import FLOAT_NAMES, ignored
from reverie.tracing_record import (
    ARRAY_FUNCTIONS,
    RECORDER_FILES,
    UFUNC_METHODS,
    UFUNCS,
    UNARY_BUILTINS,
    Axis,
    Traced,
    TraceError,
    _first_traced,
    broadcast,
    concatenate,
    normal_axes,
    operand,
    recorded,
    stack,
    user_line,
    where,
)
from reverie.tracing_sizes import Size

RECORDER_FILES.add(__file__)

# NumPy/SciPy ufunc name -> the built-ins of the language that mean it, the first found
# wins (every unary built-in also stands for itself: `np.tanh` is `tanh`).
ELEMENTWISE_NAMES: dict[str, tuple[str, ...]] = {
    **{name: (name,) for name in UNARY_BUILTINS},
    "absolute": ("abs",), "fabs": ("abs",),
    "arcsin": ("arcsin", "asin"), "arccos": ("arccos", "acos"), "arctan": ("arctan", "atan"),
    "arcsinh": ("arcsinh", "asinh"), "arccosh": ("arccosh", "acosh"),
    "arctanh": ("arctanh", "atanh"), "sinh": ("sinh",), "cosh": ("cosh",),
    "log2": ("log2",), "log10": ("log10",), "exp2": ("exp2",), "cbrt": ("cbrt",),
    "deg2rad": ("deg2rad",), "radians": ("deg2rad",), "rad2deg": ("rad2deg",),
    "degrees": ("rad2deg",), "trunc": ("trunc",), "rint": ("round", "rint"),
    "arctan2": ("arctan2", "atan2"), "hypot": ("hypot",), "logaddexp": ("logaddexp",),
    "logaddexp2": ("logaddexp2",), "fmax": ("max",), "fmin": ("min",),
    "maximum": ("max",), "minimum": ("min",), "copysign": ("copysign",),
    # scipy.special
    "gammaln": ("lgamma",), "psi": ("digamma",), "expit": ("sigmoid",), "logit": ("logit",),
    "gamma": ("gamma",), "erfc": ("erfc",), "erfinv": ("erfinv",), "erfcinv": ("erfcinv",),
    "erfcx": ("erfcx",), "ndtr": ("ndtr",), "log_ndtr": ("log_ndtr",),
    "j0": ("j0",), "j1": ("j1",), "y0": ("y0",), "y1": ("y1",), "i0": ("i0",), "i1": ("i1",),
    "i0e": ("i0e",), "i1e": ("i1e",), "jv": ("jv", "jn"), "yn": ("yn",), "yv": ("yv",),
    "iv": ("iv",), "ive": ("ive",), "beta": ("beta",), "betaln": ("betaln",),
    "gammainc": ("gammainc",), "gammaincc": ("gammaincc",), "betainc": ("betainc",),
    "xlogy": ("xlogy",), "xlog1py": ("xlog1py",), "entr": ("entr",),
}

LN2 = math.log(2.0)
# Spellings in other built-ins, used while the name's own built-in is missing.
COMPOSITES: dict[str, Callable[..., Traced]] = {
    "logit": lambda x: np.log(x / (1.0 - x)),
    "log2": lambda x: np.log(x) / LN2,
    "log10": lambda x: np.log(x) / math.log(10.0),
    "exp2": lambda x: np.exp(x * LN2),
    "deg2rad": lambda x: x * (math.pi / 180.0),
    "rad2deg": lambda x: x * (180.0 / math.pi),
    "logaddexp": lambda a, b: _logaddexp(a, b),
    "logaddexp2": lambda a, b: _logaddexp(a * LN2, b * LN2) / LN2,
    "xlogy": lambda x, y: where(x == 0, 0.0, x * np.log(y)),
    "xlog1py": lambda x, y: where(x == 0, 0.0, x * np.log1p(y)),
    "entr": lambda x: where(x > 0, -x * np.log(where(x > 0, x, 1.0)),
                            where(x == 0, 0.0, -math.inf)),
}

# ufuncs that are Python operators, by the name of the `Traced` method recording each.
OPERATORS = {"add": "__add__", "subtract": "__sub__", "multiply": "__mul__",
             "divide": "__truediv__", "true_divide": "__truediv__", "power": "__pow__",
             "float_power": "__pow__", "matmul": "__matmul__", "floor_divide": "__floordiv__",
             "remainder": "__mod__", "mod": "__mod__", "less": "__lt__",
             "less_equal": "__le__", "greater": "__gt__", "greater_equal": "__ge__",
             "equal": "__eq__", "not_equal": "__ne__", "logical_and": "__and__",
             "logical_or": "__or__"}
REFLECTED = {"__add__": "__radd__", "__sub__": "__rsub__", "__mul__": "__rmul__",
             "__truediv__": "__rtruediv__", "__pow__": "__rpow__",
             "__matmul__": "__rmatmul__", "__floordiv__": "__rfloordiv__",
             "__mod__": "__rmod__", "__lt__": "__gt__", "__le__": "__ge__",
             "__gt__": "__lt__", "__ge__": "__le__", "__eq__": "__eq__", "__ne__": "__ne__",
             "__and__": "__rand__", "__or__": "__ror__"}


# Built-ins that take integers as they are; the others compute in floats (NumPy's
# `np.sqrt` of integers is float64).
NUMBER_BUILTINS = ("abs", "sign", "max", "min")


def builtin_exists(name: str) -> bool:
    """Whether the language has the built-in `name` now (the lowering's table, or an
    elementwise row of the op table marked as a built-in)."""
    row = ELEMENTWISE.get(name)
    return name in BUILTINS or name in BINARY_BUILTINS or (row is not None and row.builtin)


def elementwise(name: str) -> Callable[..., Traced]:
    """The recorder of the NumPy/SciPy elementwise function `name`."""
    def record(*inputs: Any) -> Traced:
        found = next((b for b in ELEMENTWISE_NAMES[name] if builtin_exists(b)), None)
        if found is None:
            composite = COMPOSITES.get(name) or COMPOSITES.get(ELEMENTWISE_NAMES[name][0])
            if composite is not None:
                return composite(*inputs)
            raise TraceError(
                f"{name} is not a built-in of the language yet (looked for "
                f"{' or '.join(ELEMENTWISE_NAMES[name])}; {user_line()}): write it with "
                f"the built-ins of docs/language.md §8, or in the Reverie language")
        return call_builtin(found, *inputs)

    return record


def call_builtin(builtin: str, *inputs: Any, element: str | None = None) -> Traced:
    """`builtin(a, b, ...)` of broadcast operands; numbers take the traced operands' type."""
    first = _first_traced(list(inputs))
    if first is None:
        raise TraceError(f"{builtin} of no traced value ({user_line()})")
    recording = first.recording
    parts = [operand(recording, v, first.element) for v in inputs]
    target = np.result_type(*(p.dtype for p in parts))  # NumPy's promotion
    if builtin not in NUMBER_BUILTINS and target.kind in "biu":  # ints compute in f64
        target = np.dtype(np.float64)
    parts = [p if p.dtype == target else p.astype(target) for p in parts]
    axes: tuple[Axis, ...] = ()
    for p in parts:
        axes = broadcast(axes, p.axes, recording)
    names = ", ".join(p.name for p in parts)
    return recording.let(f"{builtin}({names})", axes, element or parts[0].element)


def _logaddexp(a: Any, b: Any) -> Traced:
    """`log(e^a + e^b)` without overflow: `max(a, b) + log1p(exp(-|a - b|))`."""
    return np.maximum(a, b) + np.log1p(np.exp(-np.abs(a - b)))


def _operator(method: str) -> Callable[..., Traced]:
    def record(a: Any, b: Any) -> Traced:
        if isinstance(a, Traced):
            return getattr(a, method)(b)
        return getattr(b, REFLECTED[method])(a)

    return record


def _polygamma(n: Any, x: Any) -> Traced:
    """`scipy.special.polygamma(n, x)` for a Python integer order: `digamma` for 0, else
    the built-in `polygamma(n, x)` where the language has it."""
    if isinstance(n, Traced) or not float(n).is_integer() or int(n) < 0:
        raise TraceError(f"scipy.special.polygamma needs a non-negative Python integer "
                         f"order, got {n!r} ({user_line()})")
    if int(n) == 0:
        return call_builtin("digamma", x)
    if not builtin_exists("polygamma"):
        raise TraceError(f"polygamma of order {int(n)} is not a built-in of the language "
                         f"yet ({user_line()}): digamma (order 0) is, and its derivatives "
                         f"(rv grad of digamma) are the polygamma functions")
    x = as_traced(x)
    if x.dtype.kind in "biu":  # ints compute in f64, as call_builtin's
        x = x.astype(np.float64)
    # the order is written as an integer constant, not as an operand of x's type
    return x.recording.let(f"polygamma({int(n)}, {x.name})", x.axes, x.element)


def _multigammaln(a: Any, d: int) -> Traced:
    """`scipy.special.multigammaln(a, d) = d(d-1)/4 ln π + Σ_j lgamma(a + (1 - j) / 2)`."""
    total = sum(call_builtin("lgamma", a + (1 - j) / 2.0) for j in range(1, int(d) + 1))
    return total + int(d) * (int(d) - 1) / 4.0 * math.log(math.pi)


UFUNCS.update({
    **{name: elementwise(name) for name in ELEMENTWISE_NAMES},
    **{name: _operator(method) for name, method in OPERATORS.items()},
    "negative": lambda x: -x, "positive": lambda x: +x, "conjugate": lambda x: x,
    "square": lambda x: x * x, "reciprocal": lambda x: 1.0 / x,
    "logical_not": lambda x: ~x, "invert": lambda x: ~x,
    "isnan": lambda x: x != x, "isfinite": lambda x: x - x == 0,
    "isinf": lambda x: (x == x) & ~(x - x == 0),
    "heaviside": lambda x, h: heaviside(x, h),
})


# ---------------------------------------------------------------- reductions

# The value that leaves each reduction unchanged where `where=` masks an element out.
MASKED = {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf}


def _reduction(kind: str) -> Callable[..., Traced]:
    """`np.sum` and the like, with NumPy's `where=` (the masked elements as the
    reduction's identity; `mean` divides by the count kept) and `initial=`."""
    def reduce(x: Any, axis: Any = None, dtype: Any = None, out: Any = None,
               keepdims: bool = False, initial: Any = None, where: Any = None,
               **options: Any) -> Traced:
        ignored(f"np.{kind}", {"out": out, **options})
        x = as_traced(x)
        if where is not None and where is not True:
            if kind not in MASKED and kind != "mean":
                raise TraceError(f"np.{kind}(where=...) cannot be traced ({user_line()})")
            kept = operand(x.recording, where, "bool")
            if kind == "mean":
                count = np.sum(np.where(kept, 1.0, 0.0) + _zeros_like(x), axis=axis,
                               keepdims=bool(keepdims))
                return np.sum(np.where(kept, x, 0.0), axis=axis, keepdims=keepdims) / count
            x = np.where(kept, x, MASKED[kind])
        result = x._reduce(kind, axis, bool(keepdims))
        if initial is not None:
            combine = {"sum": np.add, "prod": np.multiply, "max": np.maximum,
                       "min": np.minimum}.get(kind)
            if combine is None:
                raise TraceError(f"np.{kind}(initial=...) cannot be traced ({user_line()})")
            result = combine(result, initial)
        return result if dtype is None else result.astype(dtype)

    return reduce


def _count(x: Traced, axis: Any) -> Any:
    """How many elements a reduction over `axis` takes: a size (symbolic) or an int."""
    return math.prod((x.shape[i] for i in normal_axes(axis, x.ndim)), start=1)


def var(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, **options: Any) -> Traced:
    """`np.var`: `Σ (x - mean)² / (n - ddof)`, n the elements reduced (symbolic)."""
    ignored("np.var", {"out": out, **options})
    x = as_traced(x)
    if x.element not in ("f32", "f64"):
        x = x.astype(np.float64)
    centred = x - x.mean(axis=axis, keepdims=True)
    squares = centred * centred
    if not ddof:
        return squares.mean(axis=axis, keepdims=bool(keepdims))
    return squares.sum(axis=axis, keepdims=bool(keepdims)) / (_count(x, axis) - ddof)


def std(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, **options: Any) -> Traced:
    return np.sqrt(var(x, axis, dtype, out, ddof, keepdims, **options))


def average(x: Any, axis: Any = None, weights: Any = None, returned: bool = False,
            keepdims: Any = None) -> Traced:
    ignored("np.average", {"returned": returned or None, "keepdims": keepdims or None})
    x = as_traced(x)
    if weights is None:
        return x.mean(axis=axis)
    weights = operand(x.recording, weights, x.element)
    if weights.ndim != x.ndim:
        if axis is None or weights.ndim != 1:
            raise TraceError(f"np.average with weights of shape {weights.shape} "
                             f"({user_line()}): give them x's shape or one axis's")
        weights = weights.reshape([n if i == axis % x.ndim else 1
                                   for i, n in enumerate(x.shape)])
    return (x * weights).sum(axis=axis) / (weights + _zeros_like(x)).sum(axis=axis)


def _zeros_like(x: Traced) -> Traced:
    """Zeros shaped as `x`, to broadcast a value to `x`'s shape (even where x is NaN)."""
    return np.where(x == x, 0.0, 0.0)


def _skipping_nan(kind: str) -> Callable[..., Traced]:
    """`np.nansum` and the like: the reduction of the elements that are not NaN."""
    def reduce(x: Any, axis: Any = None, dtype: Any = None, out: Any = None,
               keepdims: bool = False, **options: Any) -> Traced:
        x = as_traced(x)
        return _reduction(kind)(x, axis, dtype, out, keepdims, where=x == x, **options)

    return reduce


def _all_any(kind: str) -> Callable[..., Traced]:
    """`np.all`/`np.any`: the language reduces no bools, so count the true elements."""
    def reduce(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
               **options: Any) -> Traced:
        ignored(f"np.{kind}", {"out": out, **options})
        x = as_traced(x)
        ones = (x != 0 if x.element != "bool" else x).astype(np.int64)
        if kind == "all":
            return ones.min(axis=axis, keepdims=bool(keepdims)) == 1
        return ones.max(axis=axis, keepdims=bool(keepdims)) == 1

    return reduce


def _scan(kind: str) -> Callable[..., Traced]:
    def scan(x: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Traced:
        ignored(f"np.{kind}", {"out": out})
        x = as_traced(x)
        if axis is None:
            x, axis = x.ravel(), 0
        result = x.recording.let(f"{kind}({x.name}, axis={axis % x.ndim})", x.axes,
                                 x.element)
        return result if dtype is None else result.astype(dtype)

    return scan


def _ordering(kind: str) -> Callable[..., Traced]:
    def order(x: Any, axis: Any = -1, kind_: Any = None, order: Any = None,
              stable: Any = None, descending: bool = False) -> Traced:
        ignored(f"np.{kind}", {"order": order})  # every sort is stable
        x = as_traced(x)
        if axis is None:
            x, axis = x.ravel(), 0
        element = "i64" if kind == "argsort" else x.element
        flag = ", descending=true" if descending else ""
        return x.recording.let(f"{kind}({x.name}, axis={axis % x.ndim}{flag})", x.axes,
                               element)

    return order


def diff(x: Any, n: int = 1, axis: int = -1, prepend: Any = None,
         append: Any = None) -> Traced:
    x = as_traced(x)
    if prepend is not None or append is not None:
        x = concatenate([v for v in (prepend, x, append) if v is not None], axis=axis)
    axis %= x.ndim
    for _step in range(n):
        head = (slice(None),) * axis
        x = x[head + (slice(1, None),)] - x[head + (slice(None, -1),)]
    return x


def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: Any = None,
               neginf: Any = None) -> Traced:
    """`np.nan_to_num`: NaN, inf and -inf replaced (by default 0 and the dtype's largest
    and smallest finite values); the gradient flows where x is finite."""
    x = as_traced(x)
    if x.element not in FLOAT_NAMES:
        return x.copy()
    finite = np.finfo(x.dtype)
    high = float(finite.max) if posinf is None else posinf
    low = float(finite.min) if neginf is None else neginf
    return where(x != x, nan, where(x == math.inf, high, where(x == -math.inf, low, x)))


def select(condlist: Any, choicelist: Any, default: Any = 0) -> Traced:
    """`np.select`: the choice of the first condition that holds, else `default`."""
    if len(condlist) != len(choicelist):
        raise TraceError(f"np.select of {len(condlist)} conditions and {len(choicelist)} "
                         f"choices ({user_line()}): give one choice per condition")
    result = default
    for condition, choice in zip(reversed(condlist), reversed(choicelist), strict=True):
        result = where(condition, choice, result)
    return as_traced(result)


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0, **options: Any
             ) -> Traced:
    """`np.linspace` between traced numbers: start + (stop - start) i / (num - 1) (the
    divisor num without `endpoint`), the last element `stop` itself as NumPy sets it."""
    ignored("np.linspace", {"retstep": retstep or None, "dtype": dtype, **options},
            ("device",))
    if np.ndim(start) or np.ndim(stop) or axis != 0:
        raise TraceError(f"np.linspace between traced arrays ({user_line()}): traced "
                         f"endpoints are numbers (0-d), axis=0")
    divisor = max(int(num) - 1 if endpoint else int(num), 1)
    values = start + (stop - start) * (np.arange(int(num), dtype=np.float64) / divisor)
    if endpoint and int(num) > 1:
        values = where(np.arange(int(num)) == int(num) - 1, stop, values)
    return values


def clip(x: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
         min: Any = None, max: Any = None, **options: Any) -> Traced:  # noqa: A002
    """`np.clip`: `min(max(x, low), high)` (either bound may be None)."""
    ignored("np.clip", {"out": out, **options})
    x = as_traced(x)
    low = a_min if a_min is not None else min
    high = a_max if a_max is not None else max
    if low is not None:
        x = np.maximum(x, low)
    if high is not None:
        x = np.minimum(x, high)
    return x


# ---------------------------------------------------------------- shapes

def as_traced(value: Any) -> Traced:
    """A traced value from what NumPy takes as an array: a traced value, or a (nested)
    list of them and numbers."""
    if isinstance(value, Traced):
        return value
    first = _first_traced(value)
    if first is None:
        raise TraceError(f"{value!r} holds no traced value ({user_line()})")
    return operand(first.recording, value, first.element)


def _outer(ufunc: np.ufunc, a: Any, b: Any, **options: Any) -> Traced:
    """`np.multiply.outer(a, b)`: `a` with `b.ndim` new axes, then the ufunc."""
    ignored(f"np.{ufunc.__name__}.outer", options)
    a, b = as_traced(a), as_traced(b)
    return UFUNCS[ufunc.__name__](a.reshape(tuple(a.shape) + (1,) * b.ndim), b)


def _ufunc_reduce(kind: str) -> Callable[..., Traced]:
    """`np.add.reduce(x, axis=0)` and the like: the reduction (axis 0 by default)."""
    def reduce(ufunc: np.ufunc, x: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
               keepdims: bool = False, **options: Any) -> Traced:
        if kind in ("all", "any"):
            ignored(f"np.{ufunc.__name__}.reduce", {"dtype": dtype, "out": out, **options})
            return _all_any(kind)(x, axis, keepdims=keepdims)
        return _reduction(kind)(x, axis, dtype, out, keepdims, **options)

    return reduce


def _ufunc_accumulate(kind: str) -> Callable[..., Traced]:
    def accumulate(ufunc: np.ufunc, x: Any, axis: int = 0, dtype: Any = None,
                   out: Any = None) -> Traced:
        return _scan(kind)(x, axis, dtype, out)

    return accumulate


UFUNC_METHODS.update({
    "outer": _outer,
    **{f"{name}.reduce": _ufunc_reduce(kind) for name, kind in (
        ("add", "sum"), ("multiply", "prod"), ("maximum", "max"), ("minimum", "min"),
        ("fmax", "max"), ("fmin", "min"), ("logical_and", "all"), ("logical_or", "any"))},
    "add.accumulate": _ufunc_accumulate("cumsum"),
    "multiply.accumulate": _ufunc_accumulate("cumprod"),
})


def ptp(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Traced:
    ignored("np.ptp", {"out": out})
    x = as_traced(x)
    return x.max(axis=axis, keepdims=keepdims) - x.min(axis=axis, keepdims=keepdims)


def count_nonzero(x: Any, axis: Any = None, *, keepdims: bool = False) -> Traced:
    x = as_traced(x)
    return (x != 0).astype(np.int64).sum(axis=axis, keepdims=keepdims)


def trapezoid(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Traced:
    """`np.trapezoid`: `Σ (y[1:] + y[:-1]) / 2 · Δx` along `axis`."""
    y = as_traced(y)
    axis %= y.ndim
    head = (slice(None),) * axis
    ends = y[head + (slice(1, None),)] + y[head + (slice(None, -1),)]
    if x is None:
        return (ends * (dx / 2.0)).sum(axis=axis)
    x = as_traced(x) if not isinstance(x, np.ndarray) else x
    steps = np.diff(x, axis=-1 if np.ndim(x) == 1 else axis)
    if np.ndim(steps) == 1 and y.ndim > 1:
        steps = as_traced(steps).reshape([n if i == axis else 1
                                          for i, n in enumerate(ends.shape)])
    return (ends * steps / 2.0).sum(axis=axis)


def heaviside(x: Any, h: Any) -> Traced:
    return where(x > 0, 1.0, where(x == 0, h, 0.0))


def _array(value: Any, dtype: Any = None, *args: Any, copy: Any = True, ndmin: int = 0,
           **kwargs: Any) -> Traced:
    """`np.array` (a copy) and `np.asarray` (`copy=None`: the value itself); `ndmin`
    prepends axes of size 1."""
    x = as_traced(value)
    if x.ndim < ndmin:
        x = x.reshape((1,) * (ndmin - x.ndim) + tuple(x.shape))
    if dtype is not None:
        return x.astype(dtype)
    return x.copy() if copy and x is value else x


def _asarray(value: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Traced:
    return _array(value, dtype, copy=None)


ARRAY_FUNCTIONS.update({
    **{kind: _reduction(kind) for kind in ("sum", "mean", "prod", "max", "min", "argmax",
                                           "argmin")},
    "amax": _reduction("max"), "amin": _reduction("min"), "ptp": ptp,
    "count_nonzero": count_nonzero, "trapezoid": trapezoid, "trapz": trapezoid,
    "cumulative_sum": lambda x, axis=None, dtype=None, out=None, include_initial=False: (
        ignored("np.cumulative_sum", {"include_initial": include_initial or None}),
        _scan("cumsum")(x, axis, dtype, out))[1],
    "cumulative_prod": lambda x, axis=None, dtype=None, out=None, include_initial=False: (
        ignored("np.cumulative_prod", {"include_initial": include_initial or None}),
        _scan("cumprod")(x, axis, dtype, out))[1],
    **{f"nan{kind}": _skipping_nan(kind) for kind in ("sum", "prod", "max", "min", "mean")},
    "var": var, "std": std, "average": average, "all": _all_any("all"),
    "any": _all_any("any"),
    "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"), "sort": _ordering("sort"),
    "argsort": _ordering("argsort"), "diff": diff, "clip": clip,
    "where": where, "concatenate": concatenate, "concat": concatenate,
    "nan_to_num": nan_to_num, "select": select, "linspace": linspace,
    "stack": lambda values, axis=0, out=None, **options: (
        ignored("np.stack", {"out": out, **options}, ("casting",)), stack(values, axis))[1],
    "copy": lambda x, order="K", subok=False: as_traced(x).copy(),
    "asarray": _asarray,
    "real": lambda x: as_traced(x), "shape": lambda x: as_traced(x).shape,
    "ndim": lambda x: as_traced(x).ndim, "size": lambda x: as_traced(x).size,
    "i0": elementwise("i0"), "sinc": lambda x: call_builtin(_sinc_builtin(), x),
})


def _sinc_builtin() -> str:
    if not builtin_exists("sinc"):
        raise TraceError(f"np.sinc is not a built-in of the language yet ({user_line()})")
    return "sinc"


# NumPy methods of arrays that `Traced` takes too (the rest are in tracing_record.py).
for _name, _method in {
        **{kind: _reduction(kind) for kind in ("sum", "mean", "prod", "max", "min")},
        "var": var, "std": std, "clip": clip, "cumsum": _scan("cumsum"),
        "cumprod": _scan("cumprod"), "all": _all_any("all"), "any": _all_any("any"),
        "argsort": _ordering("argsort"), "conj": lambda self: self,
}.items():
    setattr(Traced, _name, _method)


# ---------------------------------------------------------------- entry points

def _holds_traced(value: Any) -> bool:
    return _first_traced(value) is not None if isinstance(value, list | tuple | np.ndarray) \
        else isinstance(value, Traced)


def _always(_: Any) -> bool:
    return True


def _holds_size(value: Any) -> bool:
    """A size or a traced value, also inside lists (what makes a factory record)."""
    if isinstance(value, list | tuple):
        return any(map(_holds_size, value))
    return isinstance(value, Size) or _holds_traced(value)


def _recording_version(original: Callable[..., Any], recorder: Callable[..., Any],
                       trigger: Callable[[Any], bool] = _holds_traced) -> Callable[..., Any]:
    """`original`, except that a call on the tracing thread with a traced value among
    its arguments (also inside lists; `trigger` says what counts) is recorded by
    `recorder` (other threads meet the original)."""
    thread = threading.get_ident()

    def version(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == thread and (trigger is _always or any(map(trigger, args))
                                                or any(map(trigger, kwargs.values()))):
            name = f"{original.__module__}.{original.__name__}".removeprefix("numpy.")
            return recorded(name.replace("numpy", "np"), recorder, *args, **kwargs)
        return original(*args, **kwargs)

    version.__wrapped__ = original  # type: ignore[attr-defined]
    version.__name__ = getattr(original, "__name__", "version")
    return version


# `module.name` -> recorder of the functions bound while a function is traced: those that
# NumPy does not dispatch on a list's elements, and the SciPy ones it never dispatches.
ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "numpy.array": _array, "numpy.asarray": _asarray, "numpy.asanyarray": _asarray,
    "numpy.ascontiguousarray": _asarray,
    "numpy.lib._index_tricks_impl.array": _array,  # np.r_[...] and np.c_[...]
    "scipy.special.polygamma": _polygamma,
    "scipy.special.multigammaln": _multigammaln,
    "scipy.special.logsumexp": lambda a, axis=None, b=None, keepdims=False,
    return_sign=False: _logsumexp(a, axis, b, keepdims, return_sign),
    "scipy.special.softmax": lambda x, axis=None: _along("softmax", x, axis),
    "scipy.special.log_softmax": lambda x, axis=None: _along("log_softmax", x, axis),
}


# What makes an entry point record where it is not a traced argument (a frozen SciPy
# distribution holding traced parameters: `reverie.tracing_stats`).
ENTRY_TRIGGERS: dict[str, Callable[[Any], bool]] = {}


def _logsumexp(a: Any, axis: Any, b: Any, keepdims: bool, return_sign: bool) -> Traced:
    """`scipy.special.logsumexp`: with weights `b`, `log Σ b e^a = logsumexp(a + log b)`
    (b > 0)."""
    if return_sign:
        raise TraceError(f"scipy.special.logsumexp(return_sign=True) ({user_line()}): "
                         f"weights b > 0 are traced, without the sign")
    a = as_traced(a)
    if b is not None:
        a = a + np.log(b if isinstance(b, Traced) else np.asarray(b, dtype=a.dtype))
    return a._reduce("logsumexp", axis, bool(keepdims))


def _along(builtin: str, x: Any, axis: Any) -> Traced:
    x = as_traced(x)
    if axis is None:
        flat = x.ravel()
        return flat.along(builtin, 0).reshape(x.shape)
    return x.along(builtin, axis)


def _random_draw(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TraceError(f"np.random.{name} in a traced function would draw once, while it "
                         f"is traced, and the kernel would reuse that draw at every call "
                         f"({user_line()}): pass the random numbers as an argument")

    return refuse


# NumPy's global random stream: refused while a function is traced (on its thread).
RANDOM_DRAWS = {f"numpy.random.{name}": _random_draw(name) for name in (
    "rand", "randn", "random", "random_sample", "ranf", "sample", "normal", "uniform",
    "randint", "random_integers", "choice", "permutation", "shuffle", "standard_normal",
    "binomial", "poisson", "beta", "gamma", "exponential", "multivariate_normal",
    "dirichlet", "laplace", "lognormal", "logistic", "multinomial")}


class _NumpyOfCompiledCode(types.ModuleType):
    """numpy as numpy.random's compiled modules see it while a function is traced (their
    global `np`, through which a draw makes its result, `np.empty(size)`): the functions
    `numpy_entry_points` binds are the originals there, since a recorded value handed to
    compiled code crashes the process, and on the tracing thread a draw is refused as
    `np.random.randn` is (a Generator's or RandomState's draw would be made once)."""

    def __init__(self, originals: dict[str, Any], thread: int) -> None:
        super().__init__("numpy")
        self._originals, self._thread = originals, thread

    def __getattr__(self, name: str) -> Any:
        if name == "empty" and threading.get_ident() == self._thread:
            raise TraceError(f"a draw of a NumPy Generator or RandomState in a traced "
                             f"function would be made once, while it is traced, and the "
                             f"kernel would reuse it at every call ({user_line()}): pass "
                             f"the random numbers as an argument")
        return self._originals.get(name) or getattr(np, name)


@contextmanager
def _compiled_code_unbound(originals: dict[str, Any]) -> Iterator[None]:
    """While a function is traced, numpy.random's modules see `_NumpyOfCompiledCode`."""
    import numpy.random  # noqa: F401 (NumPy imports it on first use: its modules now)

    shown = _NumpyOfCompiledCode(originals, threading.get_ident())
    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("numpy.random.") and getattr(m, "np", None) is np]
    for module in modules:
        module.np = shown
    try:
        yield
    finally:
        for module in modules:
            module.np = np


# Entry points that record when a size is among their arguments (`np.zeros((n, 3))`
# with `n = len(x)`), filled by `reverie.tracing_factories`.
SIZE_ENTRY_POINTS: dict[str, Callable[..., Any]] = {}


def _bindings() -> Iterator[tuple[Any, str, Callable[..., Any], Callable[[Any], bool]]]:
    """(module, attribute, recorder, trigger) of every entry point whose module is
    imported."""
    points = [(name, recorder, ENTRY_TRIGGERS.get(name, _holds_traced))
              for name, recorder in ENTRY_POINTS.items()]
    points += [(name, recorder, _holds_size) for name, recorder in SIZE_ENTRY_POINTS.items()]
    points += [(name, recorder, _always) for name, recorder in RANDOM_DRAWS.items()]
    points += [(f"numpy.{name}", recorder, _holds_traced)
               for name, recorder in ARRAY_FUNCTIONS.items()]
    for name, recorder, trigger in points:
        owner_name, _, attribute = name.rpartition(".")
        owner = _imported(owner_name)
        if owner is not None and callable(getattr(owner, attribute, None)):
            yield owner, attribute, recorder, trigger


def _imported(name: str) -> Any:
    """The module `name`, or an object inside an imported module (`scipy.stats.norm`, a
    distribution whose methods are entry points); None where none is imported."""
    module_name, path = name, []
    while module_name and module_name not in sys.modules:
        module_name, _, last = module_name.rpartition(".")
        path.insert(0, last)
    owner = sys.modules.get(module_name)
    for part in path:
        owner = getattr(owner, part, None)
    return owner


@contextmanager
def numpy_entry_points(fn: Callable[..., Any]) -> Iterator[None]:
    """While `fn` is traced, the entry points (`ENTRY_POINTS`, and the NumPy functions
    of `ARRAY_FUNCTIONS` for lists of traced values) are bound to recording versions in
    their modules and in `fn`'s globals, then restored."""
    namespace = getattr(fn, "__globals__", None)
    namespace = namespace if isinstance(namespace, dict) else {}
    saved: list[tuple[Any, str, Any]] = []
    instance_attributes: list[tuple[Any, str]] = []
    replaced: dict[int, Callable[..., Any]] = {}
    for module, attribute, recorder, trigger in _bindings():
        original = getattr(module, attribute)
        if isinstance(original, np.ufunc) or (module, attribute) in {
                (m, a) for m, a, _ in saved} | set(instance_attributes):  # the first wins
            continue
        version = replaced.setdefault(id(original),
                                      _recording_version(original, recorder, trigger))
        if isinstance(module, types.ModuleType) or attribute in vars(module):
            saved.append((module, attribute, original))
        else:  # an instance's method: shadowed by an instance attribute, then removed
            instance_attributes.append((module, attribute))
        setattr(module, attribute, version)
    globals_saved = {name: value for name, value in namespace.items()
                     if id(value) in replaced and callable(value)}
    namespace.update({name: replaced[id(value)] for name, value in globals_saved.items()})
    try:
        with _compiled_code_unbound({attribute: original for module, attribute, original
                                     in saved if module is np}):
            yield
    finally:
        for module, attribute, original in reversed(saved):
            setattr(module, attribute, original)
        for instance, attribute in instance_attributes:
            delattr(instance, attribute)  # the class's method again
        namespace.update(globals_saved)
