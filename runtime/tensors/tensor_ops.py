"""The Tensor operations beyond construction: each one a recorded compiled kernel (docs/api.md §4).

Consumes Tensors (and NumPy arrays or Python scalars beside them) and produces Tensors,
by running the kernels of `operator_kernels.py` (arithmetic, comparisons, `@`, built-ins,
reductions) and `ops_shape.py` (indexing, transposes, reshapes) through `run_kernel`, so
that a call on Tensors that require grad records itself and differentiates through the
kernel's compiled VJP, to any order. Comparisons run on the arrays: their bool results
never require grad.

The elementwise built-ins of docs/language.md §8 come from the op table
(`ops_kernels.UNARY_BUILTINS`,
the rows flagged `builtin`): each is a Tensor method and a function of `FUNCTIONS`, which
`reverie/__init__.py` serves as `rv.exp`, `rv.tanh`, ...:

    t.exp(), rv.exp(t), np.exp(t)        # the same recorded kernel `exp_op`

NumPy ufuncs on Tensors (`__array_ufunc__`) map onto the op table's rows by their NumPy
function (`UFUNCS`: `np.add` is the row `add`, `np.exp` the row `exp`); any other ufunc,
method or `out=` runs in NumPy on the arrays when nothing requires grad, and is a
TypeError that says what to do when something does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.runtime.tensors import (
    inplace,
)
from reverie.runtime.tensors import (
    operator_kernels as ops_kernels,
)
from reverie.runtime.tensors import (
    shape_kernels as ops_shape,
)
from reverie.runtime.tensors.grad_mode import grad_enabled
from reverie.runtime.tensors.indexing import index_plan
from reverie.runtime.tensors.tensor import Tensor, plain, run_kernel, wrap

# NumPy's ufuncs that are rows of the op table, by row name (`np.add` -> "add")
UFUNCS: dict[np.ufunc, str] = {
    row.numpy: name for name, row in ELEMENTWISE.items()
    if isinstance(row.numpy, np.ufunc)
    and (name in ops_kernels.BINARY_OPS or name in ops_kernels.UNARY_BUILTINS or name == "neg")}
_PROBE = np.zeros((), np.int8)


def _operand(value: object) -> object:
    """A Tensor, NumPy array or Python scalar operand; NotImplemented for anything else."""
    if isinstance(value, Tensor | np.ndarray) or (
            isinstance(value, int | float) and not isinstance(value, np.generic)):
        return value
    array = np.asarray(value)
    return NotImplemented if array.dtype == object else array


def binary(op: str, a: object, b: object) -> Tensor:
    """`a <op> b` (an op of `ops_kernels.BINARY_OPS`) through its compiled kernel;
    NotImplemented for foreign operands."""
    a, b = _operand(a), _operand(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    kernel = ops_kernels.binary_kernel(op, a, b)
    if ELEMENTWISE[op].result == "bool":  # a comparison: nothing to record
        return run_kernel(kernel, plain(a), plain(b))
    return run_kernel(kernel, a, b)


def where(condition: object, a: object, b: object) -> Tensor:
    """`a` where `condition` holds, else `b` (NumPy broadcasting), recorded: the gradient
    flows to `a` where the condition holds and to `b` elsewhere."""
    operands = [_operand(v) for v in (condition, a, b)]
    if NotImplemented in [o if o is NotImplemented else None for o in operands]:
        raise TypeError("where() takes Tensors, NumPy arrays or numbers")
    condition = np.asarray(plain(operands[0]), dtype=bool)
    return run_kernel(ops_kernels.where_kernel(condition, operands[1], operands[2]),
                      condition, operands[1], operands[2])


def clamp(t: Tensor, low: object = None, high: object = None) -> Tensor:
    """`t` limited to [low, high] (either may be None), recorded (torch's `clamp`)."""
    if low is not None:
        t = binary("maximum", t, low)
    return t if high is None else binary("minimum", t, high)


def matmul(a: object, b: object) -> Tensor:
    """`a @ b` through its compiled kernel (NotImplemented for foreign operands)."""
    a, b = _operand(a), _operand(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    if not hasattr(a, "shape") or not hasattr(b, "shape"):
        raise ValueError("'@' does not take scalars; use '*'")
    return run_kernel(ops_kernels.matmul_kernel(a, b), a, b)


def unary(op: str, x: object) -> Tensor:
    """Elementwise built-in `op` (or "neg") of a Tensor, array or number, as a Tensor."""
    x = _operand(x)
    if x is NotImplemented:
        raise TypeError(f"{op}() takes a Tensor, a NumPy array or a number")
    if not hasattr(x, "shape"):
        x = np.asarray(x)
    kernel = ops_kernels.neg_kernel(x) if op == "neg" else ops_kernels.unary_kernel(op, x)
    return run_kernel(kernel, x)


def reduce(op: str, t: Tensor, axis: int | tuple[int, ...] | None, keepdims: bool) -> Tensor:
    """Reduction `op` (sum, mean, max, min) of `t` over `axis`."""
    return run_kernel(ops_kernels.reduce_kernel(op, t, axis, keepdims), t)


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
        return _reshape_copy(t, target)
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


def _reshape_copy(t: Tensor, target: tuple[int, ...]) -> Tensor:
    """`t` in `target` shape through its compiled kernel (a copy), recorded."""
    if target == t._data.shape:
        return t
    return run_kernel(ops_shape.reshape_kernel(t._data.dtype, t._data.shape, target), t)


def getitem(t: Tensor, index: object) -> Tensor:
    """`t[index]`: a view for basic indexing (integers, slices, None, `...`; a full integer
    index gives a rank-0 view), else one gather (a copy)."""
    basic = _basic_index(index)
    if basic is None:
        return _gather(t, index)
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


def _gather(t: Tensor, index: object) -> Tensor:
    """`t[index]` with NumPy's basic and integer- or bool-array indexing, as one gather."""
    plan = index_plan(t._data.shape, index)
    if not plan.axes:  # a rank-0 tensor: `t[()]`, `t[None]`
        return _reshape_copy(t, plan.final_shape)
    if 0 in plan.final_shape:  # nothing to read (and no gradient to give back)
        return wrap(np.zeros(plan.final_shape, t._data.dtype))
    kernel = ops_shape.index_kernel(t._data.dtype, t._data.ndim, plan)
    result = run_kernel(kernel, t, *plan.values)
    return _reshape_copy(result, plan.final_shape)


def record_step(t: Tensor, step: inplace.Step) -> Tensor:
    """A new Tensor holding what a view's `step` reads from `t`, computed by its compiled
    kernel (recorded when `t` requires grad): the history of views (`inplace.py`)."""
    kind, arg = step
    if kind == "getitem":
        result = _gather(t, arg)
    elif kind == "transpose":
        result = run_kernel(ops_shape.transpose_kernel(t._data.dtype, arg), t)
    else:
        result = _reshape_copy(t, arg)
    if result is t:  # a step that changes nothing: the copy kernel records it
        result = run_kernel(ops_kernels.cast_kernel(t, t._data.dtype), t)
    return result


def record_steps(t: Tensor, steps: tuple[inplace.Step, ...]) -> Tensor:
    """`record_step` of each of `steps` in turn, from `t`."""
    for step in steps:
        t = record_step(t, step)
    return t


# ---------------------------------------------------------------- built-ins as functions


def _elementwise_function(op: str) -> Callable[[object], Tensor]:
    """`rv.<op>(x)`: the built-in applied to a Tensor (or array, or number), recorded."""
    row = ELEMENTWISE[op]

    def function(x: object) -> Tensor:
        recorder = getattr(type(x), "__reverie_builtin__", None)  # rv.trace's stand-ins
        if recorder is not None:
            return recorder(x, op)
        return unary(op, x)

    function.__name__ = function.__qualname__ = op
    maths = f" ({row.derivative.maths})" if row.derivative else f" (no derivative: " \
        f"{row.no_derivative})"
    function.__doc__ = f"Elementwise `{op}` of a Tensor, recorded{maths}."
    return function


def _method(function: Callable[[object], Tensor]) -> Callable[[Tensor], Tensor]:
    """`function` as a Tensor method: `t.exp()` is `rv.exp(t)`."""
    def method(self: Tensor) -> Tensor:
        return function(self)

    method.__name__, method.__qualname__ = function.__name__, f"Tensor.{function.__name__}"
    method.__doc__ = function.__doc__
    return method


FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    op: _elementwise_function(op) for op in ops_kernels.UNARY_BUILTINS}
for _name, _function in FUNCTIONS.items():
    setattr(Tensor, _name, _method(_function))
FUNCTIONS.update(where=where, clamp=clamp)
Tensor.clamp = clamp  # type: ignore[attr-defined]


def _inplace_method(op: str) -> Callable[[Tensor], Tensor]:
    """`t.<op>_()`: the built-in written into `t` in place (`inplace.unary`)."""
    def method(self: Tensor) -> Tensor:
        return inplace.unary(self, op)

    method.__name__, method.__qualname__ = f"{op}_", f"Tensor.{op}_"
    method.__doc__ = f"`{op}` of this tensor written into it in place, recorded."
    return method


for _name in (*ops_kernels.UNARY_BUILTINS, "neg"):
    setattr(Tensor, f"{_name}_", _inplace_method(_name))


# ---------------------------------------------------------------- NumPy ufuncs


def _requires_grad(values: tuple[object, ...]) -> bool:
    """Whether a Tensor among `values` would be recorded."""
    return grad_enabled() and any(isinstance(v, Tensor) and v._requires_grad
                                  for v in values)


def apply_ufunc(ufunc: np.ufunc, method: str, inputs: tuple[object, ...],
                kwargs: dict[str, object]) -> object:
    """`ufunc` (by `method`) on Tensor `inputs`: a recorded kernel for the op table's rows
    and `np.matmul`; NumPy on the arrays for the rest when nothing requires grad."""
    if method == "__call__" and not kwargs:
        if ufunc is np.matmul:
            return matmul(*inputs)
        op = UFUNCS.get(ufunc)
        if op is not None and len(inputs) == 2:
            return binary(op, *inputs)
        if op is not None:
            return unary(op, inputs[0])
    called = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    outs = kwargs.get("out") or ()
    if _requires_grad((*inputs, *outs)):
        raise TypeError(f"{called}{' with ' + ', '.join(kwargs) if kwargs else ''} is not "
                        "recorded on Tensors that require grad; use the Tensor operators, "
                        "methods and rv. functions, or .detach() the tensors first")
    if outs:
        kwargs = {**kwargs, "out": tuple(plain(o) for o in outs)}
    result = getattr(ufunc, method)(*(plain(i) for i in inputs), **kwargs)
    if outs:
        return outs[0] if len(outs) == 1 else outs
    if isinstance(result, tuple):
        return tuple(Tensor(r) for r in result)
    return Tensor(result)
