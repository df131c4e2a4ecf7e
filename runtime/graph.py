"""The graph API of `grad_fn` (torch.autograd's Node): names, edges, metadata and hooks.

Every node of the tape derives from `GraphNode`: a recorded kernel call (`tape.Node`), a
custom `rv.autograd.Function` call, an in-place write. A node offers what torch's does:

    y.grad_fn.name()                 # 'mul_backward'
    y.grad_fn.next_functions         # ((<AccumulateGrad>, 0), (None, 0)): one per input
    y.grad_fn.metadata["tag"] = 1    # a dict of the user's
    h = y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: ...); h.remove()
    y.grad_fn.register_prehook(lambda grad_outputs: ...)

Tensor hooks (`t.register_hook`, `t.retain_grad()`) of a non-leaf tensor are kept on the
node that produced it, per output; those of a leaf on the leaf itself (`LeafHooks`, with
its `AccumulateGrad` node). A backward `Pass` runs them in torch's order: the output's
tensor hooks (each may replace the gradient), then `retain_grad` stores it, then the
node's pre-hooks (may replace the gradient outputs), the node, its hooks (may replace the
gradient inputs); for a leaf, its tensor hooks, then accumulation into `.grad`, then its
post-accumulate hooks.

Nothing here costs a recorded call anything until a hook or metadata is asked for: a
node's `extras` is None until then.
"""

from __future__ import annotations

import itertools
import traceback
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor

Hook = Callable[..., object]
_HANDLE_IDS = itertools.count()


class RemovableHandle:
    """What `register_*hook` returns: `handle.remove()` unregisters the hook (also as a
    context manager: the hook is removed on exit)."""

    __slots__ = ("_hooks", "id")

    def __init__(self, hooks: dict[int, Hook]) -> None:
        self.id = next(_HANDLE_IDS)
        self._hooks = hooks

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def add_hook(hooks: dict[int, Hook], hook: Hook) -> RemovableHandle:
    """Register `hook` in `hooks` (kept in registration order) and return its handle."""
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


class NodeExtras:
    """What a node holds beyond its computation, made on first use: its hooks and
    pre-hooks, the tensor hooks and retained-grad tensors of each output, the user's
    metadata, and (under anomaly detection) where in the program it was recorded."""

    __slots__ = ("hooks", "prehooks", "tensor_hooks", "retained", "metadata", "trace")

    def __init__(self) -> None:
        self.hooks: dict[int, Hook] = {}
        self.prehooks: dict[int, Hook] = {}
        self.tensor_hooks: dict[int, dict[int, Hook]] = {}
        self.retained: dict[int, weakref.ref[Tensor]] = {}
        self.metadata: dict[object, object] = {}
        self.trace: traceback.StackSummary | None = None


class GraphNode:
    """The part of every tape node that torch's `grad_fn` API sees. Subclasses set
    `edges` (the input Tensors gradients flow to), `outputs` ((shape, dtype) per result),
    `extras` (None) and implement `name()`, `inputs_of_next_functions()` and `vjp`."""

    __slots__ = ()
    extras: NodeExtras | None
    edges: tuple[Tensor, ...]

    def name(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def input_edges(self) -> tuple[Tensor | None, ...]:
        """The node's inputs in torch's order, None where one does not require grad (the
        default: the edges)."""
        return self.edges

    @property
    def next_functions(self) -> tuple[tuple[GraphNode | AccumulateGrad | None, int], ...]:
        """For each input, the node its gradient flows to and that node's output index:
        the producing node for a computed tensor, the leaf's `AccumulateGrad`, or
        `(None, 0)` for an input that does not require grad."""
        return tuple(next_function(edge) for edge in self.input_edges())

    def extra(self) -> NodeExtras:
        """This node's extras, made on first use."""
        if self.extras is None:
            self.extras = NodeExtras()
        return self.extras

    @property
    def metadata(self) -> dict[object, object]:
        """A dict for the user's own data (torch's `Node.metadata`)."""
        return self.extra().metadata

    def register_hook(self, hook: Hook) -> RemovableHandle:
        """`hook(grad_inputs, grad_outputs)` runs after the node; a tuple it returns
        replaces the gradients flowing to the inputs."""
        return add_hook(self.extra().hooks, hook)

    def register_prehook(self, hook: Hook) -> RemovableHandle:
        """`hook(grad_outputs)` runs before the node; a tuple it returns replaces the
        gradients the node receives."""
        return add_hook(self.extra().prehooks, hook)


def next_function(edge: Tensor | None) -> tuple[GraphNode | AccumulateGrad | None, int]:
    """`(node, output index)` that a gradient for `edge` flows to."""
    if edge is None or not edge._requires_grad:
        return (None, 0)
    if edge.grad_fn is not None:
        return (edge.grad_fn, edge._output_index)
    return (leaf_hooks(edge).accumulate, 0)


class AccumulateGrad:
    """The node that accumulates a leaf's gradient into `.grad` (torch's): `variable` is
    the leaf. One per leaf, so `next_functions` shows the same object each time."""

    __slots__ = ("_variable", "extras", "__weakref__")
    next_functions: tuple[()] = ()

    def __init__(self, variable: Tensor) -> None:
        self._variable = weakref.ref(variable)
        self.extras: NodeExtras | None = None

    @property
    def variable(self) -> Tensor | None:
        return self._variable()

    def name(self) -> str:
        return "AccumulateGrad"

    def __repr__(self) -> str:
        return "<AccumulateGrad>"

    metadata = GraphNode.metadata
    extra = GraphNode.extra
    register_hook = GraphNode.register_hook
    register_prehook = GraphNode.register_prehook


class LeafHooks:
    """A leaf's hooks (`register_hook`, `register_post_accumulate_grad_hook`) and its
    `AccumulateGrad` node; a tensor's `_hooks` slot holds one once asked for."""

    __slots__ = ("pre", "post_accumulate", "accumulate")

    def __init__(self, leaf: Tensor) -> None:
        self.pre: dict[int, Hook] = {}
        self.post_accumulate: dict[int, Hook] = {}
        self.accumulate = AccumulateGrad(leaf)


def leaf_hooks(leaf: Tensor) -> LeafHooks:
    """The `LeafHooks` of a leaf tensor, made on first use."""
    hooks = leaf._hooks
    if hooks is None:
        hooks = leaf._hooks = LeafHooks(leaf)
    return hooks


# ---------------------------------------------------------------- running hooks (tape.Pass)


def _as_tensor(gradient: object) -> Tensor | None:
    """A gradient as the Tensor a hook sees (None stays None)."""
    from .tensor import Tensor, wrap

    if gradient is None or isinstance(gradient, Tensor):
        return gradient
    return wrap(np.asarray(gradient))


def _returned(value: object, like: object, create_graph: bool, what: str) -> object:
    """A hook's replacement gradient, checked against the one it replaces (`like`) and
    given back as the tape carries gradients (an array unless building a graph)."""
    from .tensor import Tensor

    if value is None:
        return None
    if not isinstance(value, Tensor):
        raise TypeError(f"{what} returned a {type(value).__name__}; a hook returns a Tensor "
                        "or None")
    if like is not None and value.shape != np.shape(like):
        raise RuntimeError(f"{what} returned a gradient of shape {value.shape}, expected "
                           f"{np.shape(like)}")
    return value if create_graph else value._data


def apply_tensor_hooks(hooks: dict[int, Hook], gradient: object, create_graph: bool
                       ) -> object:
    """`gradient` passed through each hook of `hooks` in order (a hook that returns a
    Tensor replaces it for the next)."""
    for hook in list(hooks.values()):
        replaced = _returned(hook(_as_tensor(gradient)), gradient, create_graph,
                             "a tensor hook")
        if replaced is not None:
            gradient = replaced
    return gradient


def run_tensor_hooks(extras: NodeExtras, cotangents: list[object], create_graph: bool
                     ) -> None:
    """The tensor hooks of each output, then `retain_grad`'s store, on `cotangents` (in
    place)."""
    for index, hooks in extras.tensor_hooks.items():
        if cotangents[index] is not None and hooks:
            cotangents[index] = apply_tensor_hooks(hooks, cotangents[index], create_graph)
    for index, reference in extras.retained.items():
        tensor = reference()
        if tensor is not None and cotangents[index] is not None:
            accumulate_grad(tensor, cotangents[index], create_graph)


def run_prehooks(extras: NodeExtras, cotangents: list[object], create_graph: bool) -> None:
    """The node's pre-hooks on its gradient outputs (in place)."""
    for hook in list(extras.prehooks.values()):
        replaced = hook(tuple(_as_tensor(c) for c in cotangents))
        if replaced is not None:
            cotangents[:] = [_returned(r, c, create_graph, "a node pre-hook")
                             for r, c in zip(replaced, cotangents, strict=True)]


def run_hooks(node: GraphNode, grads: list[object], cotangents: list[object],
              create_graph: bool) -> list[object]:
    """The node's hooks on (gradient inputs, gradient outputs); the gradients per edge,
    as the hooks left them."""
    slots = node.input_edges()
    by_input: list[object] = []
    produced = iter(grads)
    for edge in slots:
        by_input.append(None if edge is None else next(produced))
    for hook in list(node.extras.hooks.values()):
        replaced = hook(tuple(_as_tensor(g) for g in by_input),
                        tuple(_as_tensor(c) for c in cotangents))
        if replaced is not None:
            by_input = [_returned(r, g, create_graph, "a node hook")
                        for r, g in zip(replaced, by_input, strict=True)]
    return [g for g, edge in zip(by_input, slots, strict=True) if edge is not None]


def accumulate_grad(tensor: Tensor, gradient: object, create_graph: bool) -> None:
    """Add `gradient` to `tensor.grad` (torch's AccumulateGrad): the first gradient is
    stored as a copy (never the caller's object), later ones added in place unless
    building a graph."""
    from .tensor import Tensor, wrap

    old = tensor._grad
    if old is None:
        if isinstance(gradient, Tensor):
            tensor._grad = gradient.clone() if create_graph else wrap(gradient._data.copy())
        else:
            tensor._grad = wrap(np.array(gradient, dtype=tensor._data.dtype))
    elif create_graph or old._requires_grad or isinstance(gradient, Tensor) and \
            gradient._requires_grad:
        tensor._grad = old + gradient
    else:
        np.add(old._data, gradient._data if isinstance(gradient, Tensor) else gradient,
               out=old._data)
