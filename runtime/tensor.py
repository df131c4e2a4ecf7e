"""`rv.Tensor` and `rv.tensor` (SPEC §3.3): NumPy arrays that record compiled calls.

A Tensor wraps a NumPy array and, when it requires grad, the graph node that produced it
(`grad_fn`; None for leaves). Its operators run small compiled kernels
(`ops_kernels.py`), so `x * y + 1` is two recorded kernel calls that `rv.grad` runs
backwards through their compiled VJPs:

    x = rv.tensor([1.0, 2.0], requires_grad=True)    # float64, like NumPy
    y = (x * x).sum()
    rv.grad(y, x)                                    # (tensor([2., 4.]),)

Dtypes follow NumPy: Python floats give float64, Python ints int64; only float32 and
float64 tensors can require grad. Comparisons give bool tensors, which never require grad.
Beyond the operators (this file), `tensor_ops.py` implements indexing, shapes, reductions,
the elementwise built-ins (as methods, `t.exp()`, and as `rv.exp(t)`) and NumPy ufuncs on
Tensors (`np.exp(t)`), each a recorded compiled kernel too.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import ops_kernels
from .kernel_protocol import CompiledKernel
from .ops_kernels import REVERIE_DTYPES, reverie_dtype

if TYPE_CHECKING:
    from .tape import Node

# float64 first: `dtype in FLOAT_KINDS` is then one identity check in the common case
FLOAT_KINDS = (np.dtype(np.float64), np.dtype(np.float32))
DTYPE_NAMES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
               "bool": np.bool_}


class Tensor:
    """A NumPy array with an optional autograd history."""

    __slots__ = ("_data", "_requires_grad", "_grad", "grad_fn", "_output_index")
    __hash__ = object.__hash__  # by identity, as torch's, although `==` is elementwise

    def __init__(self, data: object, requires_grad: bool = False) -> None:
        self._data = np.asarray(data._data if isinstance(data, Tensor) else data)
        if self._data.dtype not in REVERIE_DTYPES:
            reverie_dtype(self._data.dtype)  # the TypeError that names the dtypes
        self._requires_grad = False
        self._grad: Tensor | None = None
        self.grad_fn: Node | None = None
        self._output_index = 0
        if requires_grad:
            self.requires_grad = True

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
        return float(self._data.item())

    def __int__(self) -> int:
        return int(self._data.item())

    def __bool__(self) -> bool:
        return bool(self._data)

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
        if value:
            _check_can_require_grad(self._data.dtype)
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

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set `requires_grad` of this leaf in place and return it (torch's)."""
        self.requires_grad = requires_grad
        return self

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
    # (each a compiled kernel: see tensor_ops.py)

    def __add__(self, other: object) -> Tensor:
        return tensor_ops.binary("add", self, other)

    def __radd__(self, other: object) -> Tensor:
        return tensor_ops.binary("add", other, self)

    def __sub__(self, other: object) -> Tensor:
        return tensor_ops.binary("sub", self, other)

    def __rsub__(self, other: object) -> Tensor:
        return tensor_ops.binary("sub", other, self)

    def __mul__(self, other: object) -> Tensor:
        return tensor_ops.binary("mul", self, other)

    def __rmul__(self, other: object) -> Tensor:
        return tensor_ops.binary("mul", other, self)

    def __truediv__(self, other: object) -> Tensor:
        return tensor_ops.binary("div", self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        return tensor_ops.binary("div", other, self)

    def __pow__(self, other: object) -> Tensor:
        return tensor_ops.binary("pow", self, other)

    def __rpow__(self, other: object) -> Tensor:
        return tensor_ops.binary("pow", other, self)

    def __matmul__(self, other: object) -> Tensor:
        return tensor_ops.matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        return tensor_ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return run_kernel(ops_kernels.neg_kernel(self), self)

    def __abs__(self) -> Tensor:
        return tensor_ops.unary("abs", self)

    # comparisons: bool tensors, never recorded (their derivative is zero everywhere)

    def __lt__(self, other: object) -> Tensor:
        return tensor_ops.binary("lt", self, other)

    def __le__(self, other: object) -> Tensor:
        return tensor_ops.binary("le", self, other)

    def __gt__(self, other: object) -> Tensor:
        return tensor_ops.binary("gt", self, other)

    def __ge__(self, other: object) -> Tensor:
        return tensor_ops.binary("ge", self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return tensor_ops.binary("eq", self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return tensor_ops.binary("ne", self, other)

    # indexing, shapes, reductions

    def __getitem__(self, index: object) -> Tensor:
        """NumPy basic and integer-array (and bool-array) indexing, recorded."""
        return tensor_ops.getitem(self, index)

    @property
    def T(self) -> Tensor:  # noqa: N802 -- NumPy's and torch's name
        """The axes reversed, recorded."""
        return tensor_ops.transpose(self, ())

    def transpose(self, *axes: int | tuple[int, ...]) -> Tensor:
        """Axes permuted: none reverses them and a full permutation permutes them (NumPy);
        two axes of a tensor of rank other than 2 are swapped (torch). Recorded."""
        return tensor_ops.transpose(self, axes)

    def reshape(self, *shape: int | tuple[int, ...]) -> Tensor:
        """The same elements in C order in `shape` (one axis may be -1), recorded."""
        return tensor_ops.reshape(self, shape)

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis` (all axes by default), recorded."""
        return tensor_ops.reduce("sum", self, axis, keepdims)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis` (all axes by default), recorded."""
        return tensor_ops.reduce("mean", self, axis, keepdims)

    def max(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Largest element over `axis` (all axes by default), recorded."""
        return tensor_ops.reduce("max", self, axis, keepdims)

    def min(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Smallest element over `axis` (all axes by default), recorded."""
        return tensor_ops.reduce("min", self, axis, keepdims)

    def astype(self, dtype: object) -> Tensor:
        """This tensor converted to `dtype`, recorded (gradients convert back)."""
        if np.dtype(dtype) == self.dtype:
            return self
        return run_kernel(ops_kernels.cast_kernel(self, np.dtype(dtype)), self)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object,
                        **kwargs: object) -> object:
        """`np.exp(t)`, `array + t`: a NumPy ufunc on Tensors, recorded where Reverie has
        the op (`tensor_ops.apply_ufunc`)."""
        return tensor_ops.apply_ufunc(ufunc, method, inputs, kwargs)


_new_object = object.__new__  # what `Tensor.__new__` is, without looking it up


def wrap(array: np.ndarray, grad_fn: Node | None = None, index: int = 0) -> Tensor:
    """A Tensor around `array` without copying or checks (requires grad iff `grad_fn`)."""
    tensor = _new_object(Tensor)
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


def _check_can_require_grad(dtype: np.dtype) -> None:
    """RuntimeError unless tensors of `dtype` can require grad (float32, float64)."""
    if dtype not in FLOAT_KINDS:
        raise RuntimeError(f"only float32 and float64 tensors can require gradients, this "
                           f"one is {dtype}; create it with a float dtype")


def tensor(data: object, dtype: object = None, requires_grad: bool = False) -> Tensor:
    """A new Tensor holding a copy of `data` (NumPy dtype rules: Python floats → float64)."""
    if type(data) is not np.ndarray and isinstance(data, Tensor):  # (a failing isinstance
        # costs more than the type check that skips it for arrays)
        data = data._data
    if dtype is None:
        array = np.array(data)
    else:
        array = np.array(data, dtype=DTYPE_NAMES.get(dtype, dtype) if isinstance(dtype, str)
                         else dtype)
    result = wrap(array)
    if requires_grad:
        if array.dtype not in FLOAT_KINDS:
            _check_can_require_grad(array.dtype)  # the RuntimeError
        result._requires_grad = True
    elif array.dtype not in REVERIE_DTYPES:
        reverie_dtype(array.dtype)  # the TypeError that names the dtypes
    return result


from . import tensor_ops  # noqa: E402 -- it builds on Tensor, which uses it at call time
