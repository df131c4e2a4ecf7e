"""Tensor operations that give views: basic indexing, transposes, reshapes (docs/api.md §4).

A view shares its base's memory and version counter (`inplace.view` makes it and records
its step). `t[index]` is a view for basic indexing (integers, slices, None, `...`) and one
gather, a copy, for integer- or bool-array indexing; `transpose` is always a view;
`reshape` is a view where NumPy can reshape without copying and a copy elsewhere, while
`view` raises there, as torch's:

    getitem(t, (0, slice(None)))      # t[0, :], a view of t's memory
"""

from __future__ import annotations

import numpy as np

from reverie.runtime.tensors import inplace, recorded_ops
from reverie.runtime.tensors import shape_kernels as ops_shape
from reverie.runtime.tensors.indexing import index_plan
from reverie.runtime.tensors.tensor_core import Tensor

_PROBE = np.zeros((), np.int8)


def transpose(t: Tensor, axes: tuple[object, ...]) -> Tensor:
    """`t` with its axes permuted (`ops_shape.normalise_permutation` reads `axes`): a view."""
    permutation = ops_shape.normalise_permutation(axes, t._data.ndim)
    if permutation == tuple(range(t._data.ndim)):
        return t
    return inplace.view(t, ("transpose", permutation), t._data.transpose(permutation))


def reshape(t: Tensor, shape: tuple[object, ...]) -> Tensor:
    """`t` in `shape` (a tuple or the sizes; one of them may be -1), C order: a view where
    NumPy can reshape without copying, else a copy."""
    target = _target_shape(t, shape)
    if target == t._data.shape:
        return t
    array = _reshaped_view(t._data, target)
    if array is None:
        return recorded_ops.reshape_copy(t, target)
    return inplace.view(t, ("reshape", target), array)


def view(t: Tensor, shape: tuple[object, ...]) -> Tensor:
    """`t` in `shape`, always a view (torch's `view`): RuntimeError where the memory
    layout needs a copy."""
    target = _target_shape(t, shape)
    if target == t._data.shape:
        return t
    array = _reshaped_view(t._data, target)
    if array is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    return inplace.view(t, ("reshape", target), array)


def _target_shape(t: Tensor, shape: tuple[object, ...]) -> tuple[int, ...]:
    """The shape `t` reshaped to `shape` has (NumPy's checks and -1)."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    return np.broadcast_to(_PROBE, t._data.shape).reshape(shape).shape


def _reshaped_view(array: np.ndarray, target: tuple[int, ...]) -> np.ndarray | None:
    """`array` in `target` shape without copying, or None where NumPy would copy."""
    try:
        return np.reshape(array, target, copy=False)
    except ValueError:
        return None


def getitem(t: Tensor, index: object) -> Tensor:
    """`t[index]`: a view for basic indexing (integers, slices, None, `...`; a full integer
    index gives a rank-0 view), else one gather (a copy)."""
    basic = _basic_index(index)
    if basic is None:
        return recorded_ops.gather(t, index)
    index_plan(t._data.shape, index)  # Reverie's IndexErrors
    return inplace.view(t, ("getitem", basic), t._data[basic])


def _basic_index(index: object) -> tuple[object, ...] | None:
    """`index` as a NumPy basic index ending in `...` (so that integers alone give a view,
    not a scalar), or None when it holds an array (advanced indexing: a copy)."""
    items = index if isinstance(index, tuple) else (index,)
    basic: list[object] = []
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            basic.append(item)
            continue
        if isinstance(item, Tensor):
            item = item._data
        if isinstance(item, bool | np.bool_) or (isinstance(item, np.ndarray) and (
                item.ndim or item.dtype.kind not in "iu")):
            return None
        if not isinstance(item, int | np.integer | np.ndarray):
            return None
        basic.append(int(item))
    if not any(item is Ellipsis for item in basic):
        basic.append(Ellipsis)
    return tuple(basic)
