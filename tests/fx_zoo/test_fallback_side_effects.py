"""The fallback path never changes a result (issue 33, deliverable 1).

Nodes that Reverie runs in eager PyTorch between its compiled segments (`fallback=True`)
may write into buffers, count steps, change Python state in a Dynamo graph break, or return
tuples (`x.chunk(2, 1)`, `torch.split`, `x.max(dim)`'s values and indices, an LSTM's
`(out, (h, c))`). Each model here runs beside an eager twin from the same state, through
`rv.fx.compile(symbolic_trace(model), fallback=True)` and through
`torch.compile(model, backend="reverie", options={"fallback": True})`: compiling changes
nothing, and at the first call and every later one the outputs, the gradients of inputs
and parameters, every buffer and the Python state equal eager's. Two opaque custom ops (a
tuple-returning one and a buffer-writing one), which no mapping will ever cover, keep the
eager-node path under test as the mapped families grow.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils._pytree import tree_flatten

import reverie as rv

CALLS = 4
TOLERANCE = {"rtol": 1e-10, "atol": 1e-12}


def compile_fx(model: nn.Module, inputs: list[torch.Tensor]) -> Callable[..., Any]:
    return rv.fx.compile(torch.fx.symbolic_trace(model), inputs, fallback=True)


def compile_dynamo(model: nn.Module, inputs: list[torch.Tensor]) -> Callable[..., Any]:
    return torch.compile(model, backend="reverie", options={"fallback": True})


ROUTES = {"rv.fx": compile_fx, "torch.compile": compile_dynamo}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """No graphs of another test (Dynamo guards on module identity and would recompile)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def normal(call: int, *shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(call)
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def assert_calls_like_eager(route: str, make_model: Callable[[], nn.Module],
                            make_inputs: Callable[[int], list[torch.Tensor]],
                            calls: int = CALLS, attributes: tuple[str, ...] = ()) -> None:
    """Call the compiled model and its eager twin `calls` times on new inputs, each call
    followed by a backward pass: everything torch computes, and the named Python
    attributes of the model, agree after compiling and after each call."""
    torch.manual_seed(0)
    model = make_model().double()
    twin = copy.deepcopy(model)
    compiled = ROUTES[route](model, make_inputs(0))
    assert_same_state(model, twin, attributes, "after compiling")
    for call in range(calls):
        where = f"call {call}"
        (got, got_grads), (want, want_grads) = (
            call_and_backward(run, make_inputs(call)) for run in (compiled, twin))
        torch.testing.assert_close(got, want, **TOLERANCE,
                                   msg=lambda m, where=where: f"{where}: {m}")
        torch.testing.assert_close(got_grads, want_grads, **TOLERANCE,
                                   msg=lambda m, where=where: f"{where}, input gradients: {m}")
        assert_same_state(model, twin, attributes, where)


def call_and_backward(run: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[Any, list]:
    """The detached outputs, and the inputs' gradients of the sum of the float outputs."""
    args = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = run(*args)
    floats = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if floats:
        sum(t.sum() for t in floats).backward()
    detached = [t.detach() if isinstance(t, torch.Tensor) else t for t in tree_flatten(out)[0]]
    return detached, [a.grad for a in args]


def assert_same_state(model: nn.Module, twin: nn.Module, attributes: tuple[str, ...],
                      where: str) -> None:
    """Parameters, their gradients, buffers and the named Python attributes agree."""
    for (name, got), (_, want) in zip(model.named_parameters(), twin.named_parameters(),
                                      strict=True):
        torch.testing.assert_close(got, want, **TOLERANCE, msg=f"{where}: parameter {name}")
        torch.testing.assert_close(got.grad, want.grad, **TOLERANCE,
                                   msg=f"{where}: gradient of {name}")
    for (name, got), (_, want) in zip(model.named_buffers(), twin.named_buffers(), strict=True):
        torch.testing.assert_close(got, want, **TOLERANCE, msg=f"{where}: buffer {name}")
    for name in attributes:
        assert getattr(model, name) == getattr(twin, name), f"{where}: attribute {name}"


# ---------------------------------------------------------------- side effects

class BufferAccumulator(nn.Module):
    """A buffer written in place (`add_`) and read after the write."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x):
        h = torch.tanh(self.linear(x))
        self.seen.add_(h.detach().mean(0))
        return h * self.seen


class StepCounter(nn.Module):
    """An integer buffer counting calls, as BatchNorm's `num_batches_tracked`, whose count
    scales the output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x):
        self.num_batches_tracked.add_(1)
        return self.linear(x) * self.num_batches_tracked


class CumulativeBatchNorm(nn.Module):
    """BatchNorm with `momentum=None`: its running statistics are a cumulative average
    weighted by `num_batches_tracked`, so a step counted twice (or not at all) shows."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4, momentum=None)

    def forward(self, x):
        return torch.sigmoid(self.bn(self.linear(x)))


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_buffer_written_in_place_once_per_call(route: str) -> None:
    assert_calls_like_eager(route, BufferAccumulator, lambda call: [normal(call, 5, 3)])


def test_step_count_once_per_call() -> None:
    """Through Dynamo only: `symbolic_trace` itself runs `add_(1)` on the buffer, once,
    and leaves it out of the graph (BatchNorm, a leaf module there, is not traced into)."""
    assert_calls_like_eager("torch.compile", StepCounter, lambda call: [normal(call, 5, 3)])


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_batch_norm_step_count_train_then_eval(route: str) -> None:
    assert_calls_like_eager(route, CumulativeBatchNorm, lambda call: [normal(call, 6, 3) + call])

    def evaluated() -> nn.Module:
        torch.manual_seed(0)
        model = CumulativeBatchNorm()
        with torch.no_grad():  # statistics of a trained model, then eval mode
            model(torch.randn(8, 3) * 3 + 1)
        return model.eval()

    assert_calls_like_eager(route, evaluated, lambda call: [normal(call, 5, 3)])


class PythonCounter(nn.Module):
    """Python state changed around a Dynamo graph break: a call counter and a log."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.calls = 0
        self.log: list[int] = []

    def forward(self, x):
        h = self.linear(x).tanh()
        self.calls += 1
        torch._dynamo.graph_break()
        self.log.append(self.calls)
        return h * self.calls + x


def test_python_counter_in_a_graph_break() -> None:
    assert_calls_like_eager("torch.compile", PythonCounter, lambda call: [normal(call, 4, 3)],
                            attributes=("calls", "log"))


# ---------------------------------------------------------------- tuples

class Chunked(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, 1)
        return a * b.tanh()


class Split(nn.Module):
    """`torch.split` into unequal parts, and nanoGPT's split-then-transpose."""

    def forward(self, x):
        q, k, v = torch.split(x, [1, 2, 3], dim=2)
        a, b = x.split(3, dim=2)
        return (q * k.sum(2, keepdim=True) + v.mean(2, keepdim=True)).transpose(1, 2), \
            a.transpose(1, 2) * b.transpose(1, 2).sigmoid()


class MaxOverDim(nn.Module):
    """`max(dim)`'s values and its integer indices, both returned and both used."""

    def forward(self, x):
        values, indices = x.max(dim=1)
        return values * 2 + indices, indices


class LSTMState(nn.Module):
    """An LSTM's `(out, (h, c))`, every part used."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out.sum(1) + h[-1] * c[-1])


TUPLE_MODELS = {"chunk": (Chunked, (3, 4)), "split": (Split, (2, 3, 6)),
                "max_dim": (MaxOverDim, (3, 5))}


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("name", sorted(TUPLE_MODELS))
def test_tuple_of_an_eager_node_is_read_at_every_call(route: str, name: str) -> None:
    make_model, shape = TUPLE_MODELS[name]
    assert_calls_like_eager(route, make_model, lambda call: [normal(call, *shape)])


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_lstm_state_tuple(route: str) -> None:
    with torch._dynamo.config.patch(allow_rnn=True):  # the route Dynamo offers for RNNs
        assert_calls_like_eager(route, LSTMState, lambda call: [normal(call, 2, 5, 3)])


# ---------------------------------------------------------------- opaque eager nodes

@torch.library.custom_op("fx_zoo::halves", mutates_args=())
def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves of the last axis, as new tensors (no mapping will ever cover it)."""
    a, b = x.chunk(2, -1)
    return a.clone(), b.clone()


@halves.register_fake
def _(x):
    a, b = x.chunk(2, -1)
    return torch.empty_like(a), torch.empty_like(b)


halves.register_autograd(lambda ctx, da, db: torch.cat([da, db], -1),
                         setup_context=lambda ctx, inputs, output: None)


@torch.library.custom_op("fx_zoo::accumulate_", mutates_args=("total",))
def accumulate_(total: torch.Tensor, x: torch.Tensor) -> None:
    """`total += x.sum(0)`, opaque to every mapping."""
    total.add_(x.sum(0))


@accumulate_.register_fake
def _(total, x):
    return None


class OpaqueNodes(nn.Module):
    """A tuple from an opaque op used on both sides of compiled nodes, and a buffer
    written by an opaque op and read afterwards."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(2))

    def forward(self, x):
        a, b = halves(F.silu(self.linear(x)))
        accumulate_(self.total, a.detach())
        return a * b.exp() + self.total


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_opaque_tuple_and_buffer_nodes(route: str) -> None:
    assert_calls_like_eager(route, OpaqueNodes, lambda call: [normal(call, 3, 4)])
