"""Arguments of mapped FX targets that were dropped (issues 30 and 33), against eager torch.

Each case compiles a graph with `rv.fx.compile` (the `call_module` path for modules) or
`torch.compile(backend="reverie")` (Dynamo's graph, where `nn.Conv` becomes `F.pad` and a
convolution) and compares the value, the gradient of every input and parameter, and the
gradient of that gradient with eager PyTorch in float64.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402

torch.manual_seed(0)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles afresh (Dynamo stops recompiling one function after 8 graphs)."""
    torch._dynamo.reset()


def normal(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def derivatives(fn, inputs, parameters, frozen):
    """Value, first derivatives of Σ out² and the derivatives of Σ of those, with respect
    to the float inputs (save those numbered in `frozen`) and `parameters`."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point() and i not in frozen)
              for i, t in enumerate(inputs)]
    wrt = [t for t in inputs if t.requires_grad] + list(parameters)
    out = fn(*inputs)
    first = torch.autograd.grad((out * out).sum(), wrt, create_graph=True)
    second = torch.autograd.grad(sum(g.sum() for g in first), wrt, allow_unused=True,
                                 materialize_grads=True)
    return [out, *first, *second]


def assert_same(compiled, eager, inputs, parameters=(), frozen=()) -> None:
    got = derivatives(compiled, inputs, parameters, frozen)
    want = derivatives(eager, inputs, parameters, frozen)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-9, atol=1e-11)


def by_fx(fn, inputs, **options):
    return rv.fx.compile(torch.fx.symbolic_trace(fn), inputs, **options)


# ---------------------------------------------------------------- padding_mode

CONVS = {"conv1d": (lambda mode: nn.Conv1d(3, 4, 3, padding=2, padding_mode=mode),
                    lambda: [normal(2, 3, 7)]),
         "conv2d": (lambda mode: nn.Conv2d(4, 4, 3, stride=(2, 1), padding=(1, 2),
                                           dilation=(1, 2), groups=2, padding_mode=mode),
                    lambda: [normal(2, 4, 6, 7)])}


@pytest.mark.parametrize("mode", ["circular", "reflect", "replicate", "zeros"])
@pytest.mark.parametrize("conv", sorted(CONVS))
@pytest.mark.parametrize("route", ["call_module", "torch.compile"])
def test_conv_padding_mode(conv: str, mode: str, route: str) -> None:
    make, inputs = CONVS[conv]
    model = nn.Sequential(make(mode), nn.Tanh()).double()
    if route == "call_module":
        compiled = rv.fx.compile(torch.fx.GraphModule(model, torch.fx.Tracer().trace(model)),
                                 inputs())
    else:
        compiled = torch.compile(model, backend="reverie", fullgraph=True)
    assert_same(compiled, model, inputs(), list(model.parameters()))


def test_pad_modes_and_constant_value() -> None:
    def padded(x):
        return (F.pad(x, (1, 2, 0, 1), value=0.5).sum() + F.pad(x, (-1, 2, 1, -1)).sum()
                + F.pad(x, (2, 1), mode="reflect") * F.pad(x, (1, 2), mode="replicate")
                + F.pad(x, (1, 2), mode="circular"))

    x = normal(2, 3, 5)
    assert_same(by_fx(padded, [x]), padded, [x])
    with pytest.raises(rv.fx.UnsupportedNodeError, match=r"pad.*negative widths"):
        by_fx(lambda x: F.pad(x, (-1, 1), mode="circular"), [x])


def test_conv_string_padding() -> None:
    def same(x, w):
        return (F.conv2d(x, w, padding="same", dilation=(2, 1))
                + F.conv2d(x, w, padding="valid").sum())

    inputs = [normal(2, 3, 6, 5), normal(3, 3, 3, 2)]
    want = F.conv2d(*inputs, padding="same", dilation=(2, 1))
    compiled = by_fx(lambda x, w: F.conv2d(x, w, padding="same", dilation=(2, 1)), inputs)
    torch.testing.assert_close(compiled(*inputs), want, rtol=1e-12, atol=1e-12)
    assert_same(by_fx(same, inputs), same, inputs)


# ---------------------------------------------------------------- cross_entropy

LABELS = torch.tensor([0, -100, 2, 1, 1, 2])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", [{}, {"ignore_index": 1}, {"label_smoothing": 0.2},
                                     {"ignore_index": 2, "label_smoothing": 0.3}])
def test_cross_entropy_ignore_index(options: dict, reduction: str) -> None:
    def loss(z, labels):
        return F.cross_entropy(z, labels, reduction=reduction, **options)

    labels = LABELS if "ignore_index" not in options else LABELS.clamp(min=0)
    inputs = [normal(6, 3), labels]
    assert_same(by_fx(loss, inputs), loss, inputs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_weighted_ignore_index(reduction: str) -> None:
    """torch's weighted mean divides by the weights of the labels that count."""
    def loss(z, labels, w):
        return F.cross_entropy(z, labels, w, reduction=reduction, label_smoothing=0.1)

    inputs = [normal(6, 3), LABELS, torch.rand(3, dtype=torch.float64) + 0.5]
    assert_same(by_fx(loss, inputs), loss, inputs, frozen=(2,))  # torch: no weight gradient


def test_cross_entropy_spatial_and_probability_targets() -> None:
    labels = torch.randint(0, 3, (2, 4, 5))
    labels[0, 1, 2] = labels[1, 3, 0] = -100
    probabilities = torch.softmax(normal(2, 3, 4), dim=1)
    weight = torch.rand(3, dtype=torch.float64) + 0.5

    def loss(z, labels, q, w, y):
        return (F.cross_entropy(z, labels, w, label_smoothing=0.1)
                + F.cross_entropy(y, q, w, label_smoothing=0.2))

    inputs = [normal(2, 3, 4, 5), labels, probabilities, weight, normal(2, 3, 4)]
    assert_same(by_fx(loss, inputs), loss, inputs, frozen=(3,))


def test_cross_entropy_module_and_dynamo() -> None:
    model = nn.CrossEntropyLoss(ignore_index=1)
    inputs = [normal(6, 3), LABELS.clamp(min=0)]
    assert_same(by_fx(model, inputs), model, inputs)
    assert_same(torch.compile(model, backend="reverie", fullgraph=True), model, inputs)
    default = nn.CrossEntropyLoss()  # a label of -100, torch's default ignore_index
    assert_same(torch.compile(default, backend="reverie", fullgraph=True), default,
                [normal(6, 3), LABELS])


# ---------------------------------------------------------------- softplus

@pytest.mark.parametrize("beta, threshold", [(1.0, 0.5), (2.0, 1.0), (0.5, -0.3)])
def test_softplus_beta_threshold(beta: float, threshold: float) -> None:
    # on both sides of βx = threshold, not on it (where torch's second derivative drops
    # the curvature its first derivative has)
    x = torch.linspace(-3, 3, 24, dtype=torch.float64)
    model = nn.Softplus(beta, threshold)
    assert_same(by_fx(model, [x]), model, [x])
    functional = lambda x: F.softplus(x, beta=beta, threshold=threshold)  # noqa: E731
    assert_same(torch.compile(functional, backend="reverie", fullgraph=True), functional, [x])


# ---------------------------------------------------------------- issue 33, defaults

def split_then_transpose(x):
    first, _ = x.split(2, dim=2)
    return first.transpose(1, 2) * 2


def test_split_then_transpose_falls_back() -> None:
    x = normal(2, 3, 4)
    assert_same(by_fx(split_then_transpose, [x], fallback=True), split_then_transpose, [x])
    compiled = torch.compile(split_then_transpose, backend="reverie",
                             options={"fallback": True})
    assert_same(compiled, split_then_transpose, [x])


def test_torch_defaults_are_torch_s() -> None:
    """F.dropout trains by default (drawing eager's mask under one seed); F.softmax without
    `dim` takes torch's implicit axis."""
    x = normal(16)
    dropped = by_fx(lambda x: F.dropout(x), [x])
    torch.manual_seed(0)
    want = F.dropout(x)
    torch.manual_seed(0)
    assert (want == 0).any() and torch.equal(dropped(x), want)
    x = normal(2, 3, 4)
    assert_same(by_fx(nn.Softmax(), [x]), nn.Softmax(), [x])


@pytest.mark.parametrize("fn, name", [
    (lambda x: F.relu(x, True), "inplace|in place"),
    (lambda x: torch.div(x, 2.0, rounding_mode="floor"), "rounding_mode"),
    (lambda x: x.view(dtype=torch.float32), "dtype"),
    (lambda x: torch.sum(x, 0, dtype=torch.int64), "dtype"),
    (lambda x: F.gelu(x, approximate="erf"), "approximate"),
])
def test_unhonoured_arguments_are_refused_by_name(fn, name: str) -> None:
    with pytest.raises(rv.fx.UnsupportedNodeError, match=name):
        by_fx(fn, [normal(3, 4)])
