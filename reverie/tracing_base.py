"""What every part of `rv.trace` shares: `TraceError`, an `Axis` (example size and
dimension expression), the dtypes' Reverie names, and `user_line`, which names the user's
Python line in each recorded statement and error.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from reverie import tracing_sizes
from reverie.tracing_sizes import product_factors

# NumPy dtypes and their Reverie names (docs/language.md §3).
DTYPE_NAMES = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32",
               np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.bool_): "bool"}
NUMPY_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
FLOAT_NAMES = ("f32", "f64")


class TraceError(TypeError):
    """A Python construct that cannot be recorded; the message names the Python line."""


@dataclass(frozen=True)
class Axis:
    """One axis of a traced value: its size in the example and its dimension expression."""

    size: int
    dim: str


# Frames of the recorders, skipped when naming the user's line.
RECORDER_FILES = {__file__, tracing_sizes.__file__}
# Frames of NumPy and SciPy, skipped too where a library function that has no recorder
# reached a traced value (`user_line(libraries=True)`).
LIBRARY_FILE = re.compile(r"[\\/](numpy|scipy)[\\/]")


def user_line(libraries: bool = False) -> str:
    """`file:line: source` of the innermost frame outside the recorders (the user's code),
    and outside NumPy and SciPy with `libraries`."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename in RECORDER_FILES or (
            libraries and LIBRARY_FILE.search(frame.f_code.co_filename))):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}: {code}"


def element_name(dtype: str | np.dtype) -> str:
    """The Reverie element type of `dtype`, a Reverie name (`"f64"`) or a NumPy dtype."""
    return dtype if isinstance(dtype, str) else DTYPE_NAMES[np.dtype(dtype)]


def element_of(name: str, dtype: Any) -> str:
    element = DTYPE_NAMES.get(np.dtype(dtype))
    if element is None:
        raise TraceError(f"argument '{name}' has dtype {np.dtype(dtype)}; Reverie takes "
                         f"{', '.join(DTYPE_NAMES.values())}")
    return element


def shape_text(axes: tuple[Axis, ...]) -> str:
    return f"[{', '.join(a.dim for a in axes)}]" if axes else ""


def factor_split(dims: Iterable[str]) -> tuple[int, list[str]]:
    """The product of dimension expressions as its integer coefficient and other factors."""
    coefficient, factors = 1, []
    for dim in dims:
        for factor in product_factors(dim):
            if factor.isdigit():
                coefficient *= int(factor)
            else:
                factors.append(factor)
    return coefficient, factors


def ignored(name: str, options: dict[str, Any], harmless: tuple[str, ...] = ()) -> None:
    """Refuse a NumPy keyword argument that a recorder does not honour: every option
    must be None (NumPy's default) or named in `harmless` (it changes no value)."""
    honoured = {k: v for k, v in options.items() if v is not None and k not in harmless}
    if honoured:
        raise TraceError(f"{name}({', '.join(f'{k}=...' for k in honoured)}) cannot be "
                         f"traced ({user_line()}): rv.trace does not take "
                         f"{', '.join(honoured)} here")
