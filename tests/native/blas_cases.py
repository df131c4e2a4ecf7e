"""Calling the matrix-product helper directly, on operands fenced by inaccessible pages.

`call_gemm(a, b, c)` runs the loaded helper `rv_gemm_<dtype>` (as a kernel would: its
address from the helper table) on NumPy views of any strides, writing `c`: 2-D views, or
3-D ones for a batch of products (`runtime_library/gemm_batch.py`). `guarded(shape,
dtype, at_end)` returns an array whose first or last byte touches a PROT_NONE page, so a
read or write past the operand's elements kills the process (tests run such calls in a
subprocess). `LAYOUTS` names operand layouts: those BLAS can express and those it cannot.

Run as a script, it multiplies every layout with guarded operands, through the helper and
through compiled kernels, with BLAS on and off, and prints "ok".
"""

from __future__ import annotations

import ctypes
import functools
import mmap
from collections.abc import Callable

import numpy as np

import reverie as rv
from reverie.compiler.call_boundary.abi import HELPERS
from reverie.compiler.loops.ir import MATMUL_PACK_ELEMENTS
from reverie.runtime.native import native_kernel as native

I64, PTR = ctypes.c_int64, ctypes.c_void_p
# batch, M, N, K, then A, B, C each with its batch stride and two strides, pack, threads, pool
GEMM = ctypes.CFUNCTYPE(None, I64, I64, I64, I64, *[PTR, I64, I64, I64] * 3, PTR, I64, I64)
_PACK = np.empty(MATMUL_PACK_ELEMENTS, np.float64)
_PAGE = mmap.PAGESIZE
_LIBC = ctypes.CDLL(None, use_errno=True)
_MAPS: list[mmap.mmap] = []  # kept mapped for the process's life


def call_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int = 1) -> None:
    """c = a @ b through the helper kernels call (strides in elements, any sign)."""
    name = f"rv_gemm_{'f32' if c.dtype == np.float32 else 'f64'}"
    table = native.load_helpers(frozenset({name}))
    GEMM(int(table[HELPERS.index(name)]))(*gemm_arguments(a, b, c, threads))


def gemm_arguments(a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int = 1) -> list:
    """The helper's arguments for c = a @ b (2-D views: a batch of one; no worker pool)."""
    batch = c.shape[0] if c.ndim == 3 else 1
    *_, m, k = a.shape
    operands = []
    for view in (a, b, c):
        strides = [s // view.itemsize for s in view.strides]
        operands += [view.ctypes.data, *([0] * (3 - view.ndim)), *strides]
    return [batch, m, b.shape[-1], k, *operands, _PACK.ctypes.data, threads, 0]


def guarded(shape: tuple[int, ...], dtype: type, at_end: bool) -> np.ndarray:
    """A C-ordered array of random values between two PROT_NONE pages, touching the one
    after it (`at_end`) or the one before it."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = -(-nbytes // _PAGE) + 2
    memory = mmap.mmap(-1, pages * _PAGE)
    _MAPS.append(memory)
    start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    for page in (0, pages - 1):
        if _LIBC.mprotect(ctypes.c_void_p(start + page * _PAGE), _PAGE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = (pages - 1) * _PAGE - nbytes if at_end else _PAGE
    array = np.frombuffer(memory, dtype, int(np.prod(shape)), offset).reshape(shape)
    array[...] = np.random.default_rng(len(_MAPS)).standard_normal(shape)
    return array


def _plain(array: np.ndarray) -> np.ndarray:
    return array


def _transposed(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array.T).T


def _every_other(array: np.ndarray) -> np.ndarray:
    """Both strides non-unit: BLAS cannot express it."""
    wide = np.zeros((array.shape[0], 2 * array.shape[1]), array.dtype)
    wide[:, ::2] = array
    return wide[:, ::2]


def _reversed(array: np.ndarray) -> np.ndarray:
    """A negative row stride: BLAS cannot express it."""
    return np.ascontiguousarray(array[::-1])[::-1]


# how an operand is laid out, and whether BLAS can take that layout
LAYOUTS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], bool]] = {
    "plain": (_plain, True),
    "transposed": (_transposed, True),
    "strided": (_every_other, False),
    "reversed": (_reversed, False),
}

SOURCES = {
    "nn": "fn f(a: float[M, K], b: float[K, N]) -> float[M, N] { return a @ b; }",
    "tn": "fn f(a: float[K, M], b: float[K, N]) -> float[M, N] { return a.T @ b; }",
    "nt": "fn f(a: float[M, K], b: float[N, K]) -> float[M, N] { return a @ b.T; }",
    "tt": "fn f(a: float[K, M], b: float[N, K]) -> float[M, N] { return a.T @ b.T; }",
}


@functools.cache
def kernel(kind: str) -> Callable[..., np.ndarray]:
    """The compiled product of `SOURCES[kind]`."""
    return rv.compile(SOURCES[kind]).f


def _check_guarded(dtype: type, m: int, k: int, n: int) -> None:
    """Every helper layout and every kernel form on operands fenced at both ends."""
    for at_end in (False, True):
        for a_form in ("plain", "transposed"):
            for b_form in ("plain", "transposed"):
                a = guarded((m, k) if a_form == "plain" else (k, m), dtype, at_end)
                b = guarded((k, n) if b_form == "plain" else (n, k), dtype, at_end)
                a_view = a if a_form == "plain" else a.T
                b_view = b if b_form == "plain" else b.T
                for c_form in ("plain", "transposed"):
                    c = guarded((m, n) if c_form == "plain" else (n, m), dtype, at_end)
                    c_view = c if c_form == "plain" else c.T
                    call_gemm(a_view, b_view, c_view)
                    np.testing.assert_allclose(c_view, a_view @ b_view, rtol=1e-4, atol=1e-4)
                kind = ("n" if a_form == "plain" else "t") + ("n" if b_form == "plain" else "t")
                got = kernel(kind)(a, b)
                np.testing.assert_allclose(got, a_view @ b_view, rtol=1e-4, atol=1e-4)


def _guarded_batch(batch: int, rows: int, cols: int, transposed: bool, dtype: type,
                   at_end: bool) -> np.ndarray:
    """A fenced batch of `rows` x `cols` matrices, each row-major or each transposed."""
    if not transposed:
        return guarded((batch, rows, cols), dtype, at_end)
    return guarded((batch, cols, rows), dtype, at_end).transpose(0, 2, 1)


def _check_guarded_batch(dtype: type, batch: int, m: int, k: int, n: int) -> None:
    """Batched products (`gemm_batch.py`) of every BLAS layout on fenced operands."""
    for at_end in (False, True):
        for a_t in (False, True):
            for b_t in (False, True):
                a = _guarded_batch(batch, m, k, a_t, dtype, at_end)
                b = _guarded_batch(batch, k, n, b_t, dtype, at_end)
                for c_t in (False, True):
                    c = _guarded_batch(batch, m, n, c_t, dtype, at_end)
                    call_gemm(a, b, c)
                    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def main() -> None:
    for enabled in (True, False):
        native.use_blas(enabled)
        for dtype in (np.float32, np.float64):
            for m, k, n in ((37, 29, 10), (1, 17, 9), (8, 1, 5), (12, 40, 1), (64, 64, 64)):
                _check_guarded(dtype, m, k, n)
            for batch, m, k, n in ((3, 37, 29, 10), (5, 1, 17, 9), (2, 8, 1, 5),
                                   (2, 101, 100, 100)):  # the last: one ?gemm_batch call
                _check_guarded_batch(dtype, batch, m, k, n)
    print("ok")


if __name__ == "__main__":
    main()
