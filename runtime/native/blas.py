"""An optimised BLAS found at run time: the OpenBLAS that NumPy was built with.

`find_blas()` returns the `Blas` that kernels' matrix products call (through
`compiler/runtime_library/gemm_blas.py`), or None; nothing here imports SciPy or needs a compiler.
Where it looks, in order:

1. the libraries NumPy's wheels ship beside the package (`numpy.libs/` on Linux and
   Windows, `numpy/.dylibs/` on macOS) that this process has already loaded (`dlopen`
   with RTLD_NOLOAD): importing NumPy loaded the one its `_multiarray_umath` links, so
   this is the usual find, and needs no (slower) read of `/proc/self/maps`;
2. shared libraries already mapped into this process whose name contains "blas"
   (`/proc/self/maps`);
3. NumPy's bundled libraries, loaded now.

A library qualifies when it exports CBLAS `sgemm` and `dgemm` with 64-bit integers (ILP64)
under one of the names in GEMM_SYMBOLS: `scipy_cblas_?gemm64_` (the scipy-openblas of
NumPy 2.x wheels), `cblas_?gemm64_` (the openblas64_ of NumPy 1.22+ wheels). Libraries with
32-bit integers are not used (the own kernel serves them). Its `?gemm_batch` under the same
suffix (BATCH_SYMBOLS; OpenBLAS 0.3.29+), when present, runs a batch of products as one
call. Opening a library NumPy already loaded gives the same copy, so both share one thread
pool.

Threads: when `REVERIE_NUM_THREADS` is set, OpenBLAS is told to use that many
(`openblas_set_num_threads`), which NumPy's products then use as well; otherwise its own
default stands (`OPENBLAS_NUM_THREADS`, else the CPUs) and nothing about NumPy changes.
(`openblas_set_num_threads_local` is no per-thread setting: in OpenBLAS 0.3.31 it calls the
global setter.) Kernels' single products of moderate size run one-threaded in OpenBLAS, split
over Reverie's pool instead (`runtime_library/gemm_batch.py`), so NumPy's products keep OpenBLAS's
threads and kernels do not wait on them. OpenBLAS splits a product over the rows and columns
of C, never over the summed index, so at a fixed thread count the same inputs give bitwise
the same outputs.

`REVERIE_BLAS=0` (read by `blas_requested`) makes kernels use Reverie's own kernel.

`find_lapack(dtype)` gives the LAPACKE functions (and CBLAS `?trsm`) with 64-bit integers of
the same library, by the names of `abi.LAPACK_FUNCTIONS` (`scipy_LAPACKE_dpotrf64_`, or
`LAPACKE_dpotrf64_` in the openblas64_ flavour), that the linear-algebra helpers call
(`compiler/runtime_library/lapack.py`); `REVERIE_LAPACK=0` hands them none, so they run
their own loops (read when a helper is first loaded in a process).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterator

import numpy as np

from reverie.compiler.call_boundary.abi import LAPACK_FUNCTIONS

# (sgemm, dgemm, set-threads) symbol names, by library flavour
GEMM_SYMBOLS = (
    ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "scipy_openblas_set_num_threads64_"),
    ("cblas_sgemm64_", "cblas_dgemm64_", "openblas_set_num_threads64_"),
)

# (sgemm_batch, dgemm_batch) of the same flavours, in the same order
BATCH_SYMBOLS = (
    ("scipy_cblas_sgemm_batch64_", "scipy_cblas_dgemm_batch64_"),
    ("cblas_sgemm_batch64_", "cblas_dgemm_batch64_"),
)


class Blas:
    """A loaded BLAS: its file, the addresses of its `?gemm` by element type, and of its
    `?gemm_batch` (absent where the library has none). (A plain class, so that a warm start
    does not import `dataclasses`.)"""

    __slots__ = ("path", "gemm", "library", "gemm_batch")

    def __init__(self, path: str, gemm: dict[str, int], library: ctypes.CDLL,
                 gemm_batch: dict[str, int] | None = None) -> None:
        self.path = path
        self.gemm = gemm
        self.library = library  # kept so the library stays loaded
        self.gemm_batch = gemm_batch or {}


def blas_requested() -> bool:
    """False when `REVERIE_BLAS=0` asks for Reverie's own matrix kernel."""
    return os.environ.get("REVERIE_BLAS", "").strip() != "0"


def _mapped_libraries() -> list[str]:
    """Files of the BLAS-like shared libraries mapped into this process (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as file:
            maps = file.read()
    except OSError:
        return []
    # a process maps hundreds of files, and a warm start reads this: only the few lines
    # naming "blas" anywhere are split (os.path, not pathlib)
    paths = (line.split(maxsplit=5)[-1] for line in maps.splitlines()
             if "blas" in line.lower() and line.count(" ") >= 5)
    return list(dict.fromkeys(p for p in paths if p.startswith("/") and
                              "blas" in os.path.basename(p).lower()))


def _bundled_libraries() -> list[str]:
    """BLAS libraries shipped inside NumPy's wheel."""
    package = os.path.dirname(np.__file__)  # (os.path, not pathlib: on every warm start)
    folders = (os.path.join(os.path.dirname(package), "numpy.libs"),
               os.path.join(package, ".dylibs"))
    return [os.path.join(folder, name) for folder in folders if os.path.isdir(folder)
            for name in sorted(os.listdir(folder)) if "blas" in name.lower()]


def _is_loaded(path: str) -> bool:
    """Whether the library at `path` is loaded in this process already."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def _candidates() -> Iterator[str]:
    """The libraries to try, in the order of the module docstring (each step only when
    the ones before found nothing)."""
    bundled = _bundled_libraries()
    yield from filter(_is_loaded, bundled)
    yield from _mapped_libraries()
    yield from bundled


def _open(path: str) -> Blas | None:
    """The library at `path` as a `Blas`, or None when it lacks ILP64 `?gemm`."""
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return None
    for (sgemm, dgemm, set_threads), batch in zip(GEMM_SYMBOLS, BATCH_SYMBOLS, strict=True):
        if hasattr(library, sgemm) and hasattr(library, dgemm):
            _follow_thread_setting(library, set_threads)
            return Blas(path, _addresses(library, (sgemm, dgemm)), library,
                        _addresses(library, batch))
    return None


def _addresses(library: ctypes.CDLL, names: tuple[str, str]) -> dict[str, int]:
    """The addresses of the f32 and f64 functions `names` (0 for one the library lacks)."""
    return {dtype: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            if hasattr(library, name) else 0
            for dtype, name in zip(("f32", "f64"), names, strict=True)}


def _follow_thread_setting(library: ctypes.CDLL, set_threads: str) -> None:
    """Give OpenBLAS `REVERIE_NUM_THREADS` threads, when that is set."""
    requested = os.environ.get("REVERIE_NUM_THREADS", "").strip()
    if requested.isdigit() and int(requested) > 0 and hasattr(library, set_threads):
        setter = getattr(library, set_threads)
        setter.argtypes, setter.restype = [ctypes.c_int], None
        setter(int(requested))


def lapack_symbol(flavour: str, function: str, dtype: str) -> str:
    """The exported name of LAPACKE's (CBLAS's, for trsm) `function` for `dtype`."""
    letter = "s" if dtype == "f32" else "d"
    family = "cblas" if function == "trsm" else "LAPACKE"
    return f"{flavour}{family}_{letter}{function}64_"


def find_lapack(dtype: str) -> dict[str, int]:
    """The addresses of the LAPACK functions the linear-algebra helpers call, by their
    name in `abi.LAPACK_FUNCTIONS`, from the BLAS `find_blas` found (empty: none, or
    `REVERIE_LAPACK=0`)."""
    library = find_blas()
    if library is None or os.environ.get("REVERIE_LAPACK", "").strip() == "0":
        return {}
    flavour = "scipy_" if hasattr(library.library, "scipy_cblas_dgemm64_") else ""
    found = {}
    for function in {f for functions in LAPACK_FUNCTIONS.values() for f in functions}:
        symbol = lapack_symbol(flavour, function, dtype)
        if hasattr(library.library, symbol):
            found[function] = ctypes.cast(getattr(library.library, symbol),
                                          ctypes.c_void_p).value
    return found


@functools.cache
def find_blas() -> Blas | None:
    """The BLAS kernels call (see the module docstring), or None when there is none."""
    for path in _candidates():
        found = _open(path)
        if found is not None:
            return found
    return None
