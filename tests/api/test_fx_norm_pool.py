"""The normalisation, pooling and embedding family of `rv.fx` (issue 33 item 2) against eager.

Each function compiles through `torch.compile(backend="reverie", fullgraph=True)` and is
compared with eager PyTorch in float32 and float64: values, the gradient of every float
input and the gradient of that gradient. Small models train for three SGD steps, compiled
by Dynamo and as `call_module` nodes (`torch.fx.symbolic_trace`), compared step by step:
outputs, every parameter's gradient, the parameters and every buffer (BatchNorm's running
statistics and `num_batches_tracked`, updated by the compiled kernels once per call), then
in eval mode. Refused arguments raise errors naming them.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from reverie.fx import UnsupportedNodeError  # noqa: E402
from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    compiled_as_modules,
    fresh_dynamo,
    tolerance,
)


def derivatives(fn, inputs, frozen=()):
    """The outputs, the derivatives of Σ out² and the derivatives of Σ of those, with
    respect to the float inputs (save those numbered in `frozen`)."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point() and i not in frozen)
              for i, t in enumerate(inputs)]
    wrt = [t for t in inputs if t.requires_grad]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    floats = [o for o in outs if o.is_floating_point()]
    first = torch.autograd.grad(sum((o * o).sum() for o in floats), wrt, create_graph=True)
    again = torch.autograd.grad(sum(g.sum() for g in first), wrt, allow_unused=True,
                                materialize_grads=True)
    return [*outs, *first, *again]


def assert_same(fn, inputs, dtype, frozen=()) -> None:
    """`fn` compiled whole by Reverie equals eager `fn`, to the second derivative."""
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    got, want = derivatives(compiled, inputs, frozen), derivatives(fn, inputs, frozen)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), **tolerance(dtype))


def refused(fn, inputs, name: str) -> None:
    """Compiling `fn` raises an error naming the argument `name`."""
    with pytest.raises(Exception, match=name):
        torch.compile(fn, backend="reverie", fullgraph=True)(*inputs)


# ---------------------------------------------------------------- functions

def normal(dtype, *shape):
    return torch.randn(*shape, dtype=dtype)


def positive(dtype, *shape):
    return torch.rand(*shape, dtype=dtype) + 0.5


TOKENS = torch.tensor([[1, 2, 4], [4, 0, 4]])  # repeated rows: the scatter-add sums them

FUNCTIONS = {
    "embedding": lambda d: (lambda i, w: F.embedding(i, w), [TOKENS, normal(d, 5, 3)]),
    "embedding_padding": lambda d: (lambda i, w: F.embedding(i, w, padding_idx=4),
                                    [TOKENS, normal(d, 5, 3)]),
    "embedding_padding_negative": lambda d: (lambda i, w: F.embedding(i, w, -1),
                                             [TOKENS[0], normal(d, 5, 3)]),
    "batch_norm_eval": lambda d: (
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, eps=1e-3),
        [normal(d, 4, 3, 5), normal(d, 3), positive(d, 3), normal(d, 3), normal(d, 3)]),
    "batch_norm_batch_statistics": lambda d: (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        [normal(d, 4, 3, 2, 2), normal(d, 3), normal(d, 3)]),
    "layer_norm": lambda d: (lambda x, w, b: F.layer_norm(x, (3, 4), w, b, 1e-3),
                             [normal(d, 2, 3, 4), normal(d, 3, 4), normal(d, 3, 4)]),
    "layer_norm_plain": lambda d: (lambda x: F.layer_norm(x, (4,)), [normal(d, 2, 3, 4)]),
    "group_norm": lambda d: (lambda x, w, b: F.group_norm(x, 2, w, b, 1e-3),
                             [normal(d, 3, 4, 5), normal(d, 4), normal(d, 4)]),
    "group_norm_2d": lambda d: (lambda x: F.group_norm(x, 3), [normal(d, 2, 6, 2, 3)]),
    "max_pool1d": lambda d: (lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True),
                             [normal(d, 2, 3, 8)]),
    "max_pool1d_indices": lambda d: (
        lambda x: F.max_pool1d(x, 2, dilation=2, return_indices=True), [normal(d, 3, 9)]),
    "max_pool2d": lambda d: (lambda x: F.max_pool2d(x, 2), [normal(d, 2, 3, 6, 4)]),
    "max_pool2d_indices": lambda d: (
        lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1), (1, 2), True, True),
        [normal(d, 2, 2, 7, 6)]),
    "max_pool2d_ties": lambda d: (lambda x: F.max_pool2d(x.relu(), 2),  # ties at 0
                                  [normal(d, 1, 2, 4, 4)]),
    "avg_pool1d": lambda d: (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
                             [normal(d, 2, 3, 8)]),
    "avg_pool2d": lambda d: (lambda x: F.avg_pool2d(x, 2), [normal(d, 2, 3, 6, 4)]),
    "avg_pool2d_ceil_padding": lambda d: (lambda x: F.avg_pool2d(x, 3, 2, 1, True),
                                          [normal(d, 2, 2, 7, 6)]),
    "avg_pool2d_exclude_padding": lambda d: (
        lambda x: F.avg_pool2d(x, 3, 2, 1, True, count_include_pad=False),
        [normal(d, 2, 2, 7, 6)]),
    "avg_pool2d_divisor": lambda d: (lambda x: F.avg_pool2d(x, 2, 1, divisor_override=3),
                                     [normal(d, 3, 5, 4)]),
    "adaptive_avg_pool1d": lambda d: (lambda x: F.adaptive_avg_pool1d(x, 3),
                                      [normal(d, 2, 3, 7)]),
    "adaptive_avg_pool2d": lambda d: (lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
                                      [normal(d, 2, 3, 7, 5)]),
    "adaptive_avg_pool2d_keep": lambda d: (lambda x: F.adaptive_avg_pool2d(x, (None, 2)),
                                           [normal(d, 2, 5, 6)]),
    "adaptive_avg_pool2d_global": lambda d: (lambda x: F.adaptive_avg_pool2d(x, 1),
                                             [normal(d, 2, 3, 4, 5)]),
    "max_pool3d_indices": lambda d: (
        lambda x: F.max_pool3d(x, 2, (1, 2, 1), 1, (1, 1, 2), return_indices=True),
        [normal(d, 2, 2, 4, 5, 5)]),
    "avg_pool3d_ceil_exclude_padding": lambda d: (
        lambda x: F.avg_pool3d(x, 3, 2, 1, True, count_include_pad=False),
        [normal(d, 2, 2, 5, 6, 4)]),
    "avg_pool3d_divisor": lambda d: (lambda x: F.avg_pool3d(x, 2, 1, divisor_override=5),
                                     [normal(d, 3, 3, 4, 3)]),
    "adaptive_avg_pool3d": lambda d: (lambda x: F.adaptive_avg_pool3d(x, (2, None, 3)),
                                      [normal(d, 2, 3, 5, 4, 7)]),
}
FROZEN = {"batch_norm_eval": (1, 2)}  # torch refuses gradients for running statistics


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_matches_eager(name: str, dtype: torch.dtype) -> None:
    fn, inputs = FUNCTIONS[name](dtype)
    assert_same(fn, inputs, dtype, FROZEN.get(name, ()))


def test_padding_row_gets_no_gradient() -> None:
    weight = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(lambda i, w: F.embedding(i, w, padding_idx=4), backend="reverie",
                             fullgraph=True)
    compiled(TOKENS, weight).sum().backward()
    assert weight.grad[4].abs().max() == 0 and weight.grad[1].abs().min() > 0


@pytest.mark.parametrize(("fn", "inputs", "name"), [
    (lambda i, w: F.embedding(i, w, max_norm=1.0), [TOKENS, torch.randn(5, 3)], "max_norm"),
    (lambda i, w: F.embedding(i, w, sparse=True), [TOKENS, torch.randn(5, 3)], "sparse"),
    (lambda i, w: F.embedding(i, w, scale_grad_by_freq=True), [TOKENS, torch.randn(5, 3)],
     "scale_grad_by_freq"),
    (lambda x, g: F.group_norm(x, 3, g), [torch.randn(2, 4, 3), torch.randn(4)], "num_groups"),
    (lambda x: F.max_pool2d(x, 2, padding=2), [torch.randn(1, 1, 6, 6)], "padding"),
    (lambda x: F.avg_pool2d(x, 2, stride=0), [torch.randn(1, 1, 6, 6)], "stride"),
    (lambda x: F.adaptive_avg_pool2d(x, (2, 0)), [torch.randn(1, 1, 6, 6)], "output_size"),
])
def test_refused_arguments_are_named(fn, inputs, name: str) -> None:
    refused(fn, inputs, name)


# ---------------------------------------------------------------- in-place writes

def test_add_in_place_writes_once_and_refuses_what_it_cannot_write() -> None:
    def bump(counter, x):
        counter.add_(2, alpha=3)
        return x * 2

    counter, x = torch.tensor(1), torch.randn(3, dtype=torch.float64)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(bump), [counter.clone(), x])
    assert counter == 1  # compiling touched nothing
    torch.testing.assert_close(compiled(counter, x), x * 2)
    assert counter == 7
    with pytest.raises(UnsupportedNodeError, match="other"):  # a float into an integer
        rv.fx.compile(torch.fx.symbolic_trace(lambda c: c.add_(0.5)), [counter])
    weight = torch.randn(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(UnsupportedNodeError, match="requires grad"):  # no history to write into
        rv.fx.compile(torch.fx.symbolic_trace(lambda w: w.add_(1.0) * 2), [weight])


def test_write_into_memory_another_input_shares_is_refused() -> None:
    """The kernel reads its inputs before the write lands: an alias would read stale values."""
    def bump_then_read(a, b):
        a.add_(1)
        return b * 2

    a = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(UnsupportedNodeError, match="shares"):
        rv.fx.compile(torch.fx.symbolic_trace(bump_then_read), [a, a[1:]])


# ---------------------------------------------------------------- training with buffers

class Net(nn.Module):
    """A small CNN of the family: every row, BatchNorm in both ranks."""

    def __init__(self, momentum: float | None = 0.1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum=momentum)
        self.pool = nn.MaxPool2d(2)
        self.norm = nn.GroupNorm(2, 4)
        self.avg = nn.AvgPool2d(2, ceil_mode=True)
        self.adaptive = nn.AdaptiveAvgPool2d((2, 3))
        self.bn1 = nn.BatchNorm1d(24, momentum=momentum)
        self.head = nn.Linear(24, 3)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        x = self.adaptive(self.avg(self.norm(x)))
        return self.head(self.bn1(x.flatten(1)))


class Tagger(nn.Module):
    """Embedding (with a padding row) -> LayerNorm -> BatchNorm1d over the features."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4, padding_idx=0)
        self.norm = nn.LayerNorm(4)
        self.bn = nn.BatchNorm1d(4)
        self.pool = nn.AdaptiveAvgPool1d(2)
        self.head = nn.Linear(8, 2)

    def forward(self, tokens):
        x = self.bn(self.norm(self.embed(tokens)).transpose(1, 2))
        return self.head(self.pool(x).flatten(1))


class Volumes(nn.Module):
    """The 3-D rows: Conv3d -> BatchNorm3d -> MaxPool3d -> AvgPool3d -> AdaptiveAvgPool3d."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 2, padding=1)
        self.bn = nn.BatchNorm3d(3)
        self.pool = nn.MaxPool3d(2, stride=1)
        self.avg = nn.AvgPool3d(2, ceil_mode=True, count_include_pad=False)
        self.adaptive = nn.AdaptiveAvgPool3d((1, 2, 1))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = self.avg(self.pool(F.relu(self.bn(self.conv(x)))))
        return self.head(self.adaptive(x).flatten(1))


def batches(model: nn.Module, dtype: torch.dtype) -> list[torch.Tensor]:
    """Three training batches and one for eval, the same for every run."""
    make = torch.Generator().manual_seed(1)
    if isinstance(model, Tagger):
        return [torch.randint(0, 7, (5, 6), generator=make) for _ in range(4)]
    shape = (4, 2, 4, 5, 3) if isinstance(model, Volumes) else (4, 2, 9, 8)
    return [torch.randn(*shape, dtype=dtype, generator=make) for _ in range(4)]


def train(model: nn.Module, run, dtype: torch.dtype) -> list[list[torch.Tensor]]:
    """Outputs and gradients of three SGD steps of `run` (the model, compiled or not),
    the state after each, then an eval-mode output."""
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    *steps, held_out = batches(model, dtype)
    seen = []
    for x in steps:
        out = run(x)
        optimiser.zero_grad()
        (out * out).mean().backward()
        seen.append([out.detach(), *(p.grad.clone() for p in model.parameters())])
        optimiser.step()
        seen.append([t.clone() for t in model.state_dict().values()])
    model.eval()
    seen.append([run(held_out).detach(), *(t.clone() for t in model.state_dict().values())])
    return seen


def compiled_by_dynamo(model: nn.Module):
    return torch.compile(model, backend="reverie", fullgraph=True)



@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("compiler", [compiled_by_dynamo, compiled_as_modules])
@pytest.mark.parametrize("make", [Net, Tagger, Volumes])
def test_training_matches_eager(make, compiler, dtype: torch.dtype) -> None:
    eager = make().to(dtype)
    model = copy.deepcopy(eager)
    want = train(eager, eager, dtype)
    got = train(model, compiler(model), dtype)
    for a, b in zip(got, want, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, **tolerance(dtype))
    assert model.bn.num_batches_tracked == 3


@pytest.mark.parametrize("compiler", [compiled_as_modules, torch.compile])
def test_cumulative_average_momentum_none(compiler) -> None:
    """momentum=None averages the statistics cumulatively: 1 / num_batches_tracked, in the
    kernel for nn.BatchNorm (Dynamo breaks the graph at `float(num_batches_tracked)` and
    passes the factor as a number)."""
    eager = Net(momentum=None).double()
    model = copy.deepcopy(eager)
    run = compiler(model) if compiler is compiled_as_modules else \
        torch.compile(model, backend="reverie")
    for a, b in zip(train(model, run, torch.float64), train(eager, eager, torch.float64),
                    strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, **tolerance(torch.float64))


def test_compiling_touches_no_buffer() -> None:
    """Planning runs on fake tensors; the buffers change once per call, in the kernel."""
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = batches(model, torch.float32)[0]
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    compiled(x)
    assert model.bn.num_batches_tracked == 1 and model.bn1.num_batches_tracked == 1
    assert not torch.equal(model.bn.running_mean, before["bn.running_mean"])


# ---------------------------------------------------------------- the stand-ins

def test_traced_gather_with_an_integer_array_of_any_rank() -> None:
    module = rv.trace(lambda table, rows: table[rows].sum(), np.ones((5, 3)),
                      np.array([[0, 4], [4, 2]]))
    table = np.arange(15.0).reshape(5, 3)
    rows = np.array([[0, 4], [4, 2]])
    assert module.kernel(table, rows) == table[rows].sum()
    grad = module.kernel.grad(wrt="table")(table, rows)
    np.testing.assert_array_equal(grad, np.bincount(rows.ravel(), minlength=5)[:, None]
                                  * np.ones((1, 3)))


def test_traced_argmax_along_one_axis() -> None:
    module = rv.trace(lambda x: x.argmax(axis=1), np.ones((2, 3)))
    x = np.array([[1.0, 3.0, 3.0], [5.0, 0.0, 1.0]])
    np.testing.assert_array_equal(module.kernel(x), [1, 0])
