"""What each node of an FX graph gives, learnt without computing anything (for `rv.fx`).

`rv.fx` plans a graph (which nodes compile, which run in eager PyTorch) from the shape,
dtype and kind of every node's value. Those come from running the graph on FakeTensors —
tensors with metadata and no data, the values Dynamo itself records as
`node.meta["example_value"]` — for the concrete inputs of one call, or for Dynamo's own
example values, whose sizes may be symbolic (`s0` where Dynamo made a dimension dynamic):

    facts = propagate(gm, [x, 0.5])
    facts = propagate(gm, symbolic_examples(gm))   # sizes s0, s0 * 5, ...: torch.SymInt
    facts.values[node]      # FakeTensor(size=(4, 3), dtype=float64), a SymFloat, a tuple...
    facts.mutating          # the nodes that write into a tensor (`add_`, batch_norm(training))
    facts.mutated           # the storages those writes reach (views share their base's)
    facts.autocast          # node -> the autocast state it runs under, where a block
                            # of the graph's own changed it (see below)
    facts.lowered           # the nodes whose f32 operands autocast casts to bf16/f16

Every tensor the graph reads (inputs, attributes, a module's parameters and buffers) is
replaced by a fake one before any node runs, so no node writes into the model's real
buffers or the caller's tensors, and the random stream and grad mode are as before. A node
that cannot run on fakes (an op without a fake kernel, a value read from data) has the
value `UNKNOWN`, and so has every node that uses it.

The graph runs under the caller's `torch.autocast` state (Dynamo compiles a model called
under autocast with that state on, and guards on it), and its own `_enter_autocast` /
`_exit_autocast` nodes change it as they would at run time, so the fake values have
autocast's dtypes: `rv.fx` compiles each node to give the dtype its fake value has.
`facts.autocast` holds the state each node inside such a block runs under (a node left to
eager PyTorch runs under it). A node whose result is bf16/f16 under autocast and f32 (or
an error) without it is one of autocast's lower-precision ops, whose f32 operands it casts:
`facts.lowered` (its op lists live in C++; this asks the op itself, on fakes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._pytree import tree_flatten, tree_map

UNKNOWN = object()  # the value of a node that could not run on fake tensors


@dataclass
class Facts:
    """The fake value of every node, and which nodes write into tensors."""

    mode: FakeTensorMode  # the fake mode the values belong to
    values: dict[torch.fx.Node, Any] = field(default_factory=dict)
    mutating: set[torch.fx.Node] = field(default_factory=set)
    mutated: set[int] = field(default_factory=set)  # storage ids, see `storage_id`
    autocast: dict[torch.fx.Node, tuple[Any, ...]] = field(default_factory=dict)
    lowered: set[torch.fx.Node] = field(default_factory=set)


def storage_id(tensor: torch.Tensor) -> int:
    """The identity of a tensor's storage: equal for a tensor and its views."""
    return tensor.untyped_storage()._cdata


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors inside a (nested) argument or result."""
    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


AUTOCAST_DEVICES = ("cpu", "cuda")
REDUCED_PRECISION = (torch.bfloat16, torch.float16)  # storage dtypes: torch rounds each op


def autocast_state() -> tuple[Any, ...]:
    """Whether autocast is on, and its dtype, on each device type it serves."""
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
                 for d in AUTOCAST_DEVICES)


@contextmanager
def autocast_kept() -> Iterator[None]:
    """The autocast state as it was, whatever autocast regions the graph entered and did
    not leave (a node that raised between them)."""
    state = autocast_state()
    try:
        yield
    finally:
        set_autocast_state(state)


def set_autocast_state(state: tuple[Any, ...]) -> None:
    """Autocast on or off, and its dtype, on each device type as `state` (`autocast_state`)
    says."""
    for device, (enabled, dtype) in zip(AUTOCAST_DEVICES, state, strict=True):
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)


@contextmanager
def autocast_as(state: tuple[Any, ...] | None) -> Iterator[None]:
    """Run under the autocast state `state` (None: as it is), restored after."""
    if state is None:
        yield
        return
    with autocast_kept():
        set_autocast_state(state)
        yield


class _FakeInterpreter(torch.fx.Interpreter):
    """Runs each node on fakes, recording its value and whether it wrote into a tensor."""

    def __init__(self, gm: torch.fx.GraphModule, mode: FakeTensorMode) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.mode = mode
        self.facts = Facts(mode)
        self.entry_state = autocast_state()  # the caller's

    def fake(self, value: Any) -> Any:
        """`value` with each tensor a fake of this mode (a fake of it already kept)."""
        return tree_map(lambda v: self.mode.from_tensor(v, static_shapes=True)
                        if isinstance(v, torch.Tensor) and not
                        (isinstance(v, FakeTensor) and v.fake_mode is self.mode) else v, value)

    def run_node(self, n: torch.fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if any(v is UNKNOWN for v in tree_flatten((args, kwargs))[0]):
            result = UNKNOWN
        else:
            result = self._run(n, args, kwargs)
        self.facts.values[n] = result
        return result

    def _run(self, n: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        watched = tensors_in((args, kwargs))
        if n.op == "call_module":
            watched += self.module_state(n.target).values()
        if (state := autocast_state()) != self.entry_state:
            self.facts.autocast[n] = state
        versions = [t._version for t in watched]
        try:
            with self.mode:
                result = getattr(self, n.op)(n.target, args, kwargs)
        except Exception:  # noqa: BLE001 (any failure only means: value unknown)
            result = UNKNOWN
        if result is UNKNOWN:
            return result
        if self.lowered(n, args, kwargs, result):
            self.facts.lowered.add(n)
        written = [t for t, v in zip(watched, versions, strict=True) if t._version != v]
        if written:
            self.facts.mutating.add(n)
            self.facts.mutated.update(storage_id(t) for t in written)
        return result

    def lowered(self, n: torch.fx.Node, args: Any, kwargs: Any, result: Any) -> bool:
        """Whether autocast made `n` a lower-precision op: its result holds bf16/f16
        tensors, and run again with autocast off it holds none (or fails: the operands'
        dtypes differ without autocast's casts)."""
        if not n.op.startswith("call") or not any(enabled for enabled, _ in autocast_state()) \
                or not any(t.dtype in REDUCED_PRECISION for t in tensors_in(result)):
            return False  # (a placeholder run again would take the next input)
        with autocast_kept():
            set_autocast_state(tuple((False, dtype) for _, dtype in autocast_state()))
            try:
                with self.mode:
                    plain = getattr(self, n.op)(n.target, args, kwargs)
            except Exception:  # noqa: BLE001 (mixed dtypes refused: autocast cast them)
                return True
        return not any(t.dtype in REDUCED_PRECISION for t in tensors_in(plain))

    def placeholder(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self.fake(super().placeholder(target, args, kwargs))

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self.fake(super().get_attr(target, args, kwargs))

    def module_state(self, path: str) -> dict[str, torch.Tensor]:
        """A module's parameters and buffers, as fakes (the same fakes at every use)."""
        module = self.module.get_submodule(path)
        state = dict(module.named_parameters()) | dict(module.named_buffers())
        return {name: self.fake(t) for name, t in state.items()}

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        module = self.module.get_submodule(target)
        return torch.func.functional_call(module, self.module_state(target), args, kwargs)


@contextmanager
def _global_state_kept() -> Iterator[None]:
    """Grad mode, autocast and the random stream as they were, whatever the graph's nodes
    set; autocast's cache of cast parameters off meanwhile (keyed by a tensor's address,
    it could hand a fake the cast of a fake freed before it at the same address)."""
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        with torch.random.fork_rng(devices=[]), \
                torch.set_grad_enabled(torch.is_grad_enabled()), autocast_kept():
            yield
    finally:
        torch.set_autocast_cache_enabled(cache)


def is_symbolic(value: Any) -> bool:
    """Whether `value` (a size, a tuple of them, tensors) holds a size that is not a number."""
    return any(isinstance(v, torch.SymInt) and not v.node.expr.is_number
               for v in _numbers_in(value))


def _numbers_in(value: Any) -> Iterator[Any]:
    """The leaves of `value`, with a tensor's sizes and a `torch.Size`'s (which pytree
    keeps whole) in its place."""
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor):
            yield from leaf.shape
        elif isinstance(leaf, tuple):
            yield from leaf
        else:
            yield leaf


def symbolic_examples(gm: torch.fx.GraphModule) -> list[Any] | None:
    """The fake values Dynamo gave the graph's inputs, where some size among them is
    symbolic (a dynamic graph); None for a graph of static sizes or without them."""
    examples = [n.meta.get("example_value", UNKNOWN) for n in gm.graph.nodes
                if n.op == "placeholder"]
    if any(e is UNKNOWN for e in examples) or not is_symbolic(examples):
        return None
    return examples


def propagate(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Facts:
    """The fake value of every node of `gm` for inputs like `inputs`: concrete values
    (static sizes), or fake ones (`symbolic_examples`), run in their own fake mode."""
    modes = [v.fake_mode for v in inputs if isinstance(v, FakeTensor)]
    mode = modes[0] if modes else FakeTensorMode(shape_env=ShapeEnv())
    interpreter = _FakeInterpreter(gm, mode)
    with _global_state_kept():
        interpreter.run(*inputs)
    return interpreter.facts


__all__ = ["REDUCED_PRECISION", "UNKNOWN", "Facts", "autocast_as", "autocast_kept",
           "autocast_state", "is_symbolic", "propagate", "storage_id", "symbolic_examples",
           "tensors_in"]
