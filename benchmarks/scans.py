"""Scans and sorts: Reverie's native `cumsum`/`cumprod`/`sort`/`argsort`/`topk` and their
gradients against NumPy and torch eager, in one run.

    python benchmarks/scans.py                 # scans n = 10**6, sorts n = 10**3, 10**5
    python benchmarks/scans.py --n 100000 --sort-n 1000 --rounds 5

Each case is a forward call (`cumsum(x)`, `cumprod(1 + x)`, `sort(x)`, `argsort(x)`,
`topk(x, 10)`, f64 and f32) or a gradient (`sum(cumsum(x) * w)`, `sum(cumprod(1 + x) * w)`
and `sum(sort(x) * w)` wrt x: torch.autograd.grad; NumPy: the reverse cumulative sum, or the
scatter through the permutation, written out). NumPy and torch sort stably (`kind="stable"`,
`stable=True`) except in topk, where NumPy selects with `partition` and torch calls `topk`;
Reverie's topk sorts the whole line. Every variant is checked once against NumPy in f64
(NumPy accumulates f32 in f32; Reverie and torch use f64; in f32, 1 + x is rounded once
per element, an error that a product of 10⁶ factors carries to about 1e-3), then the
rounds take one sample of each variant in turn (so a change in the machine's load hits all
peers alike); a sample repeats the call for about 20 ms and counts time per call. The table
gives medians and the ratio Reverie / peer (below 1: Reverie is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

import reverie as rv

SOURCE = """
fn running(x: float[N]) -> float[N] { return cumsum(x); }
fn growth(x: float[N]) -> float[N] { return cumprod(1.0 + x); }
fn running_loss(x: float[N], w: float[N]) -> float { return sum(cumsum(x) * w); }
fn growth_loss(x: float[N], w: float[N]) -> float { return sum(cumprod(1.0 + x) * w); }
fn sorted(x: float[N]) -> float[N] { return sort(x); }
fn order(x: float[N]) -> i64[N] { return argsort(x); }
fn top(x: float[N]) -> float[10] { return topk(x, 10); }
fn sorted_loss(x: float[N], w: float[N]) -> float { return sum(sort(x) * w); }
"""
TOP = 10


def _torch_grad(loss: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., np.ndarray]:
    def gradient(x: torch.Tensor, w: torch.Tensor) -> np.ndarray:
        xt = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad((loss(xt) * w).sum(), xt)
        return g

    return gradient


def _reverse_cumsum(v: np.ndarray) -> np.ndarray:
    return np.flip(np.cumsum(np.flip(v)))


def cases(n: int, dtype: type) -> dict[str, dict[str, tuple[Callable, tuple]]]:
    """Each case: its variants, as (function, arguments)."""
    module = rv.compile(SOURCE)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 1e-6).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    growth = np.cumprod(1.0 + x)
    return {
        "cumsum": {"reverie": (module.running, (x,)), "numpy": (np.cumsum, (x,)),
                   "torch": (lambda t: torch.cumsum(t, 0), (xt,))},
        "cumprod": {"reverie": (module.growth, (x,)),
                    "numpy": (lambda v: np.cumprod(1.0 + v), (x,)),
                    "torch": (lambda t: torch.cumprod(1.0 + t, 0), (xt,))},
        "grad cumsum": {"reverie": (module.running_loss.grad(wrt="x"), (x, w)),
                        "numpy": (lambda v, u: _reverse_cumsum(u), (x, w)),
                        "torch": (_torch_grad(lambda t: torch.cumsum(t, 0)), (xt, wt))},
        "grad cumprod": {"reverie": (module.growth_loss.grad(wrt="x"), (x, w)),
                         "numpy": (lambda v, u: _reverse_cumsum(u * growth) / (1.0 + v),
                                   (x, w)),
                         "torch": (_torch_grad(lambda t: torch.cumprod(1.0 + t, 0)),
                                   (xt, wt))},
    }


def _numpy_top(x: np.ndarray) -> np.ndarray:
    return -np.sort(-np.partition(x, x.size - TOP)[x.size - TOP:])


def _numpy_sort_grad(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x̄[p[r]] = w[r] for the stable sorting permutation p."""
    g = np.empty_like(w)
    g[np.argsort(x, kind="stable")] = w
    return g


def sort_cases(n: int, dtype: type) -> dict[str, dict[str, tuple[Callable, tuple]]]:
    """The orderings' cases, as `cases`."""
    module = rv.compile(SOURCE)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    return {
        "sort": {"reverie": (module.sorted, (x,)),
                 "numpy": (lambda v: np.sort(v, kind="stable"), (x,)),
                 "torch": (lambda t: torch.sort(t, stable=True).values, (xt,))},
        "argsort": {"reverie": (module.order, (x,)),
                    "numpy": (lambda v: np.argsort(v, kind="stable"), (x,)),
                    "torch": (lambda t: torch.sort(t, stable=True).indices, (xt,))},
        f"topk {TOP}": {"reverie": (module.top, (x,)), "numpy": (_numpy_top, (x,)),
                        "torch": (lambda t: torch.topk(t, TOP).values, (xt,))},
        "grad sort": {"reverie": (module.sorted_loss.grad(wrt="x"), (x, w)),
                      "numpy": (_numpy_sort_grad, (x, w)),
                      "torch": (_torch_grad(lambda t: torch.sort(t, stable=True).values),
                                (xt, wt))},
    }


def sample(fn: Callable, args: tuple, budget: float = 0.02) -> float:
    """Seconds per call, over repeated calls lasting about `budget` seconds."""
    calls, start = 0, time.perf_counter()
    while True:
        fn(*args)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / calls


def interleaved_medians(variants: dict[str, tuple[Callable, tuple]],
                        rounds: int) -> dict[str, float]:
    """The median `sample` time of each variant over `rounds` rounds, the variants taken
    in turn within a round (so a change in the machine's load hits them alike)."""
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for variant, (fn, args) in variants.items():
            times[variant].append(sample(fn, args))
    return {v: statistics.median(t) for v, t in times.items()}


def report(label: str, variants: dict[str, tuple[Callable, tuple]], dtype: type,
           rounds: int) -> None:
    """Check every variant against NumPy in f64, then print the medians of `rounds`."""
    reference, args = variants["numpy"]
    want = np.asarray(reference(*(a.astype(np.float64) for a in args)), dtype=np.float64)
    for variant, (fn, args) in variants.items():
        got = np.asarray(fn(*args), dtype=np.float64)
        error = np.max(np.abs(got - want), initial=0.0) / max(np.max(np.abs(want)), 1e-30)
        if error > (5e-3 if dtype == np.float32 else 1e-10):
            print(f"  MISMATCH {label} {variant}: relative error {error:.1e}")
    median = interleaved_medians(variants, rounds)
    print(f"{label:<22}" + "".join(f"{median[v] * 1e3:>10.3f}ms" for v in variants) +
          f"{median['reverie'] / median['numpy']:>10.2f}"
          f"{median['reverie'] / median['torch']:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6, help="length of the scans")
    parser.add_argument("--sort-n", type=int, nargs="*", default=[10**3, 10**5],
                        help="lengths of the sorts")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(f"scans n = {options.n}, sorts n = {options.sort_n}, {options.rounds} rounds, load "
          f"average {', '.join(f'{v:.1f}' for v in os.getloadavg())}; torch threads: 1")
    print(f"{'case':<22}{'reverie':>12}{'numpy':>12}{'torch':>12}"
          f"{'rv/numpy':>10}{'rv/torch':>10}")
    for dtype in (np.float64, np.float32):
        for name, variants in cases(options.n, dtype).items():
            report(f"{name} {np.dtype(dtype).name}", variants, dtype, options.rounds)
        for n in options.sort_n:
            for name, variants in sort_cases(n, dtype).items():
                report(f"{name} {np.dtype(dtype).name} {n:.0e}", variants, dtype,
                       options.rounds)


if __name__ == "__main__":
    main()
