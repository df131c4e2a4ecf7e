"""The tape: recorded kernel calls (graph nodes) and the walk that runs their compiled VJPs.

Consumes kernel calls with Tensor arguments that require grad (each kernel's Python call
path, `python_call_path`, behind its native entry, hands them to `record_call`); produces,
in a `Pass`, the gradient flowing into every tensor of the graph by running each call's
compiled VJP kernel (`kernel.vjp(wrt)`) from the outputs back to the inputs. Every backward
step is an ordinary kernel call, so with `create_graph=True` it is recorded too and its own
VJP is compiled from the adjoint IR: that is how derivatives of any order work.

    y = m.f(x)              # Node(kernel f, wrt=(0,)), edge x; y.grad_fn is the node
    Pass([y], [1.0], [x])   # runs f_vjp(x, 1.0); .gradient(x) is the result

A node keeps its call's arguments until a pass that does not retain the graph runs it. A
node whose VJP reads none of them (seen in the VJP's IR) keeps only zero-strided stand-ins
with their shapes and may run twice, like torch nodes that saved nothing; any other node
drops them. A gradient that the VJP's IR shows to be a constant zero does not flow (the
input counts as unused).

Everything a call derives from its kernel alone is computed once (`tape_plans.py`: the
kernel's `RecordPlan` and its `VjpPlan`s, re-exported here). A recorded call checks
nothing that running it does not check already (arity, dtypes: the native entry does),
so recording costs a few Python steps on top of the call (benchmarks/latency.py).

The tape knows kernels only through `kernel_protocol.CompiledKernel` (what a kernel offers
the run time: its IR, running it, its VJP kernels), never through the public `Kernel` class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from reverie.runtime.native.kernel_protocol import CompiledKernel
from reverie.runtime.tensors import graph, graph_hooks
from reverie.runtime.tensors.anomaly import (
    AnomalyMode,
    check_gradients,
    remember_trace,
    warn_forward_trace,
)
from reverie.runtime.tensors.grad_mode import grad_enabled
from reverie.runtime.tensors.graph import GraphNode
from reverie.runtime.tensors.inplace import check_not_stale, check_versions
from reverie.runtime.tensors.tape_plans import (
    DIFFERENTIABLE as DIFFERENTIABLE,  # re-exported for the interop layers
)
from reverie.runtime.tensors.tape_plans import RecordPlan, inputs_reaching, record_plan, vjp_plan
from reverie.runtime.tensors.tensor_core import FLOAT_KINDS, Tensor, plain, wrap

Gradient = np.ndarray | Tensor


_STAND_INS: dict[tuple[tuple[int, ...], np.dtype], np.ndarray] = {}
STAND_INS_KEPT = 4096  # distinct (shape, dtype) stand-ins kept for reuse


def _placeholder(value: object) -> object:
    """A read-only zero-strided stand-in with `value`'s shape and dtype (scalars stay as
    they are); one per (shape, dtype), reused."""
    if not isinstance(value, Tensor | np.ndarray):
        return value
    key = (value.shape, value.dtype)
    stand_in = _STAND_INS.get(key)
    if stand_in is None:
        if len(_STAND_INS) >= STAND_INS_KEPT:
            _STAND_INS.clear()
        zero = np.zeros(1, value.dtype)
        zero.flags.writeable = False
        stand_in = _STAND_INS[key] = np.ndarray(value.shape, value.dtype, zero,
                                                strides=(0,) * len(value.shape))
    return stand_in


class Node(GraphNode):
    """One recorded kernel call: the kernel, its arguments (as given, and the arrays behind
    them), and the Tensors (edges) at the parameter positions `wrt` that gradients flow
    back to. Made by `record_call` alone, which sets every slot (no `__init__`: one Python
    frame fewer per recorded call; benchmarks/instructions.py counts the cost):

    kernel, plan (its RecordPlan), wrt, edges, args, arrays, dtype (the call's float dtype),
    outputs ((shape, dtype) of each result), freed (whether `release` ran), versions (None,
    or the version of each argument tensor whose memory had been written in place when
    the call was recorded, by position: `inplace.py`), extras (hooks: `graph.py`)."""

    __slots__ = ("kernel", "plan", "wrt", "args", "arrays", "edges", "dtype", "outputs",
                 "freed", "versions", "extras")

    def name(self) -> str:
        return f"{self.kernel.name}_backward"

    def input_edges(self) -> tuple[Tensor | None, ...]:
        """One entry per parameter that can carry a gradient: the edge, or None."""
        edge_at = dict(zip(self.wrt, self.edges, strict=True))
        return tuple(edge_at.get(i) for i, d in enumerate(self.plan.differentiable) if d)

    def reached(self, cotangents: list[Gradient | None]) -> frozenset[int]:
        """The parameters that the results with a cotangent (not None) depend on."""
        by_result = inputs_reaching(self.kernel, self.plan, self.dtype)
        return frozenset().union(*(by_result[k] for k, c in enumerate(cotangents)
                                   if c is not None))

    def check_saved(self, reads_primal: tuple[bool, ...]) -> None:
        """torch's error when an argument tensor the VJP reads was written in place since
        the call (its version differs from the one recorded)."""
        args, versions = self.args, self.versions
        for i in range(len(args)):
            a = args[i]
            if reads_primal[i] and isinstance(a, Tensor) and a._version_counter is not None:
                expected = versions.get(i, 0) if versions else 0
                if a._version_counter.value != expected:
                    check_versions(((a, expected),), self.name())

    def release(self, keep_stand_ins: bool) -> None:
        """Drop the saved arguments (keeping zero-strided stand-ins with their shapes when
        `keep_stand_ins`: the node may then run again). Computed edges hold stand-ins
        from the start (`record_call`)."""
        self.args = self.arrays = [_placeholder(a) for a in self.args] if keep_stand_ins else ()
        self.freed = True

    def vjp(self, cotangents: list[Gradient | None], create_graph: bool, batch: int | None,
            retain_graph: bool = True) -> list[Gradient | None]:
        """Gradients for each edge (None where provably zero) given output cotangents; the
        saved arguments are released afterwards unless `retain_graph`."""
        plan = self.plan.vjps.get((self.wrt, self.dtype)) or vjp_plan(
            self.kernel, self.wrt, self.dtype, self.plan)
        if self.freed and plan.reads_any:
            raise RuntimeError(
                f"{self.kernel.name}: this part of the graph was already differentiated and "
                "its saved arrays were released; pass retain_graph=True to the first "
                "rv.grad/backward call to differentiate through it again")
        if plan.reads_any and not self.freed:
            self.check_saved(plan.reads_primal)
        reached = None  # the parameters the results with a nonzero cotangent depend on
        for i in range(len(cotangents)):
            if cotangents[i] is None:
                if reached is None:
                    reached = self.reached(cotangents)
                shape, dtype = self.outputs[i]
                cotangents[i] = np.zeros(shape if batch is None else (batch, *shape), dtype)
        if create_graph:  # the VJP call is recorded (its call path sees the Tensors)
            args = [a if read else plain(a)
                    for a, read in zip(self.args, plan.reads_primal, strict=True)]
            grads = (plan.kernel.array_call(*args, *cotangents) if batch is None else
                     self.kernel.batched_vjp(self.wrt, args, cotangents, recorded=True))
        elif batch is not None:
            grads = batched_vjp(self.kernel, self.wrt, self.arrays, cotangents)
        else:
            grads = plan.kernel.array_call(*self.arrays, *cotangents)
        edges = self.edges
        if not retain_graph:
            self.release(not plan.reads_any)
        gradients: list[Gradient | None] = []
        zero = plan.zero  # one flag per edge, as `grads` has one gradient per edge
        for i in range(len(grads)):
            g = grads[i]
            if zero[i] or reached is not None and self.wrt[i] not in reached:
                gradients.append(None)
                continue
            # an array (or Tensor) of the dtype of the input it flows into
            if not isinstance(g, TENSOR_OR_ARRAY):
                g = np.asarray(g)
            dtype, kind = edges[i]._data.dtype, g.dtype
            gradients.append(g if kind is dtype or kind == dtype else g.astype(dtype))
        return gradients


TENSOR_OR_ARRAY = (np.ndarray, Tensor)  # ndarray first: most gradients are arrays


def batched_vjp(kernel: CompiledKernel, wrt: tuple[int, ...], args: Sequence[object],
                batched_cotangents: Sequence[Gradient]) -> tuple[Gradient, ...]:
    """The VJPs of `kernel` (for parameters `wrt`) at `args` for a batch of cotangents
    (leading batch dimension), in one compiled call of the batched VJP kernel."""
    arrays = [plain(a) for a in args]
    cotangents = [None if c is None else plain(c) for c in batched_cotangents]
    return kernel.batched_vjp(wrt, arrays, cotangents)


# ---------------------------------------------------------------- recording


ndarray = np.ndarray  # most arguments are plain arrays: `type(a) is not ndarray` skips
# them before `isinstance(a, Tensor)`, which costs more when it fails


def python_call_path(kernel: CompiledKernel, run: Callable[..., object]
                     ) -> Callable[..., object]:
    """`kernel`'s Python call path (what its native entry hands every call it does not
    take): a call with a Tensor argument that requires grad, while grad mode is on (no
    `rv.no_grad` block is active), is recorded (`record_call`, with the kernel's
    RecordPlan, looked up on the first such call and kept here); any other runs on the
    arrays: `run(*args)`, or for Tensors the native entry on the arrays behind them."""
    plan: RecordPlan | None = None

    def call(*args: object) -> object:
        nonlocal plan
        recording = grad_enabled()
        tensors = False
        for a in args:
            if type(a) is not ndarray and isinstance(a, Tensor):
                if recording and a._requires_grad:
                    if plan is None:
                        plan = record_plan(kernel)
                    return record_call(kernel, args, plan)
                tensors = True
        if tensors:  # unrecorded: the arrays, through the native entry
            return kernel.array_call(*[plain(b) for b in args])
        return run(*args)

    return call


_new_node = object.__new__  # a Node without `__init__` (see `Node`)


def record_call(kernel: CompiledKernel, args: Sequence[object],
                plan: RecordPlan) -> Tensor | tuple[Tensor, ...]:
    """Run `kernel` on the arrays behind `args`; return Tensors that record the call
    (`plan`: the kernel's RecordPlan). One pass over the arguments and no re-checking:
    running the call checks them."""
    differentiable = plan.differentiable
    arrays = list(args)
    wrt: list[int] = []
    edges: list[Tensor] = []
    versions: dict[int, int] | None = None
    if len(args) == len(differentiable):  # else the call below raises the arity error
        for i in range(len(args)):  # (not `enumerate`: it costs more per recorded call)
            a = args[i]
            if type(a) is not ndarray and isinstance(a, Tensor):
                arrays[i] = a._data
                if a._version_counter is not None:
                    if a._view_of is not None:
                        check_not_stale(a)
                    versions = versions or {}
                    versions[i] = a._version_counter.value
                if a._requires_grad and differentiable[i]:
                    wrt.append(i)
                    # a computed edge by its place in the graph now (an in-place write
                    # may later make the tensor the output of another node), with a
                    # stand-in for its array (the node's arguments hold the array)
                    edges.append(a if a.grad_fn is None else
                                 wrap(_placeholder(a._data), a.grad_fn, a._output_index))
    results = kernel.array_call(*arrays)
    single = not isinstance(results, tuple)
    if single:
        result = np.asarray(results)
        outputs = [(result.shape, result.dtype)]
        if not wrt or result.dtype not in FLOAT_KINDS:
            return wrap(result)
    else:
        values = [np.asarray(r) for r in results]
        outputs = [(r.shape, r.dtype) for r in values]
        if not wrt:
            return tuple([wrap(r, None, i) for i, r in enumerate(values)])
    node = _new_node(Node)
    node.kernel = kernel
    node.plan = plan
    node.wrt = tuple(wrt)
    node.edges = tuple(edges)
    node.args = args
    node.arrays = arrays
    node.dtype = plan.fixed_dtype or plan.float_dtype(arrays)
    node.outputs = outputs
    node.freed = False
    node.versions = versions
    node.extras = None
    if AnomalyMode.enabled:
        remember_trace(node)
    if single:
        return wrap(result, node)
    return tuple([wrap(r, node if r.dtype in FLOAT_KINDS else None, i)
                  for i, r in enumerate(values)])


# ---------------------------------------------------------------- the tape walk


def _topological(roots: Iterable[Node]) -> list[Node]:
    """Nodes reachable from `roots`, every consumer before the nodes it consumes."""
    order: list[Node] = []
    visited: set[Node] = set()
    for root in roots:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(root.edges))]
        while stack:
            node, edges = stack[-1]
            for edge in edges:
                child = edge.grad_fn
                if child is not None and child not in visited:
                    visited.add(child)
                    stack.append((child, iter(child.edges)))
                    break
            else:
                stack.pop()
                order.append(node)
    order.reverse()
    return order


def _needed(order: list[Node], leaves: set[int], captured_at: dict[Node, set[int]]
            ) -> dict[Node, bool]:
    """Whether each node lies on a path to a target (a leaf in `leaves`, or a non-leaf)."""
    needed: dict[Node, bool] = {}
    for node in reversed(order):
        needed[node] = False
        for e in node.edges:
            producer = e.grad_fn
            if producer is None:
                reached = id(e) in leaves
            else:
                reached = needed[producer] or e._output_index in captured_at.get(producer, ())
            if reached:
                needed[node] = True
                break
    return needed


def _add(total: Gradient | None, extra: Gradient) -> Gradient:
    """`total + extra`, where a missing total is zero."""
    return extra if total is None else total + extra


def one_call_gradients(output: Tensor, seed: Gradient, inputs: Sequence[Tensor],
                       retain_graph: bool, create_graph: bool
                       ) -> list[Gradient | None] | None:
    """The gradient flowing into each of `inputs` when `output` is a result of one recorded
    call of leaf tensors and every input is a leaf: the common `rv.grad(f(x, ...), x)`, in
    one VJP call without a `Pass`. None when the graph is larger (a `Pass` then walks it)."""
    node = output.grad_fn
    if (node is None or node.extras is not None or type(node) is not Node
            or len(node.outputs) > 1):  # (a Pass skips a node no used result reaches)
        return None
    edges = node.edges
    for tensor in edges:
        if tensor.grad_fn is not None:
            return None
    used = False
    for tensor in inputs:
        if tensor.grad_fn is not None:
            return None
        for edge in edges:
            used = used or tensor is edge
    if not used:  # the node is not needed: nothing flows into the inputs
        return [None] * len(inputs)
    cotangents: list[Gradient | None] = [None] * len(node.outputs)
    cotangents[output._output_index] = seed
    grads = node.vjp(cotangents, create_graph, None, retain_graph)
    if len(edges) == 1 and len(inputs) == 1:  # the input is the edge, as `used` says
        return grads
    return _per_input(edges, grads, inputs)


def _per_input(edges: Sequence[Tensor], grads: list[Gradient | None],
               inputs: Sequence[Tensor]) -> list[Gradient | None]:
    """The gradient of each of `inputs` from those of a node's `edges` (summed over the
    edges that are the same tensor; None for an input that is no edge)."""
    totals: dict[int, Gradient] = {}
    for edge, g in zip(edges, grads, strict=True):
        if g is not None:
            totals[id(edge)] = _add(totals.get(id(edge)), g)
    return [totals.get(id(t)) for t in inputs]


class Pass:
    """One backward pass: cotangents per node output, gradients per leaf and target.
    `input_nodes`: the nodes of non-leaf `backward(inputs=...)` tensors, whose hooks run
    even where no other input needs them (set by `autograd.backward`)."""

    input_nodes: frozenset[GraphNode] = frozenset()

    def __init__(self, roots: Sequence[Tensor], seeds: Sequence[Gradient],
                 targets: Sequence[Tensor] | None) -> None:
        self.order = _topological([r.grad_fn for r in roots if r.grad_fn is not None])
        self.buffers: dict[Node, list[Gradient | None]] = {}
        self.leaves: dict[int, tuple[Tensor, Gradient]] = {}
        self.captured: dict[tuple[Node, int], Gradient] = {}
        self.captured_at: dict[Node, set[int]] = {}
        self.needed: dict[Node, bool] | None = None
        self.leaf_ids: set[int] = set()
        if targets is not None:
            for t in targets:
                if t.grad_fn is not None:
                    self.captured_at.setdefault(t.grad_fn, set()).add(t._output_index)
            self.leaf_ids = {id(t) for t in targets if t.grad_fn is None}
            self.needed = _needed(self.order, self.leaf_ids, self.captured_at)
        for root, seed in zip(roots, seeds, strict=True):
            self.deposit(root, seed)

    def deposit(self, tensor: Tensor, gradient: Gradient) -> None:
        """Add `gradient` to what flows into `tensor`."""
        node = tensor.grad_fn
        if node is None:
            old = self.leaves.get(id(tensor))
            self.leaves[id(tensor)] = (tensor, _add(None if old is None else old[1], gradient))
            return
        slots = self.buffers.get(node)
        if slots is None:
            slots = self.buffers[node] = [None] * len(node.outputs)
        slots[tensor._output_index] = _add(slots[tensor._output_index], gradient)

    def run(self, retain_graph: bool, create_graph: bool, batch: int | None = None) -> None:
        """Walk the nodes from outputs to inputs, running each needed node's VJP."""
        graph.follow_inplace_writes()
        for node in self.order:
            cotangents = self.buffers.pop(node, None)
            if cotangents is None:
                continue
            extras = node.extras
            runs = self.needed is None or self.needed[node] and self._reaches_target(
                node, cotangents)
            if extras is not None:  # hooks of the outputs it runs for, or of captured ones
                graph_hooks.run_tensor_hooks(node, cotangents, create_graph,
                                       None if runs else self.captured_at.get(node, ()))
            for index in self.captured_at.get(node, ()):
                if cotangents[index] is not None:
                    self.captured[(node, index)] = cotangents[index]
            if not runs:
                if node in self.input_nodes:
                    graph_hooks.run_input_node_hooks(node, cotangents, create_graph)
                continue
            if extras is not None and extras.prehooks:
                graph_hooks.run_prehooks(extras, cotangents, create_graph, node)
            edges = node.edges
            try:
                grads = node.vjp(cotangents, create_graph, batch, retain_graph)
            except Exception:
                if AnomalyMode.enabled:
                    warn_forward_trace(node)  # where the failing node was recorded
                raise
            if AnomalyMode.enabled:
                check_gradients(node, grads)
            if extras is not None and extras.hooks:
                grads = graph_hooks.run_hooks(node, grads, cotangents, create_graph)
            for edge, g in zip(edges, grads, strict=True):
                if g is not None:
                    self.deposit(edge, g)

    def _reaches_target(self, node: GraphNode, cotangents: list[Gradient | None]) -> bool:
        """Whether a gradient from the outputs of `node` with a cotangent can reach a
        target: for a kernel call with results left without one, only the parameters
        those results depend on count (`Node.reached`); so a node that would give every
        target nothing does not run (nor release its saved arrays)."""
        if type(node) is not Node or all(c is not None for c in cotangents):
            return True
        reached = node.reached(cotangents)
        for position, edge in zip(node.wrt, node.edges, strict=True):
            if position in reached:
                producer = edge.grad_fn
                if (id(edge) in self.leaf_ids if producer is None else
                        self.needed[producer]
                        or edge._output_index in self.captured_at.get(producer, ())):
                    return True
        return False

    def gradient(self, target: Tensor) -> Gradient | None:
        """What flowed into `target` (None when nothing did)."""
        if target.grad_fn is None:
            entry = self.leaves.get(id(target))
            return None if entry is None else entry[1]
        return self.captured.get((target.grad_fn, target._output_index))
