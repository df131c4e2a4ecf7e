"""Batched products through `torch.compile(backend="reverie")` (issue 33, docs/api.md §8–9):
`F.linear`/`nn.Linear` on (B, T, C) inputs, attention's (B, H, T, d) @ (B, H, d, T),
`torch.matmul`/`@` with broadcast batch axes and 1-D operands, `bmm`, `addmm`, `baddbmm`.

Each graph is compared with eager PyTorch in f64 and f32: the value, the gradient of
sum(out²) with respect to every input (`create_graph=True`) and the gradient of that
gradient's sum (double backward), then called again at new sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

import reverie  # noqa: F401 (registers backend="reverie")

nn = torch.nn
F = torch.nn.functional


def derivatives(fn: Callable, inputs: list[torch.Tensor]):
    """Value, gradient of sum(value²) and gradient of that gradient's sum."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    grads = torch.autograd.grad((out * out).sum(), inputs, create_graph=True)
    second = torch.autograd.grad(sum(g.sum() for g in grads), inputs, allow_unused=True,
                                 materialize_grads=True)
    return out.detach(), [g.detach() for g in grads], list(second)


def assert_like_eager(compiled: Callable, eager: Callable, inputs: list[torch.Tensor]) -> None:
    got, want = derivatives(compiled, inputs), derivatives(eager, inputs)
    f64 = inputs[0].dtype == torch.float64
    close = [{"rtol": 1e-10, "atol": 1e-12}, {"rtol": 1e-8, "atol": 1e-10},
             {"rtol": 1e-7, "atol": 1e-9}] if f64 else \
        [{"rtol": 1e-5, "atol": 1e-5}, {"rtol": 1e-4, "atol": 1e-4}, {"rtol": 1e-3, "atol": 1e-3}]
    torch.testing.assert_close(got[0], want[0], **close[0])
    for order in (1, 2):
        for a, b in zip(got[order], want[order], strict=True):
            torch.testing.assert_close(a, b, **close[order])


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


def scaled_sums(x, a, b, m1, m2):
    return (torch.baddbmm(x, a, b, beta=0.5, alpha=2.0) + torch.bmm(a, b)
            + a.bmm(b) + torch.addmm(m1[0], m1, m2, alpha=-1.5).sum() + m1.mm(m2).sum()
            + m1.addmm(m1, m2, beta=2.0).sum() + x.baddbmm(a, b))


# name: (function, shapes at the first call, shapes at the second)
CASES: dict[str, tuple[Callable, list[tuple[int, ...]], list[tuple[int, ...]]]] = {
    "linear on (B, T, C)": (lambda x, w, b: F.linear(x, w, b),
                            [(2, 5, 4), (3, 4), (3,)], [(3, 7, 4), (3, 4), (3,)]),
    "linear on (B, H, T, C), no bias": (lambda x, w: torch.tanh(F.linear(x, w)),
                                        [(2, 3, 5, 4), (6, 4)], [(1, 2, 3, 4), (6, 4)]),
    "attention": (attention, [(2, 3, 5, 4)] * 3, [(3, 2, 6, 4)] * 3),
    "broadcast batch axes": (lambda a, b: torch.matmul(a, b), [(2, 1, 3, 4), (5, 4, 6)],
                             [(3, 1, 2, 4), (2, 4, 5)]),
    "left operand 2-D": (lambda a, b: a @ b, [(3, 4), (2, 4, 5)], [(3, 4), (4, 4, 2)]),
    "vector operands": (lambda v, b, a: (v @ b).sum(-1) + a.matmul(v).sum(-1),
                        [(4,), (2, 4, 5), (2, 3, 4)], [(4,), (3, 4, 2), (3, 5, 4)]),
    "bmm, addmm, baddbmm": (scaled_sums, [(2, 3, 5), (2, 3, 4), (2, 4, 5), (4, 4), (4, 4)],
                            [(3, 2, 6), (3, 2, 4), (3, 4, 6), (4, 4), (4, 4)]),
    "addbmm, addmv, addr": (
        lambda m, a, b, v, u: (torch.addbmm(m, a, b, beta=0.5, alpha=2.0) + m.addbmm(a, b)
                               + torch.addmv(v, m, u, alpha=-1.5)[:, None]
                               + torch.addr(m, v, u, beta=2.0) + m.addr(v, u)),
        [(3, 4), (2, 3, 5), (2, 5, 4), (3,), (4,)], [(3, 4), (5, 3, 2), (5, 2, 4), (3,), (4,)]),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_products_compile_like_eager(case: str, dtype: torch.dtype) -> None:
    fn, shapes, later = CASES[case]
    torch.manual_seed(0)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    for sizes in (shapes, later):
        inputs = [torch.randn(s, dtype=dtype) for s in sizes]
        assert_like_eager(compiled, fn, inputs)


class Block(nn.Module):
    """A (B, T, C) transformer-style block: projections, attention over heads, an MLP."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.Tanh(), nn.Linear(2 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (p.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for p in (self.qkv(x)[..., i * c:(i + 1) * c] for i in range(3)))
        y = attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.out(y)
        return x + self.mlp(x)


def parameter_gradients(run: Callable, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The gradients of sum(run(x)²) with respect to `model`'s parameters."""
    return list(torch.autograd.grad((run(x) ** 2).sum(), list(model.parameters())))


def assert_model_like_eager(compiled: Callable, model: nn.Module, x: torch.Tensor) -> None:
    """Input derivatives to second order, then every parameter gradient, as eager's."""
    assert_like_eager(compiled, model, [x])
    f32 = x.dtype == torch.float32
    for got, want in zip(parameter_gradients(compiled, model, x),
                         parameter_gradients(model, model, x), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4 if f32 else 1e-10,
                                   atol=1e-4 if f32 else 1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_block_on_batched_sequences(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    model = Block().to(dtype)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    for shape in ((2, 5, 8), (3, 4, 8)):
        assert_model_like_eager(compiled, model, torch.randn(shape, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_linear_modules_on_sequences_through_rv_fx(dtype: torch.dtype) -> None:
    """symbolic_trace keeps `nn.Linear` as call_module nodes, here on (B, T, C) inputs."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).to(dtype)
    x = torch.randn(2, 5, 4, dtype=dtype)
    compiled = reverie.fx.compile(torch.fx.symbolic_trace(model), [x])
    assert_model_like_eager(compiled, model, x)


@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation_is_addmm_then_relu_or_exact_gelu(use_gelu: bool) -> None:
    """torch._addmm_activation (eager has no gradient for it): its values."""
    m, a, b = (torch.randn(*s, dtype=torch.float64) for s in ((3, 4), (3, 5), (5, 4)))
    fn = lambda *t: torch._addmm_activation(*t, alpha=0.5, use_gelu=use_gelu)  # noqa: E731
    got = torch.compile(fn, backend="reverie", fullgraph=True)(m, a, b)
    torch.testing.assert_close(got, fn(m, a, b), rtol=1e-12, atol=1e-12)


def test_baddbmm_at_beta_zero_ignores_the_input() -> None:
    """torch does not read `input` at beta=0: its NaNs do not reach the result."""
    a, b = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    x = torch.full((2, 3, 5), float("nan"), dtype=torch.float64)

    def fn(x, a, b):
        return torch.baddbmm(x, a, b, beta=0.0)

    torch._dynamo.reset()
    got = torch.compile(fn, backend="reverie", fullgraph=True)(x, a, b)
    torch.testing.assert_close(got, fn(x, a, b), rtol=1e-12, atol=1e-12)
    assert not got.isnan().any()
