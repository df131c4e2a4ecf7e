"""The elementwise spellings, scans, norms and other spellings of `rv.fx`
(`reverie/fx_rows_math.py`) against eager torch.

Each case compiles through `torch.compile(backend="reverie", fullgraph=True)` and compares
the value, the gradient of every float input and the gradient of that gradient with eager
PyTorch in float32 and float64.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    fresh_dynamo,
    normal,
    refused,
    tolerance,
)


def inside(dtype, *shape):
    return torch.rand(*shape, dtype=dtype) * 1.8 - 0.9


CASES = {
    "acos asin atan": lambda d: (
        lambda x: torch.acos(x) + x.asin() + torch.atan(x * 3) + x.atan(), [inside(d, 3, 4)]),
    "acosh asinh atanh": lambda d: (
        lambda x: torch.acosh(x.abs() + 1.5) + x.asinh() + torch.atanh(x) + x.atanh(),
        [inside(d, 3, 4)]),
    "reciprocal": lambda d: (lambda x: torch.reciprocal(x) + x.reciprocal(),
                             [normal(d, 5).abs() + 0.5]),
    "atan2": lambda d: (lambda y, x: torch.atan2(y, x) + y.arctan2(x) + torch.arctan2(x, y),
                        [normal(d, 3, 4), normal(d, 3, 4)]),
    "addcmul addcdiv": lambda d: (
        lambda a, b, c: torch.addcmul(a, b, c, value=0.5) + a.addcdiv(b, c.abs() + 1, value=2),
        [normal(d, 3, 4), normal(d, 3, 4), normal(d, 3, 4)]),
    "cumsum cumprod": lambda d: (
        lambda x: torch.cumsum(x, 1) + x.cumsum(dim=0) + torch.cumprod(x, -1) + x.cumprod(0),
        [normal(d, 3, 4)]),
    "clamp_min clamp_max": lambda d: (
        lambda x: torch.clamp_min(x, -0.3) + x.clamp_max(0.4) + x.clamp_min(0.1),
        [normal(d, 4, 5)]),
    "detach": lambda d: (lambda x, y: x * x.detach() + torch.detach(y) * y,
                         [normal(d, 3), normal(d, 3)]),
    "vector_norm": lambda d: (
        lambda x: torch.linalg.vector_norm(x) + torch.linalg.vector_norm(x, 1, dim=1).sum()
        + torch.linalg.vector_norm(x, 3, dim=(0, 1), keepdim=True).sum()
        + torch.linalg.vector_norm(x, math.inf, dim=0).sum()
        + torch.linalg.vector_norm(x, -math.inf, dim=1).sum(), [normal(d, 3, 4)]),
    "norm, dist": lambda d: (
        lambda x, y: x.norm() + torch.norm(x, dim=1).sum() + x.norm(p=1, dim=0).sum()
        + torch.dist(x, y) + x.dist(y, p=3), [normal(d, 3, 4), normal(d, 3, 4)]),
    "norm of a zero row": lambda d: (lambda x: torch.linalg.vector_norm(x * (x > 5), dim=1),
                                     [normal(d, 3, 4)]),
    "normalize": lambda d: (lambda x: F.normalize(x, dim=-1) + F.normalize(x, p=1, dim=0),
                            [normal(d, 3, 4)]),
    "cosine_similarity": lambda d: (
        lambda a, b: F.cosine_similarity(a, b) + F.cosine_similarity(a, b * 1e-9, dim=1),
        [normal(d, 3, 4), normal(d, 3, 4)]),
    "cosine_similarity broadcast": lambda d: (
        lambda a, b: F.cosine_similarity(a, b, dim=-1), [normal(d, 2, 3, 4), normal(d, 3, 4)]),
    "rms_norm": lambda d: (
        lambda x, w: F.rms_norm(x, (4,), w) + F.rms_norm(x, (3, 4), eps=1e-3),
        [normal(d, 2, 3, 4), normal(d, 4)]),
    "layer_norm group_norm spellings": lambda d: (
        lambda x, w, b: torch.layer_norm(x, (4,), w, b, 1e-5, False)
        + torch.group_norm(x.transpose(1, 2), 2, None, None, 1e-3, False).transpose(1, 2),
        [normal(d, 2, 6, 4), normal(d, 4), normal(d, 4)]),
    "convolution": lambda d: (
        lambda x, w, v: torch.convolution(x, w, None, [2], [1], [1], False, [0], 1).sum()
        + torch._convolution(x, v, None, [2], [1], [1], True, [1], 1, False, False, True,
                             True).sum(), [normal(d, 2, 3, 7), normal(d, 4, 3, 3),
                                           normal(d, 3, 2, 3)]),
    "chain_matmul multi_dot vecdot": lambda d: (
        lambda a, b, c: torch.linalg.multi_dot([a, b, c]) + torch.chain_matmul(a, b, c)
        + torch.linalg.vecdot(a, a * c[:3])[:, None],
        [normal(d, 3, 4), normal(d, 4, 5), normal(d, 5, 4)]),
    "einsum": lambda d: (
        lambda a, b: torch.einsum("bij,bjk->bik", a, b).sum(-1)
        + torch.einsum("b i j, b k j -> b i", [a, b.transpose(1, 2)])
        + torch.einsum("...ij,...ij", a, a)[:, None], [normal(d, 2, 3, 4), normal(d, 2, 4, 5)]),
    "einsum diagonal and sum": lambda d: (
        lambda a: torch.einsum("ii->i", a) + torch.einsum("ij->", a), [normal(d, 3, 3)]),
    "tensordot": lambda d: (
        lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, 1])).sum()
        + torch.tensordot(a.permute(2, 0, 1), b.transpose(0, 1), 2).sum(),
        [normal(d, 3, 4, 2), normal(d, 4, 3, 5)]),
    "outer inner": lambda d: (
        lambda a, b: torch.outer(a, b).sum(0) + a.outer(b).sum(0) + torch.ger(a, b).sum(0)
        + torch.inner(b, b) + b.inner(b), [normal(d, 3), normal(d, 4)]),
    "diagonal trace diag": lambda d: (
        lambda a, m, v: torch.diagonal(a, 1).sum() + a.diagonal(-1, 1, 2).sum() + torch.trace(m)
        + m.trace() + torch.diag(v, 1).sum() + torch.diag(m, -1).sum() + m.diag().sum(),
        [normal(d, 3, 4, 5), normal(d, 4, 5), normal(d, 3)]),
    "cdist": lambda d: (
        lambda a, b: torch.cdist(a, b).sum(-1) + torch.cdist(a, b, p=1).sum(-1)
        + torch.cdist(a, b[0], p=3.0).sum(-1) + torch.cdist(a, b, p=math.inf).sum(-1),
        [normal(d, 2, 4, 3), normal(d, 2, 5, 3)]),
    "cdist to itself": lambda d: (lambda a: torch.cdist(a, a[:2]), [normal(d, 4, 3)]),
}

# the second derivative where torch's is NaN (a norm at a zero vector: Reverie's is 0) or
# missing (cdist's backward has none)
FIRST_ONLY = {"norm of a zero row", "cdist", "cdist to itself"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_row(case: str, dtype: torch.dtype) -> None:
    fn, inputs = CASES[case](dtype)
    assert_same(fn, inputs, dtype, second=case not in FIRST_ONLY)


MODULES = {
    "RMSNorm": (nn.RMSNorm(4, eps=1e-4), 1),
    "CosineSimilarity": (nn.CosineSimilarity(dim=0), 2),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", MODULES)
def test_module_rows(name: str, dtype: torch.dtype) -> None:
    import reverie as rv

    module, inputs = MODULES[name]
    model = nn.Sequential(module).to(dtype) if inputs == 1 else module.to(dtype)
    xs = [normal(dtype, 3, 4) for _ in range(inputs)]
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), xs)
    torch.testing.assert_close(compiled(*xs), model(*xs), **tolerance(dtype))


def test_norms_torch_has_and_reverie_lacks_are_refused_by_name() -> None:
    x = normal(torch.float64, 3, 4)
    refused(lambda x: torch.linalg.vector_norm(x, 0.5), [x], "ord")
    refused(lambda x: torch.norm(x, p="nuc"), [x], "p")
    refused(lambda x, w: torch.convolution(x, w, None, [1], [0], [1], False, [1], 1),
            [normal(torch.float64, 1, 2, 5), normal(torch.float64, 3, 2, 2)], "output_padding")


def test_detached_results_need_no_gradient_as_eager_s() -> None:
    """A result computed from `x.detach()` alone requires no grad, as eager's; written
    into a buffer it leaves the buffer out of the next call's graph
    (`tests/fx_zoo/test_fallback_side_effects.py`)."""
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(lambda x: (x.detach().exp() * 2, x.detach() * x),
                             backend="reverie", fullgraph=True)
    constant, varying = compiled(x)
    assert not constant.requires_grad and varying.requires_grad
    varying.sum().backward()
    torch.testing.assert_close(x.grad, x.detach())
