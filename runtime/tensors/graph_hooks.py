"""Running the graph's hooks in a backward pass (`tape.Pass`), and accumulating into `.grad`.

Hooks are registered through `graph.py` (on nodes, leaves and tensors); a pass runs them
here in torch's order ("Backward Hooks execution" in torch's docs): the output's tensor
hooks in registration order (each may replace the gradient; called with None for an
output without one), then `retain_grad` stores it, then the node's pre-hooks (may replace
the gradient outputs), the node, its hooks (may replace the gradient inputs); for a leaf in
`backward`, its tensor hooks, the AccumulateGrad pre-hooks, accumulation into `.grad`, the
post-accumulate hooks, the AccumulateGrad hooks (`rv.grad` runs a leaf's tensor hooks
only). Hooks run with grad mode on only when the pass builds a graph, and what they return
is checked as torch does (type, shape, dtype, count):

    graph_hooks.run_tensor_hooks(node, cotangents, create_graph)   # in place
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from reverie.runtime.tensors.grad_mode import set_grad_enabled
from reverie.runtime.tensors.graph import GraphNode, Hook, NodeExtras
from reverie.runtime.tensors.tensor_core import Tensor, plain, wrap


def _is_output(tensor: Tensor | None, node: GraphNode, index: int) -> bool:
    return tensor is not None and tensor.grad_fn is node and tensor._output_index == index


def _name(hook: Hook) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


def _as_tensor(gradient: object) -> Tensor | None:
    """A gradient as the Tensor a hook sees (None stays None)."""
    if gradient is None or isinstance(gradient, Tensor):
        return gradient
    return wrap(np.asarray(gradient))


def _returned(value: object, like: object, create_graph: bool, hook: Hook) -> object:
    """A hook's replacement for the gradient `like`, checked as torch does (a Tensor of
    its shape and dtype; None keeps it) and given back as the tape carries gradients (an
    array unless building a graph)."""
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
