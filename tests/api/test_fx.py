"""`rv.fx.compile` and `torch.compile(backend="reverie")` (docs/api.md §8–9).

Every mapped target is checked against eager PyTorch in f64: values, first derivatives and
second derivatives (`create_graph=True`, then a gradient of the gradient), which is what
`torch.compile`'s default backend refuses. Whole models (an MLP, a small CNN, a
transformer block) go through `torch.compile(..., backend="reverie", fullgraph=True)`.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from reverie.fx_targets import FUNCTIONS, METHODS, MODULES, supported_targets  # noqa: E402
from reverie.tracing import UNARY_BUILTINS  # noqa: E402
from tests.api.test_fx_margin_losses import MODULES as MARGIN_LOSS_MODULES  # noqa: E402
from tests.api.test_fx_tensor_ops import MODULES as TENSOR_OP_MODULES  # noqa: E402

torch.manual_seed(0)


def derivatives(fn, inputs):
    """Value, gradient and gradient of the gradient's sum of `fn` at `inputs`."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*inputs)
    if isinstance(out, tuple):
        out = out[0]
    float_inputs = [t for t in inputs if t.requires_grad]
    grads = torch.autograd.grad((out * out).sum(), float_inputs, create_graph=True)
    total = sum(g.sum() for g in grads)
    second = torch.autograd.grad(total, float_inputs, allow_unused=True,
                                 materialize_grads=True) if total.requires_grad else None
    return out.detach(), [g.detach() for g in grads], second


def assert_same_derivatives(compiled, reference, inputs) -> None:
    got, want = derivatives(compiled, inputs), derivatives(reference, inputs)
    torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    if want[2] is not None:
        for a, b in zip(got[2], want[2], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


def compiled_by_fx(fn, inputs, **options):
    return rv.fx.compile(torch.fx.symbolic_trace(fn), inputs, **options)


class _Wrap(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def positive(*shape):
    return torch.rand(*shape, dtype=torch.float64) * 1.5 + 0.5


def normal(*shape):
    return torch.randn(*shape, dtype=torch.float64)


# positive(...) moved into the domain of the functions defined on part of it
IN_DOMAIN = {"arcsin": lambda x: x * 0.4, "arccos": lambda x: x * 0.4,
             "arctanh": lambda x: x * 0.4, "arccosh": lambda x: x + 1.0,
             "logit": lambda x: x * 0.4, "erfinv": lambda x: x * 0.4}
TORCH_UNARY = sorted(n for n in UNARY_BUILTINS if callable(getattr(torch, n, None)))


@pytest.mark.parametrize("name", TORCH_UNARY)
@pytest.mark.parametrize("spelling", ["function", "method"])
def test_elementwise_builtins(name: str, spelling: str) -> None:
    if spelling == "function":
        fn = lambda x: getattr(torch, name)(x) * x  # noqa: E731
    else:
        fn = lambda x: getattr(x, name)() * x  # noqa: E731
    x = IN_DOMAIN.get(name, lambda x: x)(positive(3, 4))
    assert_same_derivatives(compiled_by_fx(fn, [x]), fn, [x])


CASES = {
    "operators": (lambda x, y: (x + y) * (x - 2.0) / (y + 3.0) - x ** 3 + (-y) @ y.T,
                  [normal(3, 3), normal(3, 3)]),
    "torch arithmetic": (lambda x, y: torch.sub(torch.add(x, y), torch.mul(x, y))
                         + torch.div(x, torch.square(y) + 1) + torch.pow(x, 2),
                         [normal(4), normal(4)]),
    "matmul family": (lambda a, b, v: torch.mm(a, b).sum() + torch.mv(a, v).sum()
                      + torch.matmul(a, b).t().sum(), [normal(3, 4), normal(4, 2), normal(4)]),
    "reductions": (lambda x: x.sum(dim=1) + x.mean(1, keepdim=True).squeeze(1) * 0
                   + torch.amax(x, dim=1) + x.amin(dim=(1,)) + torch.logsumexp(x, dim=1)
                   + x.prod(dim=1) + torch.sum(x) + torch.mean(x, dim=1), [normal(3, 5)]),
    "softmax family": (lambda x: F.softmax(x, dim=1) + x.log_softmax(-1) + torch.softmax(x, 0),
                       [normal(3, 5)]),
    "activations": (lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x)
                    + F.softplus(x) + F.softplus(x, beta=2.0) + torch.clamp(x, min=-0.5, max=0.7)
                    + torch.maximum(x, 0.1 * x) + torch.minimum(x, x * x),
                    [normal(4, 3)]),
    "views": (lambda x: x.view(6, 2).t().reshape(-1)[::2].sum() + x.transpose(0, 1).sum(0)[1]
              + torch.flatten(x).sum() + x.permute(1, 0).contiguous()[0].sum()
              + torch.cat([x, x * 2], dim=0).sum(0).sum() + x[:, 1:].sum(), [normal(3, 4)]),
    "where": (lambda x: torch.where(x > 0, x * x, -x), [normal(5)]),
    "linear and layer_norm": (lambda x, w, b, g, h: F.layer_norm(F.linear(x, w, b), (3,), g, h),
                              [normal(4, 2), normal(3, 2), normal(3), normal(3), normal(3)]),
    "losses": (lambda z, t, labels: F.mse_loss(z, t) + F.mse_loss(z, t, reduction="sum")
               + F.cross_entropy(z, labels) + F.cross_entropy(z, labels, reduction="sum"),
               [normal(5, 3), normal(5, 3), torch.tensor([0, 2, 1, 1, 0])]),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=1) + F.conv1d(x, w, b, padding=1),
               [normal(2, 3, 7), normal(4, 3, 3), normal(4)]),
    "conv2d strided": (lambda x, w: F.conv2d(x, w, stride=2, padding=1),
                       [normal(2, 2, 6, 5), normal(3, 2, 3, 3)]),
    "dropout in eval": (lambda x: F.dropout(x, 0.3, training=False) * 2, [normal(4)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_functions_and_methods(case: str) -> None:
    fn, inputs = CASES[case]
    if case == "reductions":  # `squeeze` is not mapped: this case runs it with fallback
        compiled = compiled_by_fx(fn, inputs, fallback=True)
    else:
        compiled = compiled_by_fx(fn, inputs)
    assert_same_derivatives(compiled, fn, inputs)


MODULE_CASES = [
    (nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2),
                   nn.Sigmoid(), nn.Linear(2, 3), nn.SiLU(), nn.GELU(), nn.Softplus(),
                   nn.LayerNorm(3), nn.Softmax(dim=1), nn.Dropout(0.2), nn.Identity(),
                   nn.LogSoftmax(dim=1)), [normal(4, 3)]),
    (nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(15, 2)),
     [normal(2, 2, 5)]),
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 3 * 3, 1)),
     [normal(3, 1, 5, 5)]),
    (nn.Sequential(nn.BatchNorm2d(2), nn.MaxPool2d(2), nn.GroupNorm(2, 2),
                   nn.AvgPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d((2, 1)), nn.Flatten(),
                   nn.BatchNorm1d(4)), [normal(3, 2, 7, 6)]),
    (nn.Sequential(nn.MaxPool1d(2), nn.AvgPool1d(2, ceil_mode=True), nn.AdaptiveAvgPool1d(2)),
     [normal(2, 2, 11)]),
    (nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.ELU(0.5), nn.SELU(), nn.CELU(1.5),
                   nn.Mish(), nn.Hardtanh(-2.0, 1.5), nn.ReLU6(), nn.Hardswish(),
                   nn.LogSigmoid(), nn.Softsign(), nn.Dropout1d(0.2), nn.Dropout2d(0.2),
                   nn.Dropout3d(0.2), nn.AlphaDropout(0.2), nn.FeatureAlphaDropout(0.2),
                   nn.Unflatten(1, (2, 4)), nn.Flatten()), [normal(4, 3)]),
]


@pytest.mark.parametrize("index", range(len(MODULE_CASES)))
def test_modules(index: int) -> None:
    model, inputs = MODULE_CASES[index]
    model = model.double().eval()
    assert_same_derivatives(compiled_by_fx(model, inputs), model, inputs)


class LossModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mse, self.xent = nn.MSELoss(), nn.CrossEntropyLoss()

    def forward(self, z, t, labels):
        return self.mse(z, t) + self.xent(z, labels)


def test_loss_modules() -> None:
    inputs = [normal(5, 3), normal(5, 3), torch.tensor([0, 2, 1, 1, 0])]
    assert_same_derivatives(compiled_by_fx(LossModel(), inputs), LossModel(), inputs)


def test_every_module_row_is_tested() -> None:
    tested = {type(m) for model, _ in MODULE_CASES for m in model} | {
        nn.MSELoss, nn.CrossEntropyLoss, nn.Embedding,  # (test_fx_norm_pool.py: int input)
        nn.Hardsigmoid,  # (test_fx_activations_shapes.py: torch has no double backward)
        nn.ConvTranspose1d, nn.ConvTranspose2d,  # (test_fx_conv.py: call_module nodes)
        nn.Conv3d, nn.ConvTranspose3d,  # (test_fx_conv.py)
        nn.BatchNorm3d, nn.MaxPool3d, nn.AvgPool3d, nn.AdaptiveAvgPool3d,  # (test_fx_norm_pool)
        nn.PReLU,  # (test_fx_activations_shapes.py: it has a weight)
        nn.RMSNorm, nn.CosineSimilarity,  # (test_fx_math.py)
        *(type(m) for m, _ in MARGIN_LOSS_MODULES),  # (test_fx_margin_losses.py)
        *(type(m) for model, _ in TENSOR_OP_MODULES.values() for m in model),  # (_tensor_ops)
        nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d}  # (test_fx_resample)
    assert set(MODULES) <= tested
    listed = supported_targets()
    assert len(listed["functions"]) >= 40 and "nn.LayerNorm" in listed["modules"]
    assert "Tensor.softmax" in listed["methods"] and len(METHODS) > 20 and FUNCTIONS


# ---------------------------------------------------------------- whole models, torch.compile

class Attention(nn.Module):
    """A transformer block on one sequence: LayerNorm, softmax attention, an MLP."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.scale = 1 / math.sqrt(d)

    def forward(self, x):
        h = self.norm1(x)
        attention = torch.softmax(self.q(h) @ self.k(h).T * self.scale, dim=-1)
        x = x + attention @ self.v(h)
        return x + self.mlp(self.norm2(x))


WHOLE_MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1)),
            lambda: [normal(10, 6)]),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.Flatten(),
                                  nn.Linear(3 * 6 * 6, 2)), lambda: [normal(2, 1, 6, 6)]),
    "transformer block": (Attention, lambda: [normal(5, 8)]),
}


@pytest.mark.parametrize("name", sorted(WHOLE_MODELS))
def test_torch_compile_backend_whole_models(name: str) -> None:
    make_model, make_inputs = WHOLE_MODELS[name]
    model = make_model().double()
    inputs = make_inputs()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    assert_same_derivatives(compiled, model, inputs)


def test_training_updates_parameters_without_recompiling() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    twin = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    twin.load_state_dict(model.state_dict())
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [normal(16, 3)])
    x, y = normal(16, 3), normal(16, 1)
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for _ in range(5):
        for run, optimiser in zip((compiled, twin), optimisers, strict=True):
            optimiser.zero_grad()
            F.mse_loss(run(x), y).backward()
            optimiser.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(compiled.sources) == 1


# ---------------------------------------------------------------- unmapped nodes

def uses_erfinv(x):
    return torch.special.erfinv(x * 0.5).sum() + x.sum()


def test_unmapped_node_is_an_error_naming_it() -> None:
    with pytest.raises(rv.fx.UnsupportedNodeError, match=r"node 'special_erfinv' "
                       r"\(call_function torch\S*special_erfinv\).*no mapping"):
        compiled_by_fx(uses_erfinv, [normal(4)])


def test_unsupported_option_is_an_error_naming_the_node() -> None:
    with pytest.raises(rv.fx.UnsupportedNodeError, match="alpha_dropout.*training mode"):
        compiled_by_fx(lambda x: F.alpha_dropout(x, 0.5, training=True), [normal(4)])


def test_fallback_runs_unmapped_nodes_in_eager_pytorch() -> None:
    x = torch.rand(4, dtype=torch.float64) - 0.5
    compiled = compiled_by_fx(uses_erfinv, [x], fallback=True)
    assert len(compiled.sources) == 2  # before and after the break
    assert_same_derivatives(compiled, uses_erfinv, [x])


def test_backend_option_fallback() -> None:
    x = torch.rand(4, dtype=torch.float64) - 0.5
    compiled = torch.compile(_Wrap(uses_erfinv), backend="reverie", fullgraph=True,
                             options={"fallback": True})
    assert_same_derivatives(compiled, uses_erfinv, [x])


def test_dynamo_error_names_the_source_line() -> None:
    model = _Wrap(uses_erfinv)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    with pytest.raises(Exception, match=r"special_erfinv[\s\S]*test_fx.py"):
        compiled(normal(4))


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="GraphModule"):
        rv.fx.compile(nn.Linear(2, 2), [normal(2)])
    with pytest.raises(ValueError, match="2 example inputs"):
        rv.fx.compile(torch.fx.symbolic_trace(nn.Linear(2, 2)), [normal(2), normal(2)])
