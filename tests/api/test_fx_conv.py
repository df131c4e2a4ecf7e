"""The convolution family of `rv.fx` (issue 33 item 2): conv1d/2d and conv_transpose1d/2d.

Each convolution compiles through `torch.compile(backend="reverie", fullgraph=True)` and
is compared with eager PyTorch in float32 and float64 over a grid of strides, paddings,
output paddings, dilations, groups and biases: values, the gradient of every input and
the gradient of that gradient. The `nn.ConvTranspose` modules compile as `call_module`
nodes through `rv.fx.compile` (with `output_size` given to `forward`), a small generator
trains for three SGD steps both ways, and arguments torch does not take are refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from reverie.fx_rows_conv import conv_transpose  # noqa: E402
from reverie.fx_targets import FUNCTIONS, MODULES  # noqa: E402
from reverie.tracing import Recording  # noqa: E402
from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    compiled_as_modules,
    fresh_dynamo,
    tolerance,
)


def derivatives(fn, inputs):
    """The output, the derivatives of Σ out² and the derivatives of Σ of those, with
    respect to every input."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    first = torch.autograd.grad((out * out).sum(), inputs, create_graph=True)
    again = torch.autograd.grad(sum(g.sum() for g in first), inputs, materialize_grads=True)
    return [out, *first, *again]


def assert_same(got, want, dtype) -> None:
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), **tolerance(dtype))


def assert_compiles_alike(fn, inputs, dtype) -> None:
    """`fn` compiled whole by Reverie equals eager `fn`, to the second derivative."""
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    assert_same(derivatives(compiled, inputs), derivatives(fn, inputs), dtype)


# ---------------------------------------------------------------- the functional rows

# (spatial axes, stride, padding, output_padding, dilation, groups, bias): every value of
# each argument, and strides with output paddings and dilations together
TRANSPOSED = [
    (1, 1, 0, 0, 1, 1, False), (1, 2, 1, 1, 1, 1, True), (1, 3, 2, 2, 1, 2, True),
    (1, 2, 0, 1, 2, 1, False), (1, 1, 1, 1, 2, 2, True), (1, 3, (1,), 0, 3, 1, True),
    (2, 2, 1, 0, 1, 1, False), (2, (2, 3), (1, 0), (1, 2), 1, 2, True),
    (2, 1, 2, 0, (2, 1), 1, True), (2, 3, 1, (0, 1), 2, 2, False), (2, 2, 1, 1, 1, 2, True),
]


def transposed_case(spatial, stride, padding, output_padding, dilation, groups, bias, dtype):
    """A transposed convolution of 2·groups channels into 3·groups over lengths 5 (and 4),
    kernel 3 (by 2), with its inputs."""
    x = torch.randn(2, 2 * groups, *(5, 4)[:spatial], dtype=dtype)
    w = torch.randn(2 * groups, 3, *(3, 2)[:spatial], dtype=dtype)
    function = F.conv_transpose1d if spatial == 1 else F.conv_transpose2d

    def fn(x, w, b=None):
        return function(x, w, b, stride, padding, output_padding, groups, dilation)

    return fn, [x, w] + ([torch.randn(3 * groups, dtype=dtype)] if bias else [])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", TRANSPOSED, ids=str)
def test_conv_transpose_matches_eager(case, dtype) -> None:
    fn, inputs = transposed_case(*case, dtype)
    assert_compiles_alike(fn, inputs, dtype)


CONVS = {
    "conv1d_stride_dilation_groups": (
        lambda x, w, b: F.conv1d(x, w, b, 2, 1, 2, 2), [(2, 4, 9), (6, 2, 3), (6,)]),
    "conv2d_same": (lambda x, w: F.conv2d(x, w, padding="same", dilation=(1, 2)),
                    [(2, 3, 5, 6), (4, 3, 3, 2)]),
    "conv1d_unbatched": (lambda x, w: F.conv1d(x, w, padding=1), [(3, 7), (2, 3, 3)]),
    "conv_transpose2d_unbatched": (lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1),
                                   [(2, 3, 4), (2, 3, 3, 3), (3,)]),
    "conv3d_stride_padding_dilation": (
        lambda x, w, b: F.conv3d(x, w, b, (1, 2, 1), 1, (1, 1, 2)),
        [(2, 3, 4, 5, 6), (4, 3, 3, 2, 2), (4,)]),
    "conv3d_groups": (lambda x, w: F.conv3d(x, w, groups=2), [(1, 4, 3, 4, 3), (2, 2, 2, 2, 2)]),
    "conv_transpose3d": (lambda x, w, b: F.conv_transpose3d(x, w, b, 2, 1, 1),
                         [(2, 3, 2, 3, 2), (3, 2, 3, 3, 2), (2,)]),
    "conv_transpose3d_groups_dilation": (
        lambda x, w: F.conv_transpose3d(x, w, stride=(1, 2, 1), groups=2, dilation=(2, 1, 1)),
        [(1, 4, 3, 2, 3), (4, 1, 2, 2, 2)]),
    "conv_tbc": (lambda x, w, b: torch.conv_tbc(x, w, b, 1), [(6, 2, 3), (3, 3, 4), (4,)]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", CONVS)
def test_convolution_matches_eager(name: str, dtype) -> None:
    fn, shapes = CONVS[name]
    assert_compiles_alike(fn, [torch.randn(*s, dtype=dtype) for s in shapes], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("module", [nn.Conv3d(3, 4, 2, padding=1, padding_mode="circular"),
                                    nn.Conv3d(2, 4, (2, 1, 2), stride=2, groups=2),
                                    nn.ConvTranspose3d(3, 2, 2, stride=2, output_padding=1)],
                         ids=["Conv3d circular", "Conv3d groups", "ConvTranspose3d"])
def test_three_dimensional_modules_compile_as_calls(module: nn.Module, dtype) -> None:
    """nn.Conv3d and nn.ConvTranspose3d as `call_module` nodes (`rv.fx.compile`)."""
    model = nn.Sequential(module).to(dtype)
    x = torch.randn(2, module.in_channels, 3, 4, 3, dtype=dtype)
    run = compiled_as_modules(model)
    torch.testing.assert_close(run(x), model(x), **tolerance(dtype))


def test_torch_spelling_is_the_functional_row() -> None:
    """Dynamo hands over `torch.conv_transpose2d`, which is F.conv_transpose2d's object."""
    assert torch.conv_transpose1d in FUNCTIONS and torch.conv_transpose2d in FUNCTIONS
    assert nn.ConvTranspose1d in MODULES and nn.ConvTranspose2d in MODULES


# ---------------------------------------------------------------- the modules

class Generator(nn.Module):
    """A DCGAN-style generator: transposed convolutions, BatchNorm, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(4, 6, 4, 1, 0, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
            nn.ConvTranspose2d(6, 4, 4, 2, 1, groups=2), nn.ReLU(),
            nn.ConvTranspose2d(4, 1, 3, 2, 1, output_padding=1, dilation=2), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Upsampler(nn.Module):
    """nn.ConvTranspose1d asked for an output size at `forward`."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose1d(3, 2, 3, stride=3, padding=1)

    def forward(self, x):
        return self.up(x, output_size=[2, 2, 3 * x.shape[-1]])



def train(model: nn.Module, run, dtype) -> list[torch.Tensor]:
    """Outputs, gradients and parameters of three SGD steps of `run`, then eval's output."""
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    make = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(3):
        out = run(torch.randn(3, 4, 1, 1, dtype=dtype, generator=make))
        optimiser.zero_grad()
        (out * out).mean().backward()
        seen += [out.detach(), *(p.grad.clone() for p in model.parameters())]
        optimiser.step()
        seen += [t.clone() for t in model.state_dict().values()]
    model.eval()
    return seen + [run(torch.randn(3, 4, 1, 1, dtype=dtype, generator=make)).detach()]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("route", ["dynamo", "modules"])
def test_generator_trains_as_eager(route: str, dtype) -> None:
    torch.manual_seed(0)
    eager = Generator().to(dtype)
    compiled = Generator().to(dtype)
    compiled.load_state_dict(eager.state_dict())
    run = compiled_as_modules(compiled) if route == "modules" else \
        torch.compile(compiled, backend="reverie", fullgraph=True)
    assert_same(train(compiled, run, dtype), train(eager, eager, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_module_output_size_is_honoured(dtype) -> None:
    model = Upsampler().to(dtype)
    x = torch.randn(2, 3, 4, dtype=dtype)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    assert compiled(x).shape == (2, 2, 12)  # output padding 1: without it, 11
    assert_same(derivatives(compiled, [x]), derivatives(model, [x]), dtype)


# ---------------------------------------------------------------- refusals

def stand_ins(*shapes):
    """Float64 stand-ins of these shapes, as rv.fx records a graph's inputs."""
    recording = Recording(literal_dims=True)
    return [recording.param_like(f"a{i}", s, np.dtype(np.float64))
            for i, s in enumerate(shapes)]


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"padding": -1}, "padding"), ({"padding": "same"}, "padding"),
    ({"padding": 5}, "padding"), ({"stride": 2, "output_padding": 2}, "output_padding"),
    ({"output_padding": 1}, "output_padding"), ({"stride": 0}, "stride"),
    ({"dilation": (1, 0)}, "dilation"),
])
def test_arguments_torch_rejects_are_refused_by_name(kwargs, name: str) -> None:
    x, w = stand_ins((1, 2, 5, 5), (2, 3, 3, 3))
    with pytest.raises(NotImplementedError, match=f"conv_transpose: argument {name}="):
        conv_transpose(x, w, **kwargs)


@pytest.mark.parametrize(("shapes", "kwargs", "name"), [
    (((5,), (2, 3, 3)), {}, "input"), (((1, 2, 5), (2, 3, 3)), {"groups": 3}, "groups"),
    (((1, 3, 5), (3, 3, 3)), {"groups": 2}, "groups"),
    (((1, 2, 5), (2, 3, 3)), {"groups": 0}, "groups"),
])
def test_inputs_torch_rejects_are_refused_by_name(shapes, kwargs, name: str) -> None:
    x, w = stand_ins(*shapes)
    with pytest.raises(NotImplementedError, match=f"conv_transpose: argument {name}="):
        conv_transpose(x, w, **kwargs)


def test_padding_mode_other_than_zeros_is_refused_by_name() -> None:
    module = nn.ConvTranspose1d(2, 3, 3)
    module.padding_mode = "reflect"  # torch's constructor takes it, its forward refuses
    x, w = stand_ins((1, 2, 5), (2, 3, 3))
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        MODULES[nn.ConvTranspose1d](module, {"weight": w}, x)
