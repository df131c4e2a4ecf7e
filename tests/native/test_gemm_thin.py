"""Batches of thin matrix products, computed without packing (`runtime_library/gemm_thin.py`).

A batch whose output rows and right operand's rows are contiguous and whose output is at
most MAX_COLUMNS wide is computed in register tiles straight from the operands, split over
the worker pool one product per chunk. It must give NumPy's `matmul` for every shape that
reaches it (edge rows, partial vectors, sums longer than one depth block), touch nothing
outside its operands, and give the same bits on one thread and on the pool. W8's gradient,
whose three products are thin, must still match its NumPy gradient.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from blas_cases import call_gemm

import reverie as rv
from reverie.compiler.runtime_library.gemm_thin import DEPTH_BLOCK, MAX_COLUMNS, SHALLOW
from tests.unit.benchmark_scripts import benchmark_module

HERE = Path(__file__).resolve().parent
# (batch, M, K, N): edge rows, several column tiles and single vectors after them, partial
# last vectors, sums of one step, of exactly SHALLOW steps, and of several depth blocks with
# a partial last block; and outputs narrower than a tile (ADBench's GMM has D of 2, 10 and
# 20), which BLAS takes
SHAPES = [(3, 13, 9, 40), (2, 37, 70, 48), (4, 6, 200, 64), (2, 5, 1, 32), (3, 9, SHALLOW, 33),
          (2, 11, 3 * DEPTH_BLOCK + 5, 61), (2, 7, 70, 57), (3, 5, 7, 64), (3, 13, 9, 20),
          (2, 7, 70, 2)]

INTERLEAVED = """
fn f(x: f64[N, B, D], q: f64[B, D, D]) -> f64[N, B, D] {
    let y[n, k, j] = sum[i](q[k, j, i] * x[n, k, i]);
    return y;
}
"""


def _left(rng: np.random.Generator, layout: str, batch: int, rows: int,
          cols: int) -> np.ndarray:
    """The left operand: any strides reach the thin kernel."""
    if layout == "transposed":
        return rng.standard_normal((batch, cols, rows)).transpose(0, 2, 1)
    if layout == "interleaved":
        return rng.standard_normal((rows, batch, cols)).transpose(1, 0, 2)
    if layout == "strided":
        return rng.standard_normal((batch, rows, 2 * cols))[:, :, ::2]
    return rng.standard_normal((batch, rows, cols))


def _rows_contiguous(rng: np.random.Generator, interleaved: bool, batch: int, rows: int,
                     cols: int) -> np.ndarray:
    """A right operand or output whose rows are contiguous (what the thin kernel needs)."""
    if interleaved:
        return rng.standard_normal((rows, batch, cols)).transpose(1, 0, 2)
    return rng.standard_normal((batch, rows, cols))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", ["plain", "transposed", "interleaved", "strided"])
@pytest.mark.parametrize("b_interleaved", [False, True], ids=["b_plain", "b_interleaved"])
@pytest.mark.parametrize("c_interleaved", [False, True], ids=["c_plain", "c_interleaved"])
def test_thin_batches_give_numpys_matmul(dtype: type, a_layout: str, b_interleaved: bool,
                                         c_interleaved: bool) -> None:
    rng = np.random.default_rng(21)
    tolerance = 1e-4 if dtype == np.float32 else 1e-12
    for batch, m, k, n in SHAPES:
        assert n <= MAX_COLUMNS
        a = _left(rng, a_layout, batch, m, k).astype(dtype)
        b = _rows_contiguous(rng, b_interleaved, batch, k, n).astype(dtype)
        c = _rows_contiguous(rng, c_interleaved, batch, m, n).astype(dtype)
        c[...] = np.nan
        call_gemm(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=tolerance, atol=tolerance * np.sqrt(k))


GUARDED_SCRIPT = """
import numpy as np
from blas_cases import call_gemm, guarded
for dtype in (np.float32, np.float64):
    for batch, m, k, n in {shapes}:
        for at_end in (False, True):
            for transposed in (False, True):
                a = (guarded((batch, k, m), dtype, at_end).transpose(0, 2, 1) if transposed
                     else guarded((batch, m, k), dtype, at_end))
                b = guarded((batch, k, n), dtype, at_end)
                c = guarded((batch, m, n), dtype, at_end)
                call_gemm(a, b, c)
                np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
print("ok")
"""


def _run(code: str, tmp_path: Path, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False, cwd=HERE,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_thin_batches_touch_nothing_outside_their_operands(tmp_path: Path) -> None:
    """Operands touching PROT_NONE pages (a stray access kills the subprocess)."""
    assert _run(GUARDED_SCRIPT.format(shapes=SHAPES), tmp_path).split() == ["ok"]


ONE_THREAD_SCRIPT = """
import sys
import numpy as np
import reverie as rv
x, q = np.load(sys.argv[1]), np.load(sys.argv[2])
np.save(sys.argv[3], rv.compile('''{source}''').f(x, q))
"""


def test_the_pool_gives_the_bits_of_one_thread(tmp_path: Path) -> None:
    """W8's first product, large enough to be split over the pool: the same bits with
    REVERIE_NUM_THREADS=1 (no pool) as on this process's pool."""
    rng = np.random.default_rng(4)
    x, q = rng.standard_normal((1000, 25, 32)), rng.standard_normal((25, 32, 32))
    paths = [tmp_path / name for name in ("x.npy", "q.npy", "y.npy")]
    np.save(paths[0], x)
    np.save(paths[1], q)
    subprocess.run([sys.executable, "-c", ONE_THREAD_SCRIPT.format(source=INTERLEAVED),
                    *map(str, paths)], check=True, timeout=600, cwd=HERE,
                   env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path),
                        "REVERIE_NUM_THREADS": "1"})
    pooled = rv.compile(INTERLEAVED).f(x, q)
    np.testing.assert_allclose(pooled, np.einsum("nki,kji->nkj", x, q), rtol=1e-12,
                               atol=1e-12)
    assert np.array_equal(pooled, np.load(paths[2]))


def test_the_w8_gradient_through_thin_products_matches_numpy() -> None:
    """D = 32: the forward product and both adjoint products are thin batches."""
    w8 = benchmark_module("workloads").w8_gmm
    rng = np.random.default_rng(8)
    n, d, k = 300, 32, 6
    args = [rng.standard_normal((n, d)), 0.5 * rng.standard_normal((k, d)),
            0.1 * rng.standard_normal((k, d)), 0.3 * rng.standard_normal((k, d, d)) / 6,
            np.tril(np.ones((d, d)), -1), rng.standard_normal(k)]
    grads = rv.compile(w8.SOURCE).w8.grad(w8.PARAMETERS)(*args)
    for got, want in zip(grads, w8.numpy_grad(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
