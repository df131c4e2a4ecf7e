"""Interop overhead: `rv.torch.function` beside a torch eager op doing the same maths.

    python benchmarks/interop_torch.py [--quick]

On W4-size inputs (`sum(x * x)`, x: f64[16], where the per-call cost is all overhead),
three calls, each measured against its torch eager peer in the same run, interleaved
round by round so both see the same machine load:

- forward: `f(x)` beside `(x * x).sum()`;
- gradient: `torch.autograd.grad(f(x), x)` beside the same on `(x * x).sum()`;
- torch.func: `torch.func.grad(f)(x)` beside `torch.func.grad` of the torch expression.

Each figure is the median over rounds of the mean time of a batch of calls, in
microseconds of the calling thread's CPU time (`time.thread_time`: a machine shared with
other work stretches wall-clock figures unevenly; these calls run on that thread alone);
the ratio is reverie over torch (the target is at most 2). The results print
as a Markdown table, ready for `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import reverie as rv

SOURCE = "fn w4(x: f64[N]) -> f64 { return sum(x * x); }"
Call = Callable[[], object]


def cases() -> list[tuple[str, Call, Call]]:
    """(name, reverie call, torch eager call) for each measured call."""
    f = rv.torch.function(rv.compile(SOURCE).w4)

    def native(t: torch.Tensor) -> torch.Tensor:
        return (t * t).sum()

    x = torch.randn(16, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    xg = x.clone().requires_grad_()
    ours_grad, theirs_grad = torch.func.grad(f), torch.func.grad(native)
    return [
        ("forward `f(x)`", lambda: f(x), lambda: native(x)),
        ("gradient `autograd.grad(f(x), x)`", lambda: torch.autograd.grad(f(xg), xg),
         lambda: torch.autograd.grad(native(xg), xg)),
        ("`torch.func.grad(f)(x)`", lambda: ours_grad(x), lambda: theirs_grad(x)),
    ]


def batch_size(call: Call, seconds: float) -> int:
    """How many calls last about `seconds`."""
    call()
    start = time.thread_time()
    for _ in range(10):
        call()
    return max(1, int(seconds / max((time.thread_time() - start) / 10, 1e-7)))


def mean_us(call: Call, calls: int) -> float:
    """The mean CPU time of `calls` calls, in microseconds."""
    start = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - start) / calls * 1e6


def measure(ours: Call, theirs: Call, rounds: int, seconds: float) -> tuple[float, float]:
    """Median per-call microseconds of `ours` and `theirs`, measured in alternate rounds."""
    sizes = batch_size(ours, seconds), batch_size(theirs, seconds)
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        samples[0].append(mean_us(ours, sizes[0]))
        samples[1].append(mean_us(theirs, sizes[1]))
    return statistics.median(samples[0]), statistics.median(samples[1])


def table(rounds: int, seconds: float) -> list[tuple[str, float, float]]:
    """(name, reverie µs, torch µs) per case."""
    return [(name, *measure(ours, theirs, rounds, seconds)) for name, ours, theirs in cases()]


def markdown(rows: list[tuple[str, float, float]]) -> str:
    """The rows as a Markdown table with the ratio column."""
    lines = ["| call (x: f64[16]) | rv.torch.function (µs) | torch eager (µs) | ratio |",
             "|---|---:|---:|---:|"]
    lines += [f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}× |"
              for name, ours, theirs in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    options = parser.parse_args()
    rounds, seconds = (5, 0.01) if options.quick else (21, 0.05)
    print(markdown(table(rounds, seconds)))


if __name__ == "__main__":
    main()
