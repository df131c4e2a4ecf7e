"""In-place writes to Tensors, version counters and views (torch's semantics, docs/api.md §4).

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

Views share memory and the version counter with their base (the tensor that owns the
memory, torch's `_base`): basic indexing, `.T`/`transpose`, `reshape`/`view` where NumPy
can view (`view_ops.py` makes them with `view`). A view remembers the steps that took it
from its base (`View`). A recorded write to a view rebases the base, as torch's CopySlices:

    b = x.clone(); v = b[0]     # v.grad_fn: the gather of b[0]
    v.mul_(2)                   # b.grad_fn: SetItemNode(old b, steps of v, 2 * old v)

and every live view of the base then follows (`follow`): its history becomes its steps
replayed on the base's new history (so it may start to require grad, as torch's). Not
followed, as in torch, and raising torch's errors when written or used after their base
was written with grad recorded: views taken with grad mode off, and views a custom
`rv.autograd.Function` returned (their steps are unknown). `detach()` shares memory and
version counter but is no view: writes through it change no history.

A view records its steps, and a recorded in-place write runs its out-of-place op, through
`recorded_ops.py`, which lies below this module.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from reverie.runtime.tensors import recorded_ops
from reverie.runtime.tensors.anomaly import AnomalyMode, remember_trace
from reverie.runtime.tensors.grad_mode import grad_enabled, inference_mode_enabled
from reverie.runtime.tensors.graph import GraphNode
from reverie.runtime.tensors.recorded_ops import Step
from reverie.runtime.tensors.tensor_core import FLOAT_KINDS, Tensor, plain, wrap

NO_GRAD_VIEW_WRITTEN = (
    "a view was created in no_grad mode and is being modified in place with grad mode "
    "enabled: ambiguous, so forbidden (as torch). Take the view and write it both inside "
    "the no_grad block (not recorded) or both outside (recorded)")
NO_GRAD_VIEW_STALE = (
    "a view was created in no_grad mode and its base or another view of its base has been "
    "modified in place with grad mode enabled: ambiguous, so forbidden (as torch). Take the "
    "view again after the write")
CUSTOM_VIEW_WRITTEN = (
    "this view was returned by a custom rv.autograd.Function and is being modified in "
    "place: its base's history cannot follow (as torch); clone() the output first")
CUSTOM_VIEW_STALE = (
    "this view was returned by a custom rv.autograd.Function and its base was modified in "
    "place since: its history cannot follow (as torch); clone() the output first")
INFERENCE_WRITE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed: make a clone() "
    "of it to get a normal tensor before writing in place")


class Version:
    """The number of in-place writes to one memory block, shared by its tensors, and the
    live views of that memory (by id; made on the first view)."""

    __slots__ = ("value", "views")

    def __init__(self) -> None:
        self.value = 0
        self.views: weakref.WeakValueDictionary[int, Tensor] | None = None


class View:
    """What makes a tensor a view: its `base` (the tensor owning the memory), the `steps`
    from the base to it (None when unknown: a custom Function's view), for one taken with
    grad mode off the memory's version then (`no_grad_version`; None otherwise: any later
    write makes it unusable in the graph, as torch's), and the error it raises once it
    cannot follow its base."""

    __slots__ = ("base", "steps", "no_grad_version", "error")

    def __init__(self, base: Tensor, steps: tuple[Step, ...] | None,
                 no_grad_version: int | None) -> None:
        self.base, self.steps, self.no_grad_version = base, steps, no_grad_version
        self.error: str | None = None


def counter(t: Tensor) -> Version:
    """The version counter of `t`'s memory, made on first use."""
    version = t._version_counter
    if version is None:
        version = t._version_counter = Version()
    return version


def increment_version(t: Tensor) -> None:
    """Count one in-place write to `t`'s memory made behind autograd's back (torch's
    `torch.autograd.graph.increment_version`): nodes that saved it then refuse to run."""
    counter(t).value += 1


def alias(base: Tensor, array: np.ndarray) -> Tensor:
    """A tensor outside the graph around `array`, sharing `base`'s version counter (no
    view: writes through it change no history, as torch's `detach()`)."""
    view = wrap(array)
    view._version_counter = counter(base)
    return view


# ---------------------------------------------------------------- views


def view(t: Tensor, step: Step, array: np.ndarray) -> Tensor:
    """The view `array` of `t`'s memory that `step` takes (its NumPy view): recorded when
    `t` requires grad in grad mode; taken with grad mode off, it requires grad when `t`
    does, as a leaf (torch's)."""
    parent = t._view_of
    if grad_enabled() and t._requires_grad:
        result = recorded_ops.record_step(_recorded_source(t), step)
        result._data = array
    else:
        result = wrap(array)
        result._requires_grad = t._requires_grad
    if t.is_inference():
        result._inference = True
    no_grad = not grad_enabled() or parent is not None and parent.no_grad_version is not None
    version = counter(t).value if no_grad else None
    if parent is None:
        info = View(t, (step,), version)
    else:
        steps = None if parent.steps is None else (*parent.steps, step)
        info = View(parent.base, steps, version)
    _track(result, t, info)
    return result


def recorded_view(base: Tensor, view: Tensor, array: np.ndarray) -> Tensor:
    """`view` (a custom Function's output holding `base`'s elements `array`) made a view of
    `base`'s memory whose steps are unknown: it cannot be written in place, and raises
    once its base is written with grad recorded."""
    parent = base._view_of
    view._data = array
    _track(view, base, View(base if parent is None else parent.base, None, None))
    return view


def _track(view: Tensor, t: Tensor, info: View) -> None:
    """Make `view` share `t`'s memory counter, described by `info`, among the live views."""
    version = counter(t)
    view._version_counter = version
    view._view_of = info
    if version.views is None:
        version.views = weakref.WeakValueDictionary()
    version.views[id(view)] = view


def _recorded_source(t: Tensor) -> Tensor:
    """What a view's node records as its input: a computed `t` by its place in the graph
    now, so that the node does not hold `t` itself (whose later in-place writes would
    otherwise make a reference cycle through the node); a leaf itself (its gradient is
    collected by identity)."""
    return t if t.grad_fn is None else _place(t, t._data)


def replay(steps: tuple[Step, ...], array: np.ndarray) -> np.ndarray:
    """`steps` applied to `array` by NumPy (views where NumPy can view)."""
    for kind, arg in steps:
        if kind == "getitem":
            array = array[arg]
        elif kind == "transpose":
            array = array.transpose(arg)
        else:
            array = array.reshape(arg)
    return array


def follow(base: Tensor) -> None:
    """After a recorded write changed `base`'s history: each live view of it takes its
    steps replayed on the new history; a custom Function's view cannot follow and is
    marked (one taken with grad mode off is stale by its version: `check_not_stale`)."""
    views = counter(base).views
    for v in [] if views is None else list(views.values()):
        info = v._view_of
        if info.base is not base or info.error is not None or info.no_grad_version is not None:
            continue
        if info.steps is None:
            info.error = CUSTOM_VIEW_STALE
            continue
        fresh = recorded_ops.record_steps(_recorded_source(base), info.steps)
        v.grad_fn, v._output_index = fresh.grad_fn, fresh._output_index
        v._requires_grad = fresh._requires_grad


# ---------------------------------------------------------------- checks


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
    """RuntimeError when `t`, used in the graph, is a view that could not follow a write
    to its memory: one taken with grad mode off (any write since), or a custom Function's
    (a recorded write to its base since)."""
    info = t._view_of
    if info is None:
        return
    if info.error is not None:
        raise RuntimeError(info.error)
    if info.no_grad_version is not None and info.no_grad_version != counter(t).value:
        raise RuntimeError(NO_GRAD_VIEW_STALE)


def _check_inference(t: Tensor) -> None:
    """torch's error for an in-place write to an inference tensor outside inference mode."""
    if t.is_inference() and not inference_mode_enabled():
        raise RuntimeError(INFERENCE_WRITE)


def _check_writable(t: Tensor) -> None:
    """torch's errors for a recorded in-place write to a leaf that requires grad, to a view
    of one, and to a view that cannot rebase its base (`View`)."""
    info = t._view_of
    if info is None:
        if t.grad_fn is None and t._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation; write under rv.no_grad() or to a clone()")
        return
    if info.error is not None:
        raise RuntimeError(info.error)
    if info.no_grad_version is not None:
        raise RuntimeError(NO_GRAD_VIEW_WRITTEN)
    if info.steps is None:
        raise RuntimeError(CUSTOM_VIEW_WRITTEN)
    if info.base.grad_fn is None and info.base._requires_grad:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation; write under rv.no_grad() or to a clone()")


def _check_broadcast(t: Tensor, other: object) -> None:
    """torch's RuntimeError when `other` does not broadcast with `t` (the shape of `t`
    itself is checked by `_write`)."""
    try:
        np.broadcast_shapes(t.shape, np.shape(plain(other)))
    except ValueError:
        raise RuntimeError(f"the size of tensor a {list(t.shape)} must match the size of "
                           f"tensor b {list(np.shape(plain(other)))} (broadcasting)") from None


def _recording(t: Tensor, *values: object) -> bool:
    """Whether a write to `t` involving `values` is recorded: grad mode on, and `t`, its
    base (which may have been set to require grad since the view was taken) or one of
    `values` requires grad."""
    if not grad_enabled():
        return False
    info = t._view_of
    return (t._requires_grad or info is not None and info.base._requires_grad
            or any(isinstance(v, Tensor) and v._requires_grad for v in values))


# ---------------------------------------------------------------- writes


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


def _place(t: Tensor, data: np.ndarray) -> Tensor:
    """A tensor holding `data` at `t`'s place in the graph now (its node and output)."""
    snapshot = wrap(data, t.grad_fn, t._output_index)
    snapshot._requires_grad = t._requires_grad
    return snapshot


def _rebase(t: Tensor, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """A recorded in-place write: `compute(old)` on a snapshot of `t`'s old value becomes
    `t`'s value and history; for a view, its base's history takes the write (torch's
    CopySlices). The base's views then follow."""
    _check_writable(t)
    result = compute(_place(t, t._data.copy()))
    if result.dtype != t.dtype and result._requires_grad:
        result = result.astype(t.dtype)
    info = t._view_of
    base = t if info is None else info.base
    old_base = _place(base, base._data)
    _write(t, result._data)
    if info is None:
        t.grad_fn, t._output_index = result.grad_fn, result._output_index
        t._requires_grad = result._requires_grad
    else:
        base.grad_fn = SetItemNode(old_base, info.steps, result, "CopySlices")
        base._output_index, base._requires_grad = 0, True
    follow(base)
    return t


UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
          "pow": np.power}


def binary(t: Tensor, op: str, other: object) -> Tensor:
    """`t <op>= other` (an op of UFUNCS), in place."""
    _check_inference(t)
    _check_broadcast(t, other)
    if _recording(t, other):
        return _rebase(t, lambda old: recorded_ops.binary(op, old, other))
    with np.errstate(all="ignore"):
        result = UFUNCS[op](t._data, plain(other))
    _write(t, np.asarray(result))
    return t


def unary(t: Tensor, op: str) -> Tensor:
    """`t` replaced by the elementwise built-in `op` of it (`t.exp_()`), in place."""
    _check_inference(t)
    if _recording(t):
        return _rebase(t, lambda old: recorded_ops.unary(op, old))
    _write(t, recorded_ops.unary(op, t._data)._data)
    return t


def clamp(t: Tensor, low: object, high: object) -> Tensor:
    """`t` limited to [low, high] in place (`clamp_`)."""
    _check_inference(t)
    if low is None and high is None:
        raise RuntimeError("clamp_: at least one of 'min' or 'max' must not be None")
    if _recording(t, low, high):
        return _rebase(t, lambda old: recorded_ops.clamp(old, low, high))
    _write(t, np.clip(t._data, plain(low), plain(high)))
    return t


def detach_(t: Tensor) -> Tensor:
    """`t` taken out of the graph in place (torch's `detach_`; views raise, as torch's)."""
    if t._view_of is not None:
        raise RuntimeError("Can't detach views in-place. Use detach() instead")
    t.grad_fn, t._output_index, t._requires_grad = None, 0, False
    return t


def setitem(t: Tensor, index: object, value: object) -> Tensor:
    """`t[index] = value` in place (NumPy indexing and broadcasting; `value` converted to
    `t`'s dtype), recorded as a `SetItemNode` when grad flows (never into an integer `t`)."""
    _check_inference(t)
    index = _array_index(index)
    if not _recording(t, value) or t.dtype not in FLOAT_KINDS:
        _assign(t._data, index, value)
        counter(t).value += 1
        return t
    return _rebase(t, lambda old: _set(old, index, value))


def _set(old: Tensor, index: object, value: object) -> Tensor:
    """`old`'s value with `value` written at `index`, out of place, recorded."""
    data = old._data.copy()
    _assign(data, index, value)
    return wrap(data, SetItemNode(old, (("getitem", index),), value, "setitem_backward"))


def _assign(data: np.ndarray, index: object, value: object) -> None:
    """`data[index] = value`, with torch's RuntimeError where `value` does not broadcast."""
    try:
        data[index] = plain(value)
    except ValueError as error:
        raise RuntimeError(f"shape mismatch: value of shape {list(np.shape(plain(value)))} "
                           f"cannot be broadcast to the indexing result ({error})") from None


def _array_index(index: object) -> object:
    """`index` with Tensors in it (integer or bool) replaced by their arrays."""
    if isinstance(index, tuple):
        return tuple(plain(i) for i in index)
    return plain(index)


# ---------------------------------------------------------------- the write's node


class SetItemNode(GraphNode):
    """The node of a write into part of a tensor: `t[index] = value`, or an in-place write
    to a view seen from its base (torch's CopySlices), `steps` selecting the part. The old
    value's gradient is the output's with zeros where written (d new / d old = 1 elsewhere,
    0 there), and `value`'s is the output's gradient at the written part (the steps
    replayed on it), summed over the axes `value` was broadcast along."""

    __slots__ = ("steps", "value_shape", "edges", "outputs", "extras", "_inputs", "_name")

    def __init__(self, old: Tensor, steps: tuple[Step, ...], value: object,
                 name: str) -> None:
        self.steps = steps
        self.value_shape = np.shape(plain(value))
        self._inputs = (old if old._requires_grad else None,
                        value if isinstance(value, Tensor) and value._requires_grad else None)
        self.edges = tuple(e for e in self._inputs if e is not None)
        self.outputs = [(old.shape, old.dtype)]
        self.extras = None
        self._name = name
        if AnomalyMode.enabled:
            remember_trace(self)

    def name(self) -> str:
        return self._name

    def input_edges(self) -> tuple[Tensor | None, ...]:
        return self._inputs

    def vjp(self, cotangents: list, create_graph: bool, batch: int | None,
            retain_graph: bool = True) -> list:
        """Gradients for the old value and for `value` (see the class docstring)."""
        if batch is not None:
            raise RuntimeError("is_grads_batched=True does not run through an in-place write "
                               "(t[index] = value, a view's write); write out of place")
        g = cotangents[0]
        if g is None:
            g = np.zeros(*self.outputs[0])
        grads = []
        if self._inputs[0] is not None:
            mask = written(self.outputs[0][0], self.steps)
            zero = np.zeros((), g.dtype)
            grads.append(recorded_ops.where(mask, zero, g) if isinstance(g, Tensor)
                         else np.where(mask, zero, g))
        if self._inputs[1] is not None:
            picked = (recorded_ops.record_steps(g, self.steps) if isinstance(g, Tensor)
                      else np.asarray(replay(self.steps, g)))
            grads.append(sum_to(picked, self.value_shape).astype(self._inputs[1].dtype))
        return grads


def written(shape: tuple[int, ...], steps: tuple[Step, ...]) -> np.ndarray:
    """A bool array of `shape`, True at the elements `steps` select."""
    positions = replay(steps, np.arange(int(np.prod(shape))).reshape(shape))
    mask = np.zeros(int(np.prod(shape)), bool)
    mask[np.ravel(positions)] = True
    return mask.reshape(shape)


def sum_to(g: object, shape: tuple[int, ...]) -> object:
    """`g` summed over the axes that broadcasting `shape` to `g`'s shape added or widened."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and g.shape[lead + i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
