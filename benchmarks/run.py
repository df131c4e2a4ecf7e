"""Reverie's gradients against NumPy, torch eager, torch.compile and JAX on workloads W1–W8.

    python benchmarks/run.py [--quick] [--only W1,W3] [--rounds N] [--peers reverie,jax]
                             [--warm-cache] [--json out.json]

Every variant of a workload runs in a process of its own (`variant_process.py`), Reverie's
twice: with its default team of threads and with `REVERIE_NUM_THREADS=1`. The parent
starts a workload's children together (they import and make the inputs), then one at a
time has each build its variant and time its first call (setup, compilation and the call;
Reverie's and torch inductor's disk caches in a fresh directory per child unless
`--warm-cache`), check its gradient against the NumPy child's (`MISMATCH` past the
workload's tolerance) and choose the calls per sample. Then, over 9 rounds (5 with
`--quick`), it asks each child in turn for one sample, so all variants see the machine's
load alike; the order is reversed every other round. Before each request it waits until
no thread of any child is running (see `variant_process.py`), and it measures the CPU the
idle children took during each sample. A sample repeats the call for about 50 ms (10 ms
with `--quick`) and counts time per call.

It prints the host (CPU, vector features, CPUs, libraries, commit, load average), one block
per workload (each variant's median over rounds, fastest–slowest round, first call, error),
then Markdown tables: medians, spreads, Reverie ÷ each peer and ÷ the best peer (named),
default threads ÷ one thread, Reverie's forward and gradient ÷ forward, first calls.
`--quick` also skips torch.compile (whose first compile takes 10–60 s a workload).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from host import host_info, host_line, library_versions
from variant_process import (
    FORWARD_LABEL,
    ChildSpec,
    VariantProcess,
    cpu_seconds,
    serve,
    wait_quiet,
)
from workloads import PEERS, WORKLOADS, Workload

PEER_ROWS = {"numpy": "NumPy, hand-written gradient", "torch": "torch eager",
             "torch.compile": "torch.compile", "jax": "JAX jit"}
SHORT_NAMES = {"numpy": "NumPy", "torch": "torch eager", "torch.compile": "torch.compile",
               "jax": "JAX"}
REVERIE_ROWS = {"reverie": "Reverie", "reverie 1 thread": "Reverie, 1 thread"}
START_SECONDS = 300
PREPARE_SECONDS = 900
QUIET_LIMIT_SECONDS = 2.0


@dataclass
class Measurement:
    """What one child did: times in seconds, or why it has none ("failed: ..." or
    "skipped ..."). `settle_first` is the wait, after its first call, until no thread of any
    child ran; `settle` the longest such wait after one of its samples; `neighbours` the
    largest share of one of its samples' wall time that the idle children spent on a CPU."""

    workload: str
    row: str
    label: str
    threads: int | None = None
    samples: list[float] = field(default_factory=list)
    first: float | None = None
    error: float | None = None
    calls: int | None = None
    settle_first: float = 0.0
    settle: float = 0.0
    neighbours: float = 0.0
    failure: str | None = None

    @property
    def median(self) -> float | None:
        """The median sample, seconds per call."""
        return statistics.median(self.samples) if self.samples else None

    @property
    def spread(self) -> tuple[float, float] | None:
        """The fastest and slowest samples."""
        return (min(self.samples), max(self.samples)) if self.samples else None


@dataclass
class Settings:
    """How a run measures."""

    rounds: int
    sample_seconds: float
    skipped: dict[str, str]
    peers: tuple[str, ...]
    warm_cache: bool
    tiny: bool
    workdir: Path


def child_specs(workload: Workload, settings: Settings) -> list[ChildSpec]:
    """The workload's children: NumPy's (the reference) first, then the other peers' in
    `PEERS` order, each Reverie variant also on one thread, and Reverie's forward last."""
    specs = []
    for peer in ("numpy", *(p for p in PEERS if p != "numpy")):
        if peer not in settings.peers:
            continue
        for variant in workload.of_peer(peer):
            specs.append(ChildSpec(workload.key, variant.label, peer))
            if peer == "reverie":
                specs.append(ChildSpec(workload.key, variant.label, "reverie 1 thread", "1"))
    if "reverie" in settings.peers:
        specs.append(ChildSpec(workload.key, FORWARD_LABEL, FORWARD_LABEL))
    return specs


def start_child(spec: ChildSpec, index: int, settings: Settings) -> VariantProcess:
    """Start the child running `spec`, with its own disk caches unless `--warm-cache`."""
    environment = dict(os.environ)
    environment.pop("REVERIE_NUM_THREADS", None)
    if spec.threads is not None:
        environment["REVERIE_NUM_THREADS"] = spec.threads
    if not settings.warm_cache:
        caches = settings.workdir / f"{spec.workload}-{index}"
        environment["REVERIE_CACHE_DIR"] = str(caches / "reverie")
        environment["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    command = [sys.executable, str(Path(__file__).resolve()), "--child", spec.workload,
               spec.label] + (["--tiny"] if settings.tiny else [])
    return VariantProcess(spec, command, environment,
                          settings.workdir / f"{spec.workload}-{index}.log")


def status(text: str, end: str = "") -> None:
    """Show progress on a terminal (nothing when the output is a file)."""
    if sys.stdout.isatty():
        print(f"\r{text[:75]:<75}", end=end, flush=True)


def run_workload(workload: Workload, settings: Settings) -> list[Measurement]:
    """Start the workload's children, prepare them one at a time, take the rounds of
    samples, end the children and print the workload's block."""
    specs = child_specs(workload, settings)
    results = [Measurement(workload.key, spec.row, spec.title) for spec in specs]
    live: dict[int, VariantProcess] = {}
    try:
        for index, spec in enumerate(specs):
            if spec.row in settings.skipped:
                results[index].failure = settings.skipped[spec.row]
            else:
                live[index] = start_child(spec, index, settings)
        status(f"  starting {len(live)} processes")
        for index, child in list(live.items()):
            answer = child.receive(START_SECONDS)
            results[index].threads = answer.get("threads")
            if "failure" in answer:
                results[index].failure = answer["failure"]
                live.pop(index).close()
        prepare_all(live, results, settings)
        take_rounds(live, results, settings)
    finally:
        for child in live.values():
            child.close()
        status("", end="\r")
    for measurement in results:
        print_row(workload, measurement)
    return results


def settle(live: dict[int, VariantProcess]) -> float:
    """Wait until no child has a running thread (at most `QUIET_LIMIT_SECONDS`, naming the
    children still busy then); the seconds waited."""
    waited, busy = wait_quiet([child.pid for child in live.values()], QUIET_LIMIT_SECONDS)
    if busy:
        names = ", ".join(child.spec.title for child in live.values() if child.pid in busy)
        print(f"  still running after {QUIET_LIMIT_SECONDS:.0f} s: {names}", flush=True)
    return waited


def prepare_all(live: dict[int, VariantProcess], results: list[Measurement],
                settings: Settings) -> None:
    """Have each child in turn build its variant, time its first call and check its result
    against the NumPy child's, then (once all are quiet again) make its warm-up call; drop
    the children that fail."""
    reference = settings.workdir / f"{next(iter(results)).workload}-reference.npz"
    for index, child in list(live.items()):
        status(f"  preparing {child.spec.title}")
        settle(live)
        is_numpy = child.spec.row == "numpy"
        checked = child.spec.label != FORWARD_LABEL and reference.exists()
        answer = child.request({"prepare": {
            "reference": str(reference) if checked and not is_numpy else None,
            "save": str(reference) if is_numpy else None}}, PREPARE_SECONDS)
        if "failure" not in answer:
            results[index].first = answer["first"]
            results[index].error = answer["error"]
            results[index].settle_first = settle(live)
            answer = child.request({"warm": {"sample_seconds": settings.sample_seconds}},
                                   PREPARE_SECONDS)
        if "failure" in answer:
            results[index].failure = answer["failure"]
            live.pop(index).close()
            continue
        results[index].calls = answer["calls"]


def take_rounds(live: dict[int, VariantProcess], results: list[Measurement],
                settings: Settings) -> None:
    """`settings.rounds` rounds, each asking every child for one sample in turn (the order
    reversed every other round), with the other children idle."""
    previous = None
    for round_index in range(settings.rounds):
        order = list(live.items())[::-1 if round_index % 2 else 1]
        for index, child in order:
            if index not in live:
                continue
            status(f"  round {round_index + 1}/{settings.rounds}: {child.spec.title}")
            waited = settle(live)
            if previous is not None:
                results[previous].settle = max(results[previous].settle, waited)
            others = [other.pid for key, other in live.items() if key != index]
            cpu_before = sum(map(cpu_seconds, others))
            start = time.perf_counter()
            answer = child.request({"sample": True}, PREPARE_SECONDS)
            wall = time.perf_counter() - start
            neighbours = sum(map(cpu_seconds, others)) - cpu_before
            previous = index
            if "failure" in answer:
                results[index].failure = answer["failure"]
                live.pop(index).close()
                continue
            results[index].samples.append(answer["seconds"])
            results[index].neighbours = max(results[index].neighbours, neighbours / wall)


def scaled(seconds: float | None, unit: str) -> str:
    """A time in the workload's unit (ms or µs), or a dash."""
    if seconds is None:
        return "—"
    value = seconds * (1e6 if unit == "us" else 1e3)
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def spread_text(m: Measurement | None, unit: str) -> str:
    """Fastest–slowest sample in the workload's unit, or a dash."""
    if m is None or m.spread is None:
        return "—"
    return f"{scaled(m.spread[0], unit)}–{scaled(m.spread[1], unit)}"


def print_row(workload: Workload, m: Measurement) -> None:
    """One line of a workload's block: median and spread over rounds, first call, error,
    and how idle the other children were."""
    unit = "µs" if workload.unit == "us" else "ms"
    if m.failure is not None:
        print(f"  {m.label:<44} {m.failure}", flush=True)
        return
    check = "" if m.error is None else f"   rel. err {m.error:.1e}"
    flag = "  MISMATCH" if m.error is not None and m.error > workload.rtol else ""
    print(f"  {m.label:<44} {scaled(m.median, workload.unit):>6} {unit} "
          f"[{spread_text(m, workload.unit):>11}]   first call {m.first:7.3f} s"
          f"{check}{flag}   settled in {1e3 * m.settle_first:.0f} | {1e3 * m.settle:.1f} ms, "
          f"others {100 * m.neighbours:.1f} %", flush=True)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def headline(results: list[Measurement], key: str, row: str) -> Measurement | None:
    """Workload `key`'s measurement for a table row: Reverie's first variant (its main
    API), a peer's fastest variant (its best)."""
    ours = [m for m in results if m.workload == key and m.row == row]
    timed = [m for m in ours if m.median is not None]
    if row in (*REVERIE_ROWS, FORWARD_LABEL) or not timed:
        return next(iter(ours), None)
    return min(timed, key=lambda m: m.median)


def ratio(numerator: Measurement | None, denominator: Measurement | None) -> str:
    """numerator / denominator of two median times, or a dash when either is missing."""
    if numerator is None or denominator is None or not numerator.median \
            or not denominator.median:
        return "—"
    return f"{numerator.median / denominator.median:.2f}"


def best_peer(results: list[Measurement], key: str) -> tuple[str, Measurement] | None:
    """The fastest peer of workload `key` (by its fastest variant's median), named."""
    timed = [(SHORT_NAMES[row], m) for row in PEER_ROWS
             if (m := headline(results, key, row)) is not None and m.median is not None]
    return min(timed, key=lambda pair: pair[1].median, default=None)


def summary(workloads: list[Workload], results: list[Measurement]) -> str:
    """The Markdown tables closing the report."""
    header = ["variant"] + [w.key + (" µs" if w.unit == "us" else "") for w in workloads]
    plain_header = ["variant"] + [w.key for w in workloads]
    named = [*REVERIE_ROWS.items(), *PEER_ROWS.items()]

    def row(name: str, cell: Callable[[Workload], str]) -> list[str]:
        return [name] + [cell(w) for w in workloads]

    def of(row_key: str, text: Callable[[Measurement | None, str], str]
           ) -> Callable[[Workload], str]:
        return lambda w: text(headline(results, w.key, row_key), w.unit)

    def median_text(m: Measurement | None, unit: str) -> str:
        return scaled(m.median if m else None, unit)

    def first_text(m: Measurement | None, unit: str) -> str:
        return "—" if m is None or m.first is None else f"{m.first:.2f}"

    def over(numerator: str, denominator: str) -> Callable[[Workload], str]:
        return lambda w: ratio(headline(results, w.key, numerator),
                               headline(results, w.key, denominator))

    def over_best(w: Workload) -> str:
        best = best_peer(results, w.key)
        if best is None:
            return "—"
        return f"{ratio(headline(results, w.key, 'reverie'), best[1])} ({best[0]})"

    times = [row(name, of(key, median_text)) for key, name in named]
    spreads = [row(name, of(key, spread_text)) for key, name in named]
    ratios = [row("Reverie / best peer", over_best),
              *(row(f"Reverie / {name}", over("reverie", key)) for key, name in PEER_ROWS.items()),
              row("Reverie default threads / 1 thread", over("reverie", "reverie 1 thread"))]
    forward = [row("Reverie forward", of(FORWARD_LABEL, median_text)),
               row("Reverie gradient / forward", over("reverie", FORWARD_LABEL))]
    first = [row(name, of(key, first_text)) for key, name in named]
    tables = [
        "Gradient time, median over rounds (ms; W4 in µs), each peer's fastest variant:\n\n"
        + markdown_table(header, times),
        "Spread: fastest–slowest round of the same variants:\n\n"
        + markdown_table(header, spreads),
        "Ratios of medians (below 1: Reverie is faster; Reverie with its default threads):\n\n"
        + markdown_table(plain_header, ratios),
        "Reverie forward time (same units) and gradient / forward:\n\n"
        + markdown_table(header, forward),
        "First call (s): setup, compilation and one call:\n\n"
        + markdown_table(plain_header, first),
    ]
    others = [m for m in results if m.row in REVERIE_ROWS
              and m is not headline(results, m.workload, m.row)]
    if others:
        units = {w.key: w.unit for w in workloads}
        tables.append("Other Reverie variants:\n\n" + "\n".join(
            f"- {m.workload} {m.label}: " + (
                f"{scaled(m.median, units[m.workload])} "
                f"[{spread_text(m, units[m.workload])}], first call {m.first:.2f} s"
                if m.failure is None else m.failure)
            for m in others))
    return "\n\n".join(tables)


def idleness(results: list[Measurement]) -> str:
    """How idle the children were around each other's samples."""
    timed = [m for m in results if m.samples]
    if not timed:
        return "No samples were taken."
    slowest = max(timed, key=lambda m: m.settle)
    first = max(timed, key=lambda m: m.settle_first)
    busiest = max(timed, key=lambda m: m.neighbours)
    return (f"Idle children: no thread of any child was running before each request; the "
            f"longest wait for that was {1e3 * slowest.settle:.1f} ms after a sample of "
            f"{slowest.workload} {slowest.label} and {1e3 * first.settle_first:.0f} ms after "
            f"the first call of {first.workload} {first.label}. During a sample the idle "
            f"children used at most {100 * busiest.neighbours:.2f} % of its time on a CPU "
            f"({busiest.workload} {busiest.label}).")


def machine_line() -> str:
    """The peers' versions, the CPUs and the load average, on one line (recording.py's
    report heads with it, after its own CPU line)."""
    versions = library_versions()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (", ".join(f"{package} {versions[package]}" for package in ("numpy", "torch", "jax"))
            + f"; {os.cpu_count()} CPUs, load average {load}")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds instead of 9, 10 ms samples, and no torch.compile")
    parser.add_argument("--only", default="", help="comma-separated workload keys, e.g. W1,W3")
    parser.add_argument("--rounds", type=int, help="rounds of samples (default 9, quick 5)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated peers to run (NumPy's, the reference, always)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep Reverie's and torch inductor's disk caches")
    parser.add_argument("--json", type=Path, help="also write the host and every sample here")
    parser.add_argument("--tiny", action="store_true",
                        help="the workloads' tiny sizes (for tests; times mean nothing)")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "LABEL"),
                        help="serve one variant to a parent run.py (variant_process.py)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    warnings.simplefilter("ignore")
    if args.child:
        serve(*args.child, tiny=args.tiny)
        return
    keys = [k.strip().upper() for k in args.only.split(",") if k.strip()] or list(WORKLOADS)
    unknown = [k for k in keys if k not in WORKLOADS]
    peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    unknown += sorted(set(peers) - set(PEERS))
    if unknown:
        sys.exit(f"unknown workload(s) or peer(s) {', '.join(unknown)}; "
                 f"choose from {', '.join(WORKLOADS)} and {', '.join(PEERS)}")
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as workdir:
        settings = Settings(
            rounds=args.rounds or (5 if args.quick else 9),
            sample_seconds=0.01 if args.quick else 0.05,
            skipped={"torch.compile": "skipped by --quick"} if args.quick else {},
            peers=tuple(dict.fromkeys(("numpy", *peers))), warm_cache=args.warm_cache,
            tiny=args.tiny, workdir=Path(workdir))
        report(keys, settings, args.json)


def report(keys: list[str], settings: Settings, json_path: Path | None) -> None:
    """Measure the workloads `keys` and print (and optionally save) the report."""
    host = host_info()
    print(host_line(host))
    print(textwrap.fill(
        f"{settings.rounds} rounds of samples of about {1e3 * settings.sample_seconds:.0f} ms; "
        f"each variant in its own process. Per variant: median [fastest–slowest round]; "
        f"first call; error against NumPy's gradient; settled in: ms until no child's thread "
        f"ran, after its first call | after a sample (the longest); others: the idle "
        f"children's largest CPU share during one of its samples.", width=100), flush=True)
    workloads, results = [], []
    for key in keys:
        workload = WORKLOADS[key](tiny=True)  # (the variants' list; children make the inputs)
        print(f"\n{workload.key}: {workload.title}", flush=True)
        workloads.append(workload)
        results += run_workload(workload, settings)
    print("\n" + summary(workloads, results))
    print("\n" + textwrap.fill(idleness(results), width=100))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nLoad average at the end: {load}")
    if json_path is not None:
        json_path.write_text(json.dumps({
            "host": host, "load_average_end": list(os.getloadavg()),
            "settings": {"rounds": settings.rounds, "sample_seconds": settings.sample_seconds,
                         "skipped": settings.skipped, "peers": settings.peers,
                         "warm_cache": settings.warm_cache, "tiny": settings.tiny},
            "measurements": [asdict(m) | {"median": m.median, "spread": m.spread}
                             for m in results]}, indent=1))


if __name__ == "__main__":
    main()
