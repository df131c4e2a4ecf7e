"""Calling the sort helper directly, on lines fenced by inaccessible pages.

`call_sort(keys, out, descending)` runs the loaded helper `rv_argsort` (as a kernel would:
its address from the helper table) on a 1-D NumPy view of any stride, writing the i64
permutation into the 1-D view `out`, with a scratch of exactly 4·n i64 that touches a
PROT_NONE page (`blas_cases.guarded`) at its end. `reference(keys, descending)` is
torch.sort(stable=True)'s permutation.

Run as a script, it sorts lines of every key dtype and of lengths around the insertion
runs (16) and the merge widths, with keys, output and scratch fenced at either end, read
forwards, every other element and backwards, and prints "ok": a stray access kills the
process.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch
from blas_cases import guarded

from reverie.compiler.call_boundary.abi import HELPERS, SORT_DTYPES
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.loops.ir import SORT_SCRATCH_PER_KEY
from reverie.runtime.native import native_kernel as native

I64, PTR = ctypes.c_int64, ctypes.c_void_p
SORT = ctypes.CFUNCTYPE(None, I64, PTR, I64, I64, I64, PTR, I64, PTR)
DTYPE_NAMES = {np.dtype(NUMPY_DTYPES[name]): name for name in SORT_DTYPES}
LENGTHS = (0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000)


def call_sort(keys: np.ndarray, out: np.ndarray, descending: bool,
              scratch: np.ndarray | None = None) -> None:
    """out = the stable sorting permutation of `keys` (strides in elements, any sign)."""
    table = native.load_helpers(frozenset({"rv_argsort"}))
    sort = SORT(int(table[HELPERS.index("rv_argsort")]))
    (n,) = keys.shape
    if scratch is None:
        scratch = np.empty(SORT_SCRATCH_PER_KEY * n, np.int64)
    assert scratch.size == SORT_SCRATCH_PER_KEY * n and out.dtype == np.int64
    sort(n, keys.ctypes.data, keys.strides[0] // keys.itemsize,
         SORT_DTYPES.index(DTYPE_NAMES[keys.dtype]), int(descending),
         out.ctypes.data, out.strides[0] // out.itemsize, scratch.ctypes.data)


def reference(keys: np.ndarray, descending: bool) -> np.ndarray:
    """torch.sort(stable=True)'s permutation of `keys`."""
    return torch.sort(torch.from_numpy(keys.copy()), descending=descending,
                      stable=True).indices.numpy()


def tied_values(n: int, dtype: type, rng: np.random.Generator) -> np.ndarray:
    """n values with many ties; floats also hold NaN, ±0.0 and ±inf."""
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, -1, 0, 1, 2, 7], dtype)
    else:
        pool = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.5, -1.5, 3.0,
                         np.finfo(dtype).tiny, -np.finfo(dtype).max], dtype)
    return rng.choice(pool, n)


def _views(n: int, dtype: type, at_end: bool, rng: np.random.Generator) -> list[np.ndarray]:
    """The same kind of line read forwards, every other element, and backwards."""
    plain = guarded((n,), dtype, at_end)
    plain[...] = tied_values(n, dtype, rng)
    wide = guarded((2 * n,), dtype, at_end)
    wide[...] = tied_values(2 * n, dtype, rng)
    return [plain, wide[::2] if at_end else wide[1::2], plain[::-1]]


def main() -> None:
    rng = np.random.default_rng(0)
    for name in SORT_DTYPES:
        dtype = NUMPY_DTYPES[name]
        for n in LENGTHS:
            for at_end in (False, True):
                for keys in _views(n, dtype, at_end, rng):
                    for descending in (False, True):
                        out = guarded((n,), np.int64, at_end)
                        scratch = guarded((SORT_SCRATCH_PER_KEY * n,), np.int64, at_end)
                        call_sort(keys, out, descending, scratch)
                        np.testing.assert_array_equal(out, reference(keys, descending))
                        reversed_out = guarded((2 * n,), np.int64, at_end)[::-2]
                        call_sort(keys, reversed_out, descending, scratch)
                        np.testing.assert_array_equal(reversed_out, out)
    print("ok")


if __name__ == "__main__":
    main()
