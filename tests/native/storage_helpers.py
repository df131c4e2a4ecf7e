"""Shared helpers for the bf16/f16 tests of native code: the 16-bit dtypes by IR name (NumPy's
and torch's) and distances in units in the last place of them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

BF16 = np.dtype(ml_dtypes.bfloat16)
STORAGE = {"bf16": BF16, "f16": np.dtype(np.float16)}
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16}


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units in the last place of their 16-bit type (0 where both are NaN,
    a large number where only one is)."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)

    def ordered(values: np.ndarray) -> np.ndarray:
        bits = values.view(np.uint16).astype(np.int64)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)

    distance = np.abs(ordered(got) - ordered(want))
    nan_got, nan_want = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    return np.where(nan_got | nan_want, np.where(nan_got == nan_want, 0, 1 << 20), distance)


def assert_close_in_ulps(got: np.ndarray, want: np.ndarray, within: int,
                         what: object = "") -> None:
    """Same dtype and shape, at most `within` ulps apart everywhere, and bit for bit on
    at least 98% of the elements."""
    distance = ulps(np.asarray(got), np.asarray(want))
    assert distance.max(initial=0) <= within, (what, int(distance.max()))
    assert np.mean(distance > 0) <= 0.02, (what, float(np.mean(distance > 0)))
