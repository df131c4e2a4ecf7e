"""The example kernels through the native backend, against PyTorch, in float64 (1e-9).

Issues 3 and 5: values and gradients of the MLP loss, softmax cross-entropy with integer
labels, broadcast reductions, conv1d/conv2d (index notation), an RNN over a sequence and the
heat equation equal torch's; out-of-range labels raise IndexError and return nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import reverie as rv

EXAMPLES = Path(__file__).parents[2] / "examples"
RNG = np.random.default_rng(42)
RTOL = 1e-9


def example(name: str) -> rv.Module:
    """An example compiled natively, with every f32 turned into f64."""
    return rv.compile((EXAMPLES / name).read_text().replace("f32", "f64"), name=name)


def torch_grads(fn, arrays: list[np.ndarray], wrt: list[int]) -> tuple:  # noqa: ANN001
    """torch's value and gradients of `fn` at `arrays` with respect to positions `wrt`."""
    tensors = [torch.tensor(a, requires_grad=i in wrt and a.dtype.kind == "f")
               for i, a in enumerate(arrays)]
    value = fn(*tensors)
    grads = torch.autograd.grad(value, [tensors[i] for i in wrt])
    return value.detach().numpy(), [g.numpy() for g in grads]


def assert_matches(kernel: rv.Kernel, torch_fn, arrays: list, wrt: list[int]) -> None:  # noqa: ANN001
    value, grads = kernel.value_and_grad(wrt)(*arrays)
    want_value, want_grads = torch_grads(torch_fn, arrays, wrt)
    np.testing.assert_allclose(value, want_value, rtol=RTOL)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-12)


def test_mlp_loss() -> None:
    x, y = RNG.standard_normal((16, 5)), RNG.standard_normal((16, 3))
    w1, b1 = RNG.standard_normal((5, 7)), RNG.standard_normal(7)
    w2, b2 = RNG.standard_normal((7, 3)), RNG.standard_normal(3)

    def reference(x, y, w1, b1, w2, b2):  # noqa: ANN001, ANN202
        return torch.mean((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)

    assert_matches(example("mlp.rv").mlp_loss, reference, [x, y, w1, b1, w2, b2],
                   [0, 2, 3, 4, 5])


def test_softmax_cross_entropy_with_integer_labels() -> None:
    logits, labels = RNG.standard_normal((12, 5)), RNG.integers(0, 5, 12)
    assert_matches(example("softmax_xent.rv").softmax_xent,
                   lambda z, t: F.cross_entropy(z, t), [logits, labels], [0])


@pytest.mark.parametrize("labels", [[0, 1, 5], [0, -1, 2]], ids=["too_large", "negative"])
def test_out_of_range_labels_raise_index_error(labels: list[int]) -> None:
    kernel = example("softmax_xent.rv").softmax_xent
    logits = RNG.standard_normal((3, 5))
    for call in (kernel, kernel.grad(0)):
        with pytest.raises(IndexError, match="out of bounds"):
            call(logits, np.array(labels))


def test_broadcast_reductions_layer_norm() -> None:
    x, gamma, beta = RNG.standard_normal((6, 8)), RNG.standard_normal(8), RNG.standard_normal(8)
    weights = RNG.standard_normal((6, 8))
    kernel = example("broadcast_reductions.rv").layer_norm
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
    reference = F.layer_norm(tensors[0], (8,), tensors[1], tensors[2], eps=1e-5)
    np.testing.assert_allclose(kernel(x, gamma, beta), reference.detach().numpy(), rtol=RTOL)
    grads = kernel.vjp((0, 1, 2))(x, gamma, beta, weights)
    want = torch.autograd.grad(reference, tensors, torch.tensor(weights))
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=RTOL, atol=1e-12)


def test_conv1d_matches_torch_conv1d() -> None:
    x, w, bias = (RNG.standard_normal((2, 3, 11)), RNG.standard_normal((4, 3, 3)),
                  RNG.standard_normal(4))
    weights = RNG.standard_normal((2, 4, 9))
    kernel = example("conv1d.rv").conv1d_valid
    np.testing.assert_allclose(kernel(x, w, bias), F.conv1d(
        *map(torch.tensor, (x, w, bias))).numpy(), rtol=RTOL)
    grads = kernel.vjp((0, 1, 2))(x, w, bias, weights)
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, w, bias)]
    want = torch.autograd.grad(F.conv1d(*tensors), tensors, torch.tensor(weights))
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=RTOL, atol=1e-12)


def test_conv2d_matches_torch_conv2d() -> None:
    x, w, bias = (RNG.standard_normal((2, 3, 7, 6)), RNG.standard_normal((4, 3, 3, 2)),
                  RNG.standard_normal(4))
    kernel = example("conv2d.rv").conv2d
    out = kernel(x, w, bias)
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, w, bias)]
    reference = F.conv2d(*tensors)
    np.testing.assert_allclose(out, reference.detach().numpy(), rtol=RTOL)
    weights = RNG.standard_normal(out.shape)
    grads = kernel.vjp((0, 1, 2))(x, w, bias, weights)
    want = torch.autograd.grad(reference, tensors, torch.tensor(weights))
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=RTOL, atol=1e-12)


def test_rnn_over_a_sequence_matches_unrolled_torch() -> None:
    T, D, H = 6, 3, 4
    arrays = [RNG.standard_normal((T, D)), RNG.standard_normal(H),
              RNG.standard_normal((D, H)) / 2, RNG.standard_normal((H, H)) / 2,
              RNG.standard_normal(H), RNG.standard_normal(H), np.float64(0.3)]

    def reference(xs, h, wx, wh, b, wo, target):  # noqa: ANN001, ANN202
        for t in range(T):
            h = torch.tanh(xs[t] @ wx + h @ wh + b)
        return (h @ wo - target) ** 2

    module = example("rnn.rv")
    assert_matches(module.rnn_loss, reference, arrays, [0, 1, 2, 3, 4, 5])
    checkpointed = rv.compile(module.source, checkpoint=True).rnn_loss
    assert_matches(checkpointed, reference, arrays, [0, 1, 2, 3, 4, 5])


def test_heat_equation_gradient_wrt_initial_condition() -> None:
    u0, alpha, steps = RNG.standard_normal(50), np.float64(0.2), np.int64(30)

    def reference(u, alpha):  # noqa: ANN001, ANN202
        for _ in range(int(steps)):
            u = u + alpha * (torch.roll(u, 1) - 2 * u + torch.roll(u, -1))
        return torch.sum(u ** 2)

    value, grads = example("heat1d.rv").heat1d.value_and_grad((0, 1))(u0, alpha, steps)
    want_value, want_grads = torch_grads(reference, [u0, alpha], [0, 1])
    np.testing.assert_allclose(value, want_value, rtol=RTOL)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL)
