"""Selections, orderings, statistics, masks, shrinking activations and the other tensor
operations of `rv.fx` (`reverie/fx_rows_tensor_ops.py`, the new rows of
`fx_rows_activations.py` and `fx_rows_norm_pool.py`) against eager torch.

Each case compiles through `torch.compile(backend="reverie", fullgraph=True)` and compares
the value, the gradient of every float input and the gradient of that gradient with eager
PyTorch in float32 and float64; the nn modules compile as `call_module` nodes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    fresh_dynamo,
    normal,
    refused,
    tolerance,
)

INDEX = torch.tensor([[0, 2], [1, 3], [3, 0]])
SELECT = torch.tensor([3, 0, 2])
LABELS = torch.tensor([[0, 2], [1, 1]])

CASES = {
    "max and min": lambda d: (
        lambda x, y: torch.max(x, dim=1).values + x.min(0)[0].sum() + torch.max(x)
        + torch.max(x, y).sum(1) + x.max(1, keepdim=True)[0].sum(1) + torch.min(x),
        [normal(d, 3, 4), normal(d, 3, 4)]),
    "max indices": lambda d: (
        lambda x: x * torch.max(x, 1)[1][:, None] + torch.argmin(x, 0) + torch.argmax(x)
        + x.argmax(1, keepdim=True), [normal(d, 3, 4)]),
    "var std": lambda d: (
        lambda x: torch.var(x, 1) + x.std(1, unbiased=False) + torch.var(x, (0, 1), keepdim=True)
        .sum(0) + torch.std(x, 1, correction=2) + x.var(1, True), [normal(d, 3, 4)]),
    "var_mean std_mean": lambda d: (
        lambda x: torch.var_mean(x, 0)[0] + torch.var_mean(x, 0)[1]
        + torch.std_mean(x, 0, keepdim=True)[0][0] + torch.std_mean(x)[1], [normal(d, 3, 4)]),
    "std of a constant line": lambda d: (lambda x: torch.std(x * 0 + x[:, :1], 1),
                                         [normal(d, 3, 4)]),
    "sort argsort topk": lambda d: (
        lambda x: torch.sort(x, 1).values + x.sort(0, descending=True)[0]
        + x * torch.argsort(x, 1) + torch.topk(x, 2).values.sum(1, keepdim=True)
        + x.topk(2, 0, largest=False)[0].sum(0), [normal(d, 3, 4)]),
    "gather index_select": lambda d: (
        lambda x: torch.gather(x, 1, INDEX).sum(1) + x.gather(0, INDEX[:2, :1]).sum()
        + torch.index_select(x, 1, SELECT).sum(1) + x.index_select(0, SELECT[1:]).sum(),
        [normal(d, 3, 4)]),
    "repeat_interleave flip roll": lambda d: (
        lambda x: torch.repeat_interleave(x, 2, dim=0)[::2] + x.repeat_interleave(2)[:12]
        .reshape(3, 4) + torch.flip(x, [0, 1]) + x.flip(1) + torch.roll(x, 1, 1)
        + x.roll((1, -1), (0, 1)) + torch.roll(x, 5), [normal(d, 3, 4)]),
    "tril triu movedim swapaxes mT diff": lambda d: (
        lambda x: torch.tril(x) + x.triu(1) + torch.triu(x, -1) + torch.movedim(x[None], 0, 2)
        .sum(2) + x[None].swapaxes(0, 1).sum(1) + x.mT.T + torch.diff(x, dim=1, append=x[:, :1])
        + x.diff(2, 0, prepend=x[:2]), [normal(d, 3, 4)]),
    "remainder fmod floor_divide": lambda d: (
        lambda x, y: torch.remainder(x, y) + x.fmod(y) + torch.fmod(x, 0.7) + x % 0.3
        + torch.floor_divide(x.detach(), y.detach()) * x + (x.detach() // 0.4) * y,
        [normal(d, 3, 4), normal(d, 3, 4)]),
    "lerp hypot xlogy logaddexp": lambda d: (
        lambda x, y, w: torch.lerp(x, y, 0.3) + x.lerp(y, 0.8) + torch.lerp(x, y, w)
        + torch.hypot(x, y) + torch.xlogy(x.abs(), y.abs() + 0.5) + torch.logaddexp(x, y),
        [normal(d, 3, 4), normal(d, 3, 4), torch.rand(3, 4, dtype=d)]),
    "booleans": lambda d: (
        lambda x, y: torch.where(torch.logical_and(x > 0, y) | torch.logical_not(x < -1)
                                 ^ torch.logical_xor(x, y > 0) & ~torch.isnan(x)
                                 & x.isfinite() & ~x.isinf(), x, y)
        + torch.where((x > 1).any(1, keepdim=True) | torch.all(y < 3), x, 0.0),
        [normal(d, 3, 4), normal(d, 3, 4)]),
    "nan_to_num": lambda d: (
        lambda x: torch.nan_to_num(torch.log(x), nan=0.5) * x,
        [torch.tensor([[3.0, 1.0, -1.0], [2.0, 0.5, -0.5]], dtype=d)]),
    "one_hot and factories": lambda d: (
        lambda x: x @ F.one_hot(SELECT[:1].repeat(4), 5).to(x.dtype)[:, :4].T.sum(1)[:, None]
        + torch.eye(3, 4, dtype=x.dtype) + torch.linspace(0, 1, 4, dtype=x.dtype)
        + torch.tensor([[1.0], [2.0], [3.0]], dtype=x.dtype), [normal(d, 3, 4)]),
    "clone in place": lambda d: (lambda x: x.clone().mul_(2).exp_() + torch.clone(x),
                                 [normal(d, 3, 4)]),
    "stacks meshgrid": lambda d: (
        lambda a, b: torch.vstack([a, b]).sum(0) + torch.hstack([a, b])[:4]
        + torch.dstack([a, b]).sum(-1).sum(0) + torch.column_stack([a, b]).sum(1)
        + torch.meshgrid(a, b)[0].sum(1) + torch.meshgrid(a, b, indexing="xy")[1].sum(0),
        [normal(d, 4), normal(d, 4)]),
    "pixel_shuffle": lambda d: (
        lambda x: F.pixel_unshuffle(F.pixel_shuffle(x, 2) * 2, 2)
        + F.pixel_shuffle(x * x, 2)[:, :, 1:3, :2].sum(), [normal(d, 2, 8, 3, 2)]),
    "det slogdet logdet": lambda d: (
        lambda a: torch.det(a) + torch.linalg.det(a) + torch.slogdet(a)[1]
        + torch.linalg.slogdet(a)[0] + torch.logdet(a @ a.mT), [normal(d, 2, 3, 3)]),
    "shrinking activations": lambda d: (
        lambda x: F.softshrink(x) + F.hardshrink(x, 0.3) + F.threshold(x, 0.1, -2.0)
        + F.tanhshrink(x) + F.rrelu(x) + torch.hardshrink(x), [normal(d, 3, 4)]),
    "glu softmin": lambda d: (
        lambda x: F.glu(x).sum(1) + F.glu(x[:2], 0).sum() + F.softmin(x, 1).sum(1)
        + F.softmin(x, dim=0, dtype=x.dtype).sum(0)[:3], [normal(d, 3, 4)]),
    "broadcast_tensors as_tensor": lambda d: (
        lambda x, y: sum(torch.broadcast_tensors(x[:, :1], y[0], torch.as_tensor(2.0)))
        + torch.as_tensor(x, dtype=torch.float64).to(x.dtype)
        + x.new_zeros(torch.broadcast_shapes(x.shape, (1, 4))), [normal(d, 3, 4), normal(d, 3, 4)]),
    "diag_embed": lambda d: (
        lambda x: torch.diag_embed(x).sum(-1) + torch.diag_embed(x, 1)[:, 1:, 1:].sum(-2)
        + x.diag_embed(-2, 0, 2).sum(0)[:, 2:] + torch.diag_embed(x, dim1=-1, dim2=0).sum(-1).T,
        [normal(d, 3, 4)]),
    "linalg.solve_triangular": lambda d: (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False)
        + torch.linalg.solve_triangular(a, b, upper=True, left=False)
        + torch.linalg.solve_triangular(a[0], b, upper=False, unitriangular=True),
        [normal(d, 2, 3, 3) + 4 * torch.eye(3, dtype=d), normal(d, 2, 3, 3)]),
    "casts and integer sums": lambda d: (
        lambda x: x * x.long() + x.int().sum() * (x > 0).sum(1, keepdim=True)
        + x.type(torch.int64).cumsum(1) + x * x.bool() + x.to(torch.bool).long().prod(0)
        + torch.sum(x > 0, 0) + x.int().amax(1, keepdim=True) * (x > 1).amin(0),
        [normal(d, 3, 4) * 3]),
    "masks and counts meeting Python numbers": lambda d: (
        lambda x: x * ((x > 0) * 1.5) + (x > 0).sum() * 0.5 + x.argmax() * 0.25
        + ((x < 0) * 2 - 1) * x, [normal(d, 3, 4)]),
    "0-d operands of a wider dtype": lambda d: (
        lambda x, s: x * s + (s - x) / s + torch.where(x > 0, x, s) + torch.clamp(x, min=s),
        [normal(d, 3, 4), normal(torch.float64, 1)[0]]),
    "instance_norm": lambda d: (
        lambda x, w, b: F.instance_norm(x) + F.instance_norm(x, weight=w, bias=b, eps=1e-3),
        [normal(d, 2, 3, 5), normal(d, 3), normal(d, 3)]),
}

# the gradient of the gradient where torch's is NaN (std at a zero variance; Reverie's 0)
FIRST_ONLY = {"std of a constant line"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_row(case: str, dtype: torch.dtype) -> None:
    fn, inputs = CASES[case](dtype)
    assert_same(fn, inputs, dtype, second=case not in FIRST_ONLY)


MODULES = {
    "PixelShuffle": (nn.Sequential(nn.PixelShuffle(2), nn.PixelUnshuffle(2)), (2, 8, 3, 2)),
    "shrinking": (nn.Sequential(nn.Softshrink(0.3), nn.Hardshrink(0.2), nn.Threshold(0.1, 5.0),
                                nn.Tanhshrink(), nn.RReLU().eval(), nn.GLU(1), nn.Softmin(1)),
                  (3, 8)),
    "InstanceNorm": (nn.Sequential(nn.InstanceNorm1d(3, affine=True)), (2, 3, 5)),
    "InstanceNorm unbatched": (nn.Sequential(nn.InstanceNorm1d(3)), (3, 5)),
    "InstanceNorm2d": (nn.Sequential(nn.InstanceNorm2d(3, affine=True)), (2, 3, 4, 5)),
    "InstanceNorm3d": (nn.Sequential(nn.InstanceNorm3d(2)), (1, 2, 3, 4, 2)),
    "padding 1-d": (nn.Sequential(nn.ReflectionPad1d(2), nn.ReplicationPad1d((1, 0)),
                                  nn.ZeroPad1d(1), nn.ConstantPad1d((0, 2), 2.5),
                                  nn.CircularPad1d(1)), (2, 3, 5)),
    "padding 2-d": (nn.Sequential(nn.ReflectionPad2d((1, 2, 0, 1)), nn.ReplicationPad2d(1),
                                  nn.ZeroPad2d(2), nn.ConstantPad2d(1, -1.0),
                                  nn.CircularPad2d((0, 1, 1, 0))), (2, 3, 4, 5)),
    "padding 3-d": (nn.Sequential(nn.ReflectionPad3d(1), nn.ReplicationPad3d((1, 0, 0, 1, 1, 0)),
                                  nn.ZeroPad3d(1), nn.ConstantPad3d(1, 0.5), nn.CircularPad3d(1)),
                    (1, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", MODULES)
def test_modules_as_calls(name: str, dtype: torch.dtype) -> None:
    model, shape = MODULES[name]
    model = model.to(dtype)
    x = normal(dtype, *shape)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    torch.testing.assert_close(compiled(x), model(x), **tolerance(dtype))


def test_nan_to_num_replaces_what_eager_replaces() -> None:
    x = torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64)
    for fn in (lambda x: torch.nan_to_num(x / 0.0),
               lambda x: torch.nan_to_num(x / 0.0, nan=1.0, posinf=5.0, neginf=-2.0),
               lambda x: (x / 0.0).nan_to_num(posinf=3.0).float()):
        torch._dynamo.reset()
        got = torch.compile(fn, backend="reverie", fullgraph=True)(x)
        torch.testing.assert_close(got, fn(x), rtol=0, atol=0)


def test_what_reverie_cannot_honour_is_refused_by_name() -> None:
    x = normal(torch.float64, 3, 4)
    refused(lambda x: F.rrelu(x, training=True), [x], "training")
    refused(lambda x: F.one_hot(SELECT), [x], "num_classes")
    refused(lambda x: torch.repeat_interleave(x, SELECT[:3], dim=0), [x], "repeats")
    refused(lambda x: F.glu(x[:, :3]), [x], "input")
    refused(lambda x: F.instance_norm(x[None], torch.zeros(3, dtype=x.dtype)), [x],
            "running_mean")
    refused(lambda x: torch.linalg.inv(x[:3, :3]), [x], "inv")
