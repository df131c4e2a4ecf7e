"""`rv.Tensor` and `rv.tensor` (docs/api.md §4): NumPy arrays that record compiled calls.

A Tensor wraps a NumPy array and, when it requires grad, the graph node that produced it
(`grad_fn`; None for leaves). Its operators run small compiled kernels
(`operator_kernels.py`), so `x * y + 1` is two recorded kernel calls that `rv.grad` runs
backwards through their compiled VJPs:

    x = rv.tensor([1.0, 2.0], requires_grad=True)    # float64, like NumPy
    y = (x * x).sum()
    rv.grad(y, x)                                    # (tensor([2., 4.]),)

The class is defined in `tensor_core.py` (its array and autograd state, and the functions
that make Tensors), below the modules that compute with Tensors and make new ones:
`recorded_ops.py` (operators, reductions, the elementwise built-ins, NumPy ufuncs),
`view_ops.py` (indexing, transposes, reshapes), `inplace.py` (in-place writes) and
`autograd_api.py` (`backward`). This module, above them, gives the class the methods that
are their functions (`TensorMethods`), so the `Tensor` imported from here is complete:
import it from here wherever a program's Tensors are made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import FunctionType

import numpy as np

from reverie.runtime.tensors import autograd_api, inplace, recorded_ops, torch_functions, view_ops
from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors.tensor_core import Tensor, tensor

__all__ = ["Tensor", "tensor"]  # (`tensor` is tensor_core.py's, served from here)


class TensorMethods:
    """The methods of `Tensor` that run other modules' functions; `give_methods` copies
    them onto the class. Never instantiated."""

    # ------------------------------------------------------------ graph (inplace.py)

    def detach(self) -> Tensor:
        """A tensor sharing this data and its version counter, outside the graph
        (requires_grad False): an in-place write to either shows in both."""
        return inplace.alias(self, self._data)

    def detach_(self) -> Tensor:
        """Take this tensor out of the graph, in place: it becomes a leaf that does not
        require grad (torch's; not allowed on a view recorded in the graph)."""
        return inplace.detach_(self)

    # ------------------------------------------------------------ autograd (autograd_api.py)

    def backward(self, gradient: Tensor | np.ndarray | None = None,
                 retain_graph: bool | None = None, create_graph: bool = False,
                 inputs: Tensor | Sequence[Tensor] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of the leaves (see `rv.backward`)."""
        autograd_api.backward(self, gradient, retain_graph, create_graph, inputs)

    # ------------------------------------------------------------ recorded operators
    # (each a compiled kernel: recorded_ops.py)

    def __add__(self, other: object) -> Tensor:
        return recorded_ops.binary("add", self, other)

    def __radd__(self, other: object) -> Tensor:
        return recorded_ops.binary("add", other, self)

    def __sub__(self, other: object) -> Tensor:
        return recorded_ops.binary("sub", self, other)

    def __rsub__(self, other: object) -> Tensor:
        return recorded_ops.binary("sub", other, self)

    def __mul__(self, other: object) -> Tensor:
        return recorded_ops.binary("mul", self, other)

    def __rmul__(self, other: object) -> Tensor:
        return recorded_ops.binary("mul", other, self)

    def __truediv__(self, other: object) -> Tensor:
        return recorded_ops.binary("div", self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        return recorded_ops.binary("div", other, self)

    def __pow__(self, other: object) -> Tensor:
        return recorded_ops.binary("pow", self, other)

    def __rpow__(self, other: object) -> Tensor:
        return recorded_ops.binary("pow", other, self)

    def __matmul__(self, other: object) -> Tensor:
        return recorded_ops.matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        return recorded_ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return recorded_ops.unary("neg", self)

    def __abs__(self) -> Tensor:
        return recorded_ops.unary("abs", self)

    # comparisons: bool tensors, never recorded (their derivative is zero everywhere)

    def __lt__(self, other: object) -> Tensor:
        return recorded_ops.binary("lt", self, other)

    def __le__(self, other: object) -> Tensor:
        return recorded_ops.binary("le", self, other)

    def __gt__(self, other: object) -> Tensor:
        return recorded_ops.binary("gt", self, other)

    def __ge__(self, other: object) -> Tensor:
        return recorded_ops.binary("ge", self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return recorded_ops.binary("eq", self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return recorded_ops.binary("ne", self, other)

    # indexing, shapes, reductions

    def __getitem__(self, index: object) -> Tensor:
        """NumPy basic and integer-array (and bool-array) indexing, recorded."""
        return view_ops.getitem(self, index)

    @property
    def T(self) -> Tensor:  # noqa: N802 -- NumPy's and torch's name
        """The axes reversed, recorded."""
        return view_ops.transpose(self, ())

    def transpose(self, *axes: int | tuple[int, ...]) -> Tensor:
        """Axes permuted: none reverses them and a full permutation permutes them (NumPy);
        two axes of a tensor of rank other than 2 are swapped (torch). Recorded."""
        return view_ops.transpose(self, axes)

    def reshape(self, *shape: int | tuple[int, ...]) -> Tensor:
        """The same elements in C order in `shape` (one axis may be -1), recorded."""
        return view_ops.reshape(self, shape)

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis` (all axes by default), recorded."""
        return recorded_ops.reduce("sum", self, axis, keepdims)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis` (all axes by default), recorded."""
        return recorded_ops.reduce("mean", self, axis, keepdims)

    def max(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False, *,
            dim: int | None = None, keepdim: bool = False) -> object:
        """Largest element over `axis` (all axes by default; NumPy's), recorded; torch's
        `dim=` gives the (values, indices) of `rv.max(t, dim)`, and a Tensor the
        elementwise `rv.maximum`."""
        return self._extremum("max", axis, keepdims, dim, keepdim)

    def min(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False, *,
            dim: int | None = None, keepdim: bool = False) -> object:
        """Smallest element over `axis` (all axes by default; NumPy's), recorded; torch's
        `dim=` gives the (values, indices) of `rv.min(t, dim)`, and a Tensor the
        elementwise `rv.minimum`."""
        return self._extremum("min", axis, keepdims, dim, keepdim)

    def _extremum(self, op: str, axis: object, keepdims: bool, dim: int | None,
                  keepdim: bool) -> object:
        if dim is not None:
            return torch_functions.FUNCTIONS[op](self, dim, keepdim)
        if isinstance(axis, Tensor | np.ndarray):
            return torch_functions.ELEMENTWISE_FUNCTIONS[op](self, axis)
        return recorded_ops.reduce(op, self, axis, keepdims)

    def maximum(self, other: object) -> Tensor:
        """torch's `t.maximum(other)`: `rv.maximum(t, other)`."""
        return torch_functions.maximum(self, other)

    def minimum(self, other: object) -> Tensor:
        """torch's `t.minimum(other)`: `rv.minimum(t, other)`."""
        return torch_functions.minimum(self, other)

    def pow(self, exponent: object) -> Tensor:
        """torch's `t.pow(exponent)`: `t ** exponent`, recorded."""
        return torch_functions.pow(self, exponent)

    def where(self, condition: object, other: object) -> Tensor:
        """torch's `t.where(condition, other)`: `rv.where(condition, t, other)`."""
        return torch_functions.where(condition, self, other)

    def clamp(self, low: object = None, high: object = None) -> Tensor:
        """This tensor limited to [low, high] (either may be None), recorded."""
        return recorded_ops.clamp(self, low, high)

    # ------------------------------------------------------------ views (view_ops.py)

    def view(self, *shape: int | tuple[int, ...]) -> Tensor:
        """The same memory in `shape` (one axis may be -1), a view recorded as a reshape;
        RuntimeError where the layout needs a copy (use `reshape`), as torch's."""
        if len(shape) == 1 and not isinstance(shape[0], int | tuple | list):
            raise TypeError(f"view() takes a shape; reinterpreting the memory as another "
                            f"dtype ({shape[0]!r}) is not supported: use astype()")
        return view_ops.view(self, shape)

    def view_as(self, other: Tensor) -> Tensor:
        """`self.view(other.shape)`."""
        return view_ops.view(self, (other.shape,))

    # ------------------------------------------------------------ in-place (inplace.py)

    def add_(self, other: object, *, alpha: float = 1) -> Tensor:
        """`self += alpha * other` in place, recorded."""
        return inplace.binary(self, "add", other if alpha == 1 else other * alpha)

    def sub_(self, other: object, *, alpha: float = 1) -> Tensor:
        """`self -= alpha * other` in place, recorded."""
        return inplace.binary(self, "sub", other if alpha == 1 else other * alpha)

    def mul_(self, other: object) -> Tensor:
        """`self *= other` in place, recorded."""
        return inplace.binary(self, "mul", other)

    def div_(self, other: object) -> Tensor:
        """`self /= other` in place, recorded."""
        return inplace.binary(self, "div", other)

    def pow_(self, other: object) -> Tensor:
        """`self **= other` in place, recorded."""
        return inplace.binary(self, "pow", other)

    def clamp_(self, min: object = None, max: object = None) -> Tensor:  # noqa: A002
        """`self` limited to [min, max] in place, recorded (torch's names)."""
        return inplace.clamp(self, min, max)

    def zero_(self) -> Tensor:
        """Every element set to zero, in place (recorded: no gradient flows back)."""
        return inplace.setitem(self, Ellipsis, 0)

    def fill_(self, value: object) -> Tensor:
        """Every element set to `value` (a number or a rank-0 tensor), in place."""
        rank = np.ndim(value._data if isinstance(value, Tensor) else value)
        if rank:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {rank} dimensions.")
        return inplace.setitem(self, Ellipsis, value)

    def copy_(self, source: object) -> Tensor:
        """`source` (broadcast to this shape, converted to this dtype) written in place;
        the gradient flows to `source`."""
        return inplace.setitem(self, Ellipsis, source)

    def __setitem__(self, index: object, value: object) -> None:
        """`t[index] = value`: NumPy indexing, written in place and recorded."""
        inplace.setitem(self, index, value)

    def __iadd__(self, other: object) -> Tensor:
        return inplace.binary(self, "add", other)

    def __isub__(self, other: object) -> Tensor:
        return inplace.binary(self, "sub", other)

    def __imul__(self, other: object) -> Tensor:
        return inplace.binary(self, "mul", other)

    def __itruediv__(self, other: object) -> Tensor:
        return inplace.binary(self, "div", other)

    def __ipow__(self, other: object) -> Tensor:
        return inplace.binary(self, "pow", other)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object,
                        **kwargs: object) -> object:
        """`np.exp(t)`, `array + t`: a NumPy ufunc on Tensors, recorded where Reverie has
        the op (`recorded_ops.apply_ufunc`)."""
        return recorded_ops.apply_ufunc(ufunc, method, inputs, kwargs)


def give_methods(methods: type, cls: type) -> None:
    """Copy the functions and properties defined in class `methods` onto class `cls`,
    named as `cls`'s own (`Tensor.__add__`)."""
    for name, member in vars(methods).items():
        if isinstance(member, FunctionType):
            member.__qualname__ = f"{cls.__name__}.{name}"
        elif not isinstance(member, property):
            continue  # (the class's own __dict__, __doc__, ...)
        setattr(cls, name, member)


def _builtin_method(op: str) -> Callable[[Tensor], Tensor]:
    """`t.<op>()`: elementwise built-in `op` of `t`, recorded (`rv.<op>(t)`)."""
    def method(self: Tensor) -> Tensor:
        return recorded_ops.unary(op, self)

    method.__name__, method.__qualname__ = op, f"Tensor.{op}"
    method.__doc__ = recorded_ops.builtin_doc(op)
    return method


def _inplace_method(op: str) -> Callable[[Tensor], Tensor]:
    """`t.<op>_()`: the built-in written into `t` in place (`inplace.unary`)."""
    def method(self: Tensor) -> Tensor:
        return inplace.unary(self, op)

    method.__name__, method.__qualname__ = f"{op}_", f"Tensor.{op}_"
    method.__doc__ = f"`{op}` of this tensor written into it in place, recorded."
    return method


give_methods(TensorMethods, Tensor)
for _name in ops_kernels.UNARY_BUILTINS:
    setattr(Tensor, _name, _builtin_method(_name))
for _name in (*ops_kernels.UNARY_BUILTINS, "neg"):
    setattr(Tensor, f"{_name}_", _inplace_method(_name))
