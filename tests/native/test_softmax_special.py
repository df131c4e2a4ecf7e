"""softmax, log_softmax and logsumexp on rows holding ±inf and NaN, against PyTorch.

Issue 8: a row with `+inf` gave `[nan, 0, 0]` where torch gives all NaN. Every backend
(interpreter, native, MLIR) must give torch's values, NaN and infinities in the same
places, in f32 and f64, along the last and the first axis; the gradients (vjp) must equal
torch's too, NaN where torch's are NaN. Finite rows, large finite rows (values only) and
masked rows (`-inf` entries, as in masked attention) are among the cases, so the
stability shift stays correct where it matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.runtime.native.mlir_to_llvm import mlir_tools

INF, NAN = math.inf, math.nan
SPECIAL = [
    [INF, 0.0, 1.0], [-INF, 0.0, 1.0], [-INF, -INF, -INF], [NAN, 0.0, 1.0], [INF, INF, 0.0],
    [INF, -INF, 0.0], [INF, NAN, 0.0], [-INF, NAN, 0.0], [INF, -INF, -INF], [-INF, -INF, 1.0],
    [NAN, INF, -INF], [0.5, -1.0, 2.0],
]
# only for values: torch's logsumexp gradient, exp(x - logsumexp(x)), loses the log 2 of
# [1e30, 1e30, 0] (it gives weights 1, 1, 0) and most digits of 710 - 710.0000454 in f32
LARGE = [[1e30, 1e30, 0.0], [700.0, 710.0, -5.0]]
SOURCE = """
fn softmax_rows(x: float[N, C]) -> float[N, C] { return softmax(x); }
fn log_softmax_rows(x: float[N, C]) -> float[N, C] { return log_softmax(x, axis=1); }
fn logsumexp_rows(x: float[N, C]) -> float[N] { return logsumexp(x, axis=1); }
fn logsumexp_kept(x: float[N, C]) -> float[N, 1] { return logsumexp(x, axis=1, keepdims=true); }
fn softmax_columns(x: float[C, N]) -> float[C, N] { return softmax(x, axis=0); }
fn log_softmax_columns(x: float[C, N]) -> float[C, N] { return log_softmax(x, axis=0); }
"""
# each function: (torch reference on the rows, whether it takes the rows transposed)
REFERENCES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "softmax_rows": (lambda t: torch.softmax(t, 1), False),
    "log_softmax_rows": (lambda t: torch.log_softmax(t, 1), False),
    "logsumexp_rows": (lambda t: torch.logsumexp(t, 1), False),
    "logsumexp_kept": (lambda t: torch.logsumexp(t, 1, keepdim=True), False),
    "softmax_columns": (lambda t: torch.softmax(t, 1), True),
    "log_softmax_columns": (lambda t: torch.log_softmax(t, 1), True),
}
BACKENDS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
RTOL = {np.float32: 2e-6, np.float64: 1e-13}


@pytest.fixture(scope="module", params=BACKENDS)
def m(request: pytest.FixtureRequest) -> rv.Module:
    """The functions, compiled once per backend."""
    return rv.compile(SOURCE, backend=request.param)


def torch_value_and_vjp(name: str, rows: np.ndarray,
                        cotangent: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """torch's value of function `name` on `rows` and, given a `cotangent`, its vjp (both
    laid out as the Reverie function takes and returns them)."""
    reference, transposed = REFERENCES[name]
    t = torch.tensor(rows, requires_grad=True)
    out = reference(t)
    value = out.detach().numpy().T if transposed else out.detach().numpy()
    if cotangent is None:
        return value, np.zeros_like(rows)
    (grad,) = torch.autograd.grad(out, t, torch.tensor(cotangent.T if transposed else cotangent))
    return value, grad.numpy().T if transposed else grad.numpy()


def assert_same(got: np.ndarray, want: np.ndarray, dtype: type) -> None:
    """Equal dtype and shape; NaN and ±inf in the same places; the rest within `RTOL`."""
    got = np.asarray(got)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=RTOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_values_match_torch(m: rv.Module, name: str, dtype: type) -> None:
    rows = np.array(SPECIAL + LARGE, dtype)
    want, _ = torch_value_and_vjp(name, rows)
    argument = rows.T.copy() if REFERENCES[name][1] else rows
    assert_same(m[name](argument), want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_gradients_match_torch(m: rv.Module, name: str, dtype: type) -> None:
    rows = np.array(SPECIAL, dtype)
    transposed = REFERENCES[name][1]
    argument = rows.T.copy() if transposed else rows
    value, _ = torch_value_and_vjp(name, rows)
    cotangent = np.random.default_rng(8).standard_normal(value.shape).astype(dtype)
    _, want = torch_value_and_vjp(name, rows, cotangent)
    assert_same(m[name].vjp(0)(argument, cotangent), want, dtype)
