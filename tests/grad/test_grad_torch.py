"""Reverse mode against PyTorch: whole programs, and the values at non-differentiable points.

Gradients must agree to 1e-9 relative in float64. Skipped where torch is not installed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from grad_helpers import grad, specialise

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(5)


def torch_grads(fn: Callable, args: list[np.ndarray], wrt: list[int]) -> list[np.ndarray]:
    """Gradients of torch function `fn` at `args` with respect to the `wrt` positions."""
    tensors = [torch.tensor(a, requires_grad=i in wrt) for i, a in enumerate(args)]
    grads = torch.autograd.grad(fn(*tensors), [tensors[i] for i in wrt])
    return [g.numpy() for g in grads]


def compare(source: str, args: list[np.ndarray], dims: dict[str, int], reference: Callable,
            wrt: list[int] | None = None) -> None:
    fn = specialise(source)
    if wrt is None:
        wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    ours = grad(fn, wrt, args, dims)
    theirs = torch_grads(reference, args, wrt)
    for name, a, b in zip([fn.param_names[i] for i in wrt], ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)


def test_mlp_mean_squared_error() -> None:
    source = """
    fn f(x: f64[N, D], W1: f64[D, H], b1: f64[H], W2: f64[H, O], b2: f64[O],
         y: f64[N, O]) -> f64 {
        let h = tanh(x @ W1 + b1);
        let err = h @ W2 + b2 - y;
        return mean(err * err);
    }"""
    shapes = [(5, 4), (4, 6), (6,), (6, 2), (2,), (5, 2)]
    args = [RNG.standard_normal(s) for s in shapes]
    compare(source, args, {"N": 5, "D": 4, "H": 6, "O": 2},
            lambda x, W1, b1, W2, b2, y: (((torch.tanh(x @ W1 + b1) @ W2 + b2) - y) ** 2).mean())


def test_softmax_cross_entropy_with_integer_labels() -> None:
    source = """
    fn f(z: f64[N, C], labels: i64[N]) -> f64 {
        let lp = log_softmax(z, axis=1);
        let picked[n] = lp[n, labels[n]];
        return -mean(picked);
    }"""
    labels = np.array([2, 0, 3, 3, 1])
    compare(source, [3 * RNG.standard_normal((5, 4)), labels], {"N": 5, "C": 4},
            lambda z, labels: F.cross_entropy(z, labels), wrt=[0])


def test_broadcast_reductions_layer_norm() -> None:
    source = """
    fn f(x: f64[N, D], g: f64[D], b: f64[D]) -> f64 {
        let mu = mean(x, axis=1, keepdims=true);
        let var_ = mean((x - mu) ** 2, axis=1, keepdims=true);
        let y = (x - mu) / sqrt(var_ + 1e-5) * g + b;
        return sum(y * sin(y)) + sum(max(x, axis=0) * min(x, axis=1, keepdims=true));
    }"""
    args = [RNG.standard_normal(s) for s in [(4, 6), (6,), (6,)]]

    def reference(x, g, b):
        mu = x.mean(1, keepdim=True)
        var = ((x - mu) ** 2).mean(1, keepdim=True)
        y = (x - mu) / torch.sqrt(var + 1e-5) * g + b
        return (y * torch.sin(y)).sum() + (x.amax(0) * x.amin(1, keepdim=True)).sum()

    compare(source, args, {"N": 4, "D": 6}, reference)


def test_logsumexp_softmax_and_prod() -> None:
    source = """
    fn f(x: f64[N, M]) -> f64 {
        return sum(logsumexp(x, axis=1)) + logsumexp(x) + sum(softmax(x, axis=0) * x)
             + sum(prod(x, axis=0));
    }"""
    x = RNG.standard_normal((3, 5))
    x[1, 2] = 0.0
    compare(source, [x], {"N": 3, "M": 5},
            lambda x: torch.logsumexp(x, 1).sum() + torch.logsumexp(x, (0, 1))
            + (torch.softmax(x, 0) * x).sum() + x.prod(0).sum())


def test_matmul_variants() -> None:
    source = """
    fn f(A: f64[N, K], B: f64[K, M], u: f64[K], v: f64[N]) -> f64 {
        return sum((A @ B) * (A @ B)) + sum(u @ B) + sum(A @ u * v) + u @ u + sum(v @ A);
    }"""
    args = [RNG.standard_normal(s) for s in [(3, 4), (4, 2), (4,), (3,)]]
    compare(source, args, {"N": 3, "K": 4, "M": 2},
            lambda A, B, u, v: ((A @ B) ** 2).sum() + (u @ B).sum() + ((A @ u) * v).sum()
            + u @ u + (v @ A).sum())


def test_slicing_concat_roll_transpose_reshape() -> None:
    source = """
    fn f(x: f64[N, M]) -> f64 {
        let a = concat((x[1:, ::2], x[:N-1, 1:2]), axis=1);
        let b = roll(reshape(x.T, (N * M,)), 2);
        return sum(a * a * a) + sum(b * cos(b)) + sum(x[0, :N] * x[:, 1]);
    }"""
    x = RNG.standard_normal((4, 5))

    def reference(x):
        a = torch.cat([x[1:, ::2], x[:3, 1:2]], 1)
        b = torch.roll(x.T.reshape(20), 2)
        return (a ** 3).sum() + (b * torch.cos(b)).sum() + (x[0, :4] * x[:, 1]).sum()

    compare(source, [x], {"N": 4, "M": 5}, reference)


def test_where() -> None:
    source = """
    fn f(x: f64[N], y: f64[N]) -> f64 {
        return sum(where(x > y, x * y, exp(y)) + where(x < 0.0, 0.0, x * x));
    }"""
    args = [RNG.standard_normal(7), RNG.standard_normal(7)]
    compare(source, args, {"N": 7},
            lambda x, y: (torch.where(x > y, x * y, torch.exp(y))
                          + torch.where(x < 0, torch.zeros_like(x), x * x)).sum())


def test_max_and_min_ties_split_like_torch() -> None:
    source = """
    fn f(a: f64[N, M], b: f64[N, M]) -> f64 {
        return sum(max(a, b) * 3.0) + sum(min(a, b) * a) + sum(max(a, axis=1) * 2.0)
             + min(b) + max(a);
    }"""
    a = np.array([[1.0, 2.0, 2.0], [0.5, 0.5, 0.5]])
    b = np.array([[1.0, 3.0, 2.0], [-1.0, 0.5, 4.0]])
    compare(source, [a, b], {"N": 2, "M": 3},
            lambda a, b: (torch.maximum(a, b) * 3).sum() + (torch.minimum(a, b) * a).sum()
            + (a.amax(1) * 2).sum() + b.min() + a.max())


def test_conv1d_in_index_notation() -> None:
    source = """
    fn f(x: f64[B, C, L], w: f64[O, C, K], bias: f64[O]) -> f64 {
        let y[b, o, i in 0..L] = sum[c, j](x[b, c, i + j - K // 2] * w[o, c, j]) + bias[o];
        return sum(tanh(y) * y);
    }"""
    args = [RNG.standard_normal(s) for s in [(2, 3, 7), (4, 3, 3), (4,)]]

    def reference(x, w, bias):
        y = F.conv1d(x, w, bias, padding=1)
        return (torch.tanh(y) * y).sum()

    compare(source, args, {"B": 2, "C": 3, "L": 7, "O": 4, "K": 3}, reference)


def _rnn_reference(W, xs, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = torch.tanh(W @ h + xs[t])
    return (h * h).sum()


@pytest.mark.parametrize("checkpoint", [False, True])
def test_rnn_loop_against_unrolled_torch(checkpoint: bool) -> None:
    source = """
    fn f(W: f64[H, H], xs: f64[T, H], h0: f64[H]) -> f64 {
        var h = h0;
        for t in 0..T { h = tanh(W @ h + xs[t]); }
        return sum(h * h);
    }"""
    args = [0.5 * RNG.standard_normal(s) for s in [(4, 4), (6, 4), (4,)]]
    fn = specialise(source)
    ours = grad(fn, [0, 1, 2], args, {"H": 4, "T": 6}, checkpoint=checkpoint)
    for a, b in zip(ours, torch_grads(_rnn_reference, args, [0, 1, 2]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_heat_equation_with_a_runtime_step_count() -> None:
    source = """
    fn f(u0: f64[N], alpha: f64, steps: i64) -> f64 {
        var u = u0;
        for t in 0..steps {
            u = u + alpha * (roll(u, 1) - 2.0 * u + roll(u, -1));
        }
        return sum(u * u);
    }"""

    def reference(u0, alpha, steps):
        u = u0
        for _ in range(int(steps)):
            u = u + alpha * (torch.roll(u, 1) - 2 * u + torch.roll(u, -1))
        return (u * u).sum()

    args = [RNG.standard_normal(8), np.float64(0.2), np.int64(12)]
    compare(source, args, {"N": 8}, reference)


NON_DIFFERENTIABLE_POINTS = {
    "abs": ("abs(x)", torch.abs),
    "relu": ("relu(x)", torch.relu),
    "sign": ("sign(x)", torch.sign),
    "sqrt": ("sqrt(x)", torch.sqrt),
    "log": ("log(x)", torch.log),
    "reciprocal": ("1.0 / x", lambda x: 1.0 / x),
    "where_sqrt": ("where(x > 0.0, sqrt(x), 0.0)",
                   lambda x: torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))),
    "pow_half": ("x ** 0.5", lambda x: x ** 0.5),
    "pow_square": ("pow(x, 2.0)", lambda x: torch.pow(x, 2.0)),
    "norm_composed": ("sqrt(sum(x * x)) + 0.0 * x", lambda x: torch.sqrt((x * x).sum()) + 0 * x),
    "max_ties": ("max(x, x * 1.0)", lambda x: torch.maximum(x, x * 1.0)),
    "floor_ceil": ("floor(x) + ceil(x) * x", lambda x: torch.floor(x) + torch.ceil(x) * x),
}


@pytest.mark.parametrize("case", sorted(NON_DIFFERENTIABLE_POINTS))
def test_values_at_non_differentiable_points(case: str) -> None:
    expr, reference = NON_DIFFERENTIABLE_POINTS[case]
    source = f"fn f(x: f64[N]) -> f64 {{ return sum({expr}); }}"
    x = np.array([0.0, 0.0, 1.5])
    (ours,) = grad(specialise(source), [0], [x], {"N": 3})
    (theirs,) = torch_grads(lambda x: reference(x).sum(), [x], [0])
    np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)  # inf and NaN where torch has


def test_pow_gradients_at_zero_base_and_exponent() -> None:
    source = "fn f(a: f64[N], b: f64[N]) -> f64 { return sum(pow(a, b)); }"
    a = np.array([0.0, 0.0, 2.0, 0.0])
    b = np.array([0.0, 2.0, 0.0, -1.0])
    ours = grad(specialise(source), [0, 1], [a, b], {"N": 4})
    theirs = torch_grads(lambda a, b: torch.pow(a, b).sum(), [a, b], [0, 1])
    for x, y in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-15, atol=0)
