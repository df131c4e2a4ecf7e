"""Subscripts and reshapes of traced values as Reverie source: integer subscripts
(`x[-1]` is `x[X0 - 1]`), slices whose bounds keep their meaning at every size (`x[1:]` is
`X0 - 1` long, a negative step reads the flipped axis), constant index arrays, and
reshapes whose symbolic factors cancel (docstring of `reverie.tracing`).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.tracing_base import RECORDER_FILES, Axis, TraceError, factor_split, user_line
from reverie.tracing_sizes import Size, combine, offset, product_text

if TYPE_CHECKING:
    from reverie.tracing_record import Recording, Traced

RECORDER_FILES.add(__file__)


def index_source(k: int | np.integer | Size, axis: Axis) -> str:
    """An integer subscript as source: `2`, a size's expression, or `X0 - 1` for -1 (a
    negative index counts from the end at every size, as NumPy's does)."""
    if isinstance(k, Size) and k.is_dim and 0 <= k.value < axis.size:
        return k.expr
    index = operator.index(k)  # any other size: its example value, its dimensions fixed
    if not -axis.size <= index < axis.size:
        raise TraceError(f"index {index} is out of range for size {axis.size} "
                         f"({user_line()})")
    return str(index) if index >= 0 else offset(axis.dim, index)


@dataclass(frozen=True)
class Position:
    """A slice bound resolved on its axis: `base + shift` (`base` None counts from 0),
    at `value` in the example."""

    base: str | None
    shift: int
    value: int

    @property
    def text(self) -> str:
        return str(self.shift) if self.base is None else offset(self.base, self.shift)


START = Position(None, 0, 0)


def position(bound: Any, axis: Axis, recording: Recording, at_end: bool) -> Position:
    """Where a slice bound of a symbolic axis falls at every size: a negative bound counts
    from the axis's dimension, a size is its own expression; a bound that NumPy clips to
    the axis's ends is clipped for the example's size only (the axis is fixed)."""
    if bound is None:
        return Position(axis.dim, 0, axis.size) if at_end else START
    if isinstance(bound, Size) and bound.is_dim and 0 <= bound.value <= axis.size:
        return Position(bound.expr, 0, bound.value)
    value = operator.index(bound)
    if 0 <= value <= axis.size:
        return Position(None, value, value)
    if -axis.size <= value < 0:
        return Position(axis.dim, value, axis.size + value)
    recording.fix(axis.dim)
    clipped = 0 if value < 0 else axis.size
    return Position(None, clipped, clipped)


def slice_source(k: slice, axis: Axis, recording: Recording) -> tuple[str, Axis]:
    """A slice as Reverie source with its result axis: `x[1:]` of `X0` is `X0 - 1` long,
    `x[-2:]` is `X0 - 2:` and 2 long, at every size."""
    step = 1 if k.step is None else operator.index(k.step)
    if step <= 0:
        raise TraceError(f"slices with a negative step cannot be traced ({user_line()})")
    if axis.dim.isdigit():  # a literal axis: NumPy's own bounds
        start, stop, _ = slice(k.start, k.stop).indices(axis.size)
        stop = max(start, stop)
        count = len(range(start, stop, step))
        return f"{start}:{stop}" + (f":{step}" if step != 1 else ""), Axis(count, str(count))
    start = position(k.start, axis, recording, at_end=False)
    stop = position(k.stop, axis, recording, at_end=True)
    end = Position(axis.dim, 0, axis.size)
    if (start, stop, step) == (START, end, 1):
        return ":", axis
    length, count = slice_length(start, stop, recording)
    if count == 0:
        start = stop = Position(None, start.value, start.value)
    if step != 1:
        count = -(-count // step)
        length = str(count) if length.isdigit() else combine(
            combine(length, "+", str(step - 1)), "//", str(step))
    text = (("" if start == START else start.text) + ":" + ("" if stop == end else stop.text)
            + (f":{step}" if step != 1 else ""))
    return text, Axis(count, length)


def slice_length(start: Position, stop: Position, recording: Recording) -> tuple[str, int]:
    """The length `stop - start` of a slice as a dimension expression, with its value; an
    empty slice whose bounds depend on different sizes is empty at the example's only."""
    count = max(stop.value - start.value, 0)
    if start.base == stop.base:
        return str(count), count
    if count == 0:
        recording.fix(f"{start.base} {stop.base}")
        return "0", 0
    if start.base is None:
        return offset(stop.base, stop.shift - start.shift), count
    return combine(stop.text, "-", start.text), count


def reversed_slice(k: slice, axis: Axis, recording: Recording) -> slice:
    """The positive-step slice of the flipped axis (`j = n - 1 - i`) that selects what
    `k`, of a negative step, selects (in the flipped order, which is `k`'s)."""
    step, n = -operator.index(k.step), axis.size
    if axis.dim.isdigit():
        picked = range(*k.indices(n))
        first = n - 1 - picked[0] if picked else 0
        return slice(first, first + (len(picked) - 1) * step + 1 if picked else 0, step)

    def flipped(bound: Any) -> Any:
        if isinstance(bound, Size) and bound.is_dim and 0 <= bound.value < n:
            return Size(recording, combine(offset(axis.dim, -1), "-", bound.expr),
                        n - 1 - bound.value, True)
        value = operator.index(bound)
        if -n <= value < 0:
            return -value - 1
        if 0 <= value < n:
            return Size(recording, offset(axis.dim, -1 - value), n - 1 - value, True)
        recording.fix(axis.dim)  # NumPy clips the bound to the axis's ends
        return 0 if value >= n else n

    return slice(None if k.start is None else flipped(k.start),
                 None if k.stop is None else flipped(k.stop), step)


# The most elements of a constant array (a subscript, `np.array([...])` of numbers) that
# rv.trace writes out in the source; larger ones are arguments of the traced function.
CONSTANT_LIMIT = 256


def constant_index(k: Any, axis: Axis) -> np.ndarray:
    """A constant array subscript as integers (a boolean mask: the positions it holds)."""
    array = np.asarray(k)
    if array.dtype == np.bool_:
        if array.ndim != 1 or array.size != axis.size:
            raise TraceError(f"a boolean mask of shape {array.shape} must be 1-D and as long "
                             f"as its axis ({axis.size}) ({user_line()})")
        return np.flatnonzero(array)
    if not np.issubdtype(array.dtype, np.integer) and array.size:
        raise TraceError(f"subscript {k!r} cannot be traced ({user_line()}): index arrays "
                         f"hold integers")
    array = array.astype(np.int64)
    if array.size and not (-axis.size <= array.min() and array.max() < axis.size):
        raise TraceError(f"index {array.tolist()} is out of range for size {axis.size} "
                         f"({user_line()})")
    return array


def reshape(x: Traced, target: tuple[Any, ...]) -> Traced:
    """`reshape` to sizes (`x.shape[0]`), numbers and at most one -1. The input's factors
    that the target names again cancel, and the -1 is the product of the others
    (`(X0, X1)` to `(-1,)` is `X0 * X1`, `(X0, X1)` to `(X0, -1)` is `X1`); where the
    element counts agree only at the example's sizes (`reshape(3, 4)`), the dimensions
    that do not cancel are fixed."""
    entries = [n if isinstance(n, Size) and n.is_dim else operator.index(n) for n in target]
    free = [i for i, n in enumerate(entries) if isinstance(n, int) and n == -1]
    given = [n for i, n in enumerate(entries) if i not in free]
    total = math.prod(a.size for a in x.axes)
    known = math.prod(n.value if isinstance(n, Size) else n for n in given)
    counts_agree = known > 0 and total % known == 0 if free else known == total
    if len(free) > 1 or any(isinstance(n, int) and n < 0 for n in given) or not counts_agree:
        raise TraceError(f"cannot reshape {x.shape} to {tuple(target)} ({user_line()})")
    in_coefficient, in_factors = factor_split(a.dim for a in x.axes)
    coefficient, factors = factor_split(n.expr if isinstance(n, Size) else str(n) for n in given)
    extra_in = list((Counter(in_factors) - Counter(factors)).elements())
    extra_target = list((Counter(factors) - Counter(in_factors)).elements())
    exact = not extra_target and (in_coefficient % coefficient == 0 if free else
                                  not extra_in and in_coefficient == coefficient)
    if not exact:
        x.recording.fix(" ".join(extra_in + extra_target))
    axes = tuple(free_axis(total // known, in_coefficient // coefficient, extra_in, exact)
                 if i in free
                 else Axis(n.value, n.expr) if isinstance(n, Size) else Axis(n, str(n))
                 for i, n in enumerate(entries))
    dims = ", ".join(a.dim for a in axes)
    return x.recording.let(f"reshape({x.name}, ({dims},))", axes, x.element)


def free_axis(size: int, coefficient: int, factors: list[str], exact: bool) -> Axis:
    """The axis of a reshape's -1: the product of the input's factors left over, or its
    size where those were fixed."""
    return Axis(size, product_text(coefficient, factors) if exact else str(size))
