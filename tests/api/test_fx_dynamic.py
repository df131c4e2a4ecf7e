"""Symbolic sizes through `torch.compile(backend="reverie")` (issue 33 item 4).

A dynamic graph of Dynamo's (made so at the second batch size, or by `dynamic=True` or
`mark_dynamic`) is compiled once with its sizes as Reverie's dimensions, so every later
batch size or sequence length runs the kernels already compiled; the graph Dynamo compiles
again for a `no_grad` call records the same Reverie source and reuses the training
graph's kernel. Each call's outputs and gradients equal eager's. A tensor torch makes at
every call (a dropout mask) takes the symbolic sizes too and is drawn with the call's.
"""

from __future__ import annotations

import copy
import re

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import reverie as rv  # noqa: E402
from reverie.runtime.native.lru import LruCache  # noqa: E402

SIZES = (4, 8, 16, 3)


@pytest.fixture
def compilations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Reverie source of each kernel compiled from now on (an empty kernel cache)."""
    made: list[str] = []
    function = rv.fx.interop_torch.function

    def counting(kernel):
        made.append(kernel.module.source)
        return function(kernel)

    monkeypatch.setattr(rv.fx, "KERNELS", LruCache(256))
    monkeypatch.setattr(rv.fx.interop_torch, "function", counting)
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def assert_step_matches_eager(compiled, model: nn.Module, twin: nn.Module, x,
                              mark_dynamic: bool = False) -> None:
    """Outputs, input and parameter gradients of one forward/backward from one seed equal
    eager's, and the random stream is left where eager leaves it (with `mark_dynamic`, the
    input's first dimension marked dynamic)."""
    results = []
    for run, m in ((compiled, model), (twin, twin)):
        m.zero_grad()
        xg = x.detach().clone().requires_grad_()
        if mark_dynamic:
            torch._dynamo.mark_dynamic(xg, 0)
        torch.manual_seed(len(x))
        out = run(xg)
        out.pow(2).sum().backward()
        results.append([out, xg.grad, *(p.grad for p in m.parameters()),
                        torch.rand((), dtype=torch.float64)])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


class Reshaping(nn.Module):
    """An MLP that reads the batch size (`view(x.size(0), -1)`, a scale by it)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(6, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.hidden(x)).view(x.size(0), -1)
        return self.out(h) / x.size(0)


def models() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = Reshaping().double()
    return model, copy.deepcopy(model)


def test_new_batch_sizes_and_no_grad_reuse_the_kernels(compilations: list[str]) -> None:
    model, twin = models()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    counts = []
    for size in SIZES:
        assert_step_matches_eager(compiled, model, twin, torch.randn(size, 6).double())
        counts.append(len(compilations))
    # static at 4, made dynamic by Dynamo at 8: kernels for both, none after
    assert counts == [1, 2, 2, 2]
    assert "v_l_x_: f64[4, 6]" in compilations[0]
    assert re.search(r"v_l_x_: f64\[S\d+, 6\]", compilations[1])
    x = torch.randn(5, 6).double()
    with torch.no_grad():
        got = compiled(x)
    torch.testing.assert_close(got, twin(x))
    assert len(compilations) == 2  # Dynamo's no_grad graph runs the forward kernel


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
def test_dynamic_graph_compiles_once(compilations: list[str], how: str) -> None:
    model, twin = models()
    compiled = torch.compile(model, backend="reverie", fullgraph=True,
                             dynamic=True if how == "dynamic=True" else None)
    for size in SIZES:
        assert_step_matches_eager(compiled, model, twin, torch.randn(size, 6).double(),
                                  mark_dynamic=how == "mark_dynamic")
    assert len(compilations) == 1


class Attention(nn.Module):
    """Single-head self-attention over a sequence whose length varies."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(4, 12)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
        return (weights @ v).mean(1)


def test_new_sequence_lengths_run_the_compiled_kernels(compilations: list[str]) -> None:
    torch.manual_seed(0)
    model = Attention().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    for length in (5, 7, 9, 2):
        assert_step_matches_eager(compiled, model, twin, torch.randn(3, length, 4).double())
    assert len(compilations) == 2


class SizeToEager(nn.Module):
    """A symbolic size read by a node that runs in eager PyTorch (`fallback=True`)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        h = torch.tanh(self.linear(x))
        return torch.kthvalue(h, x.size(0) // 2 + 1, 0).values * 0.5 + h  # no mapping


def test_size_read_by_an_eager_node_is_the_calls(compilations: list[str]) -> None:
    torch.manual_seed(0)
    model = SizeToEager().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", options={"fallback": True})
    for size in SIZES:
        assert_step_matches_eager(compiled, model, twin, torch.randn(size, 3).double())
    kernels = len(compilations)
    assert_step_matches_eager(compiled, model, twin, torch.randn(6, 3).double())
    assert len(compilations) == kernels


class DroppedOut(nn.Module):
    """Dropout in training on the hidden layer, and on its transpose (a mask laid out as a
    tensor whose strides hold the batch size, as eager's `empty_like` lays it out)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(8, 16)
        self.dropout = nn.Dropout(0.3)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        h = self.dropout(torch.relu(self.hidden(x)))
        return self.out(nn.functional.dropout(h.t(), 0.5).t())


def test_dropout_masks_take_the_symbolic_batch_size(compilations: list[str]) -> None:
    torch.manual_seed(0)
    model = DroppedOut().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    counts = []
    for size in (4, 5, 6, 7, 9, 12):
        assert_step_matches_eager(compiled, model, twin, torch.randn(size, 8).double())
        counts.append(len(compilations))
    assert counts == [1, 2, 2, 2, 2, 2]  # static at 4, dynamic from 5 on: masks included
    assert re.search(r"_made: f64\[S\d+, 16\]", compilations[1])
    assert re.search(r"_made: f64\[16, S\d+\]", compilations[1])
    x = torch.randn(10, 8).double()
    with torch.no_grad():
        torch.manual_seed(1)
        got = compiled(x)
        torch.manual_seed(1)
        torch.testing.assert_close(got, twin(x), rtol=1e-10, atol=1e-12)
    assert len(compilations) == 2  # Dynamo's no_grad graph runs the training kernel


class Recurrent(nn.Module):
    """A two-layer LSTM read time-first; its output's last step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, 2)

    def forward(self, x):
        return self.lstm(x)[0][-1]


def test_recurrent_layers_at_new_batch_sizes(compilations: list[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """At a dynamic batch size Dynamo leaves unused `not_(s0 == s0)` nodes beside the RNN;
    they record nothing, and every size equals eager. (The recurrent row slices each step
    with the example's extents, so the graph is planned per size: a kernel each.)"""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    torch.manual_seed(0)
    model = Recurrent().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    for size in (3, 6, 9):
        assert_step_matches_eager(compiled, model, twin,
                                  torch.randn(7, size, 4, dtype=torch.float64))
    assert len(compilations) == 3


def test_feature_dropout_takes_the_symbolic_batch_size(compilations: list[str]) -> None:
    """Dropout2d draws one number per (sample, channel): its noise is shaped by each call's
    batch, so every batch size runs the kernels compiled once."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.Dropout2d(0.3), nn.Tanh()).double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    counts = []
    for size in (4, 6, 9):
        assert_step_matches_eager(compiled, model, twin,
                                  torch.randn(size, 2, 7, 7, dtype=torch.float64))
        counts.append(len(compilations))
    assert counts == [1, 2, 2]
