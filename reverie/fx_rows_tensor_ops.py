"""Rows of the `rv.fx` target table (`fx_targets.py`): selections, orderings, statistics,
masks and the other tensor operations models use between their layers.

Each table has the form of `fx_targets`' own (see `fx_rows_losses.py`). Most rows are the
NumPy form of the operation on `reverie.tracing` stand-ins (`np.flip`, `np.roll`,
`np.take_along_axis`, ...), so they record what `rv.trace` records for NumPy code; every
value is torch's, and so is every gradient:

    max, min (dim)      (values, indices): the first extreme element of each line and its
                        index; the gradient goes to that element (torch's), not shared
    max, min            the whole tensor's extreme, or the elementwise one of two tensors
    argmax, argmin      the first extreme's index (of the flattened tensor without `dim`)
    var, std            Σ (x − mean)² / (N − correction) (`unbiased` is correction 1); std
                        its root, whose gradient is 0 where it is 0 (torch's)
    var_mean, std_mean  (var or std, mean)
    sort, argsort, topk (values, indices) in torch's order (stable); values gathered, so
                        gradients go to the elements they came from
    gather, index_select, repeat_interleave, flip, roll, tril, triu, movedim, swapaxes,
    diff                their NumPy forms along torch's dims
    remainder, fmod     x − ⌊x / y⌋ y (sign of y) and x − trunc(x / y) y (sign of x);
                        floor_divide ⌊x / y⌋ (no gradient)
    lerp, hypot, xlogy, logaddexp   torch's formulas (lerp's two branches at weight ½)
    logical_and/or/xor/not, isnan/isinf/isfinite, any, all   booleans
    one_hot             int64 [..., C] (num_classes given: it fixes the shape)
    clone               the same value (Reverie's values are never shared)
    vstack hstack dstack column_stack meshgrid (torch's "ij" by default)   NumPy's
    nan_to_num          NaN, ±inf replaced (by default 0 and the dtype's extremes)
    pixel_shuffle       [*, C r², H, W] -> [*, C, H r, W r] by a reshape and a transpose
                        (pixel_unshuffle the inverse)
    linalg.solve_triangular   the built-in triangular_solve (no check, as torch's)
    det slogdet logdet  the language's built-ins (inverse, solve and cholesky stay
                        unmapped: torch raises on a singular or indefinite matrix, where
                        a kernel would give inf or NaN)
    eye, linspace, tensor (of numbers)   factories, made by torch at every call
    as_tensor           a tensor cast as `Tensor.to` casts it, numbers as torch.tensor
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from reverie.fx_functional import reduced_axes, refuse, safe_root
from reverie.fx_rows_shapes import broadcast_shapes, broadcast_to, check_factory, made, to
from reverie.tracing import RECORDER_FILES, Axis, Traced, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]


def _axis(x: Traced, dim: int) -> int:
    return dim % max(x.ndim, 1)


def _extreme(kind: str) -> Emit:
    """torch.max / torch.min: of all elements, (values, indices) along `dim`, or of two."""
    def emit(input: Traced, dim: Any = None, keepdim: bool = False) -> Any:
        if isinstance(dim, Traced):  # torch.max(input, other)
            return input._binary(kind, dim)
        if dim is None:
            return input._reduce(kind, None, False)
        axis = _axis(input, dim)
        index = input._reduce(f"arg{kind}", axis, False)
        kept = np.expand_dims(index, axis)
        values = np.take_along_axis(input, kept, axis)  # the gradient to the chosen element
        return (values, kept) if keepdim else (np.squeeze(values, axis), index)

    return emit


def _arg_extreme(kind: str) -> Emit:
    """torch.argmax / argmin: the first extreme's index, along `dim` or of all elements."""
    def emit(input: Traced, dim: int | None = None, keepdim: bool = False) -> Traced:
        if dim is None:
            index = input.ravel()._reduce(kind, 0, False)
            return index.reshape((1,) * input.ndim) if keepdim else index
        index = input._reduce(kind, _axis(input, dim), False)
        return np.expand_dims(index, _axis(input, dim)) if keepdim else index

    return emit


# ---------------------------------------------------------------- statistics

def _correction(target: str, dim: Any, unbiased: Any, correction: Any) -> tuple[Any, float]:
    """torch's `var(x, unbiased)` (a bool where `dim` stands) and `correction` folded into
    (dim, correction)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise refuse(target, "correction", correction, "torch takes unbiased or correction")
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    return dim, float(correction)


def _moments(input: Traced, dim: Any, correction: float, keepdim: bool
             ) -> tuple[Traced, Traced]:
    """(variance, mean) over `dim`: Σ (x − mean)² / (N − correction)."""
    axes = reduced_axes(input, dim)
    count = int(np.prod([input.shape[a] for a in axes]))
    mean = input._reduce("mean", axes, True)
    deviation = input - mean
    variance = (deviation * deviation)._reduce("sum", axes, keepdim) / max(
        count - correction, 0.0)
    return variance, mean if keepdim else input._reduce("mean", axes, False)


def _statistic(kind: str) -> Emit:
    """torch.var / std / var_mean / std_mean."""
    def emit(input: Traced, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> Any:
        dim, c = _correction(kind, dim, unbiased, correction)
        variance, mean = _moments(input, dim, c, keepdim)
        spread = safe_root(variance) if kind.startswith("std") else variance
        return (spread, mean) if kind.endswith("_mean") else spread

    return emit


# ---------------------------------------------------------------- orderings

def sort(input: Traced, dim: int = -1, descending: bool = False, stable: bool = False
         ) -> tuple[Traced, Traced]:
    """torch.sort: (values, indices), stably (torch's order among equals, stable=True)."""
    order = argsort(input, dim, descending)
    return np.take_along_axis(input, order, _axis(input, dim)), order


def argsort(input: Traced, dim: int = -1, descending: bool = False, stable: bool = False
            ) -> Traced:
    axis = _axis(input, dim)
    flag = ", descending=true" if descending else ""
    return input.recording.let(f"argsort({input.name}, axis={axis}{flag})", input.axes, "i64")


def topk(input: Traced, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
         ) -> tuple[Traced, Traced]:
    """torch.topk: the k largest (smallest) along `dim`, in order."""
    axis = _axis(input, dim)
    order = argsort(input, dim, descending=largest)
    first = order[(slice(None),) * axis + (slice(0, int(k)),)]
    return np.take_along_axis(input, first, axis), first


# ---------------------------------------------------------------- selections, layout

def gather(input: Traced, dim: int, index: Traced, *, sparse_grad: bool = False) -> Traced:
    """torch.gather: out[i][j] = input[i][index[i][j]] along `dim`; index may be shorter
    than input along the other axes (input read there up to index's sizes)."""
    if sparse_grad:
        raise refuse("gather", "sparse_grad", sparse_grad, "Reverie's gradients are dense")
    axis = _axis(input, dim)
    if index.ndim != input.ndim:
        raise refuse("gather", "index", index, "torch takes an index of the input's rank")
    window = tuple(slice(None) if a == axis else slice(0, index.shape[a])
                   for a in range(input.ndim))
    return np.take_along_axis(input[window], index, axis)


def index_select(input: Traced, dim: int, index: Traced) -> Traced:
    return input[(slice(None),) * _axis(input, dim) + (index,)]


def repeat_interleave(input: Traced, repeats: Any, dim: int | None = None, *,
                      output_size: Any = None) -> Traced:
    """torch.repeat_interleave by one count (a count per element would size the output by
    data)."""
    if not isinstance(repeats, int):
        raise refuse("repeat_interleave", "repeats", repeats, "Reverie takes one int count")
    return np.repeat(input, repeats, axis=None if dim is None else _axis(input, dim))


def flip(input: Traced, *dims: Any) -> Traced:
    axes = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], tuple | list) else dims
    return np.flip(input, axis=tuple(a % input.ndim for a in axes))


def roll(input: Traced, shifts: Any, dims: Any = None) -> Traced:
    return np.roll(input, shifts, axis=dims)


def _triangle(kind: str) -> Emit:
    def emit(input: Traced, diagonal: int = 0) -> Traced:
        if input.ndim < 2:
            raise refuse(kind, "input", input, "torch takes at least two axes")
        return getattr(np, kind)(input, diagonal)

    return emit


def movedim(input: Traced, source: Any, destination: Any) -> Traced:
    return np.moveaxis(input, source, destination)


def swapaxes(input: Traced, axis0: int, axis1: int) -> Traced:
    return np.swapaxes(input, axis0, axis1)


def diff(input: Traced, n: int = 1, dim: int = -1, prepend: Any = None,
         append: Any = None) -> Traced:
    """torch.diff: n-th differences along `dim` (prepended / appended values first)."""
    axis = _axis(input, dim)
    parts = [p for p in (prepend, input, append) if p is not None]
    x = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)
    return np.diff(x, n, axis=axis)


def clone(input: Traced, *, memory_format: Any = None) -> Traced:
    """A copy: equal to the input (Reverie's values are never written in place)."""
    return input


# ---------------------------------------------------------------- elementwise

def remainder(input: Any, other: Any) -> Traced:
    """x − ⌊x / y⌋ y: Python's modulus (the sign of y), with torch's gradients (1, −⌊x/y⌋)."""
    return input - np.floor(input / other) * other


def fmod(input: Any, other: Any) -> Traced:
    """x − trunc(x / y) y: C's fmod (the sign of x)."""
    quotient = input / other
    return input - where(quotient < 0, np.ceil(quotient), np.floor(quotient)) * other


def floor_divide(input: Any, other: Any) -> Traced:
    return np.floor(input / other)


def lerp(input: Traced, end: Traced, weight: Any) -> Traced:
    """torch.lerp in ATen's two branches: x + w (e − x) below w = ½, e − (e − x)(1 − w)
    from it (so lerp(x, e, 1) is e exactly)."""
    difference = end - input
    if not isinstance(weight, Traced):
        return input + weight * difference if abs(weight) < 0.5 else \
            end - difference * (1 - weight)
    small = abs(weight) < 0.5
    return where(small, input + weight * difference, end - difference * (1 - weight))


def hypot(input: Traced, other: Traced) -> Traced:
    return np.hypot(input, other)


def logaddexp(input: Traced, other: Traced) -> Traced:
    return np.logaddexp(input, other)


def xlogy(input: Any, other: Any) -> Traced:
    """torch.xlogy: x log y, 0 where x = 0 (unless y is NaN)."""
    product = input * np.log(other)
    return where(np.logical_and(input == 0, np.logical_not(np.isnan(other))), 0.0, product)


def _as_bool(x: Any) -> Any:
    return x if not isinstance(x, Traced) or x.element == "bool" else x != 0


def _logical(kind: str) -> Emit:
    def emit(input: Any, other: Any) -> Traced:
        a, b = _as_bool(input), _as_bool(other)
        return {"and": a & b, "or": a | b, "xor": a != b}[kind]

    return emit


def logical_not(input: Traced) -> Traced:
    return np.logical_not(_as_bool(input))


def _boolean_operator(kind: str) -> Emit:
    """`a & b`, `a | b`, `a ^ b`, `~a` of boolean tensors (of integers they are bitwise,
    which Reverie lacks)."""
    def emit(*operands: Any) -> Traced:
        for operand in operands:
            if not isinstance(operand, bool) and not (isinstance(operand, Traced)
                                                      and operand.element == "bool"):
                raise refuse(f"operator.{kind}", "operand", operand,
                             "Reverie takes booleans (integers' bitwise ops are not mapped)")
        return logical_not(*operands) if kind == "invert" else _logical(kind)(*operands)

    return emit


def _test(kind: str) -> Emit:
    def emit(input: Traced) -> Traced:
        return getattr(np, kind)(input)

    return emit


def _truth(kind: str) -> Emit:
    """torch.any / torch.all over `dim` (every axis without)."""
    def emit(input: Traced, dim: Any = None, keepdim: bool = False) -> Traced:
        axes = None if dim is None else reduced_axes(input, dim)
        return getattr(np, kind)(_as_bool(input), axis=axes, keepdims=keepdim)

    return emit


def one_hot(tensor: Traced, num_classes: int = -1) -> Traced:
    """F.one_hot: int64 [..., C], 1 at each element's class."""
    if num_classes < 0:
        raise refuse("one_hot", "num_classes", num_classes,
                     "Reverie takes the number of classes (the output's shape)")
    names = [f"o{i}" for i in range(tensor.ndim)]
    return tensor.recording.index_let(
        [*((name, None) for name in names), ("c", str(num_classes))],
        lambda *got: f"i64(where({tensor.name}[{', '.join(got[:-1])}] == {got[-1]}, 1, 0))",
        (*tensor.axes, Axis(num_classes, str(num_classes))), "i64")


def nan_to_num(input: Traced, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Traced:
    """torch.nan_to_num: NaN -> nan, +inf -> posinf, -inf -> neginf (the dtype's largest
    and lowest finite values by default); the gradient flows where x is finite."""
    finfo = np.finfo(np.float64 if input.element == "f64" else np.float32)
    high = float(finfo.max) if posinf is None else posinf
    low = float(finfo.min) if neginf is None else neginf
    return where(np.isnan(input), nan, where(input == np.inf, high,
                                             where(input == -np.inf, low, input)))


def pixel_shuffle(input: Traced, upscale_factor: int) -> Traced:
    """[*, C r², H, W] -> [*, C, H r, W r]: out[c, h r + i, w r + j] = in[c r² + i r + j, h, w]."""
    r, (*lead, channels, height, width) = upscale_factor, input.shape
    if channels % (r * r):
        raise refuse("pixel_shuffle", "upscale_factor", r, f"{channels} channels are not a "
                     f"multiple of {r * r}")
    split = input.reshape((*lead, channels // (r * r), r, r, height, width))
    k = len(lead)
    order = (*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return split.transpose(order).reshape((*lead, channels // (r * r), height * r, width * r))


def pixel_unshuffle(input: Traced, downscale_factor: int) -> Traced:
    """[*, C, H r, W r] -> [*, C r², H, W], pixel_shuffle's inverse."""
    r, (*lead, channels, height, width) = downscale_factor, input.shape
    if height % r or width % r:
        raise refuse("pixel_unshuffle", "downscale_factor", r, f"the size {height} x {width} "
                     f"is not a multiple of it")
    split = input.reshape((*lead, channels, height // r, r, width // r, r))
    k = len(lead)
    order = (*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return split.transpose(order).reshape((*lead, channels * r * r, height // r, width // r))


def _stacked(kind: str) -> Emit:
    def emit(tensors: Sequence[Traced], *, out: Any = None) -> Traced:
        if out is not None:
            raise refuse(kind, "out", out, "a write in place")
        return getattr(np, kind)(list(tensors))

    return emit


def meshgrid(*tensors: Traced, indexing: str | None = None) -> tuple[Traced, ...]:
    """torch.meshgrid: "ij" indexing unless "xy" is asked (NumPy's default is "xy")."""
    if len(tensors) == 1 and isinstance(tensors[0], tuple | list):
        tensors = tuple(tensors[0])
    return tuple(np.meshgrid(*tensors, indexing=indexing or "ij"))


def _linalg(name: str) -> Emit:
    def emit(input: Traced) -> Any:
        return getattr(np.linalg, name)(input)

    return emit


def logdet(input: Traced) -> Traced:
    """torch.logdet: log det (NaN for a negative determinant, as torch)."""
    sign, magnitude = np.linalg.slogdet(input)
    return where(sign < 0, np.nan, magnitude + np.log(sign))


def solve_triangular(A: Traced, B: Traced, *, upper: bool, left: bool = True,  # noqa: N803
                     unitriangular: bool = False) -> Traced:
    """torch.linalg.solve_triangular: X with T X = B (X T = B unless `left`), T the upper
    or lower triangle of A (ones on its diagonal when `unitriangular`); a singular T gives
    inf/NaN, as torch's, which does not check. B broadcast to the batch axes of both."""
    if A.ndim < 2 or B.ndim < 2:
        raise refuse("linalg.solve_triangular", "B" if A.ndim >= 2 else "A",
                     B if A.ndim >= 2 else A, "torch takes matrices (at least two axes)")
    batch = broadcast_shapes(A.shape[:-2], B.shape[:-2])
    B = broadcast_to(B, (*batch, *B.shape[-2:]))
    keywords = (f"lower={str(not upper).lower()}, unit_diagonal={str(unitriangular).lower()}"
                f", left={str(left).lower()}")
    return B.recording.let(f"triangular_solve({A.name}, {B.name}, {keywords})", B.axes,
                           B.element)


# ---------------------------------------------------------------- factories

def eye(n: int, m: int | None = None, *, dtype: Any = None, layout: Any = None,
        device: Any = None, pin_memory: bool | None = False,
        requires_grad: bool = False) -> Traced:
    check_factory("eye", layout, device, pin_memory, requires_grad, n=n, m=m)
    return made(lambda _: torch.eye(n, n if m is None else m, dtype=dtype))


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Traced:
    check_factory("linspace", layout, device, False, requires_grad, start=start, end=end,
                  steps=steps)
    return made(lambda _: torch.linspace(start, end, steps, dtype=dtype))


def tensor(data: Any, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False, pin_memory: bool = False) -> Traced:
    """torch.tensor of Python numbers (nested lists of them)."""
    check_factory("tensor", None, device, pin_memory, requires_grad, data=tuple(_flat(data)))
    return made(lambda _: torch.tensor(data, dtype=dtype))


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Traced:
    """torch.as_tensor: a tensor as it is or cast to `dtype` (as `Tensor.to`), numbers as
    torch.tensor makes them."""
    if isinstance(data, Traced):
        return to(data, dtype=dtype, device=device)
    return tensor(data, dtype=dtype, device=device)


def _flat(data: Any) -> list[Any]:
    if isinstance(data, Sequence) and not isinstance(data, str):
        return [v for item in data for v in _flat(item)]
    return [data]


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    torch.max: (_extreme("max"), {}), torch.min: (_extreme("min"), {}),
    torch.argmax: (_arg_extreme("argmax"), {}), torch.argmin: (_arg_extreme("argmin"), {}),
    **{getattr(torch, kind): (_statistic(kind), {})
       for kind in ("var", "std", "var_mean", "std_mean")},
    torch.sort: (sort, {}), torch.argsort: (argsort, {}), torch.topk: (topk, {}),
    torch.gather: (gather, {}), torch.index_select: (index_select, {}),
    torch.repeat_interleave: (repeat_interleave, {}), torch.flip: (flip, {}),
    torch.roll: (roll, {}), torch.tril: (_triangle("tril"), {}),
    torch.triu: (_triangle("triu"), {}), torch.movedim: (movedim, {}),
    torch.moveaxis: (movedim, {}), torch.swapaxes: (swapaxes, {}),
    torch.swapdims: (swapaxes, {}), torch.diff: (diff, {}), torch.clone: (clone, {}),
    torch.remainder: (remainder, {}), operator.mod: (remainder, {}), torch.fmod: (fmod, {}),
    operator.floordiv: (floor_divide, {}),
    torch.floor_divide: (floor_divide, {}), torch.lerp: (lerp, {}), torch.hypot: (hypot, {}),
    torch.logaddexp: (logaddexp, {}), torch.xlogy: (xlogy, {}),
    **{getattr(torch, f"logical_{kind}"): (_logical(kind), {}) for kind in ("and", "or", "xor")},
    torch.logical_not: (logical_not, {}),
    **{getattr(operator, f"{kind}_"): (_boolean_operator(kind), {}) for kind in ("and", "or")},
    operator.xor: (_boolean_operator("xor"), {}),
    operator.invert: (_boolean_operator("invert"), {}),
    **{getattr(torch, kind): (_test(kind), {}) for kind in ("isnan", "isinf", "isfinite")},
    torch.any: (_truth("any"), {}), torch.all: (_truth("all"), {}),
    torch.nn.functional.one_hot: (one_hot, {}),
    torch.eye: (eye, {}), torch.linspace: (linspace, {}), torch.tensor: (tensor, {}),
    torch.as_tensor: (as_tensor, {}),
    torch.nan_to_num: (nan_to_num, {}), torch.pixel_shuffle: (pixel_shuffle, {}),
    torch.pixel_unshuffle: (pixel_unshuffle, {}),
    **{getattr(torch, kind): (_stacked(kind), {})
       for kind in ("vstack", "hstack", "dstack", "column_stack")},
    torch.meshgrid: (meshgrid, {}),
    **{target: (_linalg(name), {}) for target, name in (
        (torch.det, "det"), (torch.linalg.det, "det"), (torch.slogdet, "slogdet"),
        (torch.linalg.slogdet, "slogdet"))},
    torch.logdet: (logdet, {}),
    torch.linalg.solve_triangular: (solve_triangular, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {
    "max": (_extreme("max"), {}), "min": (_extreme("min"), {}),
    "argmax": (_arg_extreme("argmax"), {}), "argmin": (_arg_extreme("argmin"), {}),
    "var": (_statistic("var"), {}), "std": (_statistic("std"), {}),
    "sort": (sort, {}), "argsort": (argsort, {}), "topk": (topk, {}),
    "gather": (gather, {}), "index_select": (index_select, {}),
    "repeat_interleave": (repeat_interleave, {}), "flip": (flip, {}), "roll": (roll, {}),
    "tril": (_triangle("tril"), {}), "triu": (_triangle("triu"), {}),
    "movedim": (movedim, {}), "moveaxis": (movedim, {}), "swapaxes": (swapaxes, {}),
    "swapdims": (swapaxes, {}), "diff": (diff, {}), "clone": (clone, {}),
    "remainder": (remainder, {}), "fmod": (fmod, {}), "floor_divide": (floor_divide, {}),
    "__mod__": (remainder, {}), "__floordiv__": (floor_divide, {}),
    "lerp": (lerp, {}), "hypot": (hypot, {}), "logaddexp": (logaddexp, {}),
    "xlogy": (xlogy, {}),
    **{f"logical_{kind}": (_logical(kind), {}) for kind in ("and", "or", "xor")},
    "logical_not": (logical_not, {}),
    "__and__": (_boolean_operator("and"), {}), "__or__": (_boolean_operator("or"), {}),
    "__xor__": (_boolean_operator("xor"), {}), "__invert__": (_boolean_operator("invert"), {}),
    **{kind: (_test(kind), {}) for kind in ("isnan", "isinf", "isfinite")},
    "any": (_truth("any"), {}), "all": (_truth("all"), {}),
    "nan_to_num": (nan_to_num, {}), "det": (_linalg("det"), {}),
    "slogdet": (_linalg("slogdet"), {}), "logdet": (logdet, {}),
}
MODULES: dict[type, Callable[..., Any]] = {
    nn.PixelShuffle: lambda m, w, x: pixel_shuffle(x, m.upscale_factor),
    nn.PixelUnshuffle: lambda m, w, x: pixel_unshuffle(x, m.downscale_factor),
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES"]
