"""Reverie's gradients against NumPy, torch eager, torch.compile and JAX on workloads W1–W8.

    python benchmarks/run.py [--quick] [--only W1,W3] [--warm-cache]

For every workload (all peers in this one process) it builds each variant, times its first
call (setup, compilation and the call itself), checks its gradient against the hand-written
NumPy one and makes a warm-up call; then it takes 9 rounds of samples, each round timing
every variant once in turn, and reports each variant's median (a sample averages several
calls when one call is short). It prints one block per workload, then Markdown tables:
gradient times per peer, Reverie time / peer time, Reverie's forward time and
gradient / forward ratio, and the first-call times.

`--quick` takes 5 samples instead of 9 and skips torch.compile (whose first compile takes
10–60 s a workload). Reverie's and torch inductor's disk caches of compiled code point at a
fresh temporary directory, so first calls include all compilation; `--warm-cache` keeps the
user's caches.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from workloads import PEERS, WORKLOADS, Variant, Workload, relative_error

PEER_ROWS = {"numpy": "NumPy, hand-written gradient", "torch": "torch eager",
             "torch.compile": "torch.compile", "jax": "JAX jit"}


@dataclass
class Measurement:
    """What one variant of one workload did: times in seconds, or why it has none
    ("failed: ..." or "skipped ...")."""

    workload: str
    peer: str
    label: str
    median: float | None = None
    fastest: float | None = None
    first: float | None = None
    error: float | None = None
    failure: str | None = None


@dataclass
class Prepared:
    """A variant built, called once and checked, with the calls per timed sample chosen."""

    measurement: Measurement
    thunk: Callable[[], object]
    calls: int
    samples: list[float]


def short_reason(error: BaseException) -> str:
    """The first line of an exception, prefixed by its type."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:160] if lines else ''}"


def prepare(workload: Workload, variant: Variant, reference: object | None,
            sample_seconds: float) -> tuple[Prepared | None, Measurement, object | None]:
    """Build a variant, time its first call, check its result against `reference`, and
    time one warm-up call to choose how many calls make a sample of `sample_seconds`."""
    measurement = Measurement(workload.key, variant.peer, variant.label)
    try:
        start = time.perf_counter()
        thunk = variant.build()
        value = thunk()
        measurement.first = time.perf_counter() - start
        if reference is not None:
            measurement.error = relative_error(value, reference)
        start = time.perf_counter()
        thunk()
        warm = max(time.perf_counter() - start, 1e-9)
    except Exception as error:  # a peer that fails is reported, not fatal
        measurement.failure = "failed: " + short_reason(error)
        return None, measurement, None
    calls = max(1, math.ceil(sample_seconds / warm))
    return Prepared(measurement, thunk, calls, []), measurement, value


def take_samples(prepared: list[Prepared], repeats: int) -> None:
    """`repeats` rounds, each timing one sample of every variant in turn (so a change in
    the machine's load hits all peers alike), with the garbage collector off; then store
    each variant's median seconds per call."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            for p in prepared:
                start = time.perf_counter()
                for _ in range(p.calls):
                    p.thunk()
                p.samples.append((time.perf_counter() - start) / p.calls)
    finally:
        gc.enable()
    for p in prepared:
        p.measurement.median = statistics.median(p.samples)
        p.measurement.fastest = min(p.samples)


def run_workload(workload: Workload, repeats: int, sample_seconds: float,
                 skipped_peers: dict[str, str]) -> list[Measurement]:
    """Prepare the NumPy reference first, then every other variant and Reverie's forward;
    then time them all in interleaved rounds and print the workload's block."""
    forward = Variant("reverie forward", "reverie forward", workload.forward)
    ordered = workload.of_peer("numpy") + [v for p in PEERS if p != "numpy"
                                           for v in workload.of_peer(p)] + [forward]
    reference: object | None = None
    results, prepared = [], []
    for variant in ordered:
        if variant.peer in skipped_peers:
            results.append(Measurement(workload.key, variant.peer, variant.label,
                                       failure=skipped_peers[variant.peer]))
            continue
        if sys.stdout.isatty():
            print(f"\r  preparing {variant.label:<60}", end="", flush=True)
        ready, measurement, value = prepare(workload, variant,
                                            None if variant is forward else reference,
                                            sample_seconds)
        if variant.peer == "numpy":
            reference = value
        results.append(measurement)
        prepared += [ready] if ready else []
    if sys.stdout.isatty():
        print(f"\r{'':<75}\r", end="")
    take_samples(prepared, repeats)
    for measurement in results:
        print_row(workload, measurement)
    return results


def scaled(seconds: float | None, unit: str) -> str:
    """A time in the workload's unit (ms or µs), or a dash."""
    if seconds is None:
        return "—"
    value = seconds * (1e6 if unit == "us" else 1e3)
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def print_row(workload: Workload, m: Measurement) -> None:
    """One line of a workload's block: median and fastest sample, first call, error."""
    unit = "µs" if workload.unit == "us" else "ms"
    if m.failure is not None:
        print(f"  {m.label:<40} {m.failure}", flush=True)
        return
    check = "" if m.error is None else f"   rel. err {m.error:.1e}"
    flag = "  MISMATCH" if m.error is not None and m.error > workload.rtol else ""
    print(f"  {m.label:<40} {scaled(m.median, workload.unit):>8} {unit} "
          f"(fastest {scaled(m.fastest, workload.unit):>6})   first call {m.first:7.3f} s"
          f"{check}{flag}", flush=True)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def headline(results: list[Measurement], key: str, peer: str) -> Measurement | None:
    """Workload `key`'s measurement for a table row: Reverie's first variant (its main
    API), another peer's fastest variant (its best)."""
    ours = [m for m in results if m.workload == key and m.peer == peer]
    timed = [m for m in ours if m.median is not None]
    if peer == "reverie" or not timed:
        return next(iter(ours), None)
    return min(timed, key=lambda m: m.median)


def ratio(numerator: Measurement | None, denominator: Measurement | None) -> str:
    """numerator / denominator of two median times, or a dash when either is missing."""
    if numerator is None or denominator is None or not numerator.median \
            or not denominator.median:
        return "—"
    return f"{numerator.median / denominator.median:.2f}"


def summary(workloads: list[Workload], results: list[Measurement]) -> str:
    """The Markdown tables closing the report."""
    header = ["peer"] + [w.key + (" µs" if w.unit == "us" else "") for w in workloads]

    def row(name: str, cell: Callable[[Workload], str]) -> list[str]:
        return [name] + [cell(w) for w in workloads]

    def median_of(peer: str, statistic: str = "median") -> Callable[[Workload], str]:
        return lambda w: scaled(getattr(headline(results, w.key, peer), statistic, None),
                                w.unit)

    def first_of(peer: str) -> Callable[[Workload], str]:
        def cell(w: Workload) -> str:
            first = getattr(headline(results, w.key, peer), "first", None)
            return "—" if first is None else f"{first:.2f}"
        return cell

    def reverie_over(peer: str) -> Callable[[Workload], str]:
        return lambda w: ratio(headline(results, w.key, "reverie"), headline(results, w.key, peer))

    named = [("reverie", "Reverie"), *PEER_ROWS.items()]
    times = [row(name, median_of(peer)) for peer, name in named]
    fastest = [row(name, median_of(peer, "fastest")) for peer, name in named]
    ratios = [row(f"Reverie / {name}", reverie_over(peer)) for peer, name in PEER_ROWS.items()]
    forward = [row("Reverie forward", median_of("reverie forward")),
               row("Reverie gradient / forward", lambda w: ratio(
                   headline(results, w.key, "reverie"),
                   headline(results, w.key, "reverie forward")))]
    first = [row(name, first_of(peer)) for peer, name in named]
    tables = [
        "Gradient time, median (ms; W4 in µs), each peer's fastest variant:\n\n"
        + markdown_table(header, times),
        "Reverie time / peer time (below 1: Reverie is faster):\n\n"
        + markdown_table(header, ratios),
        "Fastest sample of the same variants (less disturbed by other processes):\n\n"
        + markdown_table(header, fastest),
        "Reverie forward time (same units) and gradient / forward:\n\n"
        + markdown_table(header, forward),
        "First call (s): setup, compilation and one call:\n\n" + markdown_table(header, first),
    ]
    others = [m for m in results if m.peer == "reverie"
              and m is not headline(results, m.workload, "reverie")]
    if others:
        units = {w.key: w.unit for w in workloads}
        tables.append("Other Reverie variants:\n\n" + "\n".join(
            f"- {m.workload} {m.label}: " + (
                f"{scaled(m.median, units[m.workload])}, first call {m.first:.2f} s"
                if m.failure is None else m.failure)
            for m in others))
    return "\n\n".join(tables)


def machine_line() -> str:
    """The peers' versions, the CPUs and the load average: what the times depend on."""
    versions = []
    for package in ("numpy", "torch", "jax"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} missing")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{', '.join(versions)}; {os.cpu_count()} CPUs, load average {load}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="5 samples instead of 9, and no torch.compile")
    parser.add_argument("--only", default="", help="comma-separated workload keys, e.g. W1,W3")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep Reverie's and torch inductor's disk caches")
    args = parser.parse_args()
    keys = [k.strip().upper() for k in args.only.split(",") if k.strip()] or list(WORKLOADS)
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        sys.exit(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    if not args.warm_cache:
        cache = tempfile.TemporaryDirectory(prefix="reverie-bench-cache-")
        os.environ["REVERIE_CACHE_DIR"] = os.path.join(cache.name, "reverie")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache.name, "inductor")
    warnings.simplefilter("ignore")
    repeats, sample_seconds = (5, 0.01) if args.quick else (9, 0.05)
    skipped = {"torch.compile": "skipped by --quick"} if args.quick else {}

    print(machine_line())
    workloads, results = [], []
    for key in keys:
        workload = WORKLOADS[key]()
        print(f"\n{workload.key}: {workload.title}", flush=True)
        workloads.append(workload)
        results += run_workload(workload, repeats, sample_seconds, skipped)
    print("\n" + summary(workloads, results))
    print("\n" + machine_line())


if __name__ == "__main__":
    main()
