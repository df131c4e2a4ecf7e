"""The `Tensor` class (docs/api.md §4): its array, its autograd state, and how Tensors are made.

A Tensor wraps a NumPy array and, when it requires grad, the graph node that produced it
(`grad_fn`; None for leaves). This module is the class's state and what reads and sets it:
the array protocol, `requires_grad`, `.grad`, hooks, pickling and copying, and the
functions that make Tensors (`wrap`, `tensor`, `run_kernel`). It lies below the modules
that compute with Tensors and make new ones (`recorded_ops.py`, `view_ops.py`,
`inplace.py`, the tape, `autograd_api.py`); `tensor.py`, above them, gives the class the
methods that are their functions (`x + y`, `x.sum()`, `x.add_(y)`, `x.backward()`), so
import `Tensor` from `tensor.py` wherever a program's Tensors are made:

    t = wrap(np.ones(3))           # a leaf that does not require grad, no copy

Dtypes follow NumPy: Python floats give float64, Python ints int64; float tensors (float64,
float32, float16, and ml_dtypes.bfloat16) can require grad. bf16/f16 tensors compute as
torch's: each op in f32, its result rounded to the tensor's dtype.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from reverie.runtime.native.kernel_protocol import CompiledKernel
from reverie.runtime.tensors import grad_mode, graph
from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors.operator_kernels import FLOAT_KINDS, REVERIE_DTYPES, reverie_dtype

if TYPE_CHECKING:
    from reverie.runtime.tensors.graph import GraphNode, RemovableHandle

DTYPE_NAMES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
               "i64": np.int64, "bool": np.bool_}


class Tensor:
    """A NumPy array with an optional autograd history (its operators, views, in-place
    writes and `backward` are `TensorMethods`, which `tensor.py` gives it)."""

    __slots__ = ("_data", "_requires_grad", "_grad", "grad_fn", "_output_index",
                 "_version_counter", "_hooks", "_view_of", "_inference", "__weakref__")
    # `_version_counter`: None or the `inplace.Version` shared with the tensors that share
    # this one's memory (views); `_hooks`: a leaf's `graph.LeafHooks`, else None;
    # `_view_of`: for a view recorded in the graph, its memory's version when it was taken;
    # `_inference`: set (True) only on tensors made in `rv.inference_mode`, unset otherwise
    __hash__ = object.__hash__  # by identity, as torch's, although `==` is elementwise

    def __init__(self, data: object, requires_grad: bool = False) -> None:
        self._data = np.asarray(data._data if isinstance(data, Tensor) else data)
        if self._data.dtype not in REVERIE_DTYPES:
            reverie_dtype(self._data.dtype)  # the TypeError that names the dtypes
        self._requires_grad = False
        self._grad: Tensor | None = None
        self.grad_fn: GraphNode | None = None
        self._output_index = 0
        self._version_counter = self._hooks = self._view_of = None
        _mark_inference(self)
        if requires_grad is not False:
            _check_flag(requires_grad, "Tensor")
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

    def numpy(self, force: bool = False) -> np.ndarray:
        """The wrapped array (shared, not copied). A tensor that requires grad raises, as
        torch's: an array cannot carry the graph (`.detach().numpy()`, or `force=True`,
        the same array; allowed under `rv.no_grad()`, as torch's)."""
        if self._requires_grad and not force and grad_mode.grad_enabled():
            raise RuntimeError("can't call numpy() on a tensor that requires grad: NumPy "
                               "would drop its graph; use tensor.detach().numpy() instead")
        return self._data

    def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python number."""
        return self._data.item()

    def __array__(self, dtype: object = None, copy: bool | None = None) -> np.ndarray:
        if self._requires_grad:  # np.asarray(t), np.where(t > 0, t, 0), ...
            self.numpy()  # the RuntimeError unless under no_grad
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
        if value is not True and value is not False:
            raise RuntimeError(f"requires_grad must be a bool (True or False), not "
                               f"{type(value).__name__}")
        if self.grad_fn is not None:
            raise RuntimeError("requires_grad can only be changed on leaf tensors; use "
                               ".detach() to get a tensor outside the graph")
        if value:
            _check_can_require_grad(self._data.dtype)
            if self.is_inference() and not grad_mode.inference_mode_enabled():
                raise RuntimeError("setting requires_grad=True on an inference tensor (made "
                                   "in rv.inference_mode) outside inference mode is not "
                                   "allowed; make a clone() of it outside first")
        self._requires_grad = value

    @requires_grad.deleter
    def requires_grad(self) -> None:
        raise RuntimeError("requires_grad cannot be deleted; set it to False instead")

    def is_inference(self) -> bool:
        """Whether this tensor was made inside `rv.inference_mode` (torch's)."""
        return getattr(self, "_inference", False)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self) -> Tensor | None:
        if self._grad is None and self.grad_fn is not None and not self.retains_grad:
            warnings.warn("reading .grad of a non-leaf tensor: it is None, because backward() "
                          "fills .grad of leaves only; call .retain_grad() on it first, pass "
                          "it in backward(inputs=...) or use rv.grad(output, this_tensor)",
                          UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            _check_assigned_grad(self, value)
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set `requires_grad` of this leaf in place and return it (torch's: on a computed
        tensor, which requires grad already, `requires_grad_()` does nothing)."""
        _check_flag(requires_grad, "requires_grad_()")
        if requires_grad and self.grad_fn is not None:
            return self
        self.requires_grad = requires_grad
        return self

    def clone(self) -> Tensor:
        """A copy of this tensor in new memory, recorded (the gradient passes unchanged)."""
        return run_kernel(ops_kernels.cast_kernel(self, self._data.dtype), self)

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's memory has had (torch's `_version`)."""
        counter = self._version_counter
        return 0 if counter is None else counter.value

    # ------------------------------------------------------------ hooks (graph.py)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """`hook(grad)` runs when this tensor's gradient is computed; a Tensor it returns
        replaces the gradient. Returns a handle whose `remove()` unregisters it."""
        return graph.add_hook(self._tensor_hooks(), hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]
                                           ) -> RemovableHandle:
        """`hook(tensor)` runs after backward() accumulated into this leaf's `.grad`."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors: backward() accumulates into leaves only")
        self._check_requires_grad("register_post_accumulate_grad_hook")
        return graph.add_hook(graph.leaf_hooks(self).post_accumulate, hook)

    def retain_grad(self) -> None:
        """Fill `.grad` of this non-leaf tensor in backward passes too (a no-op on leaves)."""
        self._check_requires_grad("retain_grad")
        if self.grad_fn is not None:
            graph.retain(self)

    @property
    def retains_grad(self) -> bool:
        """Whether `.grad` of this non-leaf tensor is filled (`retain_grad()`; it follows
        the tensor through in-place writes)."""
        return graph.retains(self)

    def _tensor_hooks(self) -> dict[int, graph.Hook]:
        """The hooks run on this tensor's gradient: on its node for a computed tensor, on
        the tensor for a leaf."""
        self._check_requires_grad("register_hook")
        if self.grad_fn is None:
            return graph.leaf_hooks(self).pre
        return self.grad_fn.extra().tensor_hooks.setdefault(self._output_index, {})

    def _check_requires_grad(self, what: str) -> None:
        if not self._requires_grad:
            raise RuntimeError(f"cannot {what} on a tensor that doesn't require grad; "
                               "create it with requires_grad=True")

    def astype(self, dtype: object) -> Tensor:
        """This tensor converted to `dtype`, recorded (gradients convert back)."""
        if np.dtype(dtype) == self.dtype:
            return self
        return run_kernel(ops_kernels.cast_kernel(self, np.dtype(dtype)), self)

    # ------------------------------------------------------------ views and memory
    # (views share memory and version counter with their base: inplace.py)

    @property
    def _base(self) -> Tensor | None:
        """The tensor whose memory this view shares (torch's `_base`); None if no view."""
        info = self._view_of
        return None if info is None else info.base

    def _is_view(self) -> bool:
        """Whether this tensor is a view of another's memory (torch's `_is_view`)."""
        return self._view_of is not None

    @property
    def data(self) -> Tensor:
        """This tensor's memory outside the graph with a version counter of its own:
        writes through it are hidden from autograd (torch's `.data`; `detach()` is safer)."""
        return wrap(self._data)

    @data.setter
    def data(self, value: Tensor) -> None:
        """Make this tensor hold `value`'s memory (shape may change), keeping its graph
        state and version counter, as torch's `x.data = value`."""
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(value).__name__}")
        if self._requires_grad and value.dtype not in FLOAT_KINDS:
            _check_can_require_grad(value.dtype)
        self._data = value._data

    def __reduce_ex__(self, protocol: object) -> tuple[object, tuple[np.ndarray, bool]]:
        """Pickled as its data and `requires_grad` (any protocol); unpickled as a leaf
        (also by `copy.copy`), without `.grad`, as torch's."""
        return _rebuild, (self._data, self._requires_grad)

    def __deepcopy__(self, memo: dict[int, object]) -> Tensor:
        """A leaf with copies of the data and of `.grad` (torch's); a computed tensor
        raises, since the copy could not keep its graph."""
        if self.grad_fn is not None:
            raise RuntimeError("only leaf tensors can be deep-copied: this one was computed "
                               "and its copy would lose the graph; deep-copy "
                               "tensor.detach() instead")
        duplicate = Tensor(self._data.copy(), self._requires_grad)
        memo[id(self)] = duplicate
        duplicate._grad = copy.deepcopy(self._grad, memo)
        return duplicate
_new_object = object.__new__  # what `Tensor.__new__` is, without looking it up


def wrap(array: np.ndarray, grad_fn: GraphNode | None = None, index: int = 0) -> Tensor:
    """A Tensor around `array` without copying or checks (requires grad iff `grad_fn`)."""
    tensor = _new_object(Tensor)
    tensor._data = array
    tensor._requires_grad = grad_fn is not None
    tensor._grad = None
    tensor.grad_fn = grad_fn
    tensor._output_index = index
    tensor._version_counter = tensor._hooks = tensor._view_of = None
    return tensor


def plain(value: object) -> object:
    """The array behind a Tensor (anything else unchanged)."""
    return value._data if isinstance(value, Tensor) else value


def _rebuild(data: np.ndarray, requires_grad: bool) -> Tensor:
    """A pickled Tensor, unpickled: a leaf, as torch's."""
    return Tensor(data, requires_grad)


def _check_assigned_grad(tensor: Tensor, grad: object) -> None:
    """The errors torch gives for `tensor.grad = grad` (type, itself, dtype, shape)."""
    if not isinstance(grad, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                        f"{type(grad).__name__}")
    if grad is tensor:
        raise RuntimeError("can't assign a tensor as its own grad")
    if grad.dtype != tensor.dtype:
        raise RuntimeError(f"attempting to assign a gradient with dtype {grad.dtype} to a "
                           f"tensor of dtype {tensor.dtype}; they must match")
    if grad.shape != tensor.shape:
        raise RuntimeError(f"attempting to assign a gradient of shape {grad.shape} to a "
                           f"tensor of shape {tensor.shape}; they must match")


def run_kernel(kernel: CompiledKernel, *args: object) -> Tensor:
    """Call an operator kernel and return its result as a Tensor (recorded when needed)."""
    result = kernel(*args)
    if isinstance(result, Tensor):
        return result
    return _mark_inference(wrap(np.asarray(result)))


def _mark_inference(tensor: Tensor) -> Tensor:
    """`tensor`, marked as an inference tensor when made inside `rv.inference_mode`."""
    if grad_mode.inference_mode_enabled():
        tensor._inference = True
    return tensor


def _check_flag(value: object, caller: str) -> None:
    """TypeError unless `requires_grad` given to `caller` is True or False (torch's: 1,
    None and NumPy bools are refused)."""
    if value is not True and value is not False:
        raise TypeError(f"{caller}: requires_grad must be a bool (True or False), not "
                        f"{type(value).__name__}")


def _check_can_require_grad(dtype: np.dtype) -> None:
    """RuntimeError unless tensors of `dtype` can require grad (the float dtypes)."""
    if dtype not in FLOAT_KINDS and np.dtype(dtype).name == "bfloat16":
        reverie_dtype(dtype)  # its first sight enters it in FLOAT_KINDS
    if dtype not in FLOAT_KINDS:
        raise RuntimeError(f"only float tensors (float64, float32, bfloat16, float16) can "
                           f"require gradients, this one is {dtype}; create it with a float "
                           f"dtype")


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
    result = _mark_inference(wrap(array))
    if requires_grad is not False:
        _check_flag(requires_grad, "tensor()")
        if array.dtype not in FLOAT_KINDS:
            _check_can_require_grad(array.dtype)  # the RuntimeError
        result._requires_grad = True
    elif array.dtype not in REVERIE_DTYPES:
        reverie_dtype(array.dtype)  # the TypeError that names the dtypes
    return result
