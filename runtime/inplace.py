"""In-place writes to Tensors, version counters and views (torch's semantics, SPEC §3.3).

A tensor's memory has a version counter, shared by every tensor that shares the memory
(`detach()`, views): each in-place write adds one. A recorded node remembers the versions
of the tensors it saved, and its backward raises torch's "modified by an inplace
operation" error when a saved tensor it reads has changed since (`check_versions`).

An in-place write that nothing records (grad mode off, or no tensor involved requires
grad) is a NumPy write into the array: `with rv.no_grad(): p -= lr * p.grad` updates `p`,
the same object. A recorded one computes the out-of-place result from a snapshot of the
old value and makes the tensor its output, as torch rebases `grad_fn`:

    y = x * 2          # y.grad_fn: mul
    y += 1             # y.grad_fn: add, whose input is y's old value (grad_fn mul)

`t[index] = value` (also `zero_`, `fill_`, `copy_`) is a `SetItemNode`: the gradient flows
to the old value except at `index`, and to `value` from `index`.

Views: basic indexing, `.T`, `transpose`, `reshape` (where NumPy can) and `detach()` share
memory with their base, as torch's do, so writes show through both ways. A view recorded in
the graph cannot be written in place (torch re-derives the base's history then; Reverie
raises, naming the view), and one whose base was written after it was taken cannot be used
in the graph again (taking the view again after the write does the right thing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .grad_mode import grad_enabled
from .graph import GraphNode
from .tensor import Tensor, wrap


class Version:
    """The number of in-place writes to one memory block, shared by its tensors."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


def counter(t: Tensor) -> Version:
    """The version counter of `t`'s memory, made on first use."""
    version = t._version_counter
    if version is None:
        version = t._version_counter = Version()
    return version


def alias(base: Tensor, array: np.ndarray) -> Tensor:
    """A tensor outside the graph around `array`, a view of `base`'s memory: it shares the
    version counter."""
    view = wrap(array)
    view._version_counter = counter(base)
    return view


def recorded_view(base: Tensor, view: Tensor, array: np.ndarray) -> Tensor:
    """`view` (a recorded result computing `base`'s elements `array`) made a true view:
    it holds `array` and shares `base`'s counter, with the version it was taken at."""
    version = counter(base)
    view._data = array
    view._version_counter = version
    view._view_of = version.value
    return view


def _recording(*values: object) -> bool:
    """Whether a write involving `values` is recorded (grad mode on, one requires grad)."""
    return grad_enabled() and any(isinstance(v, Tensor) and v._requires_grad for v in values)


def _plain(value: object) -> object:
    return value._data if isinstance(value, Tensor) else value


def check_versions(saved: tuple[tuple[Tensor, int], ...], node_name: str) -> None:
    """torch's error when a tensor a node saved (with its version then) has been written
    in place since."""
    for tensor, version in saved:
        if tensor._version != version:
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: [{tensor.dtype} {list(tensor.shape)}], saved by "
                f"{node_name}, is at version {tensor._version}; expected version {version} "
                "instead. Write out of place (y = y + 1) or clone() it before the write")


def check_not_stale(t: Tensor) -> None:
    """RuntimeError when `t` is a recorded view whose memory was written after it was
    taken (its recorded history no longer gives its value)."""
    if t._view_of is not None and t._view_of != t._version_counter.value:
        raise RuntimeError(
            f"a view ({t.dtype} {list(t.shape)}) was used in the graph after an in-place "
            "write to its base: Reverie does not re-derive a view's history (torch does); "
            "take the view again after the write")


def _check_writable(t: Tensor) -> None:
    """torch's errors for a recorded in-place write to a leaf that requires grad, and
    Reverie's for one to a recorded view."""
    if t.grad_fn is None and t._requires_grad:
        raise RuntimeError("a leaf tensor that requires grad is being used in an in-place "
                           "operation; write under rv.no_grad() or to a clone()")
    if t._view_of is not None:
        raise RuntimeError(
            f"in-place write to a view ({t.dtype} {list(t.shape)}) recorded in the graph: "
            "Reverie would not update its base's history; write to the base itself "
            "(base[index] = ...) or to a clone()")


def _write(t: Tensor, result: np.ndarray) -> None:
    """Store `result` in `t`'s memory with torch's shape and dtype rules; add a version."""
    if result.shape != t._data.shape:
        raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")
    if not np.can_cast(result.dtype, t._data.dtype, "same_kind"):
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output "
                           f"type {t.dtype}")
    np.copyto(t._data, result, casting="same_kind")
    counter(t).value += 1


def _rebase(t: Tensor, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """A recorded in-place write: `compute(old)` on a snapshot of `t`'s old value becomes
    `t`'s value and history."""
    _check_writable(t)
    old = wrap(t._data.copy(), t.grad_fn, t._output_index)
    old._requires_grad = t._requires_grad
    result = compute(old)
    if result.dtype != t.dtype and result._requires_grad:
        result = result.astype(t.dtype)
    _write(t, result._data)
    t.grad_fn, t._output_index = result.grad_fn, result._output_index
    t._requires_grad = result._requires_grad
    return t


UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
          "pow": np.power}


def binary(t: Tensor, op: str, other: object) -> Tensor:
    """`t <op>= other` (an op of UFUNCS), in place."""
    from . import tensor_ops

    if _recording(t, other):
        return _rebase(t, lambda old: tensor_ops.binary(op, old, other))
    with np.errstate(all="ignore"):
        result = UFUNCS[op](t._data, _plain(other))
    _write(t, np.asarray(result))
    return t


def clamp(t: Tensor, low: object, high: object) -> Tensor:
    """`t` limited to [low, high] in place (`clamp_`)."""
    from . import tensor_ops

    if low is None and high is None:
        raise RuntimeError("clamp_: at least one of 'min' or 'max' must not be None")
    if _recording(t, low, high):
        return _rebase(t, lambda old: tensor_ops.clamp(old, low, high))
    _write(t, np.clip(t._data, _plain(low), _plain(high)))
    return t


def detach_(t: Tensor) -> Tensor:
    """`t` taken out of the graph in place (torch's `detach_`)."""
    if t._view_of is not None:
        raise RuntimeError("can't detach_() a view recorded in the graph; use detach(), "
                           "which returns a new tensor")
    t.grad_fn, t._output_index, t._requires_grad = None, 0, False
    return t


def setitem(t: Tensor, index: object, value: object) -> Tensor:
    """`t[index] = value` in place (NumPy indexing and broadcasting; `value` converted to
    `t`'s dtype), recorded as a `SetItemNode` when grad flows."""
    if not _recording(t, value):
        t._data[index] = _plain(value)
        counter(t).value += 1
        return t
    _check_writable(t)
    old = wrap(t._data.copy(), t.grad_fn, t._output_index)
    old._requires_grad = t._requires_grad
    t._data[index] = _plain(value)
    counter(t).value += 1
    node = SetItemNode(old, index, value, t._data.dtype)
    t.grad_fn, t._output_index, t._requires_grad = node, 0, True
    return t


class SetItemNode(GraphNode):
    """The node of `t[index] = value`: the old value's gradient is the output's with zeros
    at `index` (d new / d old = 1 elsewhere, 0 there), and `value`'s is the output's at
    `index`, summed over the axes `value` was broadcast along (d new[index] / d value = 1)."""

    __slots__ = ("index", "value_shape", "edges", "outputs", "extras", "_inputs")

    def __init__(self, old: Tensor, index: object, value: object, dtype: np.dtype) -> None:
        self.index = index
        self.value_shape = np.shape(_plain(value))
        self._inputs = (old if old._requires_grad else None,
                        value if isinstance(value, Tensor) and value._requires_grad else None)
        self.edges = tuple(e for e in self._inputs if e is not None)
        self.outputs = [(old.shape, dtype)]
        self.extras = None
        from .anomaly import AnomalyMode, remember_trace

        if AnomalyMode.enabled:
            remember_trace(self)

    def name(self) -> str:
        return "setitem_backward"

    def input_edges(self) -> tuple[Tensor | None, ...]:
        return self._inputs

    def vjp(self, cotangents: list, create_graph: bool, batch: int | None,
            retain_graph: bool = True) -> list:
        """Gradients for the old value and for `value` (see the class docstring)."""
        from . import tensor_ops

        if batch is not None:
            raise RuntimeError("is_grads_batched=True does not run through t[index] = value "
                               "(an in-place write); write out of place")
        g = cotangents[0]
        if g is None:
            g = np.zeros(*self.outputs[0])
        grads = []
        if self._inputs[0] is not None:
            mask = np.zeros(g.shape, bool)
            mask[self.index] = True
            grads.append(tensor_ops.where(mask, 0.0, g) if isinstance(g, Tensor)
                         else np.where(mask, 0, g))
        if self._inputs[1] is not None:
            picked = g[self.index]
            grads.append(sum_to(picked, self.value_shape).astype(self._inputs[1].dtype))
        return grads


def sum_to(g: object, shape: tuple[int, ...]) -> object:
    """`g` summed over the axes that broadcasting `shape` to `g`'s shape added or widened."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and g.shape[lead + i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
