"""Mixed operand types promote as the traced library does: NumPy's rule in `rv.trace`
(`f32 + i64` is f64), torch's in `rv.fx` (`f32 + i64` is f32), never a type-check error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv

PAIRS = [(np.float32, np.int64), (np.float32, np.int32), (np.float64, np.int32),
         (np.float32, np.float64), (np.int32, np.int64), (np.bool_, np.float32)]


@pytest.mark.parametrize(("left", "right"), PAIRS)
def test_trace_promotes_as_numpy(left: type, right: type) -> None:
    a = (np.arange(4) % 2 if left is np.bool_ else np.arange(4) + 0.5).astype(left)
    b = np.arange(4).astype(right)
    traced = rv.trace(lambda x, y: x * y + y, a, b)
    expected = a * b + b
    result = np.asarray(traced.kernel(a, b))
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected)


@pytest.mark.parametrize(("left", "right"), [(torch.float32, torch.int64),
                                             (torch.float64, torch.int32),
                                             (torch.float32, torch.float64)])
def test_fx_promotes_as_torch(left: torch.dtype, right: torch.dtype) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.arange(4, dtype=right) + 1

    x = torch.linspace(-1, 1, 12, dtype=left).reshape(3, 4).requires_grad_()
    model = Model()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    got, expected = compiled(x), model(x)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)
    (g,) = torch.autograd.grad(got.sum(), x)
    (h,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(g, h)
