"""Helpers for the ports of PyTorch's autograd tests: compare torch or Reverie tensors."""

from __future__ import annotations

import numpy as np


def as_array(value: object) -> np.ndarray:
    """A torch or Reverie tensor (or anything array-like) as a NumPy array, graph dropped."""
    if hasattr(value, "detach"):
        value = value.detach()
    return np.asarray(value)


def assert_close(actual: object, expected: object, rtol: float = 1e-7,
                 atol: float = 1e-12) -> None:
    """`actual` equals `expected` elementwise (NaNs equal), any tensor kind on either side."""
    np.testing.assert_allclose(as_array(actual), as_array(expected), rtol=rtol, atol=atol,
                               equal_nan=True)
