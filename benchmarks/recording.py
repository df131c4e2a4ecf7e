"""Recording cost: the per-op overhead of `rv.Tensor` autograd beside torch eager.

    python benchmarks/recording.py [--rounds 7] [--size 16] [--inner-rounds 40]

The timed program is `chain`, seven Tensor operations (`x * w`, `+ x`, `tanh`, `exp`,
`- w`, `h * h`, `sum`) on W4-size leaves (`x, w: f64[16]`, both `requires_grad=True`;
W4 has no matrix product, so neither has the chain), written once and run on `rv.Tensor`
and on `torch.Tensor` alike. Three calls of it are timed per framework:

- `no_grad`: the forward under `no_grad()` (the context entered once per call);
- `recorded`: the forward with the graph recorded (and dropped);
- `backward`: `x.grad = w.grad = None`, the recorded forward, then `.backward()`.

Each framework runs in a process of its own (one round: a Reverie child and a torch child,
their order flipped every round), with one thread: `OMP_NUM_THREADS`, `MKL_NUM_THREADS`,
`OPENBLAS_NUM_THREADS` and `REVERIE_NUM_THREADS` set to 1 and `torch.set_num_threads(1)`.
Inside a child the three calls alternate batch by batch and each gets the fastest batch's
mean (`latency.per_call_us`). The tables give, per op (a call's time over the chain's
seven ops), the median over rounds with the range of the round values, and Reverie ÷ torch
(ratio of the medians, then the range of the rounds' own ratios). Recording overhead is
recorded − no_grad; the recorded path's overhead is backward − no_grad (recording and
running the backward), the figure whose goal is at most torch eager's.
Only public API is used (`rv.tensor`, operators, `.tanh()`, `.exp()`, `.sum()`,
`.backward()`, `.grad`, `rv.no_grad`). The host CPU and its vector extensions print beside
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
from latency import per_call_us

FRAMEWORKS = ("reverie", "torch")
CALLS = ("no_grad", "recorded", "backward")
OPS = 7  # the operations of `chain`
VECTOR_FLAGS = ("avx2", "avx512f", "amx_tile")
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                     "OPENBLAS_NUM_THREADS", "REVERIE_NUM_THREADS")}
# row label: (minuend call, subtrahend call or None)
ROWS: dict[str, tuple[str, str | None]] = {
    "forward under no_grad": ("no_grad", None),
    "forward, recorded": ("recorded", None),
    "forward + backward, recorded": ("backward", None),
    "recording overhead (recorded − no_grad)": ("recorded", "no_grad"),
    "recorded path's overhead (forward + backward − no_grad)": ("backward", "no_grad"),
}
GOAL_ROW = "recorded path's overhead (forward + backward − no_grad)"


def chain(x: object, w: object) -> object:
    """Seven ops on two Tensors of either framework: mul, add, tanh, exp, sub, mul, sum."""
    h = (x * w + x).tanh().exp() - w
    return (h * h).sum()


def leaves(framework: str, size: int) -> tuple[Callable[[], AbstractContextManager], object,
                                                object]:
    """The framework's `no_grad` and two f64[size] leaves `x, w` that require grad (the same
    values for both frameworks)."""
    x, w = np.random.default_rng(32).standard_normal((2, size))
    if framework == "torch":
        import torch

        torch.set_num_threads(1)
        return (torch.no_grad, *(torch.tensor(a, dtype=torch.float64, requires_grad=True)
                                 for a in (x, w)))
    import reverie as rv

    return (rv.no_grad, *(rv.tensor(a, requires_grad=True) for a in (x, w)))


def timed_calls(framework: str, size: int) -> dict[str, Callable[[], object]]:
    """The three timed calls of `chain` (module docstring) in `framework`."""
    no_grad, x, w = leaves(framework, size)

    def unrecorded() -> object:
        with no_grad():
            return chain(x, w)

    def backward() -> None:
        x.grad = w.grad = None
        chain(x, w).backward()

    return {"no_grad": unrecorded, "recorded": lambda: chain(x, w), "backward": backward}


def measure(framework: str, size: int, inner_rounds: int) -> dict[str, float]:
    """One child process's µs per call of each timed call, one thread."""
    command = [sys.executable, __file__, "--child", framework, "--size", str(size),
               "--inner-rounds", str(inner_rounds)]
    done = subprocess.run(command, env={**os.environ, **ONE_THREAD}, capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode:
        raise RuntimeError(f"{framework} child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rounds(rounds: int, size: int, inner_rounds: int) -> dict[str, list[dict]]:
    """Each framework's per-call µs, one child per framework and round, alternated."""
    results: dict[str, list[dict]] = {framework: [] for framework in FRAMEWORKS}
    for number in range(rounds):
        order = FRAMEWORKS if number % 2 == 0 else FRAMEWORKS[::-1]
        for framework in order:
            results[framework].append(measure(framework, size, inner_rounds))
        print(f"round {number + 1}/{rounds} done", file=sys.stderr, flush=True)
    return results


def per_op(result: dict[str, float], row: str) -> float:
    """One round's µs per op of a table row."""
    minuend, subtrahend = ROWS[row]
    return (result[minuend] - (result[subtrahend] if subtrahend else 0.0)) / OPS


def spread(values: list[float], digits: int) -> str:
    """'median (min–max)'."""
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")


def table(results: dict[str, list[dict]]) -> str:
    """Markdown: per op, each framework's median (range) over rounds and Reverie ÷ torch."""
    lines = ["| µs per op | Reverie | torch eager | Reverie ÷ torch (rounds) |",
             "|---|---|---|---|"]
    for row in ROWS:
        ours, theirs = ([per_op(r, row) for r in results[f]] for f in FRAMEWORKS)
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        lines.append(f"| {row} | {spread(ours, 2)} | {spread(theirs, 2)} | "
                     f"{statistics.median(ours) / statistics.median(theirs):.2f} "
                     f"({min(ratios):.2f}–{max(ratios):.2f}) |")
    return "\n".join(lines)


def goal_line(results: dict[str, list[dict]]) -> str:
    """Whether the recorded path's overhead per op (the table's medians) is at most torch
    eager's; undetermined where a framework's forward under no_grad is slower than its
    recorded one (the subtraction then says nothing about the cost of recording)."""
    def median(framework: str, row: str) -> float:
        return statistics.median(per_op(r, row) for r in results[framework])

    ours, theirs = (median(f, GOAL_ROW) for f in FRAMEWORKS)
    slower = [f for f in FRAMEWORKS
              if median(f, "forward under no_grad") > median(f, "forward, recorded")]
    verdict = "met" if ours <= theirs else "not met"
    if slower:
        verdict = (f"undetermined: {', '.join(slower)}'s forward under no_grad is slower "
                   f"than its recorded forward, so the difference does not measure "
                   f"recording; compare the whole recorded forward + backward per op")
    return (f"Goal (issue 32, item 9): recorded path's overhead per op ≤ torch eager's: "
            f"{ours:.2f} against {theirs:.2f} µs, {verdict}.")


def vector_flags() -> str:
    """Which of `VECTOR_FLAGS` /proc/cpuinfo lists (Linux; else 'unknown')."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "vector flags unknown"
    return ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in VECTOR_FLAGS)


def machine() -> str:
    """The host CPU, its vector flags, the peers' versions and the load average. (Imported
    here, not at the top: `run` imports Reverie, which a torch child must not.)"""
    from mathlib import host_cpu
    from run import machine_line

    return f"{host_cpu()}; {vector_flags()}\n{machine_line()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="processes per framework")
    parser.add_argument("--size", type=int, default=16, help="elements of x and w (W4: 16)")
    parser.add_argument("--inner-rounds", type=int, default=40,
                        help="batches of each call in a child; its fastest counts")
    parser.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        calls = timed_calls(options.child, options.size)
        print(json.dumps(per_call_us(calls, options.inner_rounds)))
        return
    print(f"{machine()}\n`chain`: {OPS} ops on "
          f"f64[{options.size}], one thread, {options.rounds} rounds of one process per "
          f"framework", flush=True)
    results = run_rounds(options.rounds, options.size, options.inner_rounds)
    print(f"\n{table(results)}\n\n{goal_line(results)}\n{machine()}")


if __name__ == "__main__":
    main()
