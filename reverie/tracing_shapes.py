"""NumPy's shape functions for `rv.trace`: new axes, joins and splits, repeats, pads,
rolls, flips and triangles, registered in `ARRAY_FUNCTIONS` (`reverie.tracing_numpy`).

Most are reshapes, transposes, slices and concatenations of the recording; `repeat`,
`tile`, `pad` and `tril`/`triu` are written in index notation (docs/language.md §10):
`np.pad(x, (1, 2))` is `let t[p0 in 0..X0 + 3] = x[p0 - 1];` (a read outside the bounds
is 0), `np.repeat(x, 3, axis=0)` a new axis of 3 copies merged into the first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reverie.tracing_base import RECORDER_FILES, Axis, TraceError, ignored, user_line
from reverie.tracing_index import flip
from reverie.tracing_numpy import ARRAY_FUNCTIONS, as_traced
from reverie.tracing_record import Traced, concatenate, normal_axes
from reverie.tracing_sizes import atom, offset

RECORDER_FILES.add(__file__)


def _new_shape(x: Traced, at: Sequence[int]) -> Traced:
    """`x` with axes of size 1 inserted at the result positions `at`."""
    rank = x.ndim + len(at)
    positions = sorted(a % rank for a in at)
    sizes = list(x.shape)
    for p in positions:
        sizes.insert(p, 1)
    return x.reshape(sizes)


def expand_dims(x: Any, axis: Any) -> Traced:
    return _new_shape(as_traced(x), axis if isinstance(axis, tuple | list) else (axis,))


# Where np.atleast_<rank>d puts the new axes of a value of each lower rank.
NEW_AXES = {(1, 0): (0,), (2, 0): (0, 1), (2, 1): (0,), (3, 0): (0, 1, 2), (3, 1): (0, 2),
            (3, 2): (2,)}


def atleast(rank: int) -> Callable[..., Any]:
    """`np.atleast_1d/2d/3d`: NumPy's placement of the new axes (a vector is a row; a
    matrix gets a last axis at rank 3)."""
    def promote(*values: Any) -> Any:
        out = []
        for value in values:
            x = as_traced(value)
            if x.ndim < rank:
                x = _new_shape(x, NEW_AXES[rank, x.ndim])
            out.append(x)
        return out[0] if len(out) == 1 else out

    return promote


def moveaxis(x: Any, source: Any, destination: Any) -> Traced:
    x = as_traced(x)
    sources = [s % x.ndim for s in np.atleast_1d(source).tolist()]
    destinations = [d % x.ndim for d in np.atleast_1d(destination).tolist()]
    order = [a for a in range(x.ndim) if a not in sources]
    for d, s in sorted(zip(destinations, sources, strict=True)):
        order.insert(d, s)
    return x.transpose(order)


def swapaxes(x: Any, axis1: int, axis2: int) -> Traced:
    x = as_traced(x)
    order = list(range(x.ndim))
    order[axis1 % x.ndim], order[axis2 % x.ndim] = order[axis2 % x.ndim], order[axis1 % x.ndim]
    return x.transpose(order)


def hstack(values: Sequence[Any], dtype: Any = None, casting: Any = None) -> Traced:
    ignored("np.hstack", {"dtype": dtype})
    parts = atleast(1)(*values)
    parts = parts if isinstance(parts, list) else [parts]
    return concatenate(parts, axis=0 if parts[0].ndim == 1 else 1)


def vstack(values: Sequence[Any], dtype: Any = None, casting: Any = None) -> Traced:
    ignored("np.vstack", {"dtype": dtype})
    parts = atleast(2)(*values)
    return concatenate(parts if isinstance(parts, list) else [parts], axis=0)


def dstack(values: Sequence[Any], dtype: Any = None, casting: Any = None) -> Traced:
    ignored("np.dstack", {"dtype": dtype})
    parts = atleast(3)(*values)
    return concatenate(parts if isinstance(parts, list) else [parts], axis=2)


def column_stack(values: Sequence[Any]) -> Traced:
    parts = [as_traced(v) for v in values]
    return concatenate([p.reshape(-1, 1) if p.ndim == 1 else p for p in parts], axis=1)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Traced]:
    """`np.split`: `n` equal parts (each `N // n` long, symbolic) or at given indices."""
    x = as_traced(x)
    axis %= x.ndim
    head = (slice(None),) * axis
    if isinstance(indices_or_sections, int | np.integer):
        sections = int(indices_or_sections)
        if x.axes[axis].size % sections:
            raise TraceError(f"np.split of {x.axes[axis].size} elements into {sections} "
                             f"equal parts ({user_line()}): use np.array_split")
        length = x.shape[axis] // sections
        return [x[head + (slice(i * length, (i + 1) * length),)] for i in range(sections)]
    bounds = [None, *indices_or_sections, None]
    return [x[head + (slice(a, b),)] for a, b in zip(bounds, bounds[1:], strict=False)]


def array_split(x: Any, sections: Any, axis: int = 0) -> list[Traced]:
    x = as_traced(x)
    if not isinstance(sections, int | np.integer):
        return split(x, sections, axis)
    size = x.shape[axis % x.ndim]
    count, extra = divmod(int(size), int(sections))  # the sizes decide: fixed
    edges = np.cumsum([0] + [count + (i < extra) for i in range(int(sections))])
    return split(x, edges[1:-1].tolist(), axis)


def axis_split(name: str, axis: int, rank: int) -> Callable[..., list[Traced]]:
    """`np.hsplit` (axis 1, or 0 of a vector), `np.vsplit` (axis 0), `np.dsplit` (axis 2):
    `np.split` along that axis of an array of at least `rank` axes."""
    def split_along(x: Any, indices_or_sections: Any) -> list[Traced]:
        x = as_traced(x)
        if x.ndim < rank:
            raise TraceError(f"np.{name} of a {x.ndim}-d array ({user_line()}): it takes at "
                             f"least {rank} axes")
        return split(x, indices_or_sections, axis if x.ndim > 1 else 0)

    return split_along


def rollaxis(x: Any, axis: int, start: int = 0) -> Traced:
    """`np.rollaxis`: `axis` moved to stand before the axis now at `start`."""
    x = as_traced(x)
    axis, start = axis % x.ndim, start % (x.ndim + 1)
    return moveaxis(x, axis, start - 1 if start > axis else start)


def append(x: Any, values: Any, axis: Any = None) -> Traced:
    return concatenate([x, values], axis=axis)


def squeeze(x: Any, axis: Any = None) -> Traced:
    return as_traced(x).squeeze(axis)


def ravel(x: Any, order: str = "C") -> Traced:
    return as_traced(x).ravel(order)


def transpose(x: Any, axes: Any = None) -> Traced:
    return as_traced(x).transpose(*(axes or ()))


def reshape(x: Any, shape: Any = None, order: str = "C", **kwargs: Any) -> Traced:
    shape = kwargs.get("newshape", shape)
    return as_traced(x).reshape(shape, order=order)


def repeat(x: Any, repeats: Any, axis: Any = None) -> Traced:
    """`np.repeat` by a constant count: each element `r` times along the axis, in index
    notation on a new axis, merged (`let t[i, r in 0..3] = x[i]`, then reshaped)."""
    x = as_traced(x)
    if axis is None:
        x, axis = x.ravel(), 0
    if not isinstance(repeats, int | np.integer):
        raise TraceError(f"np.repeat with counts per element cannot be traced "
                         f"({user_line()}): repeat by one Python integer")
    return _with_new_axis(x, axis % x.ndim + 1, int(repeats)).reshape(
        _merged(x.shape, axis % x.ndim, int(repeats)))


def tile(x: Any, reps: Any) -> Traced:
    """`np.tile`: each axis repeated as a whole (a new axis before it, merged)."""
    x = as_traced(x)
    reps = (reps,) if isinstance(reps, int | np.integer) else tuple(reps)
    if len(reps) > x.ndim:
        x = x.reshape((1,) * (len(reps) - x.ndim) + tuple(x.shape))
    reps = (1,) * (x.ndim - len(reps)) + reps
    for axis, count in enumerate(reps):
        if count != 1:
            x = _with_new_axis(x, axis, int(count)).reshape(
                _merged(x.shape, axis, int(count)))
    return x


def _with_new_axis(x: Traced, at: int, count: int) -> Traced:
    """`x` with a new axis of `count` copies at position `at` (index notation)."""
    indices = [(f"r{i}", None) for i in range(x.ndim)]
    indices.insert(at, ("r", str(count)))
    axes = x.axes[:at] + (Axis(count, str(count)),) + x.axes[at:]

    def element(*names: str) -> str:
        kept = names[:at] + names[at + 1:]
        return f"{x.name}[{', '.join(kept)}]" if kept else x.name

    return x.recording.index_let(indices, element, axes, x.element)


def _merged(shape: tuple[Any, ...], axis: int, count: int) -> list[Any]:
    return [*shape[:axis], shape[axis] * count, *shape[axis + 1:]]


def pad(x: Any, pad_width: Any, mode: str = "constant", constant_values: Any = 0,
        **options: Any) -> Traced:
    """`np.pad(mode="constant")`: index notation reads outside the bounds as 0
    (docs/language.md §10), so `let t[i in 0..N + 3] = x[i - 1]` pads 1 before and 2
    after; another constant `c` is `pad(x - c) + c`."""
    ignored("np.pad", options)
    x = as_traced(x)
    if mode != "constant":
        raise TraceError(f"np.pad(mode={mode!r}) cannot be traced ({user_line()}): "
                         f"mode='constant' can (edges with np.concatenate)")
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2)).tolist()
    fill = np.asarray(constant_values)
    if fill.ndim:
        raise TraceError(f"np.pad with constant_values per axis cannot be traced "
                         f"({user_line()}): give one number")
    shifted = x - fill.item() if fill.item() != 0 else x
    axes = tuple(Axis(a.size + before + after, offset(a.dim, before + after))
                 for a, (before, after) in zip(x.axes, widths, strict=True))
    indices = [(f"p{i}", a.dim) for i, a in enumerate(axes)]

    def element(*names: str) -> str:
        reads = [offset(name, -before) if before else name
                 for name, (before, _after) in zip(names, widths, strict=True)]
        return f"{shifted.name}[{', '.join(reads)}]"

    padded = x.recording.index_let(indices, element, axes, x.element)
    return padded + fill.item() if fill.item() != 0 else padded


def roll(x: Any, shift: Any, axis: Any = None) -> Traced:
    x = as_traced(x)
    if axis is None:
        return x.recording.let(f"roll({x.name}, {_shift(shift)})", x.axes, x.element)
    shifts = shift if isinstance(shift, tuple | list) else (shift,) * (
        len(axis) if isinstance(axis, tuple | list) else 1)
    for s, a in zip(shifts, axis if isinstance(axis, tuple | list) else (axis,), strict=True):
        x = x.recording.let(f"roll({x.name}, {_shift(s)}, axis={a % x.ndim})", x.axes,
                            x.element)
    return x


def _shift(shift: Any) -> str:
    return atom(shift.expr) if hasattr(shift, "expr") else str(int(shift))


def flip_axes(x: Any, axis: Any = None) -> Traced:
    x = as_traced(x)
    return flip(x, range(x.ndim) if axis is None else normal_axes(axis, x.ndim))


def rot90(x: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Traced:
    x = as_traced(x)
    for _turn in range(k % 4):
        x = swapaxes(flip(x, [axes[1]]), *axes)
    return x


def tri(kind: str) -> Callable[..., Traced]:
    """`np.tril`/`np.triu`: the last two axes masked in index notation,
    `let t[b, i, j] = where(j <= i + k, x[b, i, j], 0.0)`."""
    def mask(x: Any, k: int = 0) -> Traced:
        x = as_traced(x)
        if x.ndim < 2:
            raise TraceError(f"np.{kind} of shape {x.shape} ({user_line()}): it masks the "
                             f"last two axes")
        zero = "0.0" if x.element in ("f32", "f64") else "0"

        def element(*names: str) -> str:
            row, col = names[-2:]
            bound = offset(row, int(k))
            test = f"{col} <= {bound}" if kind == "tril" else f"{col} >= {bound}"
            return f"where({test}, {x.name}[{', '.join(names)}], {zero})"

        return x.recording.index_let([(f"m{i}", None) for i in range(x.ndim)], element,
                                     x.axes, x.element)

    return mask


ARRAY_FUNCTIONS.update({
    "transpose": transpose, "reshape": reshape, "ravel": ravel,
    "squeeze": squeeze, "expand_dims": expand_dims, "moveaxis": moveaxis,
    "swapaxes": swapaxes, "atleast_1d": atleast(1), "atleast_2d": atleast(2),
    "atleast_3d": atleast(3),
    "hstack": hstack, "vstack": vstack, "row_stack": vstack, "dstack": dstack,
    "column_stack": column_stack, "split": split, "array_split": array_split,
    "hsplit": axis_split("hsplit", 1, 1), "vsplit": axis_split("vsplit", 0, 2),
    "dsplit": axis_split("dsplit", 2, 3), "rollaxis": rollaxis,
    "append": append, "repeat": repeat, "tile": tile, "pad": pad, "roll": roll,
    "flip": flip_axes, "fliplr": lambda x: flip_axes(x, 1), "flipud": lambda x: flip_axes(x, 0),
    "rot90": rot90, "tril": tri("tril"), "triu": tri("triu"),
})
for _name, _method in {"swapaxes": swapaxes, "repeat": repeat}.items():
    setattr(Traced, _name, _method)


# ---------------------------------------------------------------- gathers, broadcasts

def take(x: Any, indices: Any, axis: Any = None, out: Any = None, mode: Any = None) -> Traced:
    """`np.take`: integer-array indexing along one axis (the flattened array without)."""
    ignored("np.take", {"out": out, "mode": mode})
    x = as_traced(x)
    if axis is None:
        return x.ravel()[indices]
    return x[(slice(None),) * (axis % x.ndim) + (indices,)]


def take_along_axis(x: Any, indices: Any, axis: Any) -> Traced:
    """`np.take_along_axis` (what `argsort` indices gather), in index notation:
    `let t[i, j] = x[i, idx[i, j]]` for axis 1."""
    x, index = as_traced(x), as_traced(indices)
    if axis is None:
        x, axis = x.ravel(), 0
    axis %= x.ndim
    if index.ndim != x.ndim or index.element not in ("i32", "i64"):
        raise TraceError(f"np.take_along_axis needs integer indices of x's rank "
                         f"({user_line()}), got {index!r} for {x!r}")
    axes = tuple(x.recording.same(a, b, "np.take_along_axis") if i != axis else b
                 for i, (a, b) in enumerate(zip(x.axes, index.axes, strict=True)))

    def element(*names: str) -> str:
        reads = [f"{index.name}[{', '.join(names)}]" if i == axis else n
                 for i, n in enumerate(names)]
        return f"{x.name}[{', '.join(reads)}]"

    return x.recording.index_let([(f"a{i}", None) for i in range(x.ndim)], element, axes,
                                 x.element)


def broadcast_to(x: Any, shape: Any, subok: bool = False) -> Traced:
    """`np.broadcast_to`, in index notation: new leading axes and size-1 axes read at 0
    (`let t[b0 in 0..5, i1] = x[i1];`)."""
    x = as_traced(x)
    entries = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    target = tuple(Axis(n.value, n.expr) if hasattr(n, "expr") and n.is_dim
                   else Axis(int(n), str(int(n))) for n in entries)
    lead = len(target) - x.ndim
    if lead < 0 or any(a.size not in (1, t.size) for a, t in zip(x.axes, target[lead:],
                                                                  strict=True)):
        raise TraceError(f"np.broadcast_to of shape {x.shape} to {tuple(entries)} "
                         f"({user_line()}): the shapes do not broadcast")
    stretched = [i < lead or x.axes[i - lead].size != t.size or
                 x.axes[i - lead].dim != t.dim for i, t in enumerate(target)]
    axes = tuple(t if i < lead or x.axes[i - lead].size == 1 else
                 x.recording.same(x.axes[i - lead], t, "np.broadcast_to")
                 for i, t in enumerate(target))
    indices = [(f"b{i}", t.dim if stretched[i] else None) for i, t in enumerate(axes)]

    def element(*names: str) -> str:
        reads = ["0" if x.axes[i].size == 1 and stretched[i + lead] else names[i + lead]
                 for i in range(x.ndim)]
        return f"{x.name}[{', '.join(reads)}]" if reads else x.name

    return x.recording.index_let(indices, element, axes, x.element)


def meshgrid(*values: Any, indexing: str = "xy", sparse: bool = False,
             copy: bool = True) -> list[Traced]:
    """`np.meshgrid` of vectors: each broadcast to the grid (`indexing="xy"` swaps the
    first two axes, as NumPy's)."""
    vectors = [as_traced(v).ravel() for v in values]
    shape = [v.shape[0] for v in vectors]
    if indexing == "xy" and len(vectors) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    grids = []
    for i, v in enumerate(vectors):
        at = (1 - i if i < 2 else i) if indexing == "xy" and len(vectors) > 1 else i
        column = v.reshape([n if k == at else 1 for k, n in enumerate(shape)])
        grids.append(column if sparse else broadcast_to(column, shape))
    return grids


ARRAY_FUNCTIONS.update({"take": take, "take_along_axis": take_along_axis,
                        "broadcast_to": broadcast_to, "meshgrid": meshgrid})
setattr(Traced, "take", take)  # noqa: B010 (NumPy's method, set with the others)
