"""Where the W5 Hessian-vector product's time goes: the HVP against kernels of the same
memory traffic, and the HVP ÷ forward ratio by size.

    cd benchmarks && python -m workloads.w5_profile [--rounds 20] [--n 1000000]
    cd benchmarks && python -m workloads.w5_profile --sizes

Pieces, timed in interleaved rounds (each round times 10 calls of every piece in turn, as
`run.py` takes its samples, so a change in the machine's load falls on all of them alike and
each piece's data is as warm as in the benchmark), CPU time (`time.process_time`), wall time
and minor page faults per call:

- `hvp`, `forward`: the Reverie calls `run.py` times (the HVP reads x and v, 16 MB at the
  reference size, and writes a fresh 8 MB output; the forward reads x);
- `x * v`: a Reverie kernel with the HVP's traffic (two inputs read, a fresh output written)
  and one multiply per element;
- `numpy x * v, out`: the same traffic into an output reused from call to call;
- `sum(x * x)`: a Reverie kernel with the forward's traffic (x read once);
- `numpy`: the hand-written NumPy HVP.

`--sizes` prints the HVP's and the forward's CPU time per element from 125k to 4M elements:
the ratio rises where the HVP's three arrays stop fitting the cache the process gets.
Thread counts are the process's: run it with `REVERIE_NUM_THREADS=1` and without.
benchmarks/README.md ("W1 and W5 (issue 11)", seventh session) has the figures.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import numpy as np

import reverie as rv

from .w5_rosenbrock_hvp import SOURCE, numpy_hvp

STREAMS = """
fn stream(x: f64[N], v: f64[N]) -> f64[N] { return x * v; }
fn read(x: f64[N]) -> f64 { return sum(x * x); }
"""
SIZES = (125_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000)


def pieces(n: int) -> dict[str, Callable[[], object]]:
    """Every piece of the module docstring on f64[n] inputs, each called once already."""
    rng = np.random.default_rng(5)
    x, v = rng.standard_normal(n), rng.standard_normal(n)
    module = rv.compile(SOURCE + STREAMS)
    hvp = module.w5.hvp("x")
    reused = np.empty(n)
    built = {
        "hvp": lambda: hvp(x, v),
        "forward": lambda: module.w5(x),
        "x * v": lambda: module.stream(x, v),
        "numpy x * v, out": lambda: np.multiply(x, v, out=reused),
        "sum(x * x)": lambda: module.read(x),
        "numpy": lambda: numpy_hvp(x, v),
    }
    for call in built.values():
        call()
    return built


def minor_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def profile(built: dict[str, Callable[[], object]], rounds: int,
            calls: int = 10) -> dict[str, np.ndarray]:
    """Per piece, [rounds, 3]: CPU seconds, wall seconds and minor page faults per call,
    averaged over each round's `calls` consecutive calls."""
    times = {name: np.empty((rounds, 3)) for name in built}
    for r in range(rounds):
        for name, call in built.items():
            faults, cpu, wall = minor_faults(), time.process_time(), time.perf_counter()
            for _ in range(calls):
                call()
            times[name][r] = np.array([time.process_time() - cpu, time.perf_counter() - wall,
                                       minor_faults() - faults]) / calls
    return times


def per_element(sizes: tuple[int, ...], rounds: int) -> list[tuple[int, float, float]]:
    """(n, HVP ns, forward ns) per element: the least CPU time of `rounds` rounds of calls
    adding up to ~2M elements, HVP and forward interleaved."""
    rows = []
    for n in sizes:
        built = pieces(n)
        calls = max(1, 2_000_000 // n)
        best = {"hvp": np.inf, "forward": np.inf}
        for _ in range(rounds):
            for name in best:
                cpu = time.process_time()
                for _ in range(calls):
                    built[name]()
                best[name] = min(best[name], (time.process_time() - cpu) / calls)
        rows.append((n, best["hvp"] / n * 1e9, best["forward"] / n * 1e9))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--n", type=int, default=1_000_000, help="elements of x and v")
    parser.add_argument("--sizes", action="store_true",
                        help="the HVP and forward per element by size instead")
    options = parser.parse_args()
    if options.sizes:
        print(f"{'n':>9s} {'hvp ns/el':>10s} {'forward ns/el':>14s} {'ratio':>6s}  (CPU, least)")
        for n, hvp, forward in per_element(SIZES, min(options.rounds, 15)):
            print(f"{n:9d} {hvp:10.2f} {forward:14.2f} {hvp / forward:6.1f}")
        return
    print(f"{'piece':17s} {'cpu median':>10s} {'cpu min':>8s} {'wall median':>11s} "
          f"{'wall min':>8s} (ms) {'faults/call':>11s}")
    for name, seconds in profile(pieces(options.n), options.rounds).items():
        (cpu, wall, faults), (cpu_min, wall_min, _) = np.median(seconds, 0), seconds.min(0)
        print(f"{name:17s} {cpu * 1e3:10.3f} {cpu_min * 1e3:8.3f} {wall * 1e3:11.3f} "
              f"{wall_min * 1e3:8.3f}      {faults:11.0f}")


if __name__ == "__main__":
    main()
