"""Indexing of traced values as Reverie source (NumPy's rules): basic subscripts, slices of
any step (a negative step reads the flipped axis, `flip`, in index notation), `None` and
`...`, and integer arrays: constant ones as stacks of the picked parts, one traced array on
any axis as a gather in index notation (`let g[a, j] = y[a, idx[j]]`).

The functions take a `Traced` (`reverie.tracing_record`) and record through its
recording; they know its class as `type(x)`, so this module does not import it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.tracing_base import RECORDER_FILES, Axis, TraceError, user_line
from reverie.tracing_sizes import Size, combine, offset
from reverie.tracing_slices import (
    CONSTANT_LIMIT,
    constant_index,
    index_source,
    reversed_slice,
    slice_source,
)

if TYPE_CHECKING:
    from reverie.tracing_record import Traced

RECORDER_FILES.add(__file__)


def subscript(x: Traced, key: tuple[Any, ...]) -> Traced:
    """NumPy indexing: integers, sizes and slices of any step (with an `...` and `None`s),
    and integer-array subscripts (`_advanced`)."""
    if any(k is None for k in key):
        return _new_axes(x, key)
    key = full_key(x, key)
    if any(isinstance(k, type(x) | list | tuple | np.ndarray) for k in key):
        return _advanced(x, key)
    reversed_axes = [i for i, k in enumerate(key) if isinstance(k, slice) and k.step is not None
                     and operator.index(k.step) < 0]
    if reversed_axes:  # a negative step reads the flipped axis with a positive one
        key = tuple(reversed_slice(k, axis, x.recording) if i in reversed_axes else k
                    for i, (k, axis) in enumerate(zip(key, x.axes, strict=True)))
        x = flip(x, reversed_axes)
    parts, axes = basic_parts(x, key)
    if all(p == ":" for p in parts):
        return x
    return x.recording.let(f"{x.name}[{', '.join(parts)}]", axes, x.element)


def full_key(x: Traced, key: tuple[Any, ...]) -> tuple[Any, ...]:
    """`key` with its `...` expanded and a `:` for each axis it leaves out."""
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - len(key) + 1) + key[at + 1:]
    if len(key) > x.ndim:
        raise TraceError(f"too many subscripts ({len(key)}) for shape {x.shape} "
                         f"({user_line()})")
    return key + (slice(None),) * (x.ndim - len(key))


def basic_parts(x: Traced, key: tuple[Any, ...]) -> tuple[list[str], tuple[Axis, ...]]:
    """The source of each subscript of a basic key (integers, sizes, positive-step
    slices; one per axis), and the axes of the window it selects."""
    parts, axes = [], []
    for k, axis in zip(key, x.axes, strict=True):
        if isinstance(k, int | np.integer | Size):
            parts.append(index_source(k, axis))
        elif isinstance(k, slice):
            text, kept = slice_source(k, axis, x.recording)
            parts.append(text)
            axes.append(kept)
        else:
            raise TraceError(f"subscript {k!r} cannot be traced ({user_line()}): "
                             f"use integers, slices, None, ... or integer arrays")
    return parts, tuple(axes)


def flip(x: Traced, axes: Sequence[int]) -> Traced:
    """`x` reversed along `axes`, in index notation: `let t[i in 0..N, j] = x[N - 1 - i, j]`."""
    flipped = {a % x.ndim for a in axes}
    indices = [(f"i{a}", axis.dim if a in flipped else None) for a, axis in enumerate(x.axes)]

    def element(*names: str) -> str:
        reads = [combine(offset(axis.dim, -1), "-", name) if a in flipped else name
                 for a, (name, axis) in enumerate(zip(names, x.axes, strict=True))]
        return f"{x.name}[{', '.join(reads)}]"

    return x.recording.index_let(indices, element, x.axes, x.element)


def _advanced(x: Traced, key: tuple[Any, ...]) -> Traced:
    """Integer-array subscripts (NumPy's advanced indexing): constant integer or boolean
    arrays (`x[[0, 2]]`, `x[:, [1, 1]]`, `x[[0, 1], [2, 3]]`), one stack of the picked
    parts; or one traced integer array on any axis, a gather in index notation. Integers
    beside the arrays take part as NumPy's do: the arrays' axes stand where the first
    stands when arrays and integers are adjacent, else first."""
    arrays = [i for i, k in enumerate(key) if isinstance(k, type(x) | list | tuple | np.ndarray)]
    scalars = [i for i, k in enumerate(key) if isinstance(k, int | np.integer | Size)]
    picks = sorted(arrays + scalars)
    adjacent = picks == list(range(picks[0], picks[-1] + 1))
    before = sum(isinstance(k, slice) for k in key[:picks[0]]) if adjacent else 0
    traced = [i for i in arrays if isinstance(key[i], type(x))]
    if traced:
        if len(arrays) > 1:
            raise TraceError(f"a traced integer array subscript with other array subscripts "
                             f"cannot be traced ({user_line()}): index one axis at a time, "
                             f"x[i][:, j]")
        return _gather(x, key, traced[0], before)
    constants = [constant_index(key[i], x.axes[i]) for i in arrays]
    try:
        shape = np.broadcast_shapes(*(c.shape for c in constants))
    except ValueError:
        raise TraceError(f"index arrays of shapes {[c.shape for c in constants]} do not "
                         f"broadcast ({user_line()})") from None
    if math.prod(shape) > CONSTANT_LIMIT:
        raise TraceError(f"an index array of {math.prod(shape)} elements is more than the "
                         f"{CONSTANT_LIMIT} that rv.trace spells out ({user_line()}): pass it "
                         f"as an integer argument of the traced function (a gather)")
    constants = [np.broadcast_to(c, shape) for c in constants]
    parts = []
    for at in np.ndindex(*shape):
        picked = dict(zip(arrays, (int(c[at]) for c in constants), strict=True))
        parts.append(subscript(x, tuple(picked.get(i, k) for i, k in enumerate(key))))
    if not parts:
        raise TraceError(f"an empty index array cannot be traced ({user_line()})")
    stacked = np.stack(parts).reshape(*shape, *parts[0].shape) if shape else parts[0]
    order = list(range(len(shape), len(shape) + before)) + list(range(len(shape)))
    order += list(range(len(order), stacked.ndim))
    return stacked if order == sorted(order) else stacked.transpose(order)


def _new_axes(x: Traced, key: tuple[Any, ...]) -> Traced:
    """`x[None, ..., 1]`: x indexed by the key without its `None`s, then reshaped with an
    axis of size 1 where each `None` stands (NumPy's `np.newaxis`)."""
    indexing = [k for k in key if k is not None]
    at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
    if at is not None:
        key = key[:at] + (slice(None),) * (x.ndim - len(indexing) + 1) + key[at + 1:]
    indexed = subscript(x, tuple(k for k in key if k is not None))
    sizes, kept = list(indexed.shape), 0  # kept: the result axes of the entries so far
    for k in key:
        if k is None:
            sizes.insert(kept, 1)
        kept += k is None or isinstance(k, slice | type(x))
    return indexed.reshape(sizes)


def _gather(x: Traced, key: tuple[Any, ...], at: int, before: int) -> Traced:
    """`x[..., idx, ...]` with a traced integer array `idx` of any rank at key position
    `at`: the other subscripts applied first, then index notation,
    `let g[a, j0, j1, b] = y[a, idx[j0, j1], b]` (its gradient is the scatter-add), the
    array's axes at position `before`."""
    index = key[at]
    if index.element not in ("i32", "i64"):
        raise TraceError(f"an array subscript must hold integers, got {index!r} "
                         f"({user_line()}): a boolean mask makes a shape that depends on "
                         f"the values; use np.where(mask, x, 0)")
    y = subscript(x, key[:at] + (slice(None),) + key[at + 1:])
    axis = sum(isinstance(k, slice) for k in key[:at])  # where idx's axis is in y
    names = [(f"g{i}", None) for i in range(y.ndim - 1 + index.ndim)]

    def element(*claimed: str) -> str:
        outer = list(claimed[:before]) + list(claimed[before + index.ndim:])
        inner = claimed[before:before + index.ndim]
        read = f"{index.name}[{', '.join(inner)}]" if inner else index.name
        return f"{y.name}[{', '.join(outer[:axis] + [read] + outer[axis:])}]"

    rest = y.axes[:axis] + y.axes[axis + 1:]
    return x.recording.index_let(names, element, rest[:before] + index.axes + rest[before:],
                                 x.element)
