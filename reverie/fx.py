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
PyTorch between them, at every call and only then.

Planning runs nothing on data: the shape, dtype and kind of every node's value come from
the graph run on fake tensors (`reverie/fx_fake.py`). A node that writes into a tensor in
place compiles where its row records the write (`Recording.write`: `batch_norm`'s running
statistics in training, `add_`) into a graph input, parameter or buffer that requires no
grad: its kernel returns the new value, written into the tensor after the call, once, as
eager writes it. Other in-place nodes, a view of a tensor the graph writes into, and a
node whose value is not a tensor or a size (a Python float) run in eager
PyTorch; a Python number computed at run time (a float input, `.item()`) enters a segment
as a 0-d tensor read at every call, never as a constant.

Mixed precision: Dynamo hands the backend torch-level graphs, not aten ones: a model called
under `torch.autocast` gives a graph of plain ops (autocast's state is global, and Dynamo
guards on it), and a `with torch.autocast(...)` block inside `forward` gives
`_enter_autocast`/`_exit_autocast` nodes around its ops; neither shows autocast's casts.
The fake run (`reverie/fx_fake.py`) runs under that state, so each node's fake value has
the dtype autocast's own per-op policy gives it (matmul/linear/conv in the low dtype, its
"fp32" ops in f32, other ops in their operands' promoted dtype). A node whose operands or
result hold bf16/f16 is compiled as torch's kernel computes it (`_Builder.mixed`): its f32
operands rounded to its result's bf16/f16 where it has one (autocast's cast of the inputs
of a lower-precision op; nothing for operands already of it), every operand widened to f32,
the row recorded in f32, and each result rounded once to torch's dtype — one rounding per
torch op, as eager's, however many language ops its row records. The block markers record
nothing; a node left to eager PyTorch inside a block runs under the block's state. A model
cast to bf16/f16 (`model.bfloat16()`) compiles by the same rule.

Sizes: a graph Dynamo made dynamic (at a second batch size, or with `dynamic=True`,
`mark_dynamic`) is planned on its symbolic sizes, each of Dynamo's symbols a dimension of
the kernels (`s0` is `S0`) and each size node (`x.size(0)`, `s0 * 5`) computed from the
call's sizes, so every size Dynamo's guards admit runs the kernels compiled once. A tensor
made at every call (a dropout mask) takes the symbolic sizes of the tensor it is laid out
as, and is made with the call's sizes. Kernels are kept by their Reverie source
(`KERNELS`), so a graph Dynamo compiles again with the same source (a `no_grad` call)
compiles nothing.
"""

from __future__ import annotations

import copy
import functools
import inspect
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils._sympy.functions import FloorDiv

from reverie import fx_fake, fx_targets, interop_torch
from reverie import fx_functional as fn
from reverie.compiler.ir.dtypes import FLOAT_DTYPES, INT_DTYPES
from reverie.dsl.diagnostics import CompileError
from reverie.fx_fake import (
    REDUCED_PRECISION,
    UNKNOWN,
    Facts,
    autocast_as,
    autocast_state,
    storage_id,
    tensors_in,
)
from reverie.fx_rows_shapes import ELEMENTS, FILLS
from reverie.fx_targets import FUNCTIONS, METHODS, MODULES
from reverie.runtime.native.lru import LruCache
from reverie.torch_op import TORCH_DTYPES
from reverie.tracing import (
    HOST_INPUTS,
    RECORDER_FILES,
    Axis,
    Recording,
    Traced,
    TracedModule,
    TraceError,
    compile_recording,
)
from reverie.tracing_sizes import Size

RECORDER_FILES.update({__file__, fx_targets.__file__})


@dataclass(frozen=True)
class Scalar:
    """A Python number computed at run time (a float input, an eager `.item()`), passed
    to a segment as a 0-d tensor of `dtype`, torch's dtype for it where it is used."""

    node: torch.fx.Node
    dtype: torch.dtype


@dataclass(frozen=True, eq=False)
class Made:
    """A tensor PyTorch makes at every call for the node being recorded (a dropout mask,
    `randn_like`'s draw, `arange`), read by its segment before the kernel runs: the
    segment's made inputs are made in graph order, as eager's are. `make` is given an
    empty template laid out as `layout` (shape and strides, Dynamo's sizes among them,
    and dtype) at the call's sizes, or None."""

    node: torch.fx.Node
    make: Callable[[torch.Tensor | None], torch.Tensor]
    layout: tuple[tuple[Any, ...], tuple[Any, ...], torch.dtype] | None

    def tensor(self, bindings: dict[sympy.Symbol, int]) -> torch.Tensor:
        """The tensor made for a call whose symbols have the sizes `bindings`."""
        if self.layout is None:
            return self.make(None)
        shape, strides, dtype = self.layout
        return self.make(torch.empty_strided(size_at(bindings, shape),
                                             size_at(bindings, strides), dtype=dtype))


# A segment input: a graph value, the dotted path of a module parameter, a number, or a
# tensor made at every call.
Source = torch.fx.Node | str | Scalar | Made


# Dynamo's nodes for `with torch.autocast(...)` inside a compiled function.
AUTOCAST_MARKERS = (torch.amp.autocast_mode._enter_autocast,
                    torch.amp.autocast_mode._exit_autocast)
# Calls of the autograd engine, in graphs Dynamo traced with `trace_autograd_ops=True`: run
# by torch at every call in both routes, they differentiate the segments before them
# through Reverie's compiled VJPs (`create_graph=True` too), as `.backward()` does.
AUTOGRAD_CALLS = (torch.autograd.grad,)


# Python's in-place operators on tensors, by the operator `Builder.rebinds` records instead
# Comparisons and negations: without users (Dynamo leaves `not_(s0 == s0)` after an RNN
# at a dynamic batch size), nothing reads them, so nothing is recorded.
UNUSED_TESTS = frozenset({operator.not_, operator.eq, operator.ne, operator.lt, operator.le,
                          operator.gt, operator.ge, operator.truth})
IN_PLACE_OPERATORS = {operator.iadd: operator.add, operator.isub: operator.sub,
                      operator.imul: operator.mul, operator.itruediv: operator.truediv}

class UnsupportedNodeError(TypeError):
    """A graph node that Reverie cannot compile (no mapping, or an unsupported option)."""


class _NotSymbolic(Exception):  # noqa: N818 (not an error: the static plan is used)
    """A symbolic size the segments cannot express (an expression as a segment input's
    size, two dimensions equal in the example): the graph is planned per static shape."""


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
    widths: list[tuple[bool, ...] | None]  # for an output that is a tuple (`split`), which
    # members are tensors (the others are None: `need_weights=False`); None for a tensor
    writes: list[Source] = field(default_factory=list)  # inputs written after the call with
    # the kernel's last results (`Recording.write`: BatchNorm's running statistics)


@dataclass
class EagerNode:
    """An unmapped node run by eager PyTorch (`fallback=True`), under the autocast state of
    the graph's block around it (None: outside one)."""

    node: torch.fx.Node
    autocast: tuple[Any, ...] | None = None


@dataclass
class _Open:
    """The segment being recorded: its stand-ins and where each parameter comes from."""

    recording: Recording = field(default_factory=lambda: Recording(
        literal_dims=True, promotion="torch", default_float=ELEMENTS[torch.get_default_dtype()]))
    values: dict[Source, Traced] = field(default_factory=dict)
    inputs: list[Source] = field(default_factory=list)
    nodes: set[torch.fx.Node] = field(default_factory=set)
    writes: dict[Source, Traced] = field(default_factory=dict)  # input -> its value after
    dims: dict[sympy.Symbol, Axis] = field(default_factory=dict)  # Dynamo's size -> axis

    def axis(self, size: int | torch.SymInt) -> Axis:
        """The axis of a parameter of this size: a literal, or the dimension named for
        Dynamo's symbol (`s0` is `S0`), with the example size as its value."""
        if isinstance(size, int) or size.node.expr.is_number:  # static, or specialised
            return Axis(int(size), str(int(size)))
        symbol, hint = size.node.expr, size.node.hint
        if hint is None:
            raise NotImplementedError(f"the size {symbol} depends on data")
        if not isinstance(symbol, sympy.Symbol):
            raise _NotSymbolic(f"a segment input's size is the expression {symbol}")
        if symbol not in self.dims:
            named = self.recording.dims  # what `Recording.fix` finds a dimension by
            if hint in named:
                raise _NotSymbolic(f"the sizes {symbol} and {named[hint]} are equal in the "
                                   f"example")
            named[hint] = self.recording.claim(symbol.name.upper())
            self.dims[symbol] = Axis(hint, named[hint])
        return self.dims[symbol]

    def declare(self, name: str, shape: Sequence[int | torch.SymInt],
                element: str) -> Traced:
        """A parameter `name: element[dims]` of this segment."""
        name = self.recording.claim(name)
        axes = tuple(self.axis(n) for n in shape)
        dims = f"[{', '.join(a.dim for a in axes)}]" if axes else ""
        self.recording.params.append(f"{name}: {element}{dims}")
        return Traced(self.recording, name, axes, element)

    def size(self, value: torch.SymInt) -> Size:
        """A symbolic size as a `Size` of this segment's dimensions (`s0 * 5` is `S0 * 5`)."""
        return _evaluate(value.node.expr, self.dimension)

    def dimension(self, symbol: sympy.Symbol) -> Size:
        if symbol not in self.dims:
            raise _NotSymbolic(f"the size {symbol} is no axis of the segment's inputs")
        axis = self.dims[symbol]
        return Size(self.recording, axis.dim, axis.size, True)

    def mark(self) -> tuple[int, int, int, int, int]:
        recording = self.recording
        return len(self.inputs), len(recording.params), len(recording.lines), \
            len(recording.writes), len(self.dims)

    def rollback(self, mark: tuple[int, int, int, int, int]) -> None:
        """Forget the parameters, dimensions and statements recorded since `mark` (a failed
        node's)."""
        inputs, params, lines, writes, dims = mark
        for symbol in list(self.dims)[dims:]:
            del self.recording.dims[self.dims.pop(symbol).size]
        for source in self.inputs[inputs:]:
            del self.values[source]
        recording = self.recording
        del self.inputs[inputs:], recording.params[params:], recording.lines[lines:]
        del recording.writes[writes:]


def _evaluate(expr: sympy.Expr, symbol: Callable[[sympy.Symbol], Any]) -> Any:
    """`expr`, a size of Dynamo's, computed with `symbol` for each of its symbols: a
    `Size` with a segment's dimensions, or an int with a call's sizes."""
    if isinstance(expr, sympy.Symbol):
        return symbol(expr)
    if isinstance(expr, sympy.Integer):
        return int(expr)
    args = [_evaluate(a, symbol) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return functools.reduce(operator.add, args)
    if isinstance(expr, sympy.Mul):
        return functools.reduce(operator.mul, args)
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    raise _NotSymbolic(f"the size {expr} is not a sum or product of sizes")


def _is_size(value: Any) -> bool:
    """Whether `value` is a symbolic size of Dynamo's, or a tuple holding one."""
    return fx_fake.is_symbolic(value) and not tensors_in(value)


def _map_sizes(size: Callable[[torch.SymInt], Any], value: Any) -> Any:
    """`value` with `size` of each symbolic size in it (a tuple of sizes as a tuple)."""
    if isinstance(value, tuple | list):
        return tuple(_map_sizes(size, v) for v in value)
    if isinstance(value, torch.SymInt):
        return size(value) if fx_fake.is_symbolic(value) else int(value)
    return value


def _is_number(value: Any) -> bool:
    """An int or float (SymInt, SymFloat on fakes), not a bool."""
    return isinstance(value, int | float | torch.SymInt | torch.SymFloat) and \
        not isinstance(value, bool)


class _Builder:
    """One walk over the graph, node by node, cutting it into segments. `constants` holds
    the values fixed by the signature (sizes, flags); every other value is read at run
    time, with its shape and dtype from `facts`."""

    def __init__(self, gm: torch.fx.GraphModule, facts: Facts,
                 constants: dict[torch.fx.Node, Any], fallback: bool) -> None:
        self.gm = gm
        self.facts = facts
        self.fallback = fallback
        self.constants = constants
        self.steps: list[Segment | EagerNode] = []
        self.sizes: dict[torch.fx.Node, Any] = {}  # nodes of Dynamo's symbolic sizes
        self.fixed: dict[sympy.Symbol, int] = {}  # the sizes a kernel was specialised to
        self.open = _Open()
        self.recording_node: torch.fx.Node | None = None
        self.rounding: str | None = None  # while recording a mixed node: see `mixed`
        self.widenings: dict[int, Traced] = {}  # id(operand widened) -> the operand
        self.eager_nodes: set[torch.fx.Node] = set()

    # ------------------------------------------------------------ values inside a segment
    def value(self, node: torch.fx.Node) -> Any:
        """The stand-in of `node` in the open segment (a parameter on first use), or the
        Python value of a constant node (a size, a tuple of them)."""
        if node in self.constants:
            return self.constants[node]
        if node in self.open.values:
            return self.open.values[node]
        fake = self.facts.values.get(node, UNKNOWN)
        if isinstance(fake, torch.Tensor):
            return self.parameter(node, tuple(fake.shape), fake.dtype)
        if _is_size(fake):  # Dynamo's symbolic size (`x.size(0)`, `s0 * 5`)
            return _map_sizes(self.open.size, fake)
        if _is_number(fake):
            scalar = Scalar(node, self.number_dtype(node, fake))
            if scalar in self.open.values:
                return self.open.values[scalar]
            return self.parameter(scalar, (), scalar.dtype)
        kind = "an unknown value" if fake is UNKNOWN else f"a {type(fake).__name__}"
        raise NotImplementedError(f"its operand '{node.name}' is {kind} computed at run time")

    def parameter(self, source: Source, shape: tuple[Any, ...], dtype: torch.dtype) -> Traced:
        """A new parameter of the open segment, read from `source` at every call."""
        if dtype not in ELEMENTS:
            raise NotImplementedError(f"its operand has dtype {dtype}, which Reverie's kernels "
                                      f"do not compute")
        name = (f"v_{source.node.name}_{ELEMENTS.get(source.dtype, 'number')}"
                if isinstance(source, Scalar) else f"v_{source.node.name}_made"
                if isinstance(source, Made) else "v_" + source.name
                if isinstance(source, torch.fx.Node) else "v_" + source.replace(".", "_"))
        seg = self.open
        seg.values[source] = seg.declare(name, shape, ELEMENTS[dtype])
        seg.inputs.append(source)
        return seg.values[source]

    def number_dtype(self, number: torch.fx.Node, value: Any) -> torch.dtype:
        """torch's dtype for a Python number in the node being recorded: the result's, or
        an operand's where the result is bool (a float number needs a float dtype)."""
        node = self.recording_node
        beside = [self.facts.values.get(n) for n in (node, *node.all_input_nodes)]
        dtypes = [v.dtype for v in beside if isinstance(v, torch.Tensor) and v.dtype != torch.bool
                  and (v.dtype.is_floating_point or not isinstance(value, float | torch.SymFloat))]
        if not dtypes:
            raise NotImplementedError(f"the number '{number.name}' has no tensor to take a "
                                      f"dtype from")
        return dtypes[0]

    def host_input(self, make: Callable[[torch.Tensor | None], torch.Tensor],
                   like: Traced | None = None) -> Traced:
        """`reverie.tracing.host_input` in rv.fx: a parameter of the open segment whose value
        is `make(template)` at every call, `template` empty and laid out as eager's `like`.
        Its shape and dtype are those of `make` run on the fake template (no data, no draw),
        so a mask laid out as a tensor of Dynamo's symbolic sizes has those sizes too."""
        template = None if like is None else self.template(like)
        with self.facts.mode:
            probe = make(template)
        if probe.dtype not in ELEMENTS:
            raise NotImplementedError(f"it makes a tensor of dtype {probe.dtype}; Reverie's "
                                      f"kernels hold {', '.join(map(str, ELEMENTS))}")
        layout = None if template is None else (
            _computable(tuple(template.shape)), _computable(template.stride()), template.dtype)
        made = self.parameter(Made(self.recording_node, make, layout), tuple(probe.shape),
                              probe.dtype)
        return made if self.rounding is None else self.widened(made)  # an operand too

    def template(self, like: Traced) -> torch.Tensor:
        """A fake tensor laid out as eager's value of `like`: its node's fake value (whose
        strides decide where random draws land), or for a value recorded inside a row a
        contiguous one of its sizes. A mixed node's operand widened to f32 is laid out as
        the operand (so a dropout mask is drawn in its bf16, as eager's)."""
        like = self.widenings.get(id(like), like)
        node = next((n for n, v in self.open.values.items()
                     if v is like and isinstance(n, torch.fx.Node)), None)
        fake = self.facts.values.get(node)
        if isinstance(fake, torch.Tensor):
            return fake
        sizes = [int(a.dim) if a.dim.isdigit() else self.symbolic_size(a.dim)
                 for a in like.axes]
        with self.facts.mode:
            return torch.empty(sizes, dtype=TORCH_DTYPES[like.element])

    def symbolic_size(self, dim: str) -> torch.SymInt:
        """Dimension `dim` of the open segment, one of Dynamo's symbols (`S0` for `s0`), as
        a `SymInt` of the graph's fake values."""
        symbol = next((s for s, axis in self.open.dims.items() if axis.dim == dim), None)
        size = next((size for value in self.facts.values.values() for t in tensors_in(value)
                     for size in t.shape
                     if isinstance(size, torch.SymInt) and size.node.expr == symbol), None)
        if symbol is None or size is None:
            raise _NotSymbolic(f"a tensor made at every call is laid out as a value of size "
                               f"{dim}, not one of Dynamo's sizes")
        return size

    def weights(self, path: str, module: torch.nn.Module) -> dict[str, Traced]:
        """A module's parameters and buffers as stand-ins, each read from `path.name` at
        call time."""
        found = {}
        for name, param in [*module.named_parameters(recurse=False),
                            *module.named_buffers(recurse=False)]:
            source = f"{path}.{name}"
            found[name] = self.open.values[source] if source in self.open.values else \
                self.parameter(source, tuple(param.shape), param.dtype)
        return found

    # ------------------------------------------------------------ nodes
    def emit(self, node: torch.fx.Node) -> Any:
        """Record `node`; raises UnsupportedNodeError when it has no mapping."""
        args = torch.fx.node.map_arg(node.args, self.value)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.value)
        if self.rounding is not None:
            args, kwargs = tree_map_only(Traced, self.widened, (args, kwargs))
        else:
            args, kwargs = self.scalars_demoted(node, (args, kwargs))
        if self.rebinds(node):  # in place on a value this segment computed: out of place
            if node.op == "call_module":  # nn.ReLU(inplace=True) and its kind
                return self.module_call(node, args, kwargs, out_of_place=True)
            args, kwargs = _inplace_as_keyword(node.target, args, kwargs)
            if kwargs.get("inplace") is True:
                return FUNCTIONS[node.target](*args, **{**kwargs, "inplace": False})
            if node.op == "call_method":  # x.mul_(2) as x.mul(2); a fill as itself
                return METHODS.get(node.target[:-1], METHODS.get(node.target))(*args, **kwargs)
            return FUNCTIONS[IN_PLACE_OPERATORS[node.target]](*args, **kwargs)
        if node.op == "call_module":
            return self.module_call(node, args, kwargs)
        table = METHODS if node.op == "call_method" else FUNCTIONS
        rule = table.get(node.target)
        if rule is None:
            raise UnsupportedNodeError(describe(node, "no mapping in reverie/fx_targets.py"))
        return rule(*args, **kwargs)

    def scalars_demoted(self, node: torch.fx.Node, operands: Any) -> Any:
        """`operands` with each 0-d tensor of a wider dtype than `node`'s result, of the
        same kind (float or integer), cast to the result's dtype where a tensor with axes
        has it: torch's promotion ranks tensors with axes above 0-d ones (f32[4] + f64[]
        is f32[4], the 0-d operand rounded to f32), the language's ranks dtypes alone."""
        result = self.facts.values.get(node)
        if not isinstance(result, torch.Tensor) or result.dtype not in ELEMENTS:
            return operands
        dtype = ELEMENTS[result.dtype]
        traced = [v for v in tree_flatten(operands)[0] if isinstance(v, Traced)]
        if not any(v.ndim and v.element == dtype for v in traced):
            return operands

        def demoted(value: Traced) -> Traced:
            same_kind = _kind(value.element) == _kind(dtype) != "bool"
            return fn.cast(value, dtype) if not value.ndim and same_kind else value

        return tree_map_only(Traced, demoted, operands)

    def module_call(self, node: torch.fx.Node, args: Any, kwargs: Any,
                    out_of_place: bool = False) -> Any:
        """A `call_module` node through its module's row (`out_of_place`: with the module's
        `inplace` off, its result rebound as `rebinds` says)."""
        module = self.gm.get_submodule(node.target)
        rule = MODULES.get(type(module))
        if rule is None:
            raise UnsupportedNodeError(describe(node, f"no mapping for nn.{type(module).__name__}"))
        weights = self.weights(node.target, module)
        if self.rounding is not None:
            weights = {name: self.widened(w) for name, w in weights.items()}
        if out_of_place:
            module = copy.copy(module)  # shares the parameters; only `inplace` differs
            module.inplace = False
        return rule(module, weights, *args, **kwargs)

    def record(self, node: torch.fx.Node) -> Any:
        """`node` recorded in the open segment, or its value if it is a constant; a node
        that raises leaves nothing behind (no parameter, no statement)."""
        mark = self.open.mark()
        self.recording_node = node
        self.open.recording.origin = lambda: describe(node).split("\n")[0]
        maker = HOST_INPUTS.set(self.host_input)
        self.rounding = self.mixed(node)
        try:
            result = self.emit(node)
            if self.rounding is not None:
                result = self.narrowed(node, result)
            self.check(node, result)
            writes = self.writes(node, mark)
        except Exception:
            self.open.rollback(mark)
            raise
        finally:
            HOST_INPUTS.reset(maker)
            self.rounding = None
            self.widenings.clear()
        for source, value in writes:  # the nodes after this one read the new value
            self.open.writes[source] = self.open.values[source] = value
        if self.rebinds(node):
            for earlier in self.same_memory(node):
                self.open.values[earlier] = result
        return result

    # ------------------------------------------------------------ mixed precision
    def mixed(self, node: torch.fx.Node) -> str | None:
        """For a node that reads or gives bf16/f16 tensors (autocast's, or a bf16 model's),
        the dtype its f32 operands are rounded to first: for one of autocast's
        lower-precision ops (`facts.lowered`), its result's bf16/f16, as autocast casts
        them; else "f32", nothing to round (operands are only widened: torch's kernels of
        mixed dtypes, a bf16 layer_norm's f32 weight, read them as they are). None for a
        node of f32/f64 tensors alone, recorded as it is."""
        results = tensors_in(self.facts.values.get(node))
        if node in self.facts.lowered:
            return next(ELEMENTS[t.dtype] for t in results if t.dtype in REDUCED_PRECISION)
        operands = [*tensors_in([self.facts.values.get(n) for n in node.all_input_nodes]),
                    *self.module_tensors(node)]
        return "f32" if any(t.dtype in REDUCED_PRECISION for t in [*operands, *results]) \
            else None

    def module_tensors(self, node: torch.fx.Node) -> list[torch.Tensor]:
        """A `call_module` node's parameters and buffers (none for other nodes)."""
        if node.op != "call_module":
            return []
        module = self.gm.get_submodule(node.target)
        return [*module.parameters(recurse=False), *module.buffers(recurse=False)]

    def widened(self, value: Traced) -> Traced:
        """An operand of a mixed node as torch's kernel reads it: an f32 one rounded to
        the node's bf16/f16 (`rounding`), every bf16/f16/f32 one then widened to f32
        (exact). f64, integer and bool operands are left as they are."""
        original = value
        if value.element == "f32" and self.rounding != "f32":
            value = fn.cast(value, self.rounding)
        if value.element in ("bf16", "f16"):
            value = fn.cast(value, "f32")
        self.widenings[id(value)] = original  # a row writing into it writes the original
        return value

    def narrowed(self, node: torch.fx.Node, result: Any) -> Any:
        """A mixed node's result, each f32 tensor of it rounded once to torch's dtype for
        it (the fake value's) where that is bf16/f16."""
        fake = self.facts.values.get(node, UNKNOWN)

        def rounded(value: Any, like: Any) -> Any:
            if isinstance(value, Traced) and value.element == "f32" and \
                    isinstance(like, torch.Tensor) and like.dtype in REDUCED_PRECISION:
                return fn.cast(value, ELEMENTS[like.dtype])
            return value

        if _stand_ins(result) and isinstance(fake, tuple | list) and len(fake) == len(result):
            return tuple(rounded(v, f) for v, f in zip(result, fake, strict=True))
        return rounded(result, fake)

    def rebinds(self, node: torch.fx.Node) -> bool:
        """Whether `node` writes in place into its first argument (`out += x`,
        `F.relu(out, inplace=True)`, `out.mul_(2)`) and that argument is a value this
        segment computed whose memory no other value of the graph shares: it is then
        recorded out of place, and the nodes after it read its result in the argument's
        place, as they read the written tensor in eager PyTorch."""
        if not _in_place_call(node, self.gm) or node not in self.facts.mutating:
            return False
        written = node.args[0]
        if not (written in self.open.nodes and isinstance(self.open.values.get(written), Traced)):
            return False
        layout = _layout(self.facts.values[written])
        return all(_layout(self.facts.values[n]) == layout for n in self.same_memory(node))

    def rebound_memory(self, storage: int) -> bool:
        """Whether every write into `storage` is an in-place call on a value holding all
        of it (`rebinds`' kind), so each value holding it is the latest written one."""
        layouts = {_layout(t) for value in self.facts.values.values() for t in tensors_in(value)
                   if storage_id(t) == storage}
        return len(layouts) == 1 and all(
            _in_place_call(n, self.gm) and isinstance(fake := self.facts.values.get(n.args[0]),
                                             torch.Tensor) and storage_id(fake) == storage
            for n in self.facts.mutating if storage in self.input_storages(n))

    def same_memory(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The values recorded before `node` that hold the memory its first argument does
        (the argument, and earlier in-place results on it: all rebound to the new value;
        a view among them, of another layout, makes `rebinds` refuse)."""
        storage = storage_id(self.facts.values[node.args[0]])
        return [n for n in self.open.values if isinstance(n, torch.fx.Node)
                and isinstance(fake := self.facts.values.get(n), torch.Tensor)
                and storage_id(fake) == storage]

    def writes(self, node: torch.fx.Node, mark: tuple[int, ...]) -> list[tuple[Source, Traced]]:
        """The in-place writes `node`'s row recorded (`Recording.write`), as (input, new
        value): each into a tensor the segment reads (a graph input, a parameter or
        buffer) that requires no gradient. A node that writes with no row recording it
        is refused."""
        recorded = self.open.recording.writes[mark[3]:]
        if node in self.facts.mutating and not recorded and not self.rebinds(node):
            raise NotImplementedError("it writes into a tensor in place")
        writes = []
        for written, value in recorded:
            target = self.widenings.get(id(written), written)
            source = next((s for s in self.open.inputs if self.open.values[s] is target), None)
            tensor = self.facts.values.get(source) if isinstance(source, torch.fx.Node) \
                else _attribute(self.gm, source) if isinstance(source, str) else None
            if not isinstance(tensor, torch.Tensor) or tensor.requires_grad:
                raise NotImplementedError("it writes in place into a tensor that is not a "
                                          "graph input, parameter or buffer, or requires grad")
            if self.aliased(source, node):
                raise NotImplementedError("it writes in place into a tensor whose memory "
                                          "another value of the graph shares")
            writes.append((source, fn.cast(value, target.element)))  # a bf16 buffer's
        return writes

    def aliased(self, source: torch.fx.Node | str, writer: torch.fx.Node) -> bool:
        """Whether a value of the graph other than `source` and `writer`'s result shares
        the memory of `source` (a view of it, or an attribute node reading it); the graph's
        output may return them, as it is read after the write."""
        if isinstance(source, str):
            return any(n.op == "get_attr" and n.target == source for n in self.gm.graph.nodes)
        storage = storage_id(self.facts.values[source])
        return any(storage in {storage_id(t) for t in tensors_in(value)}
                   for n, value in self.facts.values.items()
                   if n not in (source, writer) and n.op != "output")

    def sole_writer(self, node: torch.fx.Node, storage: int) -> bool:
        """Whether `node` writes into `storage` and no other node that writes in place
        reads it (so `node`'s result, a view of it, keeps its value)."""
        return node in self.facts.mutating and not any(
            storage in self.input_storages(other) for other in self.facts.mutating - {node})

    def written_after(self, node: torch.fx.Node, storage: int) -> bool:
        """Whether a node after `node` writes in place into `storage` (a view of it taken
        after its last write, such as MHA's `mask.view(1, 1, L, L)` after the
        `masked_fill_` that made it, holds its final value: a copy is the same)."""
        later = False
        for other in self.gm.graph.nodes:
            if later and other in self.facts.mutating and storage in self.input_storages(other):
                return True
            later = later or other is node
        return False

    def input_storages(self, node: torch.fx.Node) -> set[int]:
        return {storage_id(t) for n in node.all_input_nodes
                for t in tensors_in(self.facts.values.get(n))}

    def check(self, node: torch.fx.Node, result: Any) -> None:
        """Refuse a recording that is not what torch computes: another shape or dtype, a
        copy where torch gives a view of a tensor the graph writes into, a tensor where
        torch gives a number, a container of stand-ins."""
        fake = self.facts.values.get(node, UNKNOWN)
        if _stand_ins(result):  # a tuple of tensors (`split`, `chunk`), each checked
            fakes = fake if isinstance(fake, tuple | list) else [UNKNOWN] * len(result)
            if len(fakes) != len(result):
                raise NotImplementedError(f"recorded {len(result)} tensors, torch gives "
                                          f"{len(fakes)}")
            for member, member_fake in zip(result, fakes, strict=True):
                if (member is None) != (member_fake is None):
                    raise NotImplementedError("a tuple member is None where torch's is not "
                                              "(or the other way)")
                if member is not None:
                    self.check_tensor(node, member, member_fake)
            return
        if not isinstance(result, Traced):
            if any(isinstance(v, Traced) for v in tree_flatten(result)[0]):
                raise NotImplementedError(f"it gives a {type(result).__name__} of tensors")
            return
        self.check_tensor(node, result, fake)

    def check_tensor(self, node: torch.fx.Node, result: Traced, fake: Any) -> None:
        """`check` of one recorded tensor against torch's fake value."""
        if fake is UNKNOWN:
            return
        if not isinstance(fake, torch.Tensor):
            raise NotImplementedError(f"torch gives a {type(fake).__name__}, not a tensor")
        got = f"{result.element}{[a.size for a in result.axes]}"  # sizes in the example
        want = f"{ELEMENTS.get(fake.dtype, fake.dtype)}{[_hint(n) for n in fake.shape]}"
        if got != want:
            raise NotImplementedError(f"recorded as {got}, torch gives {want}")
        storage = storage_id(fake)
        if storage in self.input_storages(node) and storage in self.facts.mutated and \
                not self.sole_writer(node, storage) and not self.rebound_memory(storage) \
                and self.written_after(node, storage):
            raise NotImplementedError("torch gives a view of a tensor written in place")

    def node(self, node: torch.fx.Node) -> None:
        if node.op in ("placeholder", "get_attr"):  # constants, or values read at run time
            return
        if node.op == "output":
            self.close()
            return
        if not node.users and node.target in UNUSED_TESTS:  # `not (s0 == s0)`: read by none
            return
        if _is_size(self.facts.values.get(node)):  # Dynamo's symbolic size (`x.size(0)`):
            self.sizes[node] = self.facts.values[node]  # computed from a call's sizes
            return
        if node.target in AUTOCAST_MARKERS:  # the fake values have the block's dtypes
            return
        if node.target in AUTOGRAD_CALLS or self.member_of_eager(node):
            self.eager(node)
            return
        try:
            result = self.record(node)
        except (UnsupportedNodeError, NotImplementedError, TraceError) as error:
            if not self.fallback:
                if isinstance(error, UnsupportedNodeError):
                    raise
                raise UnsupportedNodeError(describe(node, str(error))) from None
            self.eager(node)
            return
        if isinstance(result, Traced) or _stand_ins(result):
            self.open.values[node] = result
            self.open.nodes.add(node)
        else:
            self.constants[node] = result

    def member_of_eager(self, node: torch.fx.Node) -> bool:
        """Whether `node` takes a member of a tuple an eager step gives (`grad[0]`)."""
        return node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
            and node.args[0] in self.eager_nodes

    def eager(self, node: torch.fx.Node) -> None:
        """A graph break: close the open segment; `node` runs in PyTorch at every call."""
        self.close()
        self.steps.append(EagerNode(node, self.facts.autocast.get(node)))
        self.eager_nodes.add(node)

    def close(self) -> None:
        """Compile the open segment: its outputs are the values used outside it."""
        seg = self.open
        outputs = [n for n in seg.values if isinstance(n, torch.fx.Node) and n in seg.nodes
                   and any(user not in seg.nodes for user in n.users)]
        if outputs or seg.writes:
            name = f"segment{len(self.steps)}"
            results = [t for n in outputs for t in _members(seg.values[n])]
            results += seg.writes.values()
            module = compile_recording(seg.recording, name, results,
                                       tuple_return=len(results) > 1)
            widths = [tuple(m is not None for m in v)
                      if isinstance(v := seg.values[n], tuple) else None for n in outputs]
            self.steps.append(Segment(_kernel(module, name), seg.inputs, outputs, widths,
                                      list(seg.writes)))
            self.fixed |= {symbol: axis.size for symbol, axis in seg.dims.items()
                           if axis.dim in seg.recording.fixed}
        self.open = _Open()


# Each segment's kernel by its Reverie source, which decides it: a graph Dynamo compiles
# again (made dynamic, or for a `no_grad` call) runs the kernels already compiled.
KERNELS: LruCache[str, interop_torch.KernelFunction] = LruCache(256)


def _kernel(module: TracedModule, name: str) -> interop_torch.KernelFunction:
    """The kernel `name` of `module` on torch tensors, the one compiled before for the
    same source if any (its native code, derivatives and torch operator with it)."""
    kernel = KERNELS.get(module.source)
    if kernel is None:
        kernel = KERNELS.setdefault(module.source, interop_torch.function(module[name]))
    return kernel


def _hint(size: int | torch.SymInt) -> int | None:
    """A size in the example (None for one that depends on data)."""
    return size if isinstance(size, int) else size.node.hint


def _kind(element: str) -> str:
    """A Reverie dtype's kind for torch's promotion: "float", "int" or "bool"."""
    return "float" if element in FLOAT_DTYPES else "int" if element in INT_DTYPES else "bool"


def _in_place_call(node: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    """Whether `node` is a call that writes its result into its first argument: an
    `inplace=True` function or module, a `Tensor.<op>_` method with an out-of-place row,
    `+=`."""
    return bool(node.args) and isinstance(node.args[0], torch.fx.Node) and (
        node.op == "call_module"
        and getattr(gm.get_submodule(node.target), "inplace", False) is True
        or
        node.target in FUNCTIONS
        and _inplace_as_keyword(node.target, node.args, node.kwargs)[1].get("inplace") is True
        or node.op == "call_method" and isinstance(node.target, str)
        and node.target.endswith("_")
        and (node.target[:-1] in METHODS or node.target in FILLS)
        or node.op == "call_function" and node.target in IN_PLACE_OPERATORS)

def _inplace_as_keyword(target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments with an `inplace` given by position (Dynamo writes
    `leaky_relu(x, 0.2, True)` for `nn.LeakyReLU(0.2, inplace=True)`) made a keyword."""
    position = _inplace_position(target)
    if position is None or "inplace" in kwargs or len(args) != position + 1:
        return args, kwargs
    return args[:position] + args[position + 1:], {**kwargs, "inplace": args[position]}


@functools.cache
def _inplace_position(target: Any) -> int | None:
    """The position of a function's `inplace` parameter (None: it has none)."""
    try:
        names = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    return names.index("inplace") if "inplace" in names else None


def _layout(fake: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's place in its memory: shape, strides and offset."""
    return tuple(fake.shape), fake.stride(), fake.storage_offset()

def _stand_ins(value: Any) -> bool:
    """Whether `value` is a tuple of recorded tensors (the result of `split`), some of
    them perhaps None (`multi_head_attention_forward(need_weights=False)`)."""
    return isinstance(value, tuple) and any(isinstance(v, Traced) for v in value) and \
        all(v is None or isinstance(v, Traced) for v in value)


def _members(value: Traced | tuple[Traced | None, ...]) -> tuple[Traced, ...]:
    """The recorded tensors of a value: itself, or a tuple's tensor members."""
    return tuple(v for v in value if v is not None) if isinstance(value, tuple) else (value,)




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


def _read(source: Source, gm: torch.fx.GraphModule, env: dict[torch.fx.Node, Any],
          bindings: dict[sympy.Symbol, int]) -> Any:
    """The current value of a segment input, at a call whose symbols have the sizes
    `bindings`."""
    if isinstance(source, Scalar):
        return torch.tensor(env[source.node], dtype=source.dtype)
    if isinstance(source, Made):
        return source.tensor(bindings)
    if isinstance(source, str):
        return _attribute(gm, source)
    return env[source]


@dataclass
class Plan:
    """The graph compiled for one signature of its inputs: the steps to run, and the
    values of the nodes that were constants at that signature (sizes, flags)."""

    steps: list[Segment | EagerNode]
    constants: dict[torch.fx.Node, Any]
    sizes: dict[torch.fx.Node, Any] = field(default_factory=dict)  # Dynamo's symbolic sizes,
    # computed at every call from the call's (`Symbols.bind`)
    fixed: dict[sympy.Symbol, int] = field(default_factory=dict)  # sizes a kernel fixed


@dataclass
class Symbols:
    """Where a call's inputs hold each size symbol of a dynamic graph: Dynamo's fake value
    of every input (`s0` for a dynamic dimension), and the autocast state planned under."""

    examples: list[Any]
    autocast: tuple[Any, ...]

    def bind(self, inputs: Sequence[Any]) -> dict[sympy.Symbol, int] | None:
        """Each symbol's size in `inputs`, or None where they do not fit the examples
        (another dtype, rank or static size, a symbol of two sizes)."""
        if autocast_state() != self.autocast:
            return None
        bindings: dict[sympy.Symbol, int] = {}
        pairs: list[tuple[Any, int]] = []
        for example, value in zip(self.examples, inputs, strict=True):
            if isinstance(example, torch.Tensor):
                if not isinstance(value, torch.Tensor) or value.dtype != example.dtype or \
                        value.dim() != example.dim():
                    return None
                pairs += zip(example.shape, value.shape, strict=True)
            elif isinstance(example, torch.SymInt):
                pairs.append((example, value))
            elif not _is_runtime(example) and example != value:
                return None
        for size, value in pairs:
            expr = size.node.expr if isinstance(size, torch.SymInt) else size
            if isinstance(expr, sympy.Symbol) and bindings.setdefault(expr, value) != value:
                return None
        if any(size_at(bindings, size) != value for size, value in pairs):
            return None
        return bindings


def _computable(sizes: tuple[Any, ...]) -> tuple[Any, ...]:
    """`sizes` (ints and Dynamo's sizes), checked to be computable from a call's sizes by
    `size_at`: sums, products and floor divisions of symbols."""
    _map_sizes(lambda size: _evaluate(size.node.expr, lambda _: 1), sizes)
    return sizes


def size_at(bindings: dict[sympy.Symbol, int], size: Any) -> Any:
    """A size of Dynamo's (or a tuple of them) at a call's sizes."""
    return _map_sizes(lambda s: int(_evaluate(s.node.expr, bindings.__getitem__)), size)


def _concrete(value: Any) -> Any:
    """A size Dynamo passes as a `SymInt` (a dynamic dimension), as its int."""
    return int(value) if isinstance(value, torch.SymInt) else value


def _is_runtime(value: Any) -> bool:
    """A graph input read at every call: a tensor, or a float (never frozen)."""
    return isinstance(value, torch.Tensor | float | torch.SymFloat)


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tuple(map(int, value.shape)), value.dtype
    if _is_runtime(value):
        return float
    return type(value), _concrete(value)


class CompiledGraph:
    """The compiled graph: call it as the graph module (same inputs, same outputs).

    A dynamic graph of Dynamo's (a second batch size, `dynamic=True`, `mark_dynamic`) is
    compiled once with its symbolic sizes as Reverie's dimensions (`s0` is `S0`), so every
    size its guards admit runs the same kernels; a static graph is compiled for the example
    inputs' shapes (every dimension a literal, as Dynamo specialised it), and a call with
    other shapes (or sizes a kernel fixed, as `rv.trace` fixes a size Python decided with)
    compiles the graph again for those, once, and keeps both. A kernel is compiled once
    per Reverie source (`KERNELS`): the graph Dynamo compiles again for a `no_grad` call
    runs the training graph's kernels."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 fallback: bool) -> None:
        self.gm = gm
        self.fallback = fallback
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(self.placeholders) != len(example_inputs):
            raise ValueError(f"the graph has {len(self.placeholders)} inputs, but "
                             f"{len(example_inputs)} example inputs were given")
        self.attributes = [n for n in gm.graph.nodes if n.op == "get_attr"]
        self.output = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.symbolic: tuple[Plan, Symbols] | None = self.symbolic_plan()
        if self.symbolic is None:
            self.plan_for(example_inputs)

    def symbolic_plan(self) -> tuple[Plan, Symbols] | None:
        """The graph planned on Dynamo's symbolic sizes, or None for a static graph or one
        whose sizes the segments cannot express (then it is planned per static shape)."""
        examples = fx_fake.symbolic_examples(self.gm)
        if examples is None:
            return None
        try:
            plan = self.build(examples)
        except (_NotSymbolic, UnsupportedNodeError, NotImplementedError, TraceError,
                CompileError):
            return None
        return plan, Symbols(examples, autocast_state())

    def build(self, inputs: Sequence[Any]) -> Plan:
        """The plan for inputs like `inputs` (values, or Dynamo's fake values)."""
        constants = {n: v for n, v in zip(self.placeholders, inputs, strict=True)
                     if not _is_runtime(v) and not _is_size(v)}
        constants |= {n: value for n in self.attributes
                      if not isinstance(value := _attribute(self.gm, n.target), torch.Tensor)}
        builder = _Builder(self.gm, fx_fake.propagate(self.gm, inputs), constants,
                           self.fallback)
        for node in self.gm.graph.nodes:
            builder.node(node)
        return Plan(builder.steps, builder.constants, builder.sizes, builder.fixed)

    def plan_for(self, inputs: Sequence[Any]) -> tuple[Plan, dict[sympy.Symbol, int]]:
        """The plan for a call's inputs, and the sizes of its symbols there."""
        if self.symbolic is not None:
            plan, symbols = self.symbolic
            bindings = symbols.bind(inputs)
            if bindings is not None and \
                    all(bindings.get(s) == n for s, n in plan.fixed.items()):
                return plan, bindings
        key = (*(_signature(v) for v in inputs), autocast_state())
        if key not in self.plans:
            self.plans[key] = self.build([_concrete(v) for v in inputs])
        return self.plans[key], {}

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.placeholders):
            raise TypeError(f"the compiled graph takes {len(self.placeholders)} inputs, "
                            f"got {len(inputs)}")
        plan, bindings = self.plan_for(inputs)
        env: dict[torch.fx.Node, Any] = dict(plan.constants)
        env.update(zip(self.placeholders, inputs, strict=True))
        env.update((n, _attribute(self.gm, n.target)) for n in self.attributes)
        env.update((n, size_at(bindings, size)) for n, size in plan.sizes.items())
        self.run(plan, env, bindings)
        return torch.fx.node.map_arg(self.output, env.__getitem__)

    def run(self, plan: Plan, env: dict[torch.fx.Node, Any],
            bindings: dict[sympy.Symbol, int]) -> None:
        """Each step of `plan` in order, adding the values it defines to `env` (the call's
        symbols have the sizes `bindings`)."""
        for step in plan.steps:
            if isinstance(step, EagerNode):
                node = step.node
                with autocast_as(step.autocast):  # restored after, even if it raises
                    env[node] = _run_eager(self.gm, node,
                                           torch.fx.node.map_arg(node.args, env.get),
                                           torch.fx.node.map_arg(node.kwargs, env.get))
                continue
            # an input written after the call is passed as a copy: autograd saves it
            results = step.kernel(*(_read(s, self.gm, env, bindings).clone()
                                    if s in step.writes else _read(s, self.gm, env, bindings)
                                    for s in step.inputs))
            flat = iter(results if isinstance(results, tuple) else (results,))
            for node, width in zip(step.outputs, step.widths, strict=True):
                env[node] = next(flat) if width is None else tuple(
                    next(flat) if tensor else None for tensor in width)
            with torch.no_grad():  # the in-place writes, once per call, as eager's
                for source, value in zip(step.writes, flat, strict=True):
                    _read(source, self.gm, env, bindings).copy_(value)

    @property
    def sources(self) -> list[str]:
        """The Reverie source of each compiled segment (of the symbolic plan, else of the
        first signature)."""
        plan = self.symbolic[0] if self.symbolic else next(iter(self.plans.values()))
        return [s.kernel.kernel.module.source for s in plan.steps if isinstance(s, Segment)]


def compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,  # noqa: A001
            fallback: bool = False) -> CompiledGraph:
    """`gm` compiled by Reverie for inputs shaped like `example_inputs` (docs/api.md §9)."""
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
