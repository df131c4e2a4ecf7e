"""`rv.torch.function` (docs/api.md §6–7): compiled kernels and gradients inside PyTorch models."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")

SOURCE = """
fn layer(x: float[B, D], w: float[D, H], b: float[H]) -> float[B, H] {
    return tanh(x @ w + b);
}
fn xent(logits: float[N, C], labels: i64[N]) -> float {
    let lp = log_softmax(logits, axis=1);
    let picked[n] = lp[n, labels[n]];
    return -mean(picked);
}
fn stats(x: float[N], k: i64[N]) -> (float, float[N], i64[N]) {
    return (sum(x * x), sin(x) * 2.0, k + 1);
}
fn scaled(x: float[N], a: float) -> float { return sum(exp(x) * a); }
fn cubes(x: f64[N], y: f64[N]) -> f64[N] { return x * x * x * y; }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def random(*shape: int, seed: int = 0, grad: bool = True) -> torch.Tensor:
    """A float64 tensor of standard normal entries."""
    data = np.random.default_rng(seed + len(shape)).standard_normal(shape)
    return torch.tensor(data, requires_grad=grad)


class Model(torch.nn.Module):
    """A compiled tanh layer followed by a torch linear layer."""

    def __init__(self, layer: object, d: int, h: int) -> None:
        super().__init__()
        self.layer = layer
        self.w = torch.nn.Parameter(random(d, h, seed=1, grad=False))
        self.b = torch.nn.Parameter(torch.zeros(h, dtype=torch.float64))
        self.head = torch.nn.Linear(h, 1, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x, self.w, self.b))


def test_layer_trains_in_a_torch_model_with_reference_gradients(m: rv.Module) -> None:
    torch.manual_seed(0)
    model = Model(rv.torch.function(m.layer), 3, 8)
    x, target = random(32, 3, grad=False), random(32, 1, seed=5, grad=False)
    reference = torch.tanh(x @ model.w + model.b)
    assert torch.allclose(model.layer(x, model.w, model.b), reference, rtol=0, atol=1e-12)

    loss = torch.mean((model(x) - target) ** 2)
    ours = torch.autograd.grad(loss, [model.w, model.b])
    expected_loss = torch.mean((model.head(torch.tanh(x @ model.w + model.b)) - target) ** 2)
    theirs = torch.autograd.grad(expected_loss, [model.w, model.b])
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-10)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.mean((model(x) - target) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_gradcheck_and_gradgradcheck(m: rv.Module) -> None:
    layer = rv.torch.function(m.layer)
    args = (random(2, 3), random(3, 4, seed=1), random(4, seed=2))
    assert torch.autograd.gradcheck(layer, args)
    assert torch.autograd.gradgradcheck(layer, args)


def test_second_derivatives_run_the_vjp_of_the_vjp(m: rv.Module) -> None:
    cubes = rv.torch.function(m.cubes)
    x, y = random(5), random(5, seed=1)
    (gx,) = torch.autograd.grad(cubes(x, y).sum(), x, create_graph=True)
    assert torch.allclose(gx, 3 * x * x * y)
    gxx, gxy = torch.autograd.grad(gx.sum(), [x, y])
    assert torch.allclose(gxx, 6 * x * y)
    assert torch.allclose(gxy, 3 * x * x)


def test_integer_labels_cross_entropy(m: rv.Module) -> None:
    xent = rv.torch.function(m.xent)
    logits, labels = random(6, 4), torch.tensor([0, 3, 1, 1, 2, 0])
    loss = xent(logits, labels)
    expected = torch.nn.functional.cross_entropy(logits, labels)
    assert loss.shape == () and loss.dtype == torch.float64
    assert torch.allclose(loss, expected, rtol=0, atol=1e-12)
    (ours,) = torch.autograd.grad(loss, logits)
    (theirs,) = torch.autograd.grad(expected, logits)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda z: xent(z, labels.int()), (logits,))


def test_tuple_returns_and_integer_outputs(m: rv.Module) -> None:
    stats = rv.torch.function(m.stats)
    x, k = random(4), torch.arange(4)
    total, waves, shifted = stats(x, k)
    assert torch.allclose(total, (x * x).sum()) and torch.allclose(waves, 2 * torch.sin(x))
    assert torch.equal(shifted, k + 1) and not shifted.requires_grad
    (gx,) = torch.autograd.grad(total + waves.sum(), x)
    assert torch.allclose(gx, 2 * x + 2 * torch.cos(x))
    (gx,) = torch.autograd.grad(stats(x, k)[1].sum(), x)
    assert torch.allclose(gx, 2 * torch.cos(x))
    assert torch.autograd.gradcheck(lambda x: stats(x, k)[:2], (x,))


def test_float32_scalars_and_python_numbers(m: rv.Module) -> None:
    scaled = rv.torch.function(m.scaled)
    x = random(3).detach().float().requires_grad_()
    a = torch.tensor(2.0, requires_grad=True)
    value = scaled(x, a)
    assert value.dtype == torch.float32 and value.shape == ()
    gx, ga = torch.autograd.grad(value, [x, a])
    assert gx.dtype == torch.float32
    assert torch.allclose(gx, 2 * torch.exp(x)) and torch.allclose(ga, torch.exp(x).sum())
    (gx,) = torch.autograd.grad(scaled(x, 3.0), x)
    assert torch.allclose(gx, 3 * torch.exp(x))


def test_strided_inputs_and_outputs_without_grad(m: rv.Module) -> None:
    layer = rv.torch.function(m.layer)
    x, w, b = random(3, 2, grad=False).T, random(3, 4, grad=False), random(4, grad=False)
    out = layer(x, w, b)
    assert not out.requires_grad
    assert torch.allclose(out, torch.tanh(x @ w + b))


def test_transformed_kernels_keep_their_calling_convention(m: rv.Module) -> None:
    x, k = random(4), torch.arange(4)
    stats_vjp = rv.torch.function(m.stats.vjp("x"))
    cotangent = (torch.tensor(1.0, dtype=torch.float64), torch.ones(4, dtype=torch.float64),
                 torch.zeros(4, dtype=torch.int64))
    gx = stats_vjp(x, k, cotangent)
    assert torch.allclose(gx, 2 * x + 2 * torch.cos(x))
    (gxx,) = torch.autograd.grad(gx.sum(), x)
    assert torch.allclose(gxx, 2 - 2 * torch.sin(x))
    value, (gx, ga) = rv.torch.function(m.scaled.value_and_grad())(x, 2.0)
    assert torch.allclose(value, 2 * torch.exp(x).sum()) and torch.allclose(gx, 2 * torch.exp(x))


def test_errors(m: rv.Module) -> None:
    with pytest.raises(TypeError, match="compiled kernel"):
        rv.torch.function(lambda x: x)
    layer = rv.torch.function(m.layer)
    on_meta = torch.empty(2, 3, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match="CPU"):
        layer(on_meta, random(3, 4), random(4))
    with pytest.raises(rv.ShapeMismatchError):
        layer(random(2, 3), random(4, 4), random(4))
    with pytest.raises(TypeError, match="one tuple"):
        rv.torch.function(m.stats.vjp("x"))(random(4), torch.arange(4), random(4))


def test_import_reverie_imports_neither_torch_nor_jax() -> None:
    code = ("import sys, reverie\n"
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules\n"
            "reverie.torch.function\n"
            "assert 'torch' in sys.modules and 'jax' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
