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
`Pass` runs them in torch's order ("Backward Hooks execution" in torch's docs): the
output's tensor hooks in registration order (each may replace the gradient; called with
None for an output without one), then `retain_grad` stores it, then the node's pre-hooks
(may replace the gradient outputs), the node, its hooks (may replace the gradient inputs);
for a leaf in `backward`, its tensor hooks, the AccumulateGrad pre-hooks, accumulation into
`.grad`, the post-accumulate hooks, the AccumulateGrad hooks (`rv.grad` runs a leaf's
tensor hooks only). Hooks run with grad mode on only when the pass builds a graph, and
what they return is checked as torch does (type, shape, dtype, count).

Nothing here costs a recorded call anything until a hook or metadata is asked for: a
node's `extras` is None until then. `tensor.py` imports this module (Tensor's hook methods
are here), so the three functions that make or test Tensors import it themselves: a cycle
that tests/unit/test_import_cycles.py lists until it is removed.
"""

from __future__ import annotations

import itertools
import traceback
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from reverie.runtime.tensors.grad_mode import set_grad_enabled

if TYPE_CHECKING:
    from reverie.runtime.tensors.tensor import Tensor

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
    entry is ignored from then on: see `_is_output`)."""
    for reference in list(RETAINING.values()):
        tensor = reference()
        if tensor is not None and tensor.grad_fn is not None:
            retained = tensor.grad_fn.extra().retained
            if retained.get(tensor._output_index) is not reference:
                retained[tensor._output_index] = reference


def _is_output(tensor: Tensor | None, node: GraphNode, index: int) -> bool:
    return tensor is not None and tensor.grad_fn is node and tensor._output_index == index


# ---------------------------------------------------------------- running hooks (tape.Pass)


def _name(hook: Hook) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


def _as_tensor(gradient: object) -> Tensor | None:
    """A gradient as the Tensor a hook sees (None stays None)."""
    from reverie.runtime.tensors.tensor import Tensor, wrap

    if gradient is None or isinstance(gradient, Tensor):
        return gradient
    return wrap(np.asarray(gradient))


def _returned(value: object, like: object, create_graph: bool, hook: Hook) -> object:
    """A hook's replacement for the gradient `like`, checked as torch does (a Tensor of
    its shape and dtype; None keeps it) and given back as the tape carries gradients (an
    array unless building a graph)."""
    from reverie.runtime.tensors.tensor import Tensor

    if value is None:
        return like
    if like is None:
        raise RuntimeError(f"hook {_name(hook)!r}: can't replace a None gradient with a "
                           "non-None value")
    if not isinstance(value, Tensor):
        raise TypeError(f"expected a Tensor or None, but hook returned "
                        f"'{type(value).__name__}' (hook {_name(hook)!r})")
    if value.dtype != like.dtype:
        raise RuntimeError(f"hook {_name(hook)!r} has changed the type of value (was "
                           f"{like.dtype}, got {value.dtype})")
    if value.shape != like.shape:
        raise RuntimeError(f"hook {_name(hook)!r} has changed the size of value (was "
                           f"{like.shape}, got {value.shape})")
    return value if create_graph else value._data


def _returned_tuple(value: object, like: list[object], create_graph: bool, hook: Hook
                    ) -> list[object]:
    """A node hook's replacement gradients (a tuple, one per gradient; a None entry drops
    that gradient), checked as torch does."""
    if not isinstance(value, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(value).__name__}' (hook "
                        f"{_name(hook)!r})")
    if len(value) != len(like):
        raise RuntimeError(f"hook {_name(hook)!r} has returned an incorrect number of values "
                           f"(got {len(value)}, but expected {len(like)})")
    return [None if v is None else _returned(v, g, create_graph, hook)
            for v, g in zip(value, like, strict=True)]


def apply_tensor_hooks(hooks: dict[int, Hook], gradient: object, create_graph: bool
                       ) -> object:
    """`gradient` passed through each hook of `hooks` in order (a hook that returns a
    Tensor replaces it for the next), with grad mode on only when building a graph."""
    with set_grad_enabled(create_graph):
        for hook in list(hooks.values()):
            gradient = _returned(hook(_as_tensor(gradient)), gradient, create_graph, hook)
    return gradient


def run_tensor_hooks(node: GraphNode, cotangents: list[object], create_graph: bool,
                     outputs: Iterable[int] | None = None) -> None:
    """The tensor hooks of the node's outputs (`outputs`; None: all, the node runs, and an
    output without a gradient has its hooks called with None), then `retain_grad`'s store,
    on `cotangents` (in place)."""
    extras = node.extras
    for index in range(len(cotangents)) if outputs is None else outputs:
        hooks = extras.tensor_hooks.get(index)
        if hooks and (outputs is None or cotangents[index] is not None):
            cotangents[index] = apply_tensor_hooks(hooks, cotangents[index], create_graph)
    for index, reference in list(extras.retained.items()):
        tensor = reference()
        if (_is_output(tensor, node, index) and cotangents[index] is not None
                and (outputs is None or index in outputs)):
            accumulate_grad(tensor, cotangents[index], create_graph)


def run_prehooks(extras: NodeExtras, cotangents: list[object], create_graph: bool,
                 node: GraphNode | None = None) -> None:
    """The node's pre-hooks on its gradient outputs (in place; one per result of `node`,
    None for a result that is no tensor, as torch shows them)."""
    shown = _per_result(node, cotangents)
    with set_grad_enabled(create_graph):
        for hook in list(extras.prehooks.values()):
            replaced = hook(tuple(_as_tensor(c) for c in shown))
            if replaced is not None:
                shown = _returned_tuple(replaced, shown, create_graph, hook)
    cotangents[:] = _per_tensor_result(node, shown)


def _per_result(node: GraphNode | None, cotangents: list[object]) -> list[object]:
    """Cotangents (one per tensor result) laid out one per result of `node`."""
    layout = None if node is None else node.hook_layout()
    if layout is None:
        return list(cotangents)
    positions, count = layout
    shown: list[object] = [None] * count
    for position, c in zip(positions, cotangents, strict=True):
        shown[position] = c
    return shown


def _per_tensor_result(node: GraphNode | None, shown: list[object]) -> list[object]:
    """The inverse of `_per_result`."""
    layout = None if node is None else node.hook_layout()
    return list(shown) if layout is None else [shown[p] for p in layout[0]]


def run_hooks(node: GraphNode, grads: list[object] | None, cotangents: list[object],
              create_graph: bool) -> list[object]:
    """The node's hooks on (gradient inputs, gradient outputs); the gradients per edge,
    as the hooks left them. `grads` None: the node's inputs get no gradient (torch calls
    the node of a non-leaf `backward(inputs=...)` with every input masked)."""
    slots = node.input_edges()
    produced = iter(grads or ())
    by_input = [None if edge is None or grads is None else next(produced) for edge in slots]
    with set_grad_enabled(create_graph):
        for hook in list(node.extras.hooks.values()):
            replaced = hook(tuple(_as_tensor(g) for g in by_input),
                            tuple(_as_tensor(c) for c in _per_result(node, cotangents)))
            if replaced is not None:
                by_input = _returned_tuple(replaced, by_input, create_graph, hook)
    return [g for g, edge in zip(by_input, slots, strict=True) if edge is not None]


def run_input_node_hooks(node: GraphNode, cotangents: list[object], create_graph: bool
                         ) -> None:
    """The pre-hooks and hooks of the node of a non-leaf `backward(inputs=...)` tensor that
    no other input needs: torch runs that node with its inputs masked (no gradient flows
    on), so its hooks see None for every gradient input."""
    if node.extras is None:
        return
    run_prehooks(node.extras, cotangents, create_graph, node)
    run_hooks(node, None, cotangents, create_graph)


# ---------------------------------------------------------------- leaves (AccumulateGrad)


def leaf_tensor_hooks(leaf: Tensor, gradient: object, create_graph: bool) -> object:
    """`gradient` of a leaf passed through the leaf's tensor hooks (`register_hook`): what
    `rv.grad` returns for a leaf input."""
    hooks = leaf._hooks
    if hooks is None or leaf.grad_fn is not None or not hooks.pre:
        return gradient
    return apply_tensor_hooks(hooks.pre, gradient, create_graph)


def accumulate_leaf(leaf: Tensor, gradient: object, create_graph: bool) -> None:
    """What torch's AccumulateGrad node does for `leaf` in `backward`: the leaf's tensor
    hooks, the node's pre-hooks, the accumulation into `.grad`, the leaf's post-accumulate
    hooks (`hook(leaf)`, which must return None), then the node's hooks, which see
    `((), (gradient,))` (the gradient stored: the new `.grad` when it was None)."""
    hooks = leaf._hooks
    if hooks is None:
        accumulate_grad(leaf, gradient, create_graph)
        return
    gradient = leaf_tensor_hooks(leaf, gradient, create_graph)
    extras = hooks.accumulate.extras
    cotangents = [gradient]
    if extras is not None and extras.prehooks:
        run_prehooks(extras, cotangents, create_graph)
    if cotangents[0] is None:
        return
    first = leaf._grad is None
    accumulate_grad(leaf, cotangents[0], create_graph)
    with set_grad_enabled(create_graph):
        for hook in list(hooks.post_accumulate.values()):
            if hook(leaf) is not None:
                raise RuntimeError(f"post accumulate grad hook {_name(hook)!r} returned a "
                                   "value: hooks should return None.")
        stored = (leaf._grad if first and not create_graph else _as_tensor(cotangents[0]),)
        for hook in list(extras.hooks.values()) if extras is not None else ():
            hook((), stored)


def accumulate_grad(tensor: Tensor, gradient: object, create_graph: bool) -> None:
    """Add `gradient` to `tensor.grad` (torch's AccumulateGrad): the first gradient is
    stored as a copy (never the caller's object), later ones added in place unless
    building a graph."""
    from reverie.runtime.tensors.tensor import Tensor, plain, wrap

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
        np.add(old._data, plain(gradient), out=old._data)
