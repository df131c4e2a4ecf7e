"""NumPy indexing of a Tensor, turned into one compiled gather: `t[1:, idx]` (docs/api.md §4).

Consumes a tensor shape and a NumPy index (integers, slices with any step, `None`,
`...`, integer and bool arrays, in a tuple or alone) and produces an `IndexPlan`: the
structure of the read, which decides the kernel (`ops_shape.index_kernel`, cached by it),
and the run-time values that do not (integer positions, slice starts, index arrays), so
that `x[t]` for every `t` is one kernel. Bounds are checked here, with NumPy's
`IndexError` messages; negative positions are made positive (the kernel never wraps).

    plan = index_plan((5, 4), (slice(1, None, 2), [0, 3]))
    plan.axes      # (("slice", 2, 2), ("array", 0))   step 2, length 2; index array 0
    plan.values    # (1, array([0, 3]))                the slice start, the index array
    plan.order     # where the broadcast index axes go: NumPy's rule, see `_advanced_first`

Bool arrays select like NumPy's (`np.nonzero`, one integer array per axis they cover);
`None` adds an axis of size 1, by a reshape after the gather (`final_shape`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

Axis = tuple  # ("full",) | ("int",) | ("slice", step, length) | ("array", k)


@dataclass(frozen=True)
class IndexPlan:
    """The structure of one read (`axes`: one entry per axis of the tensor), its run-time
    values (one per int or slice axis and per index array, in axis order), the shape of the
    broadcast index arrays, whether their axes come first (NumPy's rule for advanced
    indices that are not side by side) and the result shape (None axes included)."""

    axes: tuple[Axis, ...]
    values: tuple[object, ...]
    index_shape: tuple[int, ...]
    advanced_first: bool
    final_shape: tuple[int, ...]


def _entry(item: object) -> object:
    """One index entry as None, Ellipsis, an int, a slice or an integer/bool array; an
    IndexError for anything NumPy would refuse."""
    if item is None or item is Ellipsis or isinstance(item, slice):
        return item
    if hasattr(item, "numpy") and not isinstance(item, np.ndarray):
        item = item.numpy()
    if isinstance(item, bool | np.bool_):
        raise IndexError("a bool scalar is not a supported index; index with a bool array")
    if isinstance(item, int | np.integer):
        return operator.index(item)
    array = np.asarray(item)
    if array.dtype == np.bool_:
        return array
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and integer or "
                         "boolean arrays are valid indices")
    array = array.astype(np.int64)
    return int(array) if array.ndim == 0 else array


def _expand(index: object, rank: int) -> list[object]:
    """The index as a list of entries with `...` replaced by full slices and bool arrays by
    their `nonzero` integer arrays, one entry per tensor axis plus the Nones."""
    items = [_entry(i) for i in (index if isinstance(index, tuple) else (index,))]
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(i.ndim if isinstance(i, np.ndarray) and i.dtype == np.bool_ else
               0 if i is None or i is Ellipsis else 1 for i in items)
    if used > rank:
        raise IndexError(f"too many indices for tensor: tensor is {rank}-dimensional, but "
                         f"{used} were indexed")
    expanded: list[object] = []
    for item in items:
        if item is Ellipsis:
            expanded += [slice(None)] * (rank - used)
        elif isinstance(item, np.ndarray) and item.dtype == np.bool_:
            expanded += list(np.nonzero(item))
        else:
            expanded.append(item)
    if not any(i is Ellipsis for i in items):
        expanded += [slice(None)] * (rank - used)
    return expanded


def _in_bounds(value: int | np.ndarray, size: int, axis: int) -> int | np.ndarray:
    """An int or index array with negative positions counted from the end; IndexError when
    one is out of range."""
    if isinstance(value, int):
        if not -size <= value < size:
            raise IndexError(f"index {value} is out of bounds for axis {axis} with size {size}")
        return value % size
    bad = value[(value < -size) | (value >= size)]
    if bad.size:
        raise IndexError(f"index {bad[0]} is out of bounds for axis {axis} with size {size}")
    return np.ascontiguousarray(np.where(value < 0, value + size, value), dtype=np.int64)


def _advanced_first(expanded: list[object]) -> bool:
    """NumPy's rule: the broadcast axes of advanced indices (arrays, and ints beside them)
    replace them in place when they sit side by side, else come first."""
    positions = [k for k, item in enumerate(expanded) if isinstance(item, np.ndarray | int)]
    return positions[-1] - positions[0] + 1 != len(positions)


def index_plan(shape: tuple[int, ...], index: object) -> IndexPlan:
    """The plan of `tensor[index]` for a tensor of `shape` (see the module docstring)."""
    expanded = _expand(index, len(shape))
    has_arrays = any(isinstance(i, np.ndarray) for i in expanded)
    axes: list[Axis] = []
    values: list[object] = []
    arrays: list[np.ndarray] = []
    axis = 0
    for item in expanded:
        if item is None:
            continue
        size = shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            length = len(range(start, stop, step))
            if (start, step, length) == (0, 1, size):
                axes.append(("full",))
            else:
                axes.append(("slice", step, length))
                values.append(start)
        elif isinstance(item, int):
            axes.append(("int",))
            values.append(_in_bounds(item, size, axis))
        else:
            axes.append(("array", len(arrays)))
            arrays.append(_in_bounds(item, size, axis))
            values.append(None)  # filled with the broadcast array below
        axis += 1
    index_shape: tuple[int, ...] = ()
    if has_arrays:
        try:
            broadcast = np.broadcast_arrays(*arrays)
        except ValueError:
            shown = " ".join(str(a.shape) for a in arrays)
            raise IndexError(f"shape mismatch: indexing arrays could not be broadcast "
                             f"together with shapes {shown}") from None
        index_shape = broadcast[0].shape
        it = iter(np.ascontiguousarray(b) for b in broadcast)
        values = [next(it) if v is None else v for v in values]
    if has_arrays:  # NumPy's rule for where the index axes go, applied by NumPy
        final_shape = np.broadcast_to(np.zeros((), np.int8), shape)[tuple(expanded)].shape
    else:  # basic indexing: the slices' lengths, and 1 for each None
        lengths = iter([size if entry[0] == "full" else entry[2]
                        for size, entry in zip(shape, axes, strict=True) if entry[0] != "int"])
        final_shape = tuple(1 if item is None else next(lengths) for item in expanded
                            if not isinstance(item, int))
    return IndexPlan(tuple(axes), tuple(values), index_shape,
                     has_arrays and _advanced_first(expanded), final_shape)
