"""A kernel's matrix product runs OpenBLAS on the calling thread only, and leaves NumPy's
products their OpenBLAS threads (issue 31: kernels beside other work).

`runtime_library/gemm_batch.py` splits a single product of moderate size over Reverie's pool, each
slab a batch of one of `?gemm_batch`, which OpenBLAS runs on the calling thread (here one
thread and no pool: one slab); `?gemm` would split it over OpenBLAS's threads, which stall
when one of them is descheduled. The check runs in a subprocess with
`OPENBLAS_NUM_THREADS=2` (so it can fail on any machine) and compares the CPU time of the
calling thread with that of the whole process: OpenBLAS's other threads must do none of a
kernel's work, and still half of NumPy's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPT = """
import ctypes, json, time
import numpy as np
from blas_cases import call_gemm
from reverie.runtime.native.blas import find_blas

def others_share(work):
    '''CPU time of the process's other threads over that of this one, during work().'''
    time.sleep(0.5)  # OpenBLAS's threads stop spinning after a call
    process, thread = time.process_time(), time.thread_time()
    work()
    own = time.thread_time() - thread
    return (time.process_time() - process - own) / own

rng = np.random.default_rng(0)
shares = {}
for dtype in (np.float32, np.float64):
    a = rng.standard_normal((1024, 256)).astype(dtype)
    b = rng.standard_normal((256, 512)).astype(dtype)
    c = np.empty((1024, 512), dtype)
    call_gemm(a, b, c)
    shares[np.dtype(dtype).name] = others_share(lambda: [call_gemm(a, b, c) for _ in range(20)])
    shares["numpy " + np.dtype(dtype).name] = others_share(lambda: [a @ b for _ in range(20)])
    shares["equal " + np.dtype(dtype).name] = bool(np.array_equal(c, a @ b))
library = find_blas().library
shares["openblas threads"] = library.scipy_openblas_get_num_threads64_()
print(json.dumps(shares))
"""


def _measure() -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600, check=False, cwd=HERE,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_kernel_products_stay_on_the_calling_thread_and_numpys_keep_their_threads() -> None:
    shares = _measure()
    assert shares["openblas threads"] == 2, "a kernel call changed OpenBLAS's thread count"
    for dtype in ("float32", "float64"):
        assert shares[dtype] < 0.2, f"{dtype}: OpenBLAS's other threads did kernel work"
        assert shares[f"numpy {dtype}"] > 0.5, f"{dtype}: NumPy's product lost its threads"
    assert shares["equal float64"], "f64: the product should keep NumPy's bits"


EDGE_SLABS = """
import numpy as np
import reverie as rv
f = rv.compile("fn f(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a @ b; }").f
rng = np.random.default_rng(0)
for m, k, n in [(200, 200, 200), (130, 410, 260), (330, 101, 330), (1000, 300, 500)]:
    a, b = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-12, atol=1e-12)
print("ok")
"""


def test_a_split_product_with_small_edge_slabs_is_right() -> None:
    """A product cut into slabs of 64-row multiples leaves a small slab at its edge (200
    rows: 64, 64, 64, 8), which must not reach OpenBLAS's small-matrix path of
    `?gemm_batch` (a segfault before; with one thread too, hence a subprocess each)."""
    for threads in ("1", "2"):
        env = {**os.environ, "REVERIE_NUM_THREADS": threads}
        done = subprocess.run([sys.executable, "-c", EDGE_SLABS], capture_output=True,
                              text=True, timeout=300, env=env)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
