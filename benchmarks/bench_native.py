"""Native kernels against NumPy: W1's forward pass and square matrix products.

    python benchmarks/bench_native.py [--repeat 9]

Prints median times and the ratio native / NumPy (below 1 means Reverie is faster):
- W1: `sum(tanh(x) * sin(x) + exp(-x * x))` over 10M f32 (one fused, vectorised loop);
- matmul 256, 512 and 1024 squared in f32 and f64 (NumPy calls OpenBLAS; both split large
  products over the CPUs, Reverie up to `REVERIE_NUM_THREADS`);
- the per-call overhead of a tiny kernel (`sum(x * x)` over 16 f64), in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import reverie as rv
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import NativeKernel

SOURCE = """
fn w1(x: float[N]) -> float { return sum(tanh(x) * sin(x) + exp(-x * x)); }
fn matmul(a: float[M, K], b: float[K, N]) -> float[M, N] { return a @ b; }
fn tiny(x: f64[N]) -> f64 { return sum(x * x); }
"""


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `fn` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def native_call(module: rv.Module, name: str, dtype: str, *args: object) -> Callable[[], object]:
    """A zero-argument callable running the compiled kernel on pre-bound arguments."""
    fn = module.lowering.specialise(name, dtype)
    kernel = NativeKernel(fn)
    bound = bind_arguments(fn, args)
    return lambda: kernel(bound)


def report(label: str, native: float, numpy: float, unit: str = "ms") -> None:
    scale = 1e3 if unit == "ms" else 1e6
    print(f"{label:<28} native {native * scale:9.3f} {unit}   numpy {numpy * scale:9.3f} {unit}"
          f"   ratio {native / numpy:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    repeat = parser.parse_args().repeat
    module = rv.compile(SOURCE)
    rng = np.random.default_rng(0)

    x = rng.standard_normal(10_000_000).astype(np.float32)
    report("W1 forward, 10M f32",
           median_seconds(native_call(module, "w1", "f32", x), repeat),
           median_seconds(lambda: np.sum(np.tanh(x) * np.sin(x) + np.exp(-x * x)), repeat))

    for dtype, np_dtype in (("f32", np.float32), ("f64", np.float64)):
        for n in (256, 512, 1024):
            a = rng.standard_normal((n, n)).astype(np_dtype)
            b = rng.standard_normal((n, n)).astype(np_dtype)
            native = median_seconds(native_call(module, "matmul", dtype, a, b), repeat)
            numpy = median_seconds(lambda a=a, b=b: a @ b, repeat)
            report(f"matmul {n}x{n} {dtype} ({2 * n**3 / native / 1e9:.0f} GFLOP/s)",
                   native, numpy)

    small = rng.standard_normal(16)
    calls = 2000
    native_tiny = native_call(module, "tiny", "f64", small)
    report("call overhead, 16 f64 (per call)",
           median_seconds(lambda: [native_tiny() for _ in range(calls)], repeat) / calls,
           median_seconds(lambda: [np.sum(small * small) for _ in range(calls)], repeat) / calls,
           unit="us")


if __name__ == "__main__":
    main()
