"""Fixtures for the ports of PyTorch's `test/test_autograd.py` (issue 32, docs/api.md §4).

Every ported test takes `lib`, run once with torch and once with Reverie: the torch run
proves the port (the test says what torch 2.13 does), the Reverie run checks parity.
Tests build their tensors through `lib` so that both libraries see the same values:

    def test_grad_accumulates(lib):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        (x * x).sum().backward()
        assert_close(x.grad, [2.0, 4.0])    # from tests.autograd.parity
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402


class ReverieLib:
    """The torch names the ported tests use, served by Reverie (anything else: `rv.<name>`)."""

    float64 = np.float64
    float32 = np.float32
    int64 = np.int64

    def __getattr__(self, name: str) -> object:
        return getattr(rv, name)

    def __repr__(self) -> str:
        return "reverie"


@pytest.fixture(params=["torch", "reverie"])
def lib(request: pytest.FixtureRequest) -> object:
    """`torch`, or Reverie under torch's names."""
    return torch if request.param == "torch" else ReverieLib()

