"""`rv.grad` and `rv.backward`: torch.autograd's interface over the tape (`tape.py`).

Consumes output and input Tensors, optional grad_outputs and the torch flags; checks them the
way torch does (same defaults, same exception classes, Reverie's own messages that say what
to do), runs one backward `Pass`, and returns the gradients (`grad`) or accumulates them into
`.grad` (`backward`). As torch's engine, a pass with `create_graph=True` records its
computation whatever the caller's grad mode (under `rv.no_grad` too). See
docs/api.md §4 ("torch.autograd parity") for the behaviour table.

    rv.grad(loss, [w, b], create_graph=True)      # (dw, db), differentiable again
    loss.backward(); w.grad                        # accumulated in place
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping

import numpy as np

from reverie.runtime.tensors.grad_mode import enable_grad, is_grad_enabled
from reverie.runtime.tensors.graph import retain
from reverie.runtime.tensors.graph_hooks import accumulate_leaf, leaf_tensor_hooks
from reverie.runtime.tensors.tape import TENSOR_OR_ARRAY, Gradient, Pass, one_call_gradients, plain
from reverie.runtime.tensors.tensor_core import Tensor, wrap

# ---------------------------------------------------------------- arguments


def _tensors(values: object) -> tuple[object, ...]:
    """One Tensor or an iterable of them, as a tuple."""
    return (values,) if isinstance(values, Tensor) else tuple(values)


def _inputs(inputs: object, caller: str) -> tuple[object, ...]:
    """`inputs` as a tuple: one Tensor, an exact dict's values, or any iterable."""
    if isinstance(inputs, Tensor):
        return (inputs,)
    if type(inputs) is dict:
        return tuple(inputs.values())
    if isinstance(inputs, Mapping):
        raise TypeError(f"`inputs` of {caller}() may be a dict, but not a "
                        f"{type(inputs).__name__}; convert it with dict(...)")
    return tuple(inputs)


def _grad_outputs(grad_outputs: object) -> tuple[object, ...]:
    """Given grad_outputs as a tuple: one array, or the given entries."""
    if isinstance(grad_outputs, TENSOR_OR_ARRAY):
        return (grad_outputs,)
    return tuple(grad_outputs)


def _seeds(outputs: tuple[object, ...], grad_outputs: object, batched: bool,
           create_graph: bool) -> list[Gradient | None]:
    """The starting cotangent of each output (`grad_outputs` as the caller gave it):
    checked, cast to the output's dtype."""
    seeds: list[Gradient | None] = []
    given = (None,) * len(outputs) if grad_outputs is None else _grad_outputs(grad_outputs)
    for i, (out, g) in enumerate(zip(outputs, given, strict=False)):
        if not isinstance(out, Tensor):
            raise TypeError(f"outputs[{i}] is a {type(out).__name__}; outputs must be Tensors")
        if g is None:
            if not out._requires_grad:
                seeds.append(None)
                continue
            if out._data.size != 1:
                raise RuntimeError(f"output {i} has shape {out.shape}: an implicit gradient "
                                   "(grad_outputs None) exists only for one-element outputs; "
                                   "pass grad_outputs with the output's shape")
            if batched:
                raise ValueError(f"grad_outputs[{i}] is None but is_grads_batched=True needs "
                                 "every grad_output with a leading batch dimension")
            seeds.append(_unit_seed(out._data))
        elif isinstance(g, TENSOR_OR_ARRAY):
            shape = g.shape[1:] if batched else g.shape
            if (batched and g.ndim == 0) or shape != out.shape:
                batch_note = (" after its leading batch dimension (is_grads_batched=True)"
                              if batched else "")
                raise RuntimeError(f"grad_outputs[{i}] has shape {g.shape} but output {i} has "
                                   f"shape {out.shape}; they must match exactly{batch_note}")
            g = g if create_graph else plain(g)
            seeds.append(g if g.dtype == out.dtype else g.astype(out.dtype))
        else:
            raise TypeError(f"grad_outputs[{i}] is a {type(g).__name__}; grad_outputs entries "
                            "must be Tensors, NumPy arrays or None (wrap numbers with "
                            "rv.tensor(...))")
    return seeds


_UNITS: dict[np.dtype, np.ndarray] = {}


def _unit_seed(data: np.ndarray) -> np.ndarray:
    """A new array of ones shaped like the one-element `data` (as np.ones, but faster)."""
    unit = _UNITS.get(data.dtype)
    if unit is None:
        unit = _UNITS[data.dtype] = np.ones((), data.dtype)
    return unit.copy() if data.ndim == 0 else unit.reshape(data.shape).copy()


def _check_graph_ends(outputs: tuple[object, ...], seeds: list[object],
                      inputs: tuple[object, ...]) -> None:
    """RuntimeError unless there is one seed per output and every end requires grad."""
    if len(seeds) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} outputs but {len(seeds)} grad_outputs; "
                           "pass one grad_output per output (None for one-element outputs)")
    for i, out in enumerate(outputs):
        if not out._requires_grad:
            raise RuntimeError(f"output {i} does not require grad: nothing recorded it; make "
                               "sure an input tensor has requires_grad=True")
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise RuntimeError(f"inputs[{i}] is a {type(t).__name__}; inputs must be Tensors")
        if not t._requires_grad:
            raise RuntimeError(f"inputs[{i}] does not require grad; create it with "
                               "requires_grad=True to differentiate with respect to it")


# ---------------------------------------------------------------- public API


def grad(outputs: Tensor | Iterable[Tensor], inputs: Tensor | Iterable[Tensor] | dict,
         grad_outputs: object = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False
         ) -> tuple[Tensor | None, ...] | dict[object, Tensor | None]:
    """Sum of the vector-Jacobian products of `outputs` for each input (torch.autograd.grad)."""
    if create_graph and not is_grad_enabled():  # torch's engine records a create_graph
        with enable_grad():  # pass whatever the caller's grad mode (under no_grad too)
            return grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                        only_inputs, allow_unused, is_grads_batched, materialize_grads)
    if materialize_grads and allow_unused is False:
        raise ValueError("materialize_grads=True returns zeros for unused inputs, which "
                         "contradicts allow_unused=False; drop allow_unused")
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    if (grad_outputs is None and only_inputs and not is_grads_batched
            and isinstance(outputs, Tensor) and isinstance(inputs, Tensor)
            and outputs._requires_grad and inputs._requires_grad and outputs._data.size == 1):
        # the common `rv.grad(y, x)`: every check of `_arguments` holds, the seed is a one
        outputs, inputs_tuple = (outputs,), (inputs,)
        seeds: list[Gradient | None] = [_unit_seed(outputs[0]._data)]
        batch = None
    else:
        outputs, inputs_tuple, seeds, batch = _arguments(
            outputs, inputs, grad_outputs, only_inputs, is_grads_batched, create_graph)
    gradients = None
    if len(outputs) == 1 and batch is None:
        gradients = one_call_gradients(outputs[0], seeds[0], inputs_tuple, retain_graph,
                                       create_graph)
    if gradients is None:
        gradients = _walk(outputs, seeds, inputs_tuple, retain_graph, create_graph, batch)
    for i, t in enumerate(inputs_tuple):
        if t._hooks is not None and gradients[i] is not None:
            gradients[i] = leaf_tensor_hooks(t, gradients[i], create_graph)
    result: list[Tensor | None] = []
    complete = True
    for g in gradients:
        complete = complete and g is not None
        result.append(g if g is None or isinstance(g, Tensor) else wrap(np.asarray(g)))
    if not complete:
        _unused(result, inputs_tuple, allow_unused, materialize_grads, create_graph)
    if type(inputs) is dict:
        return dict(zip(inputs.keys(), result, strict=True))
    return tuple(result)


def _walk(outputs: tuple[Tensor, ...], seeds: list[Gradient | None],
          inputs: tuple[Tensor, ...], retain_graph: bool, create_graph: bool,
          batch: int | None) -> list[Gradient | None]:
    """The gradient flowing into each of `inputs`, from one backward `Pass` over the graph."""
    graph = Pass(outputs, seeds, inputs)
    graph.run(retain_graph, create_graph, batch)
    return [graph.gradient(t) for t in inputs]


def _arguments(outputs: object, inputs: object, grad_outputs: object, only_inputs: bool,
               batched: bool, create_graph: bool
               ) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], list[Gradient | None],
                          int | None]:
    """`grad`'s arguments checked and normalised: the outputs and inputs as tuples, the
    seed of each output, and the batch size of batched grad_outputs (else None)."""
    outputs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
    inputs_tuple = (inputs,) if isinstance(inputs, Tensor) else _inputs(inputs, "grad")
    if not inputs_tuple:
        raise RuntimeError("`inputs` of grad() is empty; pass the tensors to differentiate "
                           "with respect to")
    if not only_inputs:
        warnings.warn("only_inputs is deprecated and ignored; use rv.backward to accumulate "
                      "gradients into other parts of the graph", FutureWarning, stacklevel=3)
    seeds = _seeds(outputs, grad_outputs, batched, create_graph)
    batch = None
    if batched:
        sizes = {s.shape[0] for s in seeds if s is not None}
        if len(sizes) > 1:
            raise ValueError(f"grad_outputs have different batch sizes {sorted(sizes)}; with "
                             "is_grads_batched=True their first dimensions must agree")
        batch = sizes.pop() if sizes else None
    _check_graph_ends(outputs, seeds, inputs_tuple)
    return outputs, inputs_tuple, seeds, batch


def _unused(result: list[Tensor | None], inputs: tuple[Tensor, ...], allow_unused: bool,
            materialize_grads: bool, create_graph: bool) -> None:
    """Fill in the gradients of unused inputs (None, or zeros when `materialize_grads`), or
    raise when unused inputs are not allowed."""
    for i, (t, g) in enumerate(zip(inputs, result, strict=True)):
        if g is not None:
            continue
        if not allow_unused:
            raise RuntimeError(f"inputs[{i}] was not used to compute the outputs; pass "
                               "allow_unused=True to get None for it (or "
                               "materialize_grads=True to get zeros)")
        if materialize_grads:
            result[i] = Tensor(np.zeros(t.shape, t.dtype), requires_grad=bool(create_graph))


def backward(tensors: Tensor | Iterable[Tensor], grad_tensors: object = None,
             retain_graph: bool | None = None, create_graph: bool = False,
             inputs: Tensor | Iterable[Tensor] | dict | None = None) -> None:
    """Accumulate the gradients of `tensors` into `.grad` of the leaves (or of `inputs`)."""
    if create_graph and not is_grad_enabled():  # as in `grad`: a create_graph pass records
        with enable_grad():
            return backward(tensors, grad_tensors, retain_graph, create_graph, inputs)
    inputs_tuple = None if inputs is None else _inputs(inputs, "backward")
    if inputs_tuple == ():
        raise RuntimeError("`inputs` of backward() is empty; leave it out to fill every leaf")
    tensors = _tensors(tensors)
    seeds = _seeds(tensors, grad_tensors, False, create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    _check_graph_ends(tensors, seeds, inputs_tuple or ())
    graph = Pass(tensors, seeds, inputs_tuple)
    if inputs_tuple is None:
        graph.run(retain_graph, create_graph)
        filled = list(graph.leaves.values())
    else:  # as torch: a non-leaf input retains its grad (from now on) and its node runs
        unique = {id(t): t for t in inputs_tuple}.values()
        for t in unique:
            if t.grad_fn is not None:
                retain(t)
        graph.input_nodes = frozenset(t.grad_fn for t in unique if t.grad_fn is not None)
        graph.run(retain_graph, create_graph)
        filled = [(t, graph.gradient(t)) for t in unique if t.grad_fn is None]
    for t, g in filled:
        if g is not None:
            accumulate_leaf(t, g, create_graph)
