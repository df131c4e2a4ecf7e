"""`rv.autograd.Function`: a Python forward and backward recorded on the tape (torch's).

Consumes a subclass of `Function` with static `forward` and `backward` methods, in either of
torch's two styles, and its `apply(*args)` calls; produces the forward's results, recorded
(while grad mode is on and a Tensor argument requires grad) as outputs of one graph node
whose VJP calls the user's `backward`:

    class Exp(rv.autograd.Function):
        @staticmethod
        def forward(ctx, x):                 # or forward(x) with setup_context(ctx, inputs,
            y = x.exp()                      #   output) that fills ctx
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, gy):               # one gradient per forward argument (None for
            (y,) = ctx.saved_tensors         #   a non-Tensor or where there is none)
            return gy * y

    y = Exp.apply(x)                         # y.grad_fn: <ExpBackward>, the ctx itself

As in torch the context is the node (`y.grad_fn`, an instance of `Exp._backward_cls`), so
`y.grad_fn.saved_tensors` works. `forward` runs under `no_grad`; `backward` runs with grad
mode on when the pass builds a graph (`create_graph=True`), so a backward written with
Tensor operations is differentiable again; `@once_differentiable` marks one that is not.

What torch does and this follows (checked against torch 2.13):
- An output that is an input (not marked dirty) comes back as a new Tensor sharing the
  input's memory and version counter (torch's view), recorded as a view of that input: an
  in-place write to it raises. An input marked dirty (`ctx.mark_dirty`) comes back as the
  same object, its version increased and its history the node's (a leaf that requires grad
  cannot be dirtied while recording). Other outputs are the objects `forward` returned.
- Integer and bool outputs, and outputs marked non-differentiable, do not require grad;
  `backward` gets zeros for them (and for any output that received no gradient) unless
  `ctx.set_materialize_grads(False)`, and None for non-Tensor outputs. A dirty output
  marked non-differentiable leaves the graph in place (torch returns a copy).
- `backward` may return more values than there are arguments if the extra ones are None;
  a gradient is cast to its input's dtype and summed to its shape where the input
  broadcasts to it; anything else raises torch's errors.
- A tensor saved with `save_for_backward` is checked against its version counter when
  `saved_tensors` is read; after a pass without `retain_graph`, reading it raises.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from reverie.runtime.tensors.anomaly import AnomalyMode, remember_trace
from reverie.runtime.tensors.grad_mode import enable_grad, grad_enabled, no_grad
from reverie.runtime.tensors.graph import GraphNode
from reverie.runtime.tensors.inplace import (
    check_not_stale,
    check_versions,
    counter,
    follow,
    recorded_view,
    sum_to,
)
from reverie.runtime.tensors.tensor import Tensor
from reverie.runtime.tensors.tensor_core import FLOAT_KINDS, wrap

Gradient = np.ndarray | Tensor

BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")
ONCE_DIFFERENTIABLE = ("trying to differentiate twice a function that was marked with "
                       "@once_differentiable")


class FunctionCtx:
    """What `forward` (or `setup_context`) leaves for `backward`: the tensors to save, the
    inputs it wrote in place, the outputs that are not differentiable, and whether missing
    gradients reach `backward` as zeros. `needs_input_grad[i]` says whether argument `i`
    is a Tensor that requires grad."""

    needs_input_grad: tuple[bool, ...] = ()
    materialize_grads = True
    _to_save: tuple[Tensor | None, ...] = ()
    _dirty: tuple[Tensor, ...] = ()
    _non_differentiable: tuple[Tensor, ...] = ()

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keep `tensors` (Tensors or None) for `backward` (`ctx.saved_tensors`)."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors, but argument {i} "
                                f"is of type {type(t).__name__}")
        self._to_save = tensors

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Say that `forward` wrote these input tensors in place (it must return them)."""
        self._dirty = _only_tensors("mark_dirty", tensors)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        """Say that these outputs have no gradient: they will not require grad."""
        self._non_differentiable = _only_tensors("mark_non_differentiable", tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """Whether `backward` gets zeros (True, the default) or None for outputs that
        received no gradient."""
        self.materialize_grads = bool(value)


def _only_tensors(method: str, values: Sequence[object]) -> tuple[Tensor, ...]:
    """`values` as a tuple, or a TypeError naming `method` if one is not a Tensor."""
    for i, v in enumerate(values):
        if not isinstance(v, Tensor):
            raise TypeError(f"{method} only accepts tensors, but argument {i} is of type "
                            f"{type(v).__name__}")
    return tuple(values)


class BackwardFunction(FunctionCtx, GraphNode):
    """The context of one `Function.apply` call and, when it was recorded, the graph node
    of its outputs (torch's `BackwardCFunction`). Each Function subclass has its own
    subclass of this, named `<Function>Backward` (`Function._backward_cls`)."""

    _forward_cls: type[Function]

    def __init__(self) -> None:
        self.extras = None
        self._edges: tuple[Tensor, ...] = ()  # the Tensor arguments that require grad
        self._edge_positions: tuple[int, ...] = ()  # their places among the arguments
        self._tensor_inputs: tuple[Tensor | None, ...] = ()  # per Tensor argument: its edge
        self._tensor_positions: tuple[int, ...] = ()  # the places of the Tensor arguments
        self._outputs: list[tuple[tuple[int, ...], np.dtype]] = []  # per Tensor result
        self._output_positions: tuple[int, ...] = ()  # their places among the results
        self._result_count = 0
        self._saved_versions: tuple[int, ...] | None = None  # set once the node is recorded
        self._freed = False

    # ------------------------------------------------------------ the graph node

    @property
    def edges(self) -> tuple[Tensor, ...]:
        return self._edges

    @property
    def outputs(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return self._outputs

    def name(self) -> str:
        return type(self).__name__

    def hook_layout(self) -> tuple[tuple[int, ...], int] | None:
        """The tensor results' places among the forward's results (hooks see them all)."""
        if len(self._output_positions) == self._result_count:
            return None
        return self._output_positions, self._result_count

    def input_edges(self) -> tuple[Tensor | None, ...]:
        return self._tensor_inputs

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """The tensors `save_for_backward` kept, checked against their version counters
        (torch's error if one was written in place since)."""
        if self._freed:
            raise RuntimeError(BACKWARD_TWICE)
        if self._saved_versions is not None:
            check_versions(tuple((t, v) for t, v in zip(self._to_save, self._saved_versions,
                                                        strict=True) if t is not None),
                           self.name())
        return self._to_save

    def vjp(self, cotangents: list[Gradient | None], create_graph: bool, batch: int | None,
            retain_graph: bool = True) -> list[Gradient | None]:
        """The gradient of each edge from the user's `backward`, given one cotangent per
        Tensor output (None: zero); Tensors when `create_graph`, else arrays."""
        if batch is not None:
            raise RuntimeError(
                f"{self.name()}: is_grads_batched=True cannot run through the custom "
                f"rv.autograd.Function {self._forward_cls.__name__} (its backward is Python "
                "code called once per gradient); compute the gradients one at a time")
        grad_outputs = self._backward_arguments(cotangents)
        with enable_grad() if create_graph else no_grad():
            results = _user_backward(self._forward_cls)(self, *grad_outputs)
        if not retain_graph:
            self._to_save, self._freed = (), True
        return self._input_gradients(results, create_graph)

    def _backward_arguments(self, cotangents: list[Gradient | None]) -> list[Tensor | None]:
        """One argument per forward result: the cotangent as a Tensor (zeros where there is
        none and grads are materialized), None for a non-Tensor result."""
        arguments: list[Tensor | None] = [None] * self._result_count
        for position, g, (shape, dtype) in zip(self._output_positions, cotangents,
                                               self._outputs, strict=True):
            if g is None and self.materialize_grads:
                g = np.zeros(shape, dtype)
            arguments[position] = g if g is None or isinstance(g, Tensor) else wrap(g)
        return arguments

    def _input_gradients(self, results: object, create_graph: bool
                         ) -> list[Gradient | None]:
        """`backward`'s results checked (count, None for non-Tensors) and converted: one
        gradient per edge."""
        results = results if isinstance(results, tuple) else (results,)
        count = len(self.needs_input_grad)
        if len(results) < count or any(r is not None for r in results[count:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {count}, got {len(results)})")
        for i, g in enumerate(results[:count]):
            if g is not None and i not in self._tensor_positions:
                raise RuntimeError(f"function {self.name()} returned a gradient different "
                                   f"than None at position {i + 1}, but the corresponding "
                                   "forward input was not a Tensor")
        return [self._gradient(results[i], edge, i, create_graph)
                for i, edge in zip(self._edge_positions, self._edges, strict=True)]

    def _gradient(self, g: object, edge: Tensor, position: int, create_graph: bool
                  ) -> Gradient | None:
        """The gradient `backward` returned for argument `position` (its edge `edge`) with
        the edge's dtype and shape (summed where the edge broadcasts to it)."""
        if g is None:
            return None
        if not isinstance(g, Tensor):
            raise RuntimeError(f"function {self.name()} returned a {type(g).__name__} as the "
                               f"gradient of argument {position}: expected a Tensor or None")
        value = g if create_graph else g._data
        if value.shape != edge.shape:
            if _broadcast_shape(edge.shape, value.shape) != value.shape:
                raise RuntimeError(f"Function {self.name()} returned an invalid gradient at "
                                   f"index {position} - got {list(value.shape)} but expected "
                                   f"shape compatible with {list(edge.shape)}")
            value = sum_to(value, edge.shape)
        return value if value.dtype == edge.dtype else value.astype(edge.dtype)

    # ------------------------------------------------------------ recording a call

    def record(self, arguments: tuple[object, ...], results: object) -> object:
        """`forward`'s `results` as `apply` returns them: outputs wrapped as this node's
        (when the call is recorded), returned inputs aliased, dirty inputs rebased."""
        values = results if isinstance(results, tuple) else (results,)
        dirty = self._check_dirty(arguments, values)
        recording = grad_enabled() and any(self.needs_input_grad)
        if recording:
            self._connect(arguments, dirty)
        inputs = {id(a): a for a in arguments if isinstance(a, Tensor)}
        non_differentiable = {id(t) for t in self._non_differentiable}
        aliases: dict[int, Tensor] = {}
        positions = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
        self._outputs = [(values[i].shape, values[i].dtype) for i in positions]
        self._output_positions, self._result_count = tuple(positions), len(values)
        wrapped = list(values)
        for index, position in enumerate(positions):
            value = values[position]
            differentiable = (recording and id(value) not in non_differentiable
                              and value.dtype in FLOAT_KINDS)
            if id(value) in dirty:
                wrapped[position] = self._rebase(value, index, differentiable, recording)
            elif id(value) in inputs:
                if id(value) not in aliases:
                    aliases[id(value)] = self._alias(value, index, differentiable)
                wrapped[position] = aliases[id(value)]
            elif differentiable:
                wrapped[position] = self._own(value, index, inputs.values())
            else:
                _mark_views(value, inputs.values())
        self._dirty = self._non_differentiable = ()
        if recording:
            self._saved_versions = tuple(0 if t is None else t._version for t in self._to_save)
        return tuple(wrapped) if isinstance(results, tuple) else wrapped[0]

    def _check_dirty(self, arguments: tuple[object, ...], values: tuple[object, ...]
                     ) -> set[int]:
        """The ids of the dirty inputs, after torch's checks: every dirty tensor is returned
        (RuntimeError), and one that is not an input is only warned about."""
        returned = {id(v) for v in values if isinstance(v, Tensor)}
        if any(id(t) not in returned for t in self._dirty):
            raise RuntimeError("Some elements marked as dirty during the forward method were "
                               "not returned as output. The inputs that are modified inplace "
                               "must all be outputs of the Function.")
        inputs = {id(a) for a in arguments if isinstance(a, Tensor)}
        if any(id(t) not in inputs for t in self._dirty):
            warnings.warn("ctx.mark_dirty() received a tensor that was not an input. Only "
                          "input Tensors that have been mutated should be passed to "
                          "ctx.mark_dirty().", UserWarning, stacklevel=4)
        return {id(t) for t in self._dirty if id(t) in inputs}

    def _connect(self, arguments: tuple[object, ...], dirty: set[int]) -> None:
        """Make this node the one the call's outputs flow from: its edges are the Tensor
        arguments that require grad (a computed one by its place in the graph now, which a
        dirty input leaves)."""
        tensor_inputs: list[Tensor | None] = []
        edges: list[Tensor] = []
        edge_positions: list[int] = []
        tensor_positions: list[int] = []
        for position, a in enumerate(arguments):
            if not isinstance(a, Tensor):
                continue
            tensor_positions.append(position)
            if not a._requires_grad:
                tensor_inputs.append(None)
                continue
            if id(a) in dirty:
                self._check_writable(a)
            check_not_stale(a)
            edge = a if a.grad_fn is None else wrap(a._data, a.grad_fn, a._output_index)
            tensor_inputs.append(edge)
            edges.append(edge)
            edge_positions.append(position)
        self._tensor_inputs, self._edges = tuple(tensor_inputs), tuple(edges)
        self._edge_positions = tuple(edge_positions)
        self._tensor_positions = tuple(tensor_positions)
        if AnomalyMode.enabled:
            remember_trace(self)

    def _check_writable(self, t: Tensor) -> None:
        """torch's error for a dirty leaf that requires grad; Reverie's for a dirty view
        recorded in the graph (its base's history would not follow)."""
        if t.grad_fn is None:
            raise RuntimeError(f"{self._forward_cls.__name__}: a leaf Variable that requires "
                               "grad has been used in an in-place operation (ctx.mark_dirty); "
                               "pass a clone() of it")
        if t._view_of is not None:
            raise RuntimeError(f"{self._forward_cls.__name__}: an input marked dirty is a view "
                               "recorded in the graph; Reverie would not update its base's "
                               "history: pass the base, or a clone() of the view")

    def _rebase(self, t: Tensor, index: int, differentiable: bool, recording: bool
                ) -> Tensor:
        """Dirty input `t`, written by `forward`: one version newer, and (when recorded)
        output `index` of this node, or out of the graph if not differentiable."""
        counter(t).value += 1
        if differentiable:
            t.grad_fn, t._output_index, t._requires_grad = self, index, True
            follow(t)  # its live views take the new history
        elif recording:
            t.grad_fn, t._output_index, t._requires_grad = None, 0, False
        return t

    def _alias(self, t: Tensor, index: int, differentiable: bool) -> Tensor:
        """Input `t` returned as output `index`: a new Tensor sharing its memory (a view
        recorded in the graph when differentiable). Either way it is a custom Function's
        view, which cannot be written in place with grad recorded, as torch's."""
        view = wrap(t._data, self, index) if differentiable else wrap(t._data)
        return recorded_view(t, view, t._data)

    def _own(self, value: Tensor, index: int, inputs: object) -> Tensor:
        """Result `value` made output `index` of this node (a recorded view of the input it
        shares memory with, if any: an in-place write to it then raises)."""
        value.grad_fn, value._output_index, value._requires_grad = self, index, True
        _mark_views(value, inputs)
        return value


def _mark_views(value: Tensor, inputs: Iterable[Tensor]) -> None:
    """A result sharing memory with an input made that input's custom-Function view (an
    in-place write to it with grad recorded then raises, as torch's)."""
    shared = value._version_counter
    for t in inputs:
        if shared is not None and t._version_counter is shared:
            recorded_view(t, value, value._data)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape `a` and `b` broadcast to, or None if they do not."""
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


def _user_backward(function: type[Function]) -> Callable[..., object]:
    """The backward `function` implements: `backward` or `vjp` (torch's alias), not both."""
    backward, vjp = function.backward, function.vjp
    if backward is not Function.backward and vjp is not Function.vjp:
        raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is "
                           "not allowed. You should only implement one of them.")
    return vjp if vjp is not Function.vjp else backward


class Function:
    """A differentiable operation written in Python (torch.autograd.Function): subclass it
    with static `forward` and `backward` (see the module docstring) and call `apply`."""

    _backward_cls: type[BackwardFunction] = BackwardFunction

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Give each Function its node class, `<Name>Backward` (torch's `_backward_cls`)."""
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(f"{cls.__name__}Backward", (BackwardFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})

    def __init__(self, *args: object, **kwargs: object) -> None:
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd "
                      "functions are all static, so you should invoke them on the class "
                      "itself (Function.apply).", DeprecationWarning, stacklevel=2)

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           f"forward method: {type(self).__name__}.apply(...)")

    @staticmethod
    def forward(*args: object, **kwargs: object) -> object:
        """The operation: `forward(ctx, *args)`, or `forward(*args)` with `setup_context`."""
        raise NotImplementedError("You must implement the forward function for custom "
                                  "rv.autograd.Function.")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[object, ...], output: object) -> None:
        """Fill `ctx` from the arguments and results of `forward(*args)` (torch's style
        where `forward` takes no ctx)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: object) -> object:
        """One gradient per forward argument, given one per forward result."""
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    vjp = backward

    @classmethod
    def apply(cls, *args: object, **kwargs: object) -> object:
        """Run `forward` under no_grad and return its results, recorded as the outputs of
        one node whose backward is `backward` (when grad mode is on and a Tensor argument
        requires grad)."""
        ctx = cls._backward_cls()
        with_setup = cls.setup_context is not Function.setup_context
        if with_setup:  # the arguments bound to forward's parameters, defaults filled in
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, {}
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        with no_grad():
            if with_setup:
                results = cls.forward(*args)
                cls.setup_context(ctx, args, results)
            else:
                results = cls.forward(ctx, *args, **kwargs)
        return ctx.record(args, results)


# ---------------------------------------------------------------- once_differentiable


class DelayedError(GraphNode):
    """The node `@once_differentiable` puts behind a backward's results when the pass
    builds a graph: differentiating through it raises (torch's `Error` node). Its edges
    are detached copies of those results, so that they require grad."""

    def __init__(self, values: Sequence[Tensor | None]) -> None:
        self._inputs = tuple(None if v is None else _fresh_leaf(v) for v in values)
        self.edges = tuple(e for e in self._inputs if e is not None)
        self.outputs = [(v.shape, v.dtype) for v in values if v is not None]
        self.extras = None

    def name(self) -> str:
        return "DelayedError"

    def hook_layout(self) -> tuple[tuple[int, ...], int] | None:
        """The tensor results' places among the forward's results (hooks see them all)."""
        if len(self._output_positions) == self._result_count:
            return None
        return self._output_positions, self._result_count

    def input_edges(self) -> tuple[Tensor | None, ...]:
        return self._inputs

    def vjp(self, cotangents: list[Gradient | None], create_graph: bool, batch: int | None,
            retain_graph: bool = True) -> list[Gradient | None]:
        raise RuntimeError(ONCE_DIFFERENTIABLE)


def _fresh_leaf(value: Tensor) -> Tensor:
    """A leaf that requires grad around `value`'s array (torch's `detach()` then
    `requires_grad = True`)."""
    leaf = wrap(value._data)
    leaf._requires_grad = True
    return leaf


def once_differentiable(backward: Callable[..., object]) -> Callable[..., object]:
    """Decorate a `backward` that is not differentiable (say, written with NumPy): it runs
    under no_grad, and when the pass builds a graph, differentiating its results again
    raises instead of giving zeros (torch's)."""

    @functools.wraps(backward)
    def wrapper(ctx: FunctionCtx, *grad_outputs: object) -> object:
        with no_grad():
            results = backward(ctx, *grad_outputs)
        if not grad_enabled() or not any(isinstance(g, Tensor) and g._requires_grad
                                         for g in grad_outputs):
            return results
        values = results if isinstance(results, tuple) else (results,)
        tensors = [v if isinstance(v, Tensor) else None for v in values]
        node = DelayedError(tensors)
        indices = iter(range(len(node.outputs)))
        return tuple(wrap(v._data, node, next(indices)) if isinstance(v, Tensor) else v
                     for v in values)

    return wrapper
