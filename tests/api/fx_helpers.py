"""What the tests of `rv.fx`'s row families share: the dtypes, a fresh Dynamo per test,
and the tolerance of each dtype when comparing with eager PyTorch."""

from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float64]


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    """Each test compiles afresh (Dynamo stops recompiling one function after 8 graphs)."""
    torch._dynamo.reset()
    torch.manual_seed(0)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """`torch.testing.assert_close` tolerances against eager for `dtype`."""
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else \
        {"rtol": 1e-9, "atol": 1e-11}
