"""The call boundary (SPEC §3.1): Python arguments in, checked NumPy buffers out.

Everything compiled code trusts is checked here: arity, dtype conversions (NumPy
`same_kind`), ranks, and the binding of every symbolic dimension to one size. Arrays are
made contiguous copies when needed, so inputs are never modified and strided views work.

    binding = bind_arguments(fn, args)      # -> BoundCall(arrays, dims)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import NUMPY_DTYPES


class ArgumentTypeError(TypeError):
    """Wrong number of arguments, or an argument NumPy cannot convert (same_kind)."""


class ShapeMismatchError(ValueError):
    """An argument's shape does not fit the signature, or dimensions bind inconsistently."""


@dataclass
class BoundCall:
    """Arguments converted to their declared dtypes (read-only C-contiguous views, so the
    caller's arrays cannot be written through them), and the size of every dimension."""

    arrays: list[np.ndarray]
    dims: dict[str, int]


def as_array(value: object) -> np.ndarray:
    """`np.asarray`, accepting anything NumPy does (including `rv.Tensor` via __array__)."""
    return np.asarray(value)


def float_dtype_of(param_dtypes: Sequence[str], args: Sequence[object], fn_name: str,
                   param_names: Sequence[str]) -> str:
    """The specialisation for `float` parameters: from array arguments, else f64 (NumPy)."""
    seen: dict[str, str] = {}
    for declared, arg, name in zip(param_dtypes, args, param_names, strict=True):
        if declared != "float" or isinstance(arg, int | float | bool):
            continue
        kind = as_array(arg).dtype
        if kind.kind == "f":
            seen.setdefault("f32" if kind.itemsize <= 4 else "f64", name)
    if len(seen) > 1:
        raise ArgumentTypeError(
            f"{fn_name}(): 'float' parameters got float32 ('{seen['f32']}') and float64 "
            f"('{seen['f64']}') arrays; convert one so they agree")
    return next(iter(seen), "f64")


def check_arity(fn_name: str, param_names: Sequence[str], args: Sequence[object]) -> None:
    """ArgumentTypeError unless exactly one argument per parameter was given."""
    if len(args) != len(param_names):
        names = ", ".join(param_names)
        raise ArgumentTypeError(f"{fn_name}() takes {len(param_names)} argument(s) ({names}), "
                                f"got {len(args)}")


def _convert(arg: object, target: np.dtype, name: str, fn_name: str) -> np.ndarray:
    array = as_array(arg)
    if array.dtype == object or not np.can_cast(array.dtype, target, casting="same_kind"):
        raise ArgumentTypeError(
            f"{fn_name}(): argument '{name}' has dtype {array.dtype}, which cannot be converted "
            f"to {target} (NumPy same_kind casting); convert it explicitly")
    converted = np.asarray(array, dtype=target, order="C").view()
    converted.flags.writeable = False  # results aliasing an input are then copied on return
    return converted


def _solve(dim: Dim, size: int, dims: dict[str, int]) -> None:
    """Bind the one unknown symbol of a linear dimension expression `a * S + b == size`."""
    unknown = dim.symbols() - set(dims)
    if len(unknown) != 1:
        return
    (symbol,) = unknown
    at_zero = dim.evaluate({**dims, symbol: 0})
    slope = dim.evaluate({**dims, symbol: 1}) - at_zero
    if slope and (size - at_zero) % slope == 0 and dim.evaluate(
            {**dims, symbol: (size - at_zero) // slope}) == size:
        dims[symbol] = (size - at_zero) // slope


def bind_arguments(fn: Function, args: Sequence[object]) -> BoundCall:
    """Convert `args` for specialisation `fn` and bind its dimensions (raising on mismatch)."""
    check_arity(fn.name, fn.param_names, args)
    arrays = []
    for value, name, arg in zip(fn.params, fn.param_names, args, strict=True):
        array = _convert(arg, NUMPY_DTYPES[value.type.dtype], name, fn.name)
        if array.ndim != value.type.rank:
            raise ShapeMismatchError(
                f"{fn.name}(): argument '{name}' must have {value.type.rank} dimension(s) "
                f"({value.type}), got an array of shape {array.shape}")
        arrays.append(array)
    dims: dict[str, int] = {}
    where: dict[str, str] = {}
    for symbol, index in fn.value_dims:
        dims[symbol] = int(arrays[index])
        where[symbol] = f"the value of argument '{fn.param_names[index]}'"
    pending = []
    for value, name, array in zip(fn.params, fn.param_names, arrays, strict=True):
        for axis, (dim, size) in enumerate(zip(value.type.shape, array.shape, strict=True)):
            if len(dim.terms) == 1 and dim.terms[0][1] == 1 and len(dim.terms[0][0]) == 1 \
                    and isinstance(dim.terms[0][0][0], str):
                symbol = dim.terms[0][0][0]
                if symbol in dims and dims[symbol] != size:
                    raise ShapeMismatchError(
                        f"{fn.name}(): dimension {symbol} is {dims[symbol]} in "
                        f"{where[symbol]} but {size} in argument '{name}' (axis {axis})")
                dims.setdefault(symbol, size)
                where.setdefault(symbol, f"argument '{name}' (axis {axis})")
            else:
                pending.append((dim, size, name, axis))
    for dim, size, name, axis in pending:
        _solve(dim, size, dims)
        missing = dim.symbols() - set(dims)
        if missing:
            raise ShapeMismatchError(f"{fn.name}(): cannot determine dimension "
                                     f"{', '.join(sorted(missing))} from argument '{name}'")
        expected = dim.evaluate(dims)
        if expected != size:
            bound = ", ".join(f"{s}={dims[s]}" for s in sorted(dim.symbols()))
            raise ShapeMismatchError(
                f"{fn.name}(): argument '{name}' axis {axis} must have size {dim}"
                + (f" = {expected} ({bound})" if bound else "") + f", got {size}")
    for dim, reason in fn.constraints:
        if dim.evaluate(dims) < 0:
            bound = ", ".join(f"{s}={dims[s]}" for s in sorted(dim.symbols()))
            raise ShapeMismatchError(f"{fn.name}(): {reason} when {bound}")
    return BoundCall(arrays, dims)


def finish_results(fn: Function, results: Sequence[np.ndarray]) -> object:
    """NumPy results as users expect: fresh arrays (never views of inputs), 0-d as NumPy
    scalars, and a tuple for tuple returns."""
    fresh = [r if r.flags.owndata and r.flags.writeable else np.array(r) for r in results]
    out = [r[()] if r.ndim == 0 else r for r in fresh]
    return out[0] if len(out) == 1 else tuple(out)
