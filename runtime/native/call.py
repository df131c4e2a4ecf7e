"""The call boundary (docs/api.md §1–2): Python arguments in, checked NumPy buffers out.

Everything compiled code trusts is checked here: arity, dtype conversions (NumPy
`same_kind`, plus a range check wherever an integer conversion narrows, since NumPy would
wrap), ranks, and the binding of every symbolic dimension to one size. Arrays are made
contiguous copies when needed, so inputs are never modified and strided views work.

    binding = bind_arguments(fn, args)      # -> BoundCall(arrays, dims)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reverie.compiler.ir.dtypes import NUMPY_DTYPES
from reverie.runtime.native import output_pool
from reverie.runtime.native.compiler_gate import python_expr  # (a call that has the IR)

if TYPE_CHECKING:  # (not imported: a warm start's first call checks arity without the IR)
    from reverie.compiler.ir.core import Function
    from reverie.compiler.ir.dims import Dim


class ArgumentTypeError(TypeError):
    """Wrong number of arguments, or an argument NumPy cannot convert (same_kind)."""


class ArgumentValueError(ValueError):
    """An integer argument holding a value that does not fit the declared integer type."""


class ShapeMismatchError(ValueError):
    """An argument's shape does not fit the signature, or dimensions bind inconsistently."""


class BoundCall:
    """Arguments converted to their declared dtypes (read-only C-contiguous views, so the
    caller's arrays cannot be written through them), and the size of every dimension.
    (A plain class, so that a warm start does not import `dataclasses`.)"""

    __slots__ = ("arrays", "dims")

    def __init__(self, arrays: list[np.ndarray], dims: dict[str, int]) -> None:
        self.arrays = arrays
        self.dims = dims


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
        element = float_element(as_array(arg).dtype)
        if element is not None:
            seen.setdefault(element, name)
    return agreed_float(seen, fn_name)


def float_element(dtype: np.dtype) -> str | None:
    """What `float` means for arrays of NumPy `dtype` (None: not a float dtype): bf16 for
    ml_dtypes' bfloat16, else by width (float128 counts as f64)."""
    if dtype.name == "bfloat16":
        return "bf16"
    return {2: "f16", 4: "f32"}.get(dtype.itemsize, "f64") if dtype.kind == "f" else None


def agreed_float(seen: dict[str, str], fn_name: str) -> str:
    """The one element type of `seen` (by it, the first parameter given it), f64 when it is
    empty; an ArgumentTypeError naming them when `float` parameters got several."""
    if len(seen) > 1:
        got = " and ".join(f"{NUMPY_DTYPES[d]} ('{arg}')" for d, arg in seen.items())
        raise ArgumentTypeError(
            f"{fn_name}(): 'float' parameters got {got} arrays; convert them so they agree")
    return next(iter(seen), "f64")


def check_arity(fn_name: str, param_names: Sequence[str], args: Sequence[object]) -> None:
    """ArgumentTypeError unless exactly one argument per parameter was given."""
    if len(args) != len(param_names):
        names = ", ".join(param_names)
        raise ArgumentTypeError(f"{fn_name}() takes {len(param_names)} argument(s) ({names}), "
                                f"got {len(args)}")


def _convert(arg: object, target: np.dtype, name: str, fn_name: str) -> np.ndarray:
    """`arg` as a C-contiguous array of `target`, or the error that explains why not."""
    if isinstance(arg, int) and not isinstance(arg, bool) and target.kind in "if":
        return _python_int(arg, target, name, fn_name)
    array = as_array(arg)
    if array.dtype == object or not np.can_cast(array.dtype, target, casting="same_kind"):
        raise ArgumentTypeError(
            f"{fn_name}(): argument '{name}' has dtype {array.dtype}, which cannot be converted "
            f"to {target} (NumPy same_kind casting); convert it explicitly")
    if target.kind == "i" and array.dtype.kind in "iu" and not np.can_cast(array.dtype, target):
        _check_fits(array, target, name, fn_name)
    return np.asarray(array, dtype=target, order="C")


def _python_int(value: int, target: np.dtype, name: str, fn_name: str) -> np.ndarray:
    """A Python int for a number parameter; NumPy's OverflowError becomes a named error."""
    try:
        return np.asarray(value, dtype=target)
    except OverflowError:
        bits = value.bit_length()
        text = str(value) if bits <= 128 else f"an integer of {bits} bits"
        raise ArgumentValueError(f"{fn_name}(): argument '{name}' is {text}, which does not "
                                 f"fit {target}") from None


def _check_fits(array: np.ndarray, target: np.dtype, name: str, fn_name: str) -> None:
    """ArgumentValueError unless every value of an integer array is representable in
    `target` (the narrowing conversion NumPy's same_kind allows would wrap it)."""
    if not array.size:
        return
    info = np.iinfo(target)
    for value in (array.min(), array.max()):
        if not info.min <= value <= info.max:
            raise ArgumentValueError(
                f"{fn_name}(): argument '{name}' holds {value}, which does not fit {target} "
                f"({info.min}..{info.max}); converting it would wrap")


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


class FastBinder:
    """The checks of `bind_arguments` precomputed for one function, for the common call:
    C-contiguous arrays already of the declared dtypes (and Python numbers for scalars),
    with every dimension a plain name or a constant. `bind` returns None for anything
    else, and the full path then converts or explains."""

    def __init__(self, fn: Function) -> None:
        self.arity = len(fn.params)
        self.dtypes = [NUMPY_DTYPES[p.type.dtype] for p in fn.params]
        self.ranks = [p.type.rank for p in fn.params]
        self.symbols: list[tuple[int, int, str]] = []
        self.sizes: list[tuple[int, int, int]] = []
        self.usable = True
        for index, param in enumerate(fn.params):
            for axis, dim in enumerate(param.type.shape):
                if dim.is_const:
                    self.sizes.append((index, axis, dim.value))
                elif str(dim) in dim.symbols():
                    self.symbols.append((index, axis, str(dim)))
                else:
                    self.usable = False
        self.value_dims = list(fn.value_dims)
        self.constraints = [eval(f"lambda d: {python_expr(dim, lambda s: f'd[{s!r}]')}")
                            for dim, _ in fn.constraints]

    def bind(self, args: Sequence[object]) -> BoundCall | None:
        """The bound call, or None when the full path must handle these arguments."""
        if not self.usable or len(args) != self.arity:
            return None
        arrays = []
        for arg, dtype, rank in zip(args, self.dtypes, self.ranks, strict=True):
            kind = type(arg)
            if kind is np.ndarray:
                if arg.dtype != dtype or arg.ndim != rank or not arg.flags.c_contiguous:
                    return None
                arrays.append(arg)
            elif rank == 0 and (kind is float and dtype.kind == "f" or kind is int
                                and dtype.kind in "fi"):
                try:
                    arrays.append(np.asarray(arg, dtype))
                except OverflowError:
                    return None
            else:
                return None
        dims = {symbol: int(arrays[index]) for symbol, index in self.value_dims}
        for index, axis, symbol in self.symbols:
            size = arrays[index].shape[axis]
            if dims.setdefault(symbol, size) != size:
                return None
        for index, axis, size in self.sizes:
            if arrays[index].shape[axis] != size:
                return None
        for check in self.constraints:
            if check(dims) < 0:
                return None
        return BoundCall(arrays, dims)


def bind_arguments(fn: Function, args: Sequence[object]) -> BoundCall:
    """Convert `args` for specialisation `fn` and bind its dimensions (raising on mismatch)."""
    binder = fn.__dict__.get("fast_binder")
    if binder is None:
        binder = fn.__dict__["fast_binder"] = FastBinder(fn)
    bound = binder.bind(args)
    return bound if bound is not None else _bind_checked(fn, args)


def _bind_checked(fn: Function, args: Sequence[object]) -> BoundCall:
    """`bind_arguments` for any arguments: converts, solves and explains every mismatch."""
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


def finish_results(fn: Function, results: Sequence[np.ndarray],
                   inputs: Sequence[np.ndarray]) -> object:
    """NumPy results as users expect: fresh arrays (never an input or a view of one), 0-d
    as NumPy scalars, and a tuple for tuple returns."""
    fresh = [r if _fresh(r, results, inputs) else np.array(r) for r in results]
    out = [r[()] if r.ndim == 0 else r for r in fresh]
    return out[0] if len(out) == 1 else tuple(out)


def _fresh(result: np.ndarray, results: Sequence[np.ndarray],
           inputs: Sequence[np.ndarray]) -> bool:
    """Whether `result` may be returned as it is: not an input, and owning its memory or a
    view of an output pool block (`output_pool.py`) that no input or other result uses."""
    if result.base is None:
        return not any(result is a for a in inputs)
    return output_pool.POOL.holds(result.base) and not any(
        a.base is result.base for a in (*inputs, *results) if a is not result)
