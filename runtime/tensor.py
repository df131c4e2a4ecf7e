"""`rv.Tensor` and `rv.tensor` (SPEC §3.3): NumPy arrays that record compiled calls.

A Tensor wraps a NumPy array and, when it requires grad, the graph node that produced it
(`grad_fn`; None for leaves). Its operators run small compiled kernels
(`ops_kernels.py`), so `x * y + 1` is two recorded kernel calls that `rv.grad` runs
backwards through their compiled VJPs:

    x = rv.tensor([1.0, 2.0], requires_grad=True)    # float64, like NumPy
    y = (x * x).sum()
    rv.grad(y, x)                                    # (tensor([2., 4.]),)

Dtypes follow NumPy: Python floats give float64, Python ints int64; only float32 and
float64 tensors can require grad.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import ops_kernels
from .kernel_protocol import CompiledKernel
from .ops_kernels import reverie_dtype

if TYPE_CHECKING:
    from .tape import Node

FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))
DTYPE_NAMES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
               "bool": np.bool_}


class Tensor:
    """A NumPy array with an optional autograd history."""

    __slots__ = ("_data", "_requires_grad", "_grad", "grad_fn", "_output_index")
    __array_ufunc__ = None  # `array + tensor` defers to Tensor.__radd__ and is recorded

    def __init__(self, data: object, requires_grad: bool = False) -> None:
        self._data = np.asarray(data._data if isinstance(data, Tensor) else data)
        reverie_dtype(self._data.dtype)
        self._requires_grad = False
        self._grad: Tensor | None = None
        self.grad_fn: Node | None = None
        self._output_index = 0
        self.requires_grad = requires_grad

    # ------------------------------------------------------------ array protocol

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    def numpy(self) -> np.ndarray:
        """The wrapped array (shared, not copied)."""
        return self._data

    def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python number."""
        return self._data.item()

    def __array__(self, dtype: object = None, copy: bool | None = None) -> np.ndarray:
        if copy:
            return np.array(self._data, dtype=dtype)
        return self._data if dtype is None else self._data.astype(dtype, copy=False)

    def __float__(self) -> float:
        return float(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        body = np.array2string(self._data, separator=", ", prefix="tensor(")
        extras = [] if self._data.dtype in (np.float64, np.int64) else [f"dtype={self.dtype}"]
        if self.grad_fn is not None:
            extras.append(f"grad_fn={self.grad_fn}")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({', '.join([body, *extras])})"

    # ------------------------------------------------------------ autograd state

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None:
            raise RuntimeError("requires_grad can only be changed on leaf tensors; use "
                               ".detach() to get a tensor outside the graph")
        if value and self._data.dtype not in FLOAT_KINDS:
            raise RuntimeError(f"only float32 and float64 tensors can require gradients, this "
                               f"one is {self.dtype}; create it with a float dtype")
        self._requires_grad = bool(value)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self) -> Tensor | None:
        if self._grad is None and self.grad_fn is not None:
            warnings.warn("reading .grad of a non-leaf tensor: it is None, because backward() "
                          "fills .grad of leaves only; pass this tensor in backward(inputs=...) "
                          "or use rv.grad(output, this_tensor) to get its gradient",
                          UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f".grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"cannot assign a gradient of shape {value.shape} to a "
                                   f"tensor of shape {self.shape}; they must match")
        self._grad = value

    def detach(self) -> Tensor:
        """A tensor sharing this data, outside the graph (requires_grad False)."""
        return wrap(self._data)

    def backward(self, gradient: Tensor | np.ndarray | None = None,
                 retain_graph: bool | None = None, create_graph: bool = False,
                 inputs: Tensor | Sequence[Tensor] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of the leaves (see `rv.backward`)."""
        from .autograd import backward

        backward(self, gradient, retain_graph, create_graph, inputs)

    # ------------------------------------------------------------ recorded operators

    def __add__(self, other: object) -> Tensor:
        return _binary("add", self, other)

    def __radd__(self, other: object) -> Tensor:
        return _binary("add", other, self)

    def __sub__(self, other: object) -> Tensor:
        return _binary("sub", self, other)

    def __rsub__(self, other: object) -> Tensor:
        return _binary("sub", other, self)

    def __mul__(self, other: object) -> Tensor:
        return _binary("mul", self, other)

    def __rmul__(self, other: object) -> Tensor:
        return _binary("mul", other, self)

    def __truediv__(self, other: object) -> Tensor:
        return _binary("div", self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        return _binary("div", other, self)

    def __pow__(self, other: object) -> Tensor:
        return _binary("pow", self, other)

    def __rpow__(self, other: object) -> Tensor:
        return _binary("pow", other, self)

    def __matmul__(self, other: object) -> Tensor:
        return _matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        return _matmul(other, self)

    def __neg__(self) -> Tensor:
        return run_kernel(ops_kernels.neg_kernel(self), self)

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis` (all axes by default), recorded."""
        return run_kernel(ops_kernels.reduce_kernel("sum", self, axis, keepdims), self)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis` (all axes by default), recorded."""
        return run_kernel(ops_kernels.reduce_kernel("mean", self, axis, keepdims), self)

    def astype(self, dtype: object) -> Tensor:
        """This tensor converted to `dtype`, recorded (gradients convert back)."""
        if np.dtype(dtype) == self.dtype:
            return self
        return run_kernel(ops_kernels.cast_kernel(self, np.dtype(dtype)), self)


def wrap(array: np.ndarray, grad_fn: Node | None = None, index: int = 0) -> Tensor:
    """A Tensor around `array` without copying or checks (requires grad iff `grad_fn`)."""
    tensor = Tensor.__new__(Tensor)
    tensor._data = array
    tensor._requires_grad = grad_fn is not None
    tensor._grad = None
    tensor.grad_fn = grad_fn
    tensor._output_index = index
    return tensor


def run_kernel(kernel: CompiledKernel, *args: object) -> Tensor:
    """Call an operator kernel and return its result as a Tensor (recorded when needed)."""
    result = kernel(*args)
    return result if isinstance(result, Tensor) else wrap(np.asarray(result))


def _operand(value: object) -> object:
    """A Tensor, NumPy array or Python scalar operand; NotImplemented for anything else."""
    if isinstance(value, Tensor | np.ndarray) or (
            isinstance(value, int | float) and not isinstance(value, np.generic)):
        return value
    array = np.asarray(value)
    return NotImplemented if array.dtype == object else array


def _binary(op: str, a: object, b: object) -> Tensor:
    """`a <op> b` through its compiled kernel (NotImplemented for foreign operands)."""
    a, b = _operand(a), _operand(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    return run_kernel(ops_kernels.binary_kernel(op, a, b), a, b)


def _matmul(a: object, b: object) -> Tensor:
    """`a @ b` through its compiled kernel (NotImplemented for foreign operands)."""
    a, b = _operand(a), _operand(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    if not hasattr(a, "shape") or not hasattr(b, "shape"):
        raise ValueError("'@' does not take scalars; use '*'")
    return run_kernel(ops_kernels.matmul_kernel(a, b), a, b)


def tensor(data: object, dtype: object = None, requires_grad: bool = False) -> Tensor:
    """A new Tensor holding a copy of `data` (NumPy dtype rules: Python floats → float64)."""
    source = data._data if isinstance(data, Tensor) else data
    dtype = DTYPE_NAMES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    return Tensor(np.array(source, dtype=dtype), requires_grad=requires_grad)
