"""Tensor operations that compute a new Tensor by one compiled kernel each (docs/api.md §4).

Consumes Tensors (and NumPy arrays or Python scalars beside them) and produces Tensors,
by running the kernels of `operator_kernels.py` (arithmetic, comparisons, `@`, built-ins,
reductions) and `shape_kernels.py` (gathers, transposes, reshapes) through `run_kernel`,
so that a call on Tensors that require grad records itself and differentiates through the
kernel's compiled VJP, to any order. Comparisons run on the arrays: their bool results
never require grad. Nothing here shares memory with its operands: views are
`view_ops.py`'s, in-place writes `inplace.py`'s, and both build on these functions:

    binary("mul", x, 2.0)          # x * 2, recorded when x requires grad

NumPy ufuncs on Tensors (`apply_ufunc`, behind `Tensor.__array_ufunc__`) map onto the op
table's rows by their NumPy function (`UFUNCS`: `np.add` is the row `add`, `np.exp` the
row `exp`); any other ufunc, method or `out=` runs in NumPy on the arrays when nothing
requires grad, and is a TypeError that says what to do when something does.
"""

from __future__ import annotations

import numpy as np

from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors import shape_kernels as ops_shape
from reverie.runtime.tensors.grad_mode import grad_enabled
from reverie.runtime.tensors.indexing import index_plan
from reverie.runtime.tensors.tensor_core import Tensor, plain, run_kernel, wrap

Step = tuple[str, object]  # ("getitem", basic index) | ("transpose", axes) | ("reshape", shape)

# NumPy's ufuncs that are rows of the op table, by row name (`np.add` -> "add")
UFUNCS: dict[np.ufunc, str] = {
    row.numpy: name for name, row in ELEMENTWISE.items()
    if isinstance(row.numpy, np.ufunc)
    and (name in ops_kernels.BINARY_OPS or name in ops_kernels.UNARY_BUILTINS or name == "neg")}


def _operand(value: object) -> object:
    """A Tensor, NumPy array or Python scalar operand; NotImplemented for anything else."""
    if isinstance(value, Tensor | np.ndarray) or (
            isinstance(value, int | float) and not isinstance(value, np.generic)):
        return value
    array = np.asarray(value)
    return NotImplemented if array.dtype == object else array


def binary(op: str, a: object, b: object, nan_to_both: bool = False) -> Tensor:
    """`a <op> b` (an op of `ops_kernels.BINARY_OPS`) through its compiled kernel;
    NotImplemented for foreign operands. `nan_to_both`: torch.maximum's gradient at NaN
    (`ops_kernels.NAN_TO_BOTH`)."""
    a, b = _operand(a), _operand(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    kernel = ops_kernels.binary_kernel(op, a, b, nan_to_both)
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
    """`t` limited to [low, high] (either may be None), recorded by one kernel with torch's
    `clamp` gradient (`ops_kernels.clamp_kernel`)."""
    if low is None and high is None:
        return t
    operands = [_operand(v) for v in (t, low, high) if v is not None]
    if NotImplemented in [o if o is NotImplemented else None for o in operands]:
        raise TypeError("clamp() takes Tensors, NumPy arrays or numbers as bounds")
    return run_kernel(ops_kernels.clamp_kernel(*operands[:1], low, high), *operands)


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


def reshape_copy(t: Tensor, target: tuple[int, ...]) -> Tensor:
    """`t` in `target` shape through its compiled kernel (a copy), recorded."""
    if target == t._data.shape:
        return t
    return run_kernel(ops_shape.reshape_kernel(t._data.dtype, t._data.shape, target), t)


def gather(t: Tensor, index: object) -> Tensor:
    """`t[index]` with NumPy's basic and integer- or bool-array indexing, as one gather."""
    plan = index_plan(t._data.shape, index)
    if not plan.axes:  # a rank-0 tensor: `t[()]`, `t[None]`
        return reshape_copy(t, plan.final_shape)
    if 0 in plan.final_shape:  # nothing to read (and no gradient to give back)
        return wrap(np.zeros(plan.final_shape, t._data.dtype))
    kernel = ops_shape.index_kernel(t._data.dtype, t._data.ndim, plan)
    result = run_kernel(kernel, t, *plan.values)
    return reshape_copy(result, plan.final_shape)


def record_step(t: Tensor, step: Step) -> Tensor:
    """A new Tensor holding what a view's `step` reads from `t`, computed by its compiled
    kernel (recorded when `t` requires grad): the history of views (`inplace.py`)."""
    kind, arg = step
    if kind == "getitem":
        result = gather(t, arg)
    elif kind == "transpose":
        result = run_kernel(ops_shape.transpose_kernel(t._data.dtype, arg), t)
    else:
        result = reshape_copy(t, arg)
    if result is t:  # a step that changes nothing: the copy kernel records it
        result = run_kernel(ops_kernels.cast_kernel(t, t._data.dtype), t)
    return result


def record_steps(t: Tensor, steps: tuple[Step, ...]) -> Tensor:
    """`record_step` of each of `steps` in turn, from `t`."""
    for step in steps:
        t = record_step(t, step)
    return t


def builtin_doc(op: str) -> str:
    """The docstring of elementwise built-in `op` as a function and as a method."""
    row = ELEMENTWISE[op]
    maths = (f"({row.derivative.maths})" if row.derivative
             else f"(no derivative: {row.no_derivative})")
    return f"Elementwise `{op}` of a Tensor, recorded {maths}."


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
