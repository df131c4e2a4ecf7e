"""The graph API of `grad_fn` (torch.autograd's Node): names, edges, metadata and hooks.

Every node of the tape derives from `GraphNode`: a recorded kernel call (`tape.Node`), a
custom `rv.autograd.Function` call, an in-place write. A node offers what torch's does:

    y.grad_fn.name()                 # 'mul_backward'
    y.grad_fn.next_functions         # ((<AccumulateGrad>, 0), (None, 0)): one per input
    y.grad_fn.metadata["tag"] = 1    # a dict of the user's
    h = y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: ...); h.remove()
    y.grad_fn.register_prehook(lambda grad_outputs: ...)

Tensor hooks (`t.register_hook`, `t.retain_grad()`) of a non-leaf tensor are kept on the
node that produced it, per output (a hook registered before an in-place write stays with
the old version's node, as torch's; `retain_grad` follows the tensor to its new node); those
of a leaf on the leaf itself (`LeafHooks`, with its `AccumulateGrad` node). A backward
`Pass` runs them (`graph_hooks.py`).

Nothing here costs a recorded call anything until a hook or metadata is asked for: a
node's `extras` is None until then.
"""

from __future__ import annotations

import itertools
import traceback
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reverie.runtime.tensors.tensor_core import Tensor

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

    def hook_layout(self) -> tuple[tuple[int, ...], int] | None:
        """Where the tensor results sit among all results, for a node some of whose
        results are no tensors (hooks see one entry per result); None: all are tensors."""
        return None

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


# ---------------------------------------------------------------- retain_grad


RETAINING: dict[int, weakref.ref[Tensor]] = {}
# every live tensor that called retain_grad(), by id: an in-place write makes such a tensor
# the output of a new node, and its retain_grad follows it there (`follow_inplace_writes`)


def retain(tensor: Tensor) -> None:
    """Fill `.grad` of the non-leaf `tensor` in backward passes (`retain_grad()`)."""
    key = id(tensor)
    RETAINING[key] = weakref.ref(tensor, lambda _, key=key: RETAINING.pop(key, None))
    tensor.grad_fn.extra().retained[tensor._output_index] = RETAINING[key]


def retains(tensor: Tensor) -> bool:
    """Whether `tensor` is a non-leaf that retains its gradient (`retains_grad`)."""
    reference = RETAINING.get(id(tensor))
    return tensor.grad_fn is not None and reference is not None and reference() is tensor


def follow_inplace_writes() -> None:
    """Move the retain_grad of each tensor written in place since it called `retain_grad()`
    to the node that now produces it (torch moves the hook at the write; the old node's
    entry is ignored from then on: see `graph_hooks._is_output`)."""
    for reference in list(RETAINING.values()):
        tensor = reference()
        if tensor is not None and tensor.grad_fn is not None:
            retained = tensor.grad_fn.extra().retained
            if retained.get(tensor._output_index) is not reference:
                retained[tensor._output_index] = reference
