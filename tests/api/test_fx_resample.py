"""`F.interpolate` and the `nn.Upsample` modules through `rv.fx`
(`reverie/fx_rows_resample.py`) against eager torch.

Each case compiles through `torch.compile(backend="reverie", fullgraph=True)` and compares
the value, the gradient and the gradient of the gradient with eager PyTorch in float32 and
float64; the index tables are checked against ATen's over a grid of sizes and scales.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from reverie.fx_rows_resample import _linear, _nearest  # noqa: E402
from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    fresh_dynamo,
    normal,
    refused,
    tolerance,
)

CASES = {
    "nearest x2": lambda d: (lambda x: F.interpolate(x, scale_factor=2), [normal(d, 2, 3, 5)]),
    "nearest to a size": lambda d: (lambda x: F.interpolate(x, size=7) + F.interpolate(
        x, size=3).sum(-1, keepdim=True), [normal(d, 2, 3, 5)]),
    "nearest-exact": lambda d: (lambda x: F.interpolate(x, scale_factor=1.7,
                                                        mode="nearest-exact"),
                                [normal(d, 2, 3, 5)]),
    "nearest 2-d, 3-d": lambda d: (
        lambda x, v: F.interpolate(x, scale_factor=(2, 1.3)).sum() + F.interpolate(
            v, size=(2, 3, 5)).sum(), [normal(d, 1, 2, 4, 5), normal(d, 1, 2, 3, 4, 2)]),
    "linear": lambda d: (lambda x: F.interpolate(x, scale_factor=2, mode="linear")
                         + F.interpolate(x, size=10, mode="linear", align_corners=True),
                         [normal(d, 2, 3, 5)]),
    "bilinear": lambda d: (
        lambda x: F.interpolate(x, size=(5, 7), mode="bilinear").sum() + F.interpolate(
            x, scale_factor=(1.5, 0.6), mode="bilinear", align_corners=True).sum()
        + F.interpolate(x, scale_factor=0.5, mode="bilinear").sum(), [normal(d, 1, 2, 4, 6)]),
    "trilinear": lambda d: (lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear",
                                                    recompute_scale_factor=True),
                            [normal(d, 1, 2, 3, 4, 2)]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_interpolate(case: str, dtype: torch.dtype) -> None:
    fn, inputs = CASES[case](dtype)
    assert_same(fn, inputs, dtype)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_tables_are_aten_s(mode: str) -> None:
    """The source index of every output position, for sizes 1..12 to 1..25 and scale
    factors, as ATen's kernel picks it (arange in, the values out)."""
    for length in range(1, 13):
        x = torch.arange(length, dtype=torch.float64)[None, None]
        for out in range(1, 26):
            want = F.interpolate(x, size=out, mode=mode)[0, 0].long().tolist()
            assert _nearest(length, out, None, mode == "nearest-exact") == want
        for factor in (0.3, 0.5, 1.3, 1.7, 2.0, 2.5, 3.0):
            out = int(np.floor(length * factor))
            if out:
                want = F.interpolate(x, scale_factor=factor, mode=mode)[0, 0].long().tolist()
                assert _nearest(length, out, factor, mode == "nearest-exact") == want


@pytest.mark.parametrize("align_corners", [False, True])
def test_linear_tables_are_aten_s(align_corners: bool) -> None:
    """Each output of a linear resampling of one-hot rows is the weight ATen gives the
    element, so the tables' (i₀, i₁, weight) reproduce ATen's matrix."""
    for length in range(1, 9):
        eye = torch.eye(length, dtype=torch.float64)[:, None]  # [L, 1, L]: a row per element
        for out in range(1, 14):
            want = F.interpolate(eye, size=out, mode="linear", align_corners=align_corners)
            firsts, seconds, weights = _linear(length, out, None, align_corners, np.float64)
            got = torch.zeros(length, out, dtype=torch.float64)
            for j, (a, b, w) in enumerate(zip(firsts, seconds, weights, strict=True)):
                got[a, j] += 1 - w
                got[b, j] += w
            torch.testing.assert_close(got, want[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("module", [nn.Upsample(scale_factor=2),
                                    nn.Upsample(size=(5, 3), mode="bilinear",
                                                align_corners=True),
                                    nn.UpsamplingNearest2d(scale_factor=2),
                                    nn.UpsamplingBilinear2d(size=(3, 7))], ids=str)
def test_upsample_modules_as_calls(module: nn.Module, dtype) -> None:
    model = nn.Sequential(module)
    x = normal(dtype, 2, 3, 4, 5)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    torch.testing.assert_close(compiled(x), model(x), **tolerance(dtype))


def test_modes_reverie_lacks_are_refused_by_name() -> None:
    x = normal(torch.float64, 1, 2, 4, 4)
    refused(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), [x], "mode")
    refused(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True),
            [x], "antialias")
