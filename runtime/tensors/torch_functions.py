"""`rv.where`, `rv.pow`, `rv.maximum`, `rv.minimum`, `rv.max`, `rv.min`: the Tensor functions
that take torch's arguments and follow torch's gradient conventions (docs/api.md §4).

Consumes Tensors (NumPy arrays and Python numbers beside them) and produces Tensors, each by
the compiled kernels of `recorded_ops.py`, so they record and differentiate like the
operators:

    rv.where(x > 0, x, 0.0)          # torch.where; rv.where(c) the indices where c holds
    rv.pow(2.0, x), rv.pow(x, y)     # torch.pow: a Tensor base or exponent
    rv.maximum(x, y)                 # NaN wins; a NaN's gradient reaches both operands
    rv.max(x)                        # 0-d; the gradient split evenly among ties
    rv.max(x, 1, keepdim=True)       # (values, indices); the gradient to the indices alone
    rv.max(x, y)                     # rv.maximum(x, y)

The gradient conventions are torch 2.13's: `maximum`/`minimum` send half of it to each
operand on a tie and all of it to both where an operand is NaN (`binary(...,
nan_to_both=True)`); the full reduction splits it evenly among the entries equal to the
result (the NaN entries where it is NaN); the reduction along `dim` reads the values at the
indices it returns (the first of equal entries, the first NaN), so its gradient goes to
those indices alone. On `rv.trace`'s stand-ins each function records its NumPy counterpart
instead (`np.where`, `np.maximum`, `**`), which the tracer turns into the language's.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

import numpy as np

from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors import recorded_ops
from reverie.runtime.tensors import shape_kernels as ops_shape
from reverie.runtime.tensors.tensor_core import Tensor, plain, run_kernel, wrap

# torch.return_types.max / .min: the values and indices of a reduction along one dim
RETURN_TYPES = {op: namedtuple(op, ("values", "indices")) for op in ("max", "min")}
ELEMENTWISE = {"max": "maximum", "min": "minimum"}
INDEX_OPS = {"max": "argmax", "min": "argmin"}


def _stand_in(values: tuple[object, ...]) -> bool:
    """Whether one of `values` is an `rv.trace` stand-in (a type that records built-ins)."""
    return any(getattr(type(v), "__reverie_builtin__", None) is not None for v in values)


def _tensor_like(value: object) -> bool:
    return isinstance(value, Tensor | np.ndarray)


def _checked(result: object, caller: str) -> Tensor:
    """`result`, or the TypeError of a function given foreign operands."""
    if result is NotImplemented:
        raise TypeError(f"{caller}() takes Tensors, NumPy arrays or numbers")
    return result  # type: ignore[return-value]


def where(condition: object, input: object = None, other: object = None) -> object:
    """torch.where: `input` where the bool `condition` holds, else `other` (Tensors or
    numbers, broadcast), recorded (the gradient flows to `input` where the condition
    holds and to `other` elsewhere); `where(condition)` alone is the tuple of index
    Tensors where it holds (torch's `nonzero(as_tuple=True)`)."""
    if input is None and other is None:
        return tuple(wrap(i.astype(np.int64)) for i in np.nonzero(plain(condition)))
    if input is None or other is None:
        raise TypeError("where() takes a condition alone, or a condition, input and other")
    if _stand_in((condition, input, other)):
        return np.where(condition, input, other)
    dtype = getattr(condition, "dtype", np.asarray(condition).dtype)
    if np.dtype(dtype) != np.bool_:
        raise TypeError(f"where() takes a bool condition, not {dtype} (as torch): write the "
                        "comparison, such as x > 0, or convert with .astype(bool)")
    return recorded_ops.where(condition, input, other)


def pow(input: object, exponent: object) -> object:
    """torch.pow: `input ** exponent`, either of them a number (not both), recorded; its
    gradient follows torch's at a zero base."""
    if _stand_in((input, exponent)):
        return input ** exponent  # type: ignore[operator]
    if not (_tensor_like(input) or _tensor_like(exponent)):
        raise TypeError("pow() takes a Tensor as its input or exponent (as torch); for two "
                        "numbers use Python's **")
    return _checked(recorded_ops.binary("pow", input, exponent), "pow")


def _elementwise(op: str) -> Callable[[object, object], object]:
    """torch.maximum / torch.minimum (`op`): NaN-propagating, recorded."""
    def function(input: object, other: object) -> object:
        if _stand_in((input, other)):
            return getattr(np, op)(input, other)
        return _checked(recorded_ops.binary(op, input, other, nan_to_both=True), op)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = (f"torch.{op}: the elementwise {op} of two Tensors (or numbers), "
                        "broadcast; NaN where either is NaN. Gradient: all to the "
                        f"{'larger' if op == 'maximum' else 'smaller'} operand, half to each "
                        "on a tie, all to both where one is NaN (torch's).")
    return function


maximum = _elementwise("maximum")
minimum = _elementwise("minimum")


def _as_tensor(value: object) -> Tensor:
    return value if isinstance(value, Tensor) else wrap(np.asarray(value))


def _along(op: str, t: Tensor, dim: int, keepdim: bool) -> tuple[Tensor, Tensor]:
    """torch's `max(t, dim)` (`op` max or min): the values, recorded, and their i64 indices."""
    data = plain(t)
    if not isinstance(dim, int | np.integer) or isinstance(dim, bool):
        raise TypeError(f"{op}(): dim must be an int, not {type(dim).__name__}")
    if data.ndim == 0:  # torch takes dim 0 or -1 of a 0-d tensor: the element, index 0
        ops_kernels.normalise_axes(dim, 1)
        return RETURN_TYPES[op](recorded_ops.record_step(t, ("reshape", ())),
                                wrap(np.zeros((), np.int64)))
    (axis,) = ops_kernels.normalise_axes(int(dim), data.ndim)
    if data.shape[axis] == 0:
        raise IndexError(f"{op}(): cannot reduce over dim {dim} of size 0 (as torch)")
    indices = run_kernel(ops_kernels.index_reduce_kernel(INDEX_OPS[op], data, axis), data)
    values = run_kernel(ops_shape.take_along_kernel(data.dtype, data.ndim, axis), t,
                        plain(indices))
    if keepdim:
        kept = data.shape[:axis] + (1,) + data.shape[axis + 1:]
        values = recorded_ops.reshape_copy(values, kept)
        indices = wrap(plain(indices).reshape(kept))
    return RETURN_TYPES[op](values, indices)


def _reduction(op: str) -> Callable[..., object]:
    """torch.max / torch.min (`op`): the reduction of all elements, the (values, indices)
    along `dim`, or, given a second Tensor, the elementwise maximum / minimum."""
    def function(input: object, dim: object = None, keepdim: bool = False) -> object:
        if _tensor_like(dim) or _stand_in((dim,)):
            return ELEMENTWISE_FUNCTIONS[op](input, dim)
        if _stand_in((input,)):
            if dim is None:
                return getattr(input, op)()
            raise TypeError(f"rv.{op}(t, dim) (values and indices) is not traced; use "
                            f"t.{op}(axis=) for the values and np.arg{op} for the indices")
        if dim is None:
            if keepdim:
                raise TypeError(f"{op}() takes keepdim only with dim (as torch)")
            t = _as_tensor(input)
            if plain(t).size == 0:
                raise RuntimeError(f"{op}(): the reduction of an empty tensor has no "
                                   "identity; give dim (as torch)")
            return recorded_ops.reduce(op, t, None, False)
        return _along(op, _as_tensor(input), dim, bool(keepdim))

    function.__name__ = function.__qualname__ = op
    function.__doc__ = (
        f"torch.{op}: `{op}(t)` the {op} of all elements (0-d; the gradient split evenly "
        f"among equal entries); `{op}(t, dim, keepdim=False)` the namedtuple (values, "
        f"indices) along `dim` (the first of equal entries; the gradient to those indices "
        f"alone); `{op}(a, b)` is `rv.{ELEMENTWISE[op]}(a, b)`. NaN propagates.")
    return function


ELEMENTWISE_FUNCTIONS = {"max": maximum, "min": minimum}
FUNCTIONS = {"where": where, "pow": pow, "maximum": maximum, "minimum": minimum,
             "max": _reduction("max"), "min": _reduction("min")}
