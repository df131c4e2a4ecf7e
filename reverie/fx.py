"""`rv.fx`: torch FX graphs compiled by Reverie, and the `torch.compile` backend "reverie".

    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    critic = torch.compile(model, backend="reverie")      # registered at `pip install`
    g, = torch.autograd.grad(critic(x).sum(), x, create_graph=True)   # double backward

Each node of the graph is recorded on `reverie.tracing` stand-ins through the one table of
torch targets (`reverie/fx_targets.py`); the recorded statements compile as one Reverie
kernel, which runs inside PyTorch through `rv.torch.function`, so `.backward()` and
`torch.autograd.grad(..., create_graph=True)` to any order run Reverie's compiled VJPs —
what `torch.compile`'s own backend refuses ("does not currently support double backward").

Parameters (`get_attr` nodes, a `call_module`'s weights, and the parameters Dynamo lifts
to graph inputs) are kernel inputs read at every call, so training updates them without
recompiling. A node with no mapping raises `UnsupportedNodeError` naming the node, its
target and its source line; with `fallback=True` it is a graph break instead: the graph is
cut into segments, the mapped runs compiled by Reverie and the unmapped nodes run by eager
PyTorch between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx

from reverie import fx_targets, interop_torch
from reverie.fx_targets import FUNCTIONS, METHODS, MODULES
from reverie.tracing import RECORDER_FILES, Recording, Traced, TraceError, compile_recording

RECORDER_FILES.update({__file__, fx_targets.__file__})

Source = torch.fx.Node | str  # a graph value, or the dotted path of a module parameter


class UnsupportedNodeError(TypeError):
    """A graph node that Reverie cannot compile (no mapping, or an unsupported option)."""


def describe(node: torch.fx.Node, reason: str = "") -> str:
    """`node 'erfinv_1' (call_function torch.erfinv) at model.py:12`, for errors."""
    target = node.target if isinstance(node.target, str) else fx_targets.target_name(node.target)
    lines = [line.strip() for line in
             (node.stack_trace or node.meta.get("stack_trace") or "").splitlines()]
    frames = [i for i, line in enumerate(lines) if line.startswith("File ")]
    where = f"\n  from {' '.join(lines[frames[-1]:frames[-1] + 2])}" if frames else ""
    return f"node '{node.name}' ({node.op} {target}){where}" + (f": {reason}" if reason else "")


@dataclass
class Segment:
    """A run of mapped nodes compiled as one Reverie kernel: it reads `inputs` and
    defines `outputs`, in the kernel's parameter and result order."""

    kernel: interop_torch.KernelFunction
    inputs: list[Source]
    outputs: list[torch.fx.Node]


@dataclass
class EagerNode:
    """An unmapped node run by eager PyTorch (`fallback=True`)."""

    node: torch.fx.Node


@dataclass
class _Open:
    """The segment being recorded: its stand-ins and where each parameter comes from."""

    recording: Recording = field(default_factory=lambda: Recording(literal_dims=True))
    values: dict[Source, Traced] = field(default_factory=dict)
    inputs: list[Source] = field(default_factory=list)
    nodes: set[torch.fx.Node] = field(default_factory=set)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


class _Builder:
    """One walk over the graph, node by node, cutting it into segments."""

    def __init__(self, gm: torch.fx.GraphModule, placeholders: list[torch.fx.Node],
                 inputs: Sequence[Any], fallback: bool) -> None:
        self.gm = gm
        self.fallback = fallback
        self.examples: dict[Source, Any] = {}
        self.constants: dict[torch.fx.Node, Any] = {}
        self.steps: list[Segment | EagerNode] = []
        self.open = _Open()
        for node, example in zip(placeholders, inputs, strict=True):
            self._define(node, example)

    def _define(self, node: torch.fx.Node, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self.examples[node] = value
        else:
            self.constants[node] = _concrete(value)

    # ------------------------------------------------------------ values inside a segment
    def value(self, source: Source) -> Any:
        """The stand-in of `source` in the open segment (a parameter on first use), or
        the Python value of a constant node (a size, a tuple of them)."""
        if isinstance(source, torch.fx.Node) and source in self.constants:
            return self.constants[source]
        seg = self.open
        if source not in seg.values:
            example = self.examples[source]
            name = "v_" + (source.name if isinstance(source, torch.fx.Node)
                           else source.replace(".", "_"))
            seg.values[source] = seg.recording.param_like(name, tuple(map(int, example.shape)),
                                                          _numpy_dtype(example.dtype))
            seg.inputs.append(source)
        return seg.values[source]

    def weights(self, path: str, module: torch.nn.Module) -> dict[str, Traced]:
        """A module's parameters as stand-ins, each read from `path.name` at call time."""
        found = {}
        for name, param in module.named_parameters(recurse=False):
            source = f"{path}.{name}"
            self.examples[source] = param
            found[name] = self.value(source)
        return found

    # ------------------------------------------------------------ nodes
    def emit(self, node: torch.fx.Node) -> Any:
        """Record `node`; raises UnsupportedNodeError when it has no mapping."""
        args = torch.fx.node.map_arg(node.args, self.value)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.value)
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
            rule = MODULES.get(type(module))
            if rule is None:
                raise UnsupportedNodeError(
                    describe(node, f"no mapping for nn.{type(module).__name__}"))
            return rule(module, self.weights(node.target, module), *args, **kwargs)
        table = METHODS if node.op == "call_method" else FUNCTIONS
        rule = table.get(node.target)
        if rule is None:
            raise UnsupportedNodeError(describe(node, "no mapping in reverie/fx_targets.py"))
        return rule(*args, **kwargs)

    def node(self, node: torch.fx.Node) -> None:
        if node.op == "placeholder":
            return
        if node.op == "get_attr":
            self._define(node, _attribute(self.gm, node.target))
            return
        if node.op == "output":
            self.close()
            return
        self.open.recording.origin = lambda: describe(node).split("\n")[0]
        try:
            result = self.emit(node)
        except (UnsupportedNodeError, NotImplementedError, TraceError) as error:
            if not self.fallback:
                if isinstance(error, UnsupportedNodeError):
                    raise
                raise UnsupportedNodeError(describe(node, str(error))) from None
            self.eager(node)
            return
        if isinstance(result, Traced):
            self.open.values[node] = result
            self.open.nodes.add(node)
            self.examples[node] = torch.empty(result.shape, dtype=_TORCH[result.dtype])
        else:
            self.constants[node] = result

    def eager(self, node: torch.fx.Node) -> None:
        """A graph break: close the open segment, run `node` in PyTorch from here on."""
        self.close()
        self.steps.append(EagerNode(node))
        args = torch.fx.node.map_arg(node.args, self._example)
        kwargs = torch.fx.node.map_arg(node.kwargs, self._example)
        self._define(node, _run_eager(self.gm, node, args, kwargs))

    def _example(self, node: torch.fx.Node) -> Any:
        return self.constants[node] if node in self.constants else self.examples[node]

    def close(self) -> None:
        """Compile the open segment: its outputs are the values used outside it."""
        seg = self.open
        outputs = [n for n in seg.values if isinstance(n, torch.fx.Node) and n in seg.nodes
                   and any(user not in seg.nodes for user in n.users)]
        if outputs:
            name = f"segment{len(self.steps)}"
            module = compile_recording(seg.recording, name, [seg.values[n] for n in outputs],
                                       tuple_return=len(outputs) > 1)
            self.steps.append(Segment(interop_torch.function(module[name]), seg.inputs,
                                      outputs))
        self.open = _Open()


_TORCH = {"f64": torch.float64, "f32": torch.float32, "i64": torch.int64, "i32": torch.int32,
          "bool": torch.bool}


def _attribute(gm: torch.nn.Module, path: str) -> Any:
    value: Any = gm
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _run_eager(gm: torch.fx.GraphModule, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_method":
        self, *rest = args
        return getattr(self, node.target)(*rest, **kwargs)
    return node.target(*args, **kwargs)


@dataclass
class Plan:
    """The graph compiled for one signature of its inputs: the steps to run, and the
    values of the nodes that were constants at that signature (sizes, flags)."""

    steps: list[Segment | EagerNode]
    constants: dict[torch.fx.Node, Any]


def _concrete(value: Any) -> Any:
    """A size Dynamo passes as a `SymInt` (a dynamic dimension), as its int."""
    return int(value) if isinstance(value, torch.SymInt) else value


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tuple(map(int, value.shape)), value.dtype
    return type(value), _concrete(value)


class CompiledGraph:
    """The compiled graph: call it as the graph module (same inputs, same outputs).

    Kernels are compiled for the example inputs' shapes (every dimension a literal, as
    Dynamo's graphs are specialised to them); a call with other shapes compiles the graph
    again for those, once, and keeps both."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 fallback: bool) -> None:
        self.gm = gm
        self.fallback = fallback
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(self.placeholders) != len(example_inputs):
            raise ValueError(f"the graph has {len(self.placeholders)} inputs, but "
                             f"{len(example_inputs)} example inputs were given")
        self.output = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.plan_for(example_inputs)

    def plan_for(self, inputs: Sequence[Any]) -> Plan:
        key = tuple(_signature(v) for v in inputs)
        plan = self.plans.get(key)
        if plan is None:
            builder = _Builder(self.gm, self.placeholders, inputs, self.fallback)
            for node in self.gm.graph.nodes:
                builder.node(node)
            plan = self.plans[key] = Plan(builder.steps, builder.constants)
        return plan

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.placeholders):
            raise TypeError(f"the compiled graph takes {len(self.placeholders)} inputs, "
                            f"got {len(inputs)}")
        plan = self.plan_for(inputs)
        env: dict[torch.fx.Node, Any] = dict(plan.constants)
        env.update(zip(self.placeholders, inputs, strict=True))
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                env[node] = _attribute(self.gm, node.target)
        for step in plan.steps:
            if isinstance(step, EagerNode):
                node = step.node
                env[node] = _run_eager(self.gm, node, torch.fx.node.map_arg(node.args, env.get),
                                       torch.fx.node.map_arg(node.kwargs, env.get))
                continue
            args = [env[s] if isinstance(s, torch.fx.Node) else _attribute(self.gm, s)
                    for s in step.inputs]
            results = step.kernel(*args)
            results = results if isinstance(results, tuple) else (results,)
            env.update(zip(step.outputs, results, strict=True))
        return torch.fx.node.map_arg(self.output, env.__getitem__)

    @property
    def sources(self) -> list[str]:
        """The Reverie source of each compiled segment (of the first signature)."""
        plan = next(iter(self.plans.values()))
        return [s.kernel.kernel.module.source for s in plan.steps if isinstance(s, Segment)]


def compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,  # noqa: A001
            fallback: bool = False) -> CompiledGraph:
    """`gm` compiled by Reverie for inputs shaped like `example_inputs` (SPEC §3.7)."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"rv.fx.compile expects a torch.fx.GraphModule, got "
                        f"{type(gm).__name__} (use torch.fx.symbolic_trace(model))")
    return CompiledGraph(gm, example_inputs, fallback)


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
            options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The `torch.compile` backend "reverie" (entry point `torch_dynamo_backends`);
    `torch.compile(model, backend="reverie", options={"fallback": True})` allows graph
    breaks."""
    options = dict(options or {})
    fallback = bool(options.pop("fallback", False))
    if options:
        raise TypeError(f"the reverie backend takes the option 'fallback', got "
                        f"{', '.join(sorted(options))}")
    return compile(gm, example_inputs, fallback=fallback)


__all__ = ["CompiledGraph", "UnsupportedNodeError", "backend", "compile"]
