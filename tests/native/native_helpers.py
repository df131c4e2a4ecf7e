"""Shared helpers for the native-backend tests: run a function natively and through the
reference interpreter on the same bound arguments, and compare."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import numpy as np

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel

# relative tolerance per dtype: arithmetic is exact up to reassociation, transcendentals
# are within a few ulps
RTOL = {"float32": 3e-6, "float64": 1e-12}


@functools.cache
def compiled(source: str) -> rv.Module:
    """The module of `source`, compiled once per test session."""
    return rv.compile(source, backend="interp")


def specialised(source: str, name: str, dtype: str) -> Function:
    """The typed IR of function `name` with `float` meaning `dtype`."""
    return compiled(source).lowering.specialise(name, dtype)


def run_both(fn: Function, *args: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(native results, interpreter results) of `fn` on `args`."""
    bound = bind_arguments(fn, args)
    return native_kernel(fn)(bound), interpret(fn, bound.arrays, bound.dims)


def assert_same(got: list[np.ndarray], want: list[np.ndarray], scale: float = 1.0) -> None:
    """Same dtypes and shapes; values equal up to the dtype's tolerance (`scale` times it);
    NaN where the interpreter has NaN."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        tol = RTOL.get(g.dtype.name, 0) * scale
        magnitude = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)) if w.dtype.kind == "f" \
            else 0.0
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * magnitude)


def check(source: str, *args: object, name: str = "f", dtype: str = "f64",
          scale: float = 1.0) -> list[np.ndarray]:
    """Compile function `name` of `source` for `dtype`, run it both ways, compare."""
    got, want = run_both(specialised(source, name, dtype), *args)
    assert_same(got, want, scale)
    return got


def sample(shape: tuple[int, ...], dtype: str = "f64", seed: int = 0,
           low: float | None = None, high: float | None = None) -> np.ndarray:
    """Random normal values (uniform in [low, high) when given) of a float dtype."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(low, high, shape) if low is not None else rng.standard_normal(shape)
    return x.astype(np.float32 if dtype == "f32" else np.float64)


@contextlib.contextmanager
def code_setting(monkeypatch: object, variable: str, reading: Callable[[], str]
                 ) -> Iterator[Callable[[str], None]]:
    """A function setting the code-generation setting `variable` (REVERIE_AMX, ...) for
    `reading` (its cached reader, cleared at each change); the variable unset after."""
    def use(value: str) -> None:
        monkeypatch.setenv(variable, value)
        reading.cache_clear()

    try:
        yield use
    finally:
        monkeypatch.delenv(variable, raising=False)
        reading.cache_clear()
