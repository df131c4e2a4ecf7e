"""`rv.dask` gradients over batch arrays with chunks of no rows (issue 30).

Boolean filtering of a dask array (`x[x[:, 0] > t]`) leaves chunks with no rows. Such a
chunk adds nothing to the loss, but the kernel's own mean over no rows is NaN, and the
chunk's weight 0 times NaN was NaN: the call gave NaN where the single-process call on
the concatenated rows gives a number. Every result here is compared with that call; when
no row is left at all, the single-process call is the kernel on no rows (for a mean: value
NaN, gradients 0; for a sum: 0 and 0). A cluster of 2 worker processes serves the module
(started and closed by the `client` fixture).
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from dask_programs import SOURCE, rows
from distributed import Client, wait

import reverie as rv

CLOSE = {"rtol": 1e-12, "atol": 1e-12}
KERNELS = [("mean", "mse"), ("sum", "squared_sum")]


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def filtered(x: np.ndarray, y: np.ndarray, threshold: float,
             chunks: tuple[int, ...]) -> tuple[da.Array, da.Array]:
    """The rows of `x`, `y` (cut into row `chunks`) whose first column exceeds
    `threshold`, filtered as dask does it: a chunk keeps only its own passing rows."""
    dx = da.from_array(x, chunks=(chunks, x.shape[1]))
    dy = da.from_array(y, chunks=(chunks,))
    keep = dx[:, 0] > threshold
    return dx[keep].compute_chunk_sizes(), dy[keep].compute_chunk_sizes()


def assert_same(got: tuple, expected: tuple) -> None:
    """Equal values and gradients (NaN equal to NaN)."""
    value, grads = got
    np.testing.assert_allclose(value, expected[0], **CLOSE)
    for g, e in zip(grads, expected[1], strict=True):
        np.testing.assert_allclose(g, e, **CLOSE)


def example_with_an_empty_chunk() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Six rows, the first three passing the filter `x[:, 0] > 0`, the last three not."""
    x, y, w, b = rows(n=6)
    x[:3, 0], x[3:, 0] = np.abs(x[:3, 0]) + 0.1, -np.abs(x[3:, 0]) - 0.1
    return x, y, w, b


def on_dask(kernel: rv.Kernel, reduce: str, dx: da.Array, dy: da.Array, w: np.ndarray,
            b: np.ndarray) -> tuple:
    """The loss and its gradients with respect to w and b over the row chunks of dx, dy."""
    return rv.dask.value_and_grad(kernel, wrt=("w", "b"), batch=("x", "y"),
                                  reduce=reduce)(dx, dy, w, b)


@pytest.mark.parametrize("reduce, loss", KERNELS)
def test_a_chunk_of_no_rows_adds_nothing(client: Client, m: rv.Module, reduce: str,
                                         loss: str) -> None:
    x, y, w, b = example_with_an_empty_chunk()
    dx, dy = filtered(x, y, 0.0, (3, 3))
    assert dx.chunks[0] == (3, 0)
    expected = m[loss].value_and_grad(("w", "b"))(x[:3], y[:3], w, b)
    got = on_dask(m[loss], reduce, dx, dy, w, b)
    assert np.isfinite(got[0]) and np.isfinite(got[1][0]).all()
    assert_same(got, expected)


@pytest.mark.parametrize("reduce, loss", KERNELS)
def test_empty_chunks_among_persisted_ones(client: Client, m: rv.Module, reduce: str,
                                           loss: str) -> None:
    """Chunks in worker memory are grouped per worker; the empty ones drop out of a
    group, and a group of empty chunks only drops out whole."""
    x, y, w, b = rows(n=40)
    dx = da.from_array(x, chunks=((10, 0, 0, 15, 0, 15), 4)).persist()
    dy = da.from_array(y, chunks=((10, 0, 0, 15, 0, 15),)).persist()
    wait([dx, dy])
    expected = m[loss].value_and_grad(("w", "b"))(x, y, w, b)
    got = on_dask(m[loss], reduce, dx, dy, w, b)
    assert_same(got, expected)


@pytest.mark.parametrize("reduce, loss", KERNELS)
def test_no_rows_at_all_is_the_kernel_on_no_rows(client: Client, m: rv.Module, reduce: str,
                                                 loss: str) -> None:
    x, y, w, b = example_with_an_empty_chunk()
    dx, dy = filtered(x, y, 1e9, (3, 3))
    assert dx.chunks[0] == (0, 0)
    expected = m[loss].value_and_grad(("w", "b"))(x[:0], y[:0], w, b)
    got = on_dask(m[loss], reduce, dx, dy, w, b)
    assert np.isnan(got[0]) == (reduce == "mean")  # a mean of no rows is NaN; a sum is 0
    assert_same(got, expected)
