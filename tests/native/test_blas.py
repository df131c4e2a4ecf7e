"""Matrix products through NumPy's OpenBLAS and through the own kernel.

`runtime/native/blas.py` finds the BLAS; `compiler/runtime_library/gemm_blas.py` calls it
for layouts it can express and the own kernel otherwise. Both paths must give NumPy's
results on every layout, the BLAS path NumPy's very bits (it makes the same call), neither
may touch memory outside the operands (guard pages, in a subprocess), and results must not
vary from call to call or between threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from blas_cases import LAYOUTS, call_gemm, kernel

from reverie.runtime.native import blas
from reverie.runtime.native import native_kernel as native

HERE = Path(__file__).resolve().parent
SHAPES = [(37, 29, 10), (64, 300, 48), (1, 17, 9), (8, 1, 5), (12, 40, 1), (5, 5, 5)]


@pytest.fixture(params=[True, False], ids=["blas", "own"])
def use_blas(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run the test with BLAS enabled, then with the own kernel only."""
    previous = native.use_blas(request.param)
    yield request.param
    native.use_blas(previous)


def _run(script: list[str], tmp_path: Path, **env: str) -> str:
    done = subprocess.run([sys.executable, *script], capture_output=True, text=True,
                          timeout=600, check=False, cwd=HERE,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_numpys_ilp64_openblas_is_found() -> None:
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    name, details = config.get("name", ""), config.get("openblas configuration", "")
    if "openblas" in name and ("64" in name or "USE64BITINT" in details):
        found = blas.find_blas()
        assert found is not None and "blas" in Path(found.path).name
        assert set(found.gemm) == {"f32", "f64"} and all(found.gemm.values())


def test_the_first_library_tried_is_one_this_process_has_mapped() -> None:
    first = next(blas._candidates(), None)  # NumPy's bundled one, found without the maps
    mapped = blas._mapped_libraries()
    assert (first is None) == (not mapped) and (first is None or first in mapped)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_layout", list(LAYOUTS))
@pytest.mark.parametrize("b_layout", list(LAYOUTS))
@pytest.mark.parametrize("c_transposed", [False, True], ids=["c", "c.T"])
def test_every_layout_gives_numpys_product(use_blas: bool, dtype: type, a_layout: str,
                                           b_layout: str, c_transposed: bool) -> None:
    rng = np.random.default_rng(7)
    (a_form, a_blas), (b_form, b_blas) = LAYOUTS[a_layout], LAYOUTS[b_layout]
    tolerance = 2e-5 if dtype == np.float32 else 1e-12
    for m, k, n in SHAPES:
        a = a_form(rng.standard_normal((m, k)).astype(dtype))
        b = b_form(rng.standard_normal((k, n)).astype(dtype))
        c = np.full((n, m), np.nan, dtype).T if c_transposed else np.full((m, n), np.nan, dtype)
        call_gemm(a, b, c, threads=2)
        want = a @ b
        np.testing.assert_allclose(c, want, rtol=tolerance, atol=tolerance * np.sqrt(k))
        if use_blas and a_blas and b_blas and not c_transposed and min(m, n) > 1:
            assert np.array_equal(c, want), "the BLAS path should make NumPy's own call"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_products(use_blas: bool, dtype: type) -> None:
    c = np.full((3, 4), np.nan, dtype)
    call_gemm(np.ones((3, 0), dtype), np.ones((0, 4), dtype), c)
    assert np.array_equal(c, np.zeros((3, 4), dtype))
    call_gemm(np.ones((0, 5), dtype), np.ones((5, 4), dtype), np.empty((0, 4), dtype))


def test_kernels_are_deterministic_across_calls_and_threads(use_blas: bool) -> None:
    rng = np.random.default_rng(3)
    cases = [(kind, dtype, rng.standard_normal(a).astype(dtype),
              rng.standard_normal(b).astype(dtype))
             for dtype in (np.float32, np.float64)
             for kind, a, b in (("tn", (1024, 256), (1024, 512)), ("nn", (512, 700), (700, 10)),
                                ("nt", (300, 10), (512, 10)))]
    reference = [kernel(kind)(a, b) for kind, _, a, b in cases]
    failures: list[str] = []

    def work() -> None:
        for _ in range(2):
            for (kind, dtype, a, b), want in zip(cases, reference, strict=True):
                if not np.array_equal(kernel(kind)(a.copy(), b.copy()), want):
                    failures.append(f"{kind} {np.dtype(dtype).name}")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_no_access_outside_guarded_operands(tmp_path: Path) -> None:
    """Every layout, both paths, operands touching PROT_NONE pages (a stray access kills
    the subprocess)."""
    assert _run(["blas_cases.py"], tmp_path).split() == ["ok"]


SETTINGS_SCRIPT = """
import numpy as np
from blas_cases import kernel
from reverie.runtime.native import blas
from reverie.runtime.native import native_kernel as native
a = np.arange(12.0).reshape(3, 4)
np.testing.assert_allclose(kernel("nn")(a, a.T), a @ a.T)
print(native.use_blas(True))
library = blas.find_blas().library
getters = [name for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_")
           if hasattr(library, name)]
print(getattr(library, getters[0])())
"""


def test_reverie_blas_0_forces_the_own_kernel(tmp_path: Path) -> None:
    out = _run(["-c", SETTINGS_SCRIPT], tmp_path, REVERIE_BLAS="0", REVERIE_NUM_THREADS="3")
    assert out.split() == ["False", "3"]
    out = _run(["-c", SETTINGS_SCRIPT], tmp_path, REVERIE_BLAS="1", REVERIE_NUM_THREADS="1")
    assert out.split() == ["True", "1"]
