"""Where the W2 gradient's time goes: the gradient, its forward, and each of its pieces alone.

    cd benchmarks && python -m workloads.w2_profile [--rounds 300] [--tiny]

Pieces, timed in interleaved rounds (each round times every piece once, so a change in the
machine's load falls on all of them alike), CPU time (`time.process_time`) and wall time:

- `gradient`, `forward`: the Reverie calls `run.py` times;
- `X @ W`, `X^T @ G`: the gradient's two products as the very `?gemm` calls its kernel makes
  (`runtime/native/blas.py`'s library, row-major, the same transposes and leading dimensions), so
  they time BLAS alone, without Reverie's call;
- `softmax part`: a Reverie gradient of the same loss with respect to the logits (every
  loop nest of the W2 gradient except the products);
- `read X`: one pass over X (`X.sum(axis=0)`), the memory bound of a product that reads X
  in place;
- `numpy`: the hand-written NumPy gradient.

The thread counts are the process's: run it once with `OPENBLAS_NUM_THREADS=1
REVERIE_NUM_THREADS=1` and once without. For the split inside OpenBLAS (packing against
its kernel against its threads' hand-offs) use `perf record` on a loop of gradient calls;
benchmarks/README.md ("Where Reverie is slower", W2) has both profiles.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable

import numpy as np

import reverie as rv
from reverie.runtime.native.blas import find_blas

from .w2_softmax_xent import arguments, make

LOGITS_SOURCE = """
fn xent(L: f32[N, C], b: f32[C], labels: i64[N]) -> f32 {
    let lp = log_softmax(L + b, axis=1);
    let picked[n] = lp[n, labels[n]];
    return -mean(picked);
}
"""
# CBLAS enum values (as compiler/runtime_library/gemm_blas.py)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SGEMM = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float,
                         ctypes.c_void_p, ctypes.c_int64)


def products(X: np.ndarray, W: np.ndarray, G: np.ndarray) -> dict[str, Callable[[], np.ndarray]]:
    """`X @ W` and `X^T @ G` through the BLAS kernels call (empty when none was found)."""
    blas = find_blas()
    if blas is None:
        return {}
    sgemm = SGEMM(blas.gemm["f32"])
    (n, d), c = X.shape, W.shape[1]
    logits, dW = np.empty((n, c), np.float32), np.empty((d, c), np.float32)

    def forward() -> np.ndarray:
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, c, d, 1.0, X.ctypes.data, d, W.ctypes.data, c,
              0.0, logits.ctypes.data, c)
        return logits

    def backward() -> np.ndarray:
        sgemm(ROW_MAJOR, TRANS, NO_TRANS, d, c, n, 1.0, X.ctypes.data, d, G.ctypes.data, c,
              0.0, dW.ctypes.data, c)
        return dW

    return {"X @ W": forward, "X^T @ G": backward}


def pieces(tiny: bool = False) -> dict[str, Callable[[], object]]:
    """Every piece of the module docstring, each called once already (compiled, warm)."""
    X, W, b, labels = arguments(tiny)
    G = np.random.default_rng(0).standard_normal((X.shape[0], W.shape[1])).astype(np.float32)
    workload = make(tiny)
    softmax = rv.compile(LOGITS_SOURCE).xent.grad(("L", "b"))
    logits = X @ W
    built = {
        "gradient": workload.of_peer("reverie")[0].build(),
        "forward": workload.forward(),
        **products(X, W, G),
        "softmax part": lambda: softmax(logits, b, labels),
        "read X": lambda: X.sum(axis=0),
        "numpy": workload.of_peer("numpy")[0].build(),
    }
    for call in built.values():
        call()
    return built


def profile(built: dict[str, Callable[[], object]], rounds: int) -> dict[str, np.ndarray]:
    """Per piece, [rounds, 2] seconds: CPU time and wall time of each call."""
    times = {name: np.empty((rounds, 2)) for name in built}
    for r in range(rounds):
        for name, call in built.items():
            cpu, wall = time.process_time(), time.perf_counter()
            call()
            times[name][r] = time.process_time() - cpu, time.perf_counter() - wall
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--tiny", action="store_true", help="the tests' size (N=64, D=16, C=5)")
    options = parser.parse_args()
    print(f"{'piece':14s} {'cpu median':>10s} {'cpu min':>8s} {'wall median':>11s} "
          f"{'wall min':>8s}  (ms)")
    for name, seconds in profile(pieces(options.tiny), options.rounds).items():
        (cpu, wall), (cpu_min, wall_min) = np.median(seconds, 0) * 1e3, seconds.min(0) * 1e3
        print(f"{name:14s} {cpu:10.3f} {cpu_min:8.3f} {wall:11.3f} {wall_min:8.3f}")


if __name__ == "__main__":
    main()
