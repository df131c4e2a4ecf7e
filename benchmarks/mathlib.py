"""The built-in elementwise functions against NumPy, one thread, 10^6 elements.

    python benchmarks/mathlib.py [--rounds 5] [--samples 9] [--size 1000000] [--only sin,cos]

For every built-in of docs/mathlib.md that the language has (polygamma is internal) and
both float types: a Reverie kernel `fn f(x: T[N]) -> T[N] { return name(x); }` (two
arguments for pow) against the NumPy expression (SciPy's where NumPy has none: erf,
lgamma, digamma, sigmoid). Each round is a process of its own with `REVERIE_NUM_THREADS=1`;
inside it, after a warm-up call of each, Reverie and NumPy calls alternate and each side
reports the median of its samples. The table gives the median over rounds (ms), the ratio
Reverie / NumPy and the range of the round medians. Both sides allocate their result.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import special

DTYPES = {"f32": np.float32, "f64": np.float64}
POSITIVE = (0.05, 50.0)
Reference = Callable[[np.ndarray, np.ndarray], np.ndarray]
# name: (NumPy or SciPy of (x, y), range of x); pow's second argument y is in (-3, 3)
FUNCTIONS: dict[str, tuple[Reference, tuple[float, float]]] = {
    "exp": (lambda x, y: np.exp(x), (-10.0, 10.0)),
    "expm1": (lambda x, y: np.expm1(x), (-10.0, 10.0)),
    "log": (lambda x, y: np.log(x), POSITIVE),
    "log1p": (lambda x, y: np.log1p(x), POSITIVE),
    "tanh": (lambda x, y: np.tanh(x), (-10.0, 10.0)),
    "pow": (lambda x, y: np.power(x, y), POSITIVE),
    "sigmoid": (lambda x, y: special.expit(x), (-10.0, 10.0)),
    "softplus": (lambda x, y: np.logaddexp(0, x), (-10.0, 10.0)),
    "erf": (lambda x, y: special.erf(x), (-5.0, 5.0)),
    "lgamma": (lambda x, y: special.gammaln(x), POSITIVE),
    "digamma": (lambda x, y: special.digamma(x), POSITIVE),
    "sin": (lambda x, y: np.sin(x), (-10.0, 10.0)),
    "cos": (lambda x, y: np.cos(x), (-10.0, 10.0)),
    "tan": (lambda x, y: np.tan(x), (-10.0, 10.0)),
    "sqrt": (lambda x, y: np.sqrt(x), POSITIVE),
    "floor": (lambda x, y: np.floor(x), (-10.0, 10.0)),
    "ceil": (lambda x, y: np.ceil(x), (-10.0, 10.0)),
    "abs": (lambda x, y: np.abs(x), (-10.0, 10.0)),
}


def pair(name: str, dtype: str, size: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """(Reverie's call, NumPy's call) of `name` on `size` random elements of `dtype`."""
    import reverie as rv

    reference, (lo, hi) = FUNCTIONS[name]
    rng = np.random.default_rng(0)
    x = rng.uniform(lo, hi, size).astype(DTYPES[dtype])
    y = rng.uniform(-3.0, 3.0, size).astype(DTYPES[dtype])
    if name == "pow":
        kernel = rv.compile(f"fn f(x: {dtype}[N], y: {dtype}[N]) -> {dtype}[N] "
                            "{ return pow(x, y); }").f
        ours = functools.partial(kernel, x, y)
    else:
        kernel = rv.compile(f"fn f(x: {dtype}[N]) -> {dtype}[N] {{ return {name}(x); }}").f
        ours = functools.partial(kernel, x)
    return ours, functools.partial(reference, x, y)


def alternate(ours: Callable[[], object], theirs: Callable[[], object],
              samples: int) -> tuple[float, float]:
    """Median seconds of `ours` and of `theirs`, called alternately after a warm-up."""
    times: tuple[list[float], list[float]] = ([], [])
    for call in (ours, theirs):
        call()
    for _ in range(samples):
        for call, record in zip((ours, theirs), times, strict=True):
            start = time.perf_counter()
            call()
            record.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def one_round(names: list[str], samples: int, size: int) -> dict[str, list[float]]:
    """{"name dtype": [Reverie ms, NumPy ms]} for every function and dtype, in this process."""
    results = {}
    for name in names:
        for dtype in DTYPES:
            ours, theirs = alternate(*pair(name, dtype, size), samples)
            results[f"{name} {dtype}"] = [ours * 1e3, theirs * 1e3]
    return results


def host_cpu() -> str:
    """The CPU's model name (Linux; else the platform's), LLVM's name for it and its widest
    x86 vector extension."""
    import llvmlite.binding as llvm

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), platform.processor() or platform.machine())
    widest = "AVX-512" if " avx512f" in text else "AVX2" if " avx2" in text else "no AVX"
    return f"{model} (LLVM: {llvm.get_host_cpu_name()}), {widest}"


def run_rounds(names: list[str], rounds: int, samples: int, size: int) -> list[dict]:
    """Each round's results, every round a fresh process with one Reverie thread."""
    environment = dict(os.environ, REVERIE_NUM_THREADS="1", OMP_NUM_THREADS="1",
                       OPENBLAS_NUM_THREADS="1")
    command = [sys.executable, __file__, "--child", "--samples", str(samples),
               "--size", str(size), "--only", ",".join(names)]
    results = []
    for number in range(rounds):
        output = subprocess.run(command, env=environment, capture_output=True, text=True,
                                check=True).stdout
        results.append(json.loads(output))
        print(f"round {number + 1}/{rounds} done", file=sys.stderr)
    return results


def table(rounds: list[dict]) -> str:
    """The markdown table: medians over rounds, ratio, range of the round medians."""
    lines = ["| function | dtype | Reverie (ms) | NumPy (ms) | Reverie / NumPy "
             "| round medians (Reverie / NumPy) |", "|---|---|---|---|---|---|"]
    for key in rounds[0]:
        ours, theirs = ([r[key][side] for r in rounds] for side in (0, 1))
        name, dtype = key.split()
        spread = (f"{min(ours):.2f}–{max(ours):.2f} / {min(theirs):.2f}–{max(theirs):.2f}")
        lines.append(f"| {name} | {dtype} | {statistics.median(ours):.2f} "
                     f"| {statistics.median(theirs):.2f} "
                     f"| {statistics.median(ours) / statistics.median(theirs):.2f} | {spread} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--only", default=",".join(FUNCTIONS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.only.split(",")
    unknown = sorted(set(names) - set(FUNCTIONS))
    if unknown:
        parser.error(f"--only: unknown functions {unknown}; choose from {list(FUNCTIONS)}")
    if args.child:
        print(json.dumps(one_round(names, args.samples, args.size)))
        return
    print(f"{host_cpu()}; {args.size} elements, one thread, {args.rounds} rounds "
          f"of {args.samples} alternated samples")
    print(table(run_rounds(names, args.rounds, args.samples, args.size)))


if __name__ == "__main__":
    main()
