"""NumPy's array factories for `rv.trace`: constants shaped by traced values.

`np.zeros_like(x)`, `np.ones_like`, `np.full_like` and, while a function is traced,
`np.zeros`, `np.ones`, `np.full`, `np.empty`, `np.eye`, `np.identity` and `np.arange`
called with a size among their arguments (`np.zeros((len(x), 3))`, `np.eye(x.shape[0])`,
`np.arange(n)`) are written in index notation over the dimensions, so they keep their
meaning at every size: `let t[k0 in 0..X0, k1 in 0..3] = f64(0.0);`,
`let t[i in 0..X0, j in 0..X0] = f64(where(i == j, 1.0, 0.0));`. Called with plain
integers they are NumPy's own (a constant array).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from reverie.tracing_base import (
    RECORDER_FILES,
    Axis,
    TraceError,
    element_of,
    ignored,
    user_line,
)
from reverie.tracing_numpy import ARRAY_FUNCTIONS, SIZE_ENTRY_POINTS, as_traced
from reverie.tracing_record import Recording, Traced, operand, strong
from reverie.tracing_sizes import Size, combine

RECORDER_FILES.add(__file__)


def full_of(recording: Recording, axes: tuple[Axis, ...], value: Any,
            element: str) -> Traced:
    """A value of shape `axes` filled with `value`: `let t[k0 in 0..N] = f64(0.0);`."""
    fill = operand(recording, value, element)
    if not axes:
        return strong(fill)
    return recording.index_let([(f"k{i}", a.dim) for i, a in enumerate(axes)],
                               lambda *_: f"{element}({fill.name})", axes, element)


def _like(value: Any) -> Callable[..., Traced]:
    def make(x: Any, dtype: Any = None, **options: Any) -> Traced:
        ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
        x = as_traced(x)
        element = x.element if dtype is None else element_of("dtype", dtype)
        return full_of(x.recording, x.axes, value, element)

    return make


def full_like(x: Any, fill_value: Any, dtype: Any = None, **options: Any) -> Traced:
    ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
    return _like(fill_value)(x, dtype)


def _axis(n: Any) -> Axis:
    """One entry of a shape: a size's dimension, or a number."""
    if isinstance(n, Size) and n.is_dim:
        return Axis(n.value, n.expr)
    count = int(n)  # any other size: its example value, its dimensions fixed
    return Axis(count, str(count))


def _shaped(shape: Any) -> tuple[Recording, tuple[Axis, ...]]:
    entries = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    size = next((n for n in entries if isinstance(n, Size)), None)
    if size is None:
        raise TraceError(f"a shape of no size ({user_line()})")
    return size.owner, tuple(_axis(n) for n in entries)  # type: ignore[return-value]


def _element(dtype: Any, default: Any = np.float64) -> str:
    return element_of("dtype", default if dtype is None else dtype)


def zeros(shape: Any, dtype: Any = None, **options: Any) -> Traced:
    ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
    recording, axes = _shaped(shape)
    return full_of(recording, axes, 0, _element(dtype))


def ones(shape: Any, dtype: Any = None, **options: Any) -> Traced:
    ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
    recording, axes = _shaped(shape)
    return full_of(recording, axes, 1, _element(dtype))


def full(shape: Any, fill_value: Any, dtype: Any = None, **options: Any) -> Traced:
    ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
    recording, axes = _shaped(shape)
    if isinstance(fill_value, Traced):
        return fill_value + full_of(recording, axes, 0, fill_value.element)
    default = np.result_type(fill_value) if dtype is None else dtype
    return full_of(recording, axes, fill_value, _element(default))


def eye(rows: Any, cols: Any = None, k: int = 0, dtype: Any = None, **options: Any) -> Traced:
    ignored("the NumPy factory", options, ("order", "like", "subok", "device"))
    """`np.eye`: `let t[i in 0..N, j in 0..M] = f64(where(j == i + k, 1.0, 0.0));`."""
    recording, (row, col) = _shaped((rows, rows if cols is None else cols))
    element = _element(dtype)
    on = combine("i", "+", str(k)) if k else "i"
    return recording.index_let([("i", row.dim), ("j", col.dim)],
                               lambda i, j: f"{element}(where({j} == {on.replace('i', i, 1)}, "
                                            f"1, 0))", (row, col), element)


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None,
           **options: Any) -> Traced:
    """`np.arange(n)` or `np.arange(a, n)` with a size: `let t[i in 0..N - a] = i + a`."""
    ignored("np.arange", options, ("like", "device"))
    begin, end = (0, start) if stop is None else (start, stop)
    if step not in (None, 1) or isinstance(begin, Size):
        raise TraceError(f"np.arange with a size is traced as np.arange(n) or "
                         f"np.arange(a, n), a a Python integer ({user_line()})")
    recording, (axis,) = _shaped(end - begin if begin else end)
    element = _element(dtype, np.int64)
    shift = f" + {int(begin)}" if begin else ""
    return recording.index_let([("i", axis.dim)], lambda i: f"{element}({i}{shift})",
                               (axis,), element)


ARRAY_FUNCTIONS.update({"zeros_like": _like(0), "ones_like": _like(1),
                        "empty_like": _like(0), "full_like": full_like})
SIZE_ENTRY_POINTS.update({
    "numpy.zeros": zeros, "numpy.ones": ones, "numpy.empty": zeros, "numpy.full": full,
    "numpy.eye": eye, "numpy.identity": lambda n, dtype=None, like=None: eye(n, dtype=dtype),
    "numpy.arange": arange,
})
