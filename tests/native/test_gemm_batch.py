"""Batched matrix products: one `Matmul` of 3-D views, run by the helper as one batch.

`compiler/runtime_library/gemm_batch.py` hands a batch whose layout BLAS can express to one
`?gemm_batch` call (OpenBLAS's threads then take whole products), and any other batch to
one product at a time. Both must give NumPy's `matmul`, the batch call the very bits of the
product-at-a-time path (each product is one thread's `?gemm`), at every level of the
pipeline, with BLAS on and off, from call to call and thread to thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from blas_cases import call_gemm

import reverie as rv
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import MATMUL_PACK_ELEMENTS, Buffer, Matmul, Program, View
from reverie.compiler.loops.loop_verifier import LoopVerifyError, verify_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.runtime_library.gemm_batch import BATCH_CHUNK, SMALL_MATRIX_MACS
from reverie.compiler.transforms.contractions import contract_function
from reverie.runtime.native import blas, helpers
from reverie.runtime.native import native_kernel as native
from tests.unit.level_helpers import every_level

BATCHED = """
fn f(a: f64[B, M, K], b: f64[B, N, K]) -> f64[B, M, N] {
    let c[i, m, n] = sum[k](a[i, m, k] * b[i, n, k]);
    return c;
}
"""
# W8's first product: the points laid out [N, K, D], the batch axis (K) in the middle
INTERLEAVED = """
fn f(x: f64[N, B, D], q: f64[B, D, D]) -> f64[N, B, D] {
    let y[n, k, j] = sum[i](q[k, j, i] * x[n, k, i]);
    return y;
}
"""


def _plain(rng: np.random.Generator, batch: int, rows: int, cols: int) -> np.ndarray:
    return rng.standard_normal((batch, rows, cols))


def _transposed(rng: np.random.Generator, batch: int, rows: int, cols: int) -> np.ndarray:
    return rng.standard_normal((batch, cols, rows)).transpose(0, 2, 1)


def _interleaved(rng: np.random.Generator, batch: int, rows: int, cols: int) -> np.ndarray:
    """Row-major matrices whose rows alternate between matrices (ld = batch * cols)."""
    return rng.standard_normal((rows, batch, cols)).transpose(1, 0, 2)


def _strided(rng: np.random.Generator, batch: int, rows: int, cols: int) -> np.ndarray:
    """Both strides of each matrix non-unit: BLAS cannot express it."""
    return rng.standard_normal((batch, rows, 2 * cols))[:, :, ::2]


BATCH_LAYOUTS: dict[str, Callable[..., np.ndarray]] = {
    "plain": _plain, "transposed": _transposed, "interleaved": _interleaved,
    "strided": _strided}


@pytest.fixture(params=[True, False], ids=["blas", "own"])
def use_blas(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run the test with BLAS enabled, then with the own kernel only."""
    previous = native.use_blas(request.param)
    yield request.param
    native.use_blas(previous)


def _set_batch_entry(dtype: str, address: int | None) -> None:
    """Hand the helper `rv_gemm_<dtype>` this `?gemm_batch` (None: one product at a time)."""
    name = f"rv_gemm_{dtype}"
    native.load_helpers(frozenset({name}))
    helpers._SET_POINTER(helpers._helper(name).address(name + "_use_blas_batch"))(address)


def test_the_blas_gemm_batch_is_found_where_exported() -> None:
    found = blas.find_blas()
    assert found is not None
    for dtype, flavours in zip(("f32", "f64"), zip(*blas.BATCH_SYMBOLS, strict=True),
                               strict=True):
        exported = [name for name in flavours if hasattr(found.library, name)]
        assert bool(found.gemm_batch[dtype]) == bool(exported)
    # NumPy 2.x's scipy-openblas (0.3.29 and later) has it
    if hasattr(found.library, "scipy_cblas_dgemm64_"):
        assert all(found.gemm_batch.values())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", list(BATCH_LAYOUTS))
@pytest.mark.parametrize("b_layout", list(BATCH_LAYOUTS))
@pytest.mark.parametrize("c_layout", ["plain", "transposed", "interleaved"])
def test_every_batched_layout_gives_numpys_matmul(use_blas: bool, dtype: type, a_layout: str,
                                                  b_layout: str, c_layout: str) -> None:
    rng = np.random.default_rng(11)
    tolerance = 2e-5 if dtype == np.float32 else 1e-12
    # the last shape is past SMALL_MATRIX_MACS: one `?gemm_batch` call where BLAS serves
    for batch, m, k, n in ((3, 13, 9, 6), (1, 7, 5, 4), (4, 1, 8, 3), (2, 6, 1, 5),
                           (2, 128, 96, 90)):
        a = BATCH_LAYOUTS[a_layout](rng, batch, m, k).astype(dtype)
        b = BATCH_LAYOUTS[b_layout](rng, batch, k, n).astype(dtype)
        c = BATCH_LAYOUTS[c_layout](rng, batch, m, n).astype(dtype)
        c = np.lib.stride_tricks.as_strided(c, c.shape, c.strides)  # keep the layout
        c[...] = np.nan
        call_gemm(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=tolerance, atol=tolerance * np.sqrt(k))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_one_batch_call_gives_the_bits_of_one_product_at_a_time(dtype: str) -> None:
    """f64: the very bits; f32 with several OpenBLAS threads: its `sgemm_batch` rounds
    differently from `sgemm` (measured, OpenBLAS 0.3.31), but the same from call to call."""
    rng = np.random.default_rng(5)
    batch, m, k, n = BATCH_CHUNK + 4, 160, 80, 80  # two chunks of products past
    assert m * k * n > SMALL_MATRIX_MACS              # OpenBLAS's small-matrix sizes
    a = _interleaved(rng, batch, m, k).astype(dtype.replace("f", "float"))
    b = _transposed(rng, batch, k, n).astype(a.dtype)
    results = []
    gemm_batch = blas.find_blas().gemm_batch[dtype]
    for address in (None, gemm_batch, gemm_batch, None):
        _set_batch_entry(dtype, address)
        c = np.full((batch, m, n), np.nan, a.dtype)
        call_gemm(a, b, c, threads=2)
        results.append(c)
    tolerance = 1e-4 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(results[1], a @ b, rtol=tolerance, atol=tolerance)
    assert np.array_equal(results[1], results[2]) and np.array_equal(results[0], results[3])
    if dtype == "f64":
        assert np.array_equal(results[0], results[1])


def _contracted(source: str) -> object:
    """`f` of `source`, specialised to f64, after the contraction pass."""
    return contract_function(rv.compile(source, backend="interp").lowering
                             .specialise("f", "f64"))


@pytest.mark.parametrize("source", [BATCHED, INTERLEAVED], ids=["batched", "interleaved"])
def test_a_batched_contraction_is_one_matmul_at_every_level(use_blas: bool,
                                                            source: str) -> None:
    fn = _contracted(source)
    products = [s for s in compile_function(fn, "to_loops").walk() if isinstance(s, Matmul)]
    assert len(products) == 1 and len(products[0].out.shape) == 3
    rng = np.random.default_rng(2)
    if source is BATCHED:
        args = [rng.standard_normal((5, 7, 3)), rng.standard_normal((5, 4, 3))]
        want = np.einsum("imk,ink->imn", *args)
    else:
        args = [rng.standard_normal((9, 5, 4)), rng.standard_normal((5, 4, 4))]
        want = np.einsum("nki,kji->nkj", *args)
    for got in every_level(fn, args):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_batched_kernels_are_deterministic_across_calls_and_threads() -> None:
    rng = np.random.default_rng(9)
    x, q = rng.standard_normal((1000, 40, 32)), rng.standard_normal((40, 32, 32))
    module = rv.compile(INTERLEAVED)
    want = module.f(x, q)
    np.testing.assert_allclose(want, np.einsum("nki,kji->nkj", x, q), rtol=1e-12, atol=1e-12)
    failures: list[int] = []

    def work() -> None:
        failures.extend(i for i in range(3) if not np.array_equal(module.f(x, q), want))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def _program(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
             out_shape: tuple[int, ...]) -> Program:
    def buffer(name: str, shape: tuple[int, ...], role: str, index: int) -> Buffer:
        return Buffer(name, "f64", tuple(map(Dim.const, shape)), role, index)

    a, b = buffer("a", a_shape, "input", 0), buffer("b", b_shape, "input", 1)
    out = buffer("out0", out_shape, "output", 0)
    pack = buffer("pack", (MATMUL_PACK_ELEMENTS,), "temp", 0)
    return Program("f", [], [a, b], [out], [pack],
                   [Matmul(View.of(out), View.of(a), View.of(b), pack)], [])


def test_the_verifier_checks_batched_shapes() -> None:
    verify_program(_program((3, 4, 5), (3, 5, 2), (3, 4, 2)))
    with pytest.raises(LoopVerifyError, match=r"do not fit: \[3, 4, 5\] @ \[2, 5, 2\]"):
        verify_program(_program((3, 4, 5), (2, 5, 2), (3, 4, 2)))
    with pytest.raises(LoopVerifyError, match="matmul operand b has rank 2"):
        verify_program(_program((3, 4, 5), (5, 2), (3, 4, 2)))
