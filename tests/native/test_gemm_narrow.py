"""The narrow matrix kernel (`compiler/codegen/gemm_narrow.py`): products of at most
NARROW_COLUMNS columns whose A is contiguous along a row (rows form) or a column (columns
form) run there before BLAS is asked.

Checked: NumPy's product (in f64) on every layout and on the edges of its tiles (rows of C
past a tile, columns past a group, K past a whole vector or a block of A's rows); that BLAS
on or off gives the same bits (the narrow kernel serves both); that a product split over
the worker pool gives the one-thread bits; and that no access leaves the operands (guard
pages, in a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from blas_cases import GEMM, LAYOUTS, gemm_arguments

from reverie.compiler.codegen.abi import HELPERS, POOL_SLOT
from reverie.compiler.codegen.gemm_narrow import BLOCK_K, NARROW_COLUMNS
from reverie.runtime import native

HERE = Path(__file__).resolve().parent
# (M, K, N): one-element products, K below / at / past a vector and past a block of A's
# rows, M past a tile of either form, N past a group of columns, N at the limit
SHAPES = [(1, 1, 1), (3, 7, 5), (17, 9, 10), (33, BLOCK_K + 1, NARROW_COLUMNS),
          (2, 2 * BLOCK_K + 44, 3), (40, 33, 4), (16, 64, 13), (100, 257, 11)]


def call(a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int = 1) -> None:
    """c = a @ b through the helper kernels call, on `threads` threads of the pool."""
    name = f"rv_gemm_{'f32' if c.dtype == np.float32 else 'f64'}"
    table = native.load_helpers(frozenset({name}))
    arguments = gemm_arguments(a, b, c, threads)[:-1]  # the pool: this process's
    GEMM(int(table[HELPERS.index(name)]))(*arguments, int(table[POOL_SLOT]))


@pytest.fixture(params=[True, False], ids=["blas", "own"])
def use_blas(request: pytest.FixtureRequest) -> Iterator[bool]:
    previous = native.use_blas(request.param)
    yield request.param
    native.use_blas(previous)


def _operands(dtype: type, m: int, k: int, n: int, a_layout: str, b_layout: str,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = LAYOUTS[a_layout][0](rng.standard_normal((m, k)).astype(dtype))
    b = LAYOUTS[b_layout][0](rng.standard_normal((k, n)).astype(dtype))
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", list(LAYOUTS))
@pytest.mark.parametrize("b_layout", ["plain", "transposed", "strided"])
def test_narrow_products_match_numpy_at_every_edge(use_blas: bool, dtype: type, a_layout: str,
                                                   b_layout: str) -> None:
    tolerance = 1e-5 if dtype == np.float32 else 1e-13
    for m, k, n in SHAPES:
        a, b = _operands(dtype, m, k, n, a_layout, b_layout)
        want = a.astype(np.float64) @ b.astype(np.float64)
        for c in (np.full((m, n), np.nan, dtype), np.full((n, m), np.nan, dtype).T):
            call(a, b, c)
            np.testing.assert_allclose(c, want, rtol=tolerance, atol=tolerance * np.sqrt(k),
                                       err_msg=f"{m}x{k}x{n}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", ["plain", "transposed"])
def test_the_narrow_kernel_serves_with_blas_on_and_off(dtype: type, a_layout: str) -> None:
    previous = native.use_blas(True)
    try:
        for m, k, n in SHAPES:
            a, b = _operands(dtype, m, k, n, a_layout, "plain")
            results = []
            for enabled in (True, False):
                native.use_blas(enabled)
                c = np.empty((m, n), dtype)
                call(a, b, c)
                results.append(c)
            assert np.array_equal(*results), f"{m}x{k}x{n}"
    finally:
        native.use_blas(previous)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", ["plain", "transposed"])
@pytest.mark.parametrize("n", [10, NARROW_COLUMNS])
def test_a_split_product_gives_the_one_thread_bits(dtype: type, a_layout: str, n: int) -> None:
    """Large enough for the pool (M K N >= threads.PARALLEL_MIN_MACS); M not a multiple of
    any tile, K past several blocks."""
    m, k = 1003, 4 * BLOCK_K + 5
    a, b = _operands(dtype, m, k, n, a_layout, "plain", seed=1)
    one, split = np.empty((m, n), dtype), np.empty((m, n), dtype)
    call(a, b, one, threads=1)
    for _ in range(3):
        call(a, b, split, threads=2)
        assert np.array_equal(split, one)
    np.testing.assert_allclose(one, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-4 * np.sqrt(k))


GUARDED_SCRIPT = f"""
import numpy as np
from blas_cases import _check_guarded
from reverie.runtime import native
for enabled in (True, False):
    native.use_blas(enabled)
    for dtype in (np.float32, np.float64):
        for m, k, n in ((19, {BLOCK_K} + 3, 13), (5, 40, {NARROW_COLUMNS}), (2, 9, 2)):
            _check_guarded(dtype, m, k, n)
print("ok")
"""


def test_no_access_outside_guarded_operands(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", GUARDED_SCRIPT], capture_output=True,
                          text=True, timeout=600, check=False, cwd=HERE,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok"]
