"""Shared helpers for the interpreter tests: compile once, call `f`, compare with NumPy."""

from __future__ import annotations

import functools

import numpy as np

import reverie as rv

FLOATS = [np.float32, np.float64]


@functools.cache
def compiled(source: str) -> rv.Module:
    """The interpreter-backed module of `source` (compiled once per test session)."""
    return rv.compile(source, backend="interp")


def run(source: str, *args: object) -> object:
    """Compile `source` and call its function `f`."""
    return compiled(source).f(*args)


def assert_close(got: object, want: object, dtype: type) -> None:
    """Same dtype as `dtype`, and equal up to that dtype's rounding."""
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    tol = {np.float32: 2e-6, np.float64: 1e-13}.get(dtype, 0)
    np.testing.assert_allclose(got, np.asarray(want).astype(got.dtype), rtol=tol, atol=tol)


def sample(shape: tuple[int, ...], dtype: type, seed: int = 0,
           positive: bool = False) -> np.ndarray:
    """Random values of `dtype`: normal with spread 1.5, or uniform in [0.1, 2) if positive."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 2.0, shape) if positive else rng.standard_normal(shape) * 1.5
    return x.astype(dtype)
