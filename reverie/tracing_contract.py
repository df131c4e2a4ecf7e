"""Products, diagonals and linear algebra for `rv.trace`, in index notation.

`np.einsum("ij,jk->ik", a, b)` is the index-notation statement it reads as
(docs/language.md §10): `let t[i, k] = sum[j](a[i, j] * b[j, k]);`. `tensordot`, `dot`
above two axes, `inner`, `vdot` and `kron` are einsums; `trace`, `diagonal` and `diag`
read or write the diagonal in index notation; `outer` and `cross` are products of
slices. `np.linalg.norm` is written with sums and maxima (vector orders, and the
Frobenius, 1 and inf norms of matrices). The other linear-algebra functions
(`np.linalg.inv`, `cholesky`, `solve`, ..., `scipy.linalg.*`) are the language's
built-ins of the same name where it has them (`LINALG`), else a `TraceError` naming them.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reverie.tracing_base import ignored
from reverie.tracing_numpy import ARRAY_FUNCTIONS, ENTRY_POINTS, as_traced, builtin_exists
from reverie.tracing_record import (
    RECORDER_FILES,
    Axis,
    Traced,
    TraceError,
    _first_traced,
    _promoted,
    operand,
    stack,
    user_line,
)
from reverie.tracing_shapes import swapaxes
from reverie.tracing_sizes import offset

RECORDER_FILES.add(__file__)


# ---------------------------------------------------------------- einsum

def einsum(subscripts: str, *operands: Any, out: Any = None, dtype: Any = None,
           optimize: Any = None, **options: Any) -> Traced:
    """`np.einsum` (explicit or implicit output, `...`): one index-notation statement."""
    ignored("np.einsum", {"out": out, "dtype": dtype, **options}, ("order", "casting"))
    if not isinstance(subscripts, str):
        raise TraceError(f"np.einsum in the interleaved form cannot be traced "
                         f"({user_line()}): write the subscripts as a string")
    values = [as_traced(v) for v in operands]
    values = _common_type(values)
    inputs, output = _parse(subscripts.replace(" ", ""), values)
    recording = values[0].recording
    extent: dict[str, Axis] = {}
    for letters, value in zip(inputs, values, strict=True):
        for letter, axis in zip(letters, value.axes, strict=True):
            extent[letter] = recording.same(extent[letter], axis, f"np.einsum('{subscripts}')") \
                if letter in extent else axis
    names = {letter: recording.claim(letter if letter.islower() else f"e{ord(letter)}")
             for letter in extent}
    reads = " * ".join(f"{v.name}[{', '.join(names[c] for c in letters)}]" if letters
                       else v.name for letters, v in zip(inputs, values, strict=True))
    summed = [c for c in extent if c not in output]
    body = f"sum[{', '.join(names[c] for c in summed)}]({reads})" if summed else reads
    axes = tuple(extent[c] for c in output)
    index = f"[{', '.join(names[c] for c in output)}]" if output else ""
    return recording.let(body, axes, values[0].element, index=index)


def _common_type(values: list[Traced]) -> list[Traced]:
    target = values[0]
    for v in values[1:]:
        if v.element != target.element:
            target = _promoted(target, v)[0]
    return [v.astype(target.dtype) for v in values]


def _parse(spec: str, values: Sequence[Traced]) -> tuple[list[str], str]:
    """The letters of each operand and of the output, `...` replaced by capital letters
    (aligned from the right, as NumPy broadcasts them)."""
    left, arrow, right = spec.partition("->")
    inputs = left.split(",")
    if len(inputs) != len(values):
        raise TraceError(f"np.einsum('{spec}') names {len(inputs)} operands, got "
                         f"{len(values)} ({user_line()})")
    widest = max((v.ndim - len(t.replace("...", "")) for t, v in
                  zip(inputs, values, strict=True) if "..." in t), default=0)
    ellipsis = string.ascii_uppercase[:widest]
    expanded = []
    for letters, value in zip(inputs, values, strict=True):
        if "..." in letters:
            count = value.ndim - len(letters.replace("...", ""))
            letters = letters.replace("...", ellipsis[widest - count:])
        if len(letters) != value.ndim or (letters and not letters.isalpha()):
            raise TraceError(f"np.einsum('{spec}'): '{letters}' for shape {value.shape} "
                             f"({user_line()})")
        expanded.append(letters)
    if arrow:
        output = right.replace("...", ellipsis)
    else:
        counts = "".join(expanded)
        output = ellipsis + "".join(sorted(c for c in set(counts) if counts.count(c) == 1
                                           and c.islower()))
    return expanded, output


def _letters(count: int, start: int = 0) -> str:
    return string.ascii_lowercase[start:start + count]


def tensordot(a: Any, b: Any, axes: Any = 2) -> Traced:
    a, b = as_traced(a), as_traced(b)
    if isinstance(axes, int | np.integer):
        pairs = list(zip(range(a.ndim - int(axes), a.ndim), range(int(axes)), strict=True))
    else:
        first, second = ([x] if isinstance(x, int) else list(x) for x in axes)
        pairs = [(i % a.ndim, j % b.ndim) for i, j in zip(first, second, strict=True)]
    left = list(_letters(a.ndim))
    right = list(_letters(b.ndim, a.ndim))
    for i, j in pairs:
        right[j] = left[i]
    shared = {left[i] for i, _ in pairs}
    out = [c for c in left if c not in shared] + [c for c in right if c not in shared]
    return einsum(f"{''.join(left)},{''.join(right)}->{''.join(out)}", a, b)


def dot(a: Any, b: Any, out: Any = None) -> Traced:
    """`np.dot`: `*` with a scalar, `@` up to a matrix `b`, else the sum over `a`'s last
    axis and `b`'s second to last."""
    a, b = as_traced(a) if isinstance(a, Traced | list | tuple) else a, b
    if not isinstance(a, Traced) or not isinstance(b, Traced | list | tuple):
        return a * b
    b = as_traced(b)
    if not a.ndim or not b.ndim:
        return a * b
    if b.ndim <= 2:
        return a @ b
    return tensordot(a, b, axes=([-1], [-2]))


def vdot(a: Any, b: Any) -> Traced:
    return (as_traced(a).ravel() * as_traced(b).ravel()).sum()


def inner(a: Any, b: Any) -> Traced:
    a, b = as_traced(a), as_traced(b)
    if not a.ndim or not b.ndim:
        return a * b
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a: Any, b: Any, out: Any = None) -> Traced:
    a, b = as_traced(a).ravel(), as_traced(b).ravel()
    return a[:, None] * b[None, :]


def kron(a: Any, b: Any) -> Traced:
    """`np.kron`: `let t[i0, k0, i1, k1] = a[i0, i1] * b[k0, k1]`, axis pairs merged."""
    a, b = as_traced(a), as_traced(b)
    rank = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (rank - a.ndim) + tuple(a.shape))
    b = b.reshape((1,) * (rank - b.ndim) + tuple(b.shape))
    left, right = _letters(rank), _letters(rank, rank)
    spread = einsum(f"{left},{right}->{''.join(x + y for x, y in zip(left, right, strict=True))}",
                    a, b)
    return spread.reshape([m * n for m, n in zip(a.shape, b.shape, strict=True)])


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Traced:
    """`np.cross` of 3-vectors along the last axis: `a1 b2 - a2 b1, ...`, stacked."""
    a, b = as_traced(a), as_traced(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        raise TraceError(f"np.cross of shapes {a.shape} and {b.shape} ({user_line()}): "
                         f"rv.trace takes 3-vectors")
    parts = [a[..., (k + 1) % 3] * b[..., (k + 2) % 3] - a[..., (k + 2) % 3] * b[..., (k + 1) % 3]
             for k in range(3)]
    return np.moveaxis(stack(parts, -1), -1, axisc)


# ---------------------------------------------------------------- diagonals

def diagonal(x: Any, offset_: int = 0, axis1: int = 0, axis2: int = 1, **kwargs: Any) -> Traced:
    """The diagonal `x[..., i, i + k]` of two axes, moved last (NumPy's order)."""
    k = int(kwargs.get("offset", offset_))
    x = np.moveaxis(as_traced(x), (axis1, axis2), (-2, -1))
    rows, cols = x.axes[-2:]
    length = max(0, min(rows.size, cols.size - k) if k >= 0 else min(rows.size + k, cols.size))
    if rows.dim == cols.dim:
        extent = offset(rows.dim, -abs(k))
    else:
        x.recording.fix(f"{rows.dim} {cols.dim}")
        extent = str(length)
    indices = [(f"d{i}", None) for i in range(x.ndim - 2)] + [("d", None if k == 0 and
                                                               rows.dim == cols.dim else extent)]

    def element(*names: str) -> str:
        *batch, i = names
        row, col = (i, offset(i, k)) if k >= 0 else (offset(i, -k), i)
        return f"{x.name}[{', '.join([*batch, row, col])}]"

    return x.recording.index_let(indices, element, x.axes[:-2] + (Axis(length, extent),),
                                 x.element)


def trace(x: Any, offset_: int = 0, axis1: int = 0, axis2: int = 1, **kwargs: Any) -> Traced:
    return diagonal(x, kwargs.get("offset", offset_), axis1, axis2).sum(axis=-1)


def diag(v: Any, k: int = 0) -> Traced:
    """`np.diag`: a vector on the `k`-th diagonal of a square matrix, or a matrix's
    diagonal."""
    v = as_traced(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise TraceError(f"np.diag of shape {v.shape} ({user_line()}): it takes a vector "
                         f"or a matrix")
    return diagonal_matrices(v, k)


def diagonal_matrices(v: Traced, k: int = 0) -> Traced:
    """Each vector of the last axis of `v` [..., n] on the `k`-th diagonal of a square
    matrix of zeros, [..., n + |k|, n + |k|] (torch.diag_embed's default axes)."""
    *batch, last = v.axes
    size = last.size + abs(k)
    extent = offset(last.dim, abs(k))
    zero = "0.0" if v.element in ("f32", "f64") else "0"

    def element(*names: str) -> str:
        *outer, i, j = names
        on, read = (f"{j} == {offset(i, k)}", i) if k >= 0 else (f"{i} == {offset(j, -k)}", j)
        return f"where({on}, {v.name}[{', '.join([*outer, read])}], {zero})"

    indices = [(f"d{n}", None) for n in range(len(batch))] + [("i", extent), ("j", extent)]
    return v.recording.index_let(indices, element, (*batch, Axis(size, extent),
                                                    Axis(size, extent)), v.element)


# ---------------------------------------------------------------- norms, linear algebra

def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Traced:  # noqa: A002
    """`np.linalg.norm`: vector norms of any order; the Frobenius, nuclear-free matrix
    norms (`'fro'`, 1, -1, inf, -inf) of two axes."""
    x = as_traced(x)
    if x.element not in ("f32", "f64"):
        x = x.astype(np.float64)
    if axis is None and ord is None:
        return _keep(np.sqrt((x * x).sum()), x, range(x.ndim), keepdims)
    axes = tuple(range(x.ndim)) if axis is None else \
        (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) != 2:
        raise TraceError(f"np.linalg.norm over {len(axes)} axes ({user_line()}): give "
                         f"axis= one axis or two")
    row, col = axes
    magnitude = np.abs(x)
    matrix = {"fro": lambda: np.sqrt((x * x).sum(axis=axes, keepdims=True)),
              None: lambda: np.sqrt((x * x).sum(axis=axes, keepdims=True)),
              1: lambda: magnitude.sum(axis=row, keepdims=True).max(axis=col, keepdims=True),
              -1: lambda: magnitude.sum(axis=row, keepdims=True).min(axis=col, keepdims=True),
              np.inf: lambda: magnitude.sum(axis=col, keepdims=True).max(axis=row,
                                                                          keepdims=True),
              -np.inf: lambda: magnitude.sum(axis=col, keepdims=True).min(axis=row,
                                                                           keepdims=True)}
    if ord not in matrix and builtin_exists("norm"):  # singular values: the built-in
        order = {"nuc": "nuc", 2: "2", -2: "-2"}.get(ord)
        if order is not None:
            keep = ", keepdims=true" if keepdims else ""
            kept = tuple(Axis(1, "1") if i in axes else a for i, a in enumerate(x.axes)
                         if keepdims or i not in axes)
            return x.recording.let(f"norm({x.name}, ord={order}, axis=({row}, {col})"
                                   f"{keep})", kept, x.element)
    if ord not in matrix:
        spectral = "" if builtin_exists("norm") else \
            " (2, -2 and 'nuc' need the built-in norm, not in the language yet)"
        raise TraceError(f"np.linalg.norm(ord={ord!r}) of a matrix cannot be traced "
                         f"({user_line()}): 'fro', 1, -1, np.inf, -np.inf, 2, -2 and 'nuc' "
                         f"are matrix orders{spectral}")
    result = matrix[ord]()
    return result if keepdims else result.squeeze(axes)


def _vector_norm(x: Traced, ord: Any, axis: int, keepdims: bool) -> Traced:  # noqa: A002
    magnitude = np.abs(x)
    if ord is None or ord == 2:
        return np.sqrt((x * x).sum(axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return magnitude.max(axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return magnitude.min(axis=axis, keepdims=keepdims)
    if ord == 0:
        return (x != 0).astype(x.dtype).sum(axis=axis, keepdims=keepdims)
    if ord == 1:
        return magnitude.sum(axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise TraceError(f"np.linalg.norm(ord={ord!r}) of a vector ({user_line()}): "
                         f"give a number or np.inf")
    return (magnitude ** float(ord)).sum(axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _keep(value: Traced, x: Traced, axes: Any, keepdims: bool) -> Traced:
    return value.reshape([1] * x.ndim) if keepdims else value


# `np.linalg` / `scipy.linalg` name -> (the built-ins that may mean it, the results'
# axes from the arguments' axes: one tuple of axes, or a list of them for a tuple result).
ShapeRule = Callable[..., Any]
LINALG: dict[str, tuple[tuple[str, ...], ShapeRule]] = {
    "inv": (("inv",), lambda a, *_: a),
    "cholesky": (("cholesky",), lambda a, *_: a),
    "pinv": (("pinv",), lambda a, *_: a[:-2] + (a[-1], a[-2])),
    "det": (("det",), lambda a, *_: a[:-2]),
    "slogdet": (("slogdet",), lambda a, *_: [a[:-2], a[:-2]]),
    "solve": (("solve",), lambda a, b, *_: b),
    "eigh": (("eigh",), lambda a, *_: [a[:-1], a]),
    "svd": (("svd",), lambda a, *_: [a[:-1] + (_smaller(a),), a[:-2] + (_smaller(a),),
                                     a[:-2] + (_smaller(a), a[-1])]),
    "qr": (("qr",), lambda a, *_: [a[:-1] + (_smaller(a),), a[:-2] + (_smaller(a), a[-1])]),
    "solve_triangular": (("triangular_solve", "solve_triangular"), lambda a, b, *_: b),
}


def _smaller(axes: tuple[Axis, ...]) -> Axis:
    """The shorter of a matrix's two axes (the rank of its reduced factorisations); where
    which is shorter depends on the sizes, both are fixed."""
    rows, cols = axes[-2:]
    if rows.dim == cols.dim or rows.size == 1 or cols.size == 1:
        return rows if rows.size <= cols.size else cols
    return Axis(min(rows.size, cols.size), str(min(rows.size, cols.size)))


def linalg(name: str, keywords: Callable[..., str] = lambda **_: "") -> Callable[..., Any]:
    """The recorder of `np.linalg.<name>`: the built-in `name(a, ...)` with its shapes;
    `keywords` writes the built-in's keyword arguments from NumPy's."""
    def record(*args: Any, **kwargs: Any) -> Any:
        candidates, shapes = LINALG[name]
        found = next((b for b in candidates if builtin_exists(b)), None)
        if found is None:
            raise TraceError(f"{name} is not a built-in of the language yet (looked for "
                             f"{' or '.join(candidates)}; {user_line()})")
        arrays = [a for a in args if isinstance(a, Traced | list | tuple | np.ndarray)]
        first = next((t for t in map(_first_traced, arrays) if t is not None), None)
        if first is None:
            raise TraceError(f"np.linalg.{name} of no traced value ({user_line()})")
        values = _common_type([operand(first.recording, a, first.element) for a in arrays])
        if any(isinstance(a, np.ndarray) for a in arrays):
            # a constant's sizes are literal: the dimensions they meet keep their sizes
            first.recording.fix(" ".join(x.dim for v in values for x in v.axes))
        call = f"{found}({', '.join(v.name for v in values)}{keywords(**kwargs)})"
        result = shapes(*(v.axes for v in values))
        if name in ("svd", "qr"):
            for axes in (v.axes for v in values):
                if axes[-2].dim != axes[-1].dim and 1 not in (axes[-2].size, axes[-1].size):
                    values[0].recording.fix(f"{axes[-2].dim} {axes[-1].dim}")
        recording, element = values[0].recording, values[0].element
        if isinstance(result, list):
            parts = [recording.temporary() for _ in result]  # `let (t1, t2) = svd(a);`
            recording.lines.append(f"    let ({', '.join(parts)}) = {call};  "
                                   f"# {recording.origin()}")
            return tuple(Traced(recording, part, axes, element)
                         for part, axes in zip(parts, result, strict=True))
        return recording.let(call, result, element)

    return record


def _svd_keywords(full_matrices: bool = True, compute_uv: bool = True, **_: Any) -> str:
    if not compute_uv:
        raise TraceError(f"np.linalg.svd(compute_uv=False) ({user_line()}): take "
                         f"np.linalg.svd(a, full_matrices=False)[1]")
    return "" if full_matrices else ", full_matrices=false"


def _triangular_keywords(lower: bool = False, trans: Any = 0, unit_diagonal: bool = False,
                         **_: Any) -> str:
    """scipy.linalg.solve_triangular's keywords (upper triangular by default)."""
    transpose = trans in (1, 2, "T", "C")
    return (f", lower={str(bool(lower)).lower()}" + (", transpose=true" if transpose else "")
            + (", unit_diagonal=true" if unit_diagonal else ""))


def _qr_keywords(mode: str = "reduced", **_: Any) -> str:
    if mode != "reduced":
        raise TraceError(f"np.linalg.qr(mode={mode!r}) ({user_line()}): mode='reduced' is "
                         f"traced")
    return ""


def scipy_cholesky(a: Any, lower: bool = False, **_: Any) -> Traced:
    """`scipy.linalg.cholesky`: upper triangular unless `lower` (NumPy's is lower)."""
    factor = linalg("cholesky")(a)
    return factor if lower else swapaxes(factor, -1, -2)


def multi_dot(arrays: Sequence[Any], *, out: Any = None) -> Traced:
    """`np.linalg.multi_dot`: the products left to right (NumPy may order them otherwise:
    the same values, rounded differently)."""
    ignored("np.linalg.multi_dot", {"out": out})
    result = as_traced(arrays[0])
    for factor in arrays[1:]:
        result = result @ as_traced(factor)
    return result


def matrix_power(a: Any, n: int) -> Traced:
    """`np.linalg.matrix_power` for a Python integer `n` (a negative one through `inv`)."""
    a = as_traced(a)
    if not isinstance(n, int | np.integer):
        raise TraceError(f"np.linalg.matrix_power needs a Python integer power ({user_line()})")
    if n < 0:
        a, n = RECORDERS["inv"](a), -int(n)
    if n == 0:
        return np.eye(a.shape[-1]) + 0.0 * a if a.axes[-1].dim.isdigit() else \
            np.identity(a.shape[-1]) + np.zeros_like(a)
    result = a
    for _step in range(int(n) - 1):
        result = result @ a
    return result


def matrix_transpose(x: Any) -> Traced:
    return swapaxes(as_traced(x), -1, -2)


RECORDERS = {name: linalg(name) for name in ("inv", "cholesky", "pinv", "det", "slogdet",
                                              "solve", "eigh")}
RECORDERS.update({"svd": linalg("svd", _svd_keywords), "qr": linalg("qr", _qr_keywords),
                  "solve_triangular": linalg("solve_triangular", _triangular_keywords)})
ARRAY_FUNCTIONS.update({
    "einsum": einsum, "tensordot": tensordot, "dot": dot, "vdot": vdot, "inner": inner,
    "outer": outer, "kron": kron, "cross": cross, "trace": trace, "diagonal": diagonal,
    "diag": diag, "linalg.norm": norm, "matrix_transpose": matrix_transpose,
    "linalg.multi_dot": multi_dot, "linalg.matrix_power": matrix_power,
    "linalg.matrix_norm": lambda x, keepdims=False, ord="fro": norm(
        x, ord, (-2, -1), keepdims),
    "linalg.vector_norm": lambda x, axis=None, keepdims=False, ord=2: norm(
        as_traced(x).ravel() if axis is None else x, ord, 0 if axis is None else axis,
        keepdims and axis is not None),
    **{f"linalg.{name}": recorder for name, recorder in RECORDERS.items()
       if name != "solve_triangular"},
})
ENTRY_POINTS.update({
    **{f"scipy.linalg.{name}": recorder for name, recorder in RECORDERS.items()
       if name != "cholesky"},
    "scipy.linalg.cholesky": scipy_cholesky,
    "scipy.linalg.norm": norm,
})
for _name, _method in {"dot": dot, "trace": trace, "diagonal": diagonal}.items():
    setattr(Traced, _name, _method)
