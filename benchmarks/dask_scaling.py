"""Scaling of `rv.dask.value_and_grad` over worker processes (docs/scaling.md).

A compute-bound gradient — the two-layer perceptron of `examples/mlp.rv` (64 inputs, 256
tanh units, 8 outputs, float32, gradients of all four weights) over `--chunks` chunks of
`--chunk-rows` rows (default 32 of 25,000: 800,000 rows, about 0.1 s of compute per chunk
and 3 s per call on one core, so that the fixed cost of a call is a few per cent of the
2-worker call) — timed three ways on the same data:

- `single`: `mlp_loss.value_and_grad()` in this process on the concatenated NumPy rows;
- `dask, 1 worker` and `dask, 2 workers`: a `distributed.LocalCluster` of that many worker
  processes, one thread each, with the rows already in the workers' memory (persisted).
  Both compute the same rows: 1 and 2 workers do identical total work.

Every kernel runs on one thread (`REVERIE_NUM_THREADS=1`, inherited by the workers), so the
figures compare processes, not threads. Only one cluster is alive at a time, as in use: on
two cores an idle second cluster's scheduler and workers (heartbeats, memory monitors) take
CPU from the workers. So the single-process call is measured alone first, then `--rounds`
rounds, each of: the machine's ceiling (the same gradient over the same chunks in one plain
process, then in two plain processes at once: no Dask; spawned, started together at a
barrier; twice the rows in that time is the most any two workers could reach now), one
cluster of 1 worker and one of 2 (each started, warmed up by compiling, sampled `--repeats`
times, closed), so that a change in the machine's load between rounds hits all three. Each
round prints its load average and figures; the summary gives medians over all samples
(rows/s), the two ratios with their targets: 2 workers / 1 worker (target >= 1.6) beside the
median ceiling, and dask with 1 worker / single (target <= 1.3); and the fixed cost of a
call (the same chunks of 10 rows each: scheduling, the reduction, the result's round trip),
sampled on the 2-worker clusters after their own samples.

    python benchmarks/dask_scaling.py                 # about 3 minutes on 2 idle cores
    python benchmarks/dask_scaling.py --chunks 8 --chunk-rows 10000 --rounds 1  # quick

On a shared machine, other jobs take cores from the workers and the ratio of 2 to 1
workers falls with them; the ceiling of the same round says by how much.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, wait

import reverie as rv

MLP = Path(__file__).resolve().parents[1] / "examples" / "mlp.rv"
FEATURES, HIDDEN, OUTPUTS = 64, 256, 8
WRT = ("w1", "b1", "w2", "b2")


def problem(rows: int, chunk_rows: int, seed: int = 0) -> tuple[da.Array | np.ndarray, ...]:
    """Inputs `x, y, w1, b1, w2, b2` of `mlp_loss` with `rows` rows, float32: the rows as
    dask arrays made chunk by chunk from `seed` (the same values wherever computed). Each
    chunk of `x` and of `y` is cut from one generated block, so a chunk's inputs and labels
    are made, and kept, on the same worker (as rows read from one file would be)."""
    rng = da.random.default_rng(seed)
    rows_and_labels = rng.standard_normal((rows, FEATURES + OUTPUTS),
                                          chunks=(chunk_rows, -1), dtype=np.float32)
    x, y = (part.map_blocks(np.ascontiguousarray) for part in
            (rows_and_labels[:, :FEATURES], rows_and_labels[:, FEATURES:]))
    weights = np.random.default_rng(seed)
    w1 = weights.standard_normal((FEATURES, HIDDEN), dtype=np.float32) / np.float32(8)
    w2 = weights.standard_normal((HIDDEN, OUTPUTS), dtype=np.float32) / np.float32(16)
    return x, y, w1, np.zeros(HIDDEN, np.float32), w2, np.zeros(OUTPUTS, np.float32)


def sample_times(run: Callable[[], object], repeats: int) -> list[float]:
    """`repeats` wall times of `run`, after one warm-up call (compiling)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def rounds_of_times(loss: rv.Kernel, data: tuple, small: tuple, chunks: int,
                    chunk_rows: int, rounds: int, repeats: int) -> dict[str, list[float]]:
    """Per round, the machine's ceiling (two plain processes / one), then wall times of the
    data-parallel call on a cluster of 1 worker and one of 2 (one alive at a time), and of
    the small call on the 2-worker one; each round's figures printed as it ends."""
    times: dict[str, list[float]] = {"dask, 1 worker": [], "dask, 2 workers": [],
                                     "fixed cost": [], "ceiling": []}
    for round_number in range(1, rounds + 1):
        load = os.getloadavg()[0]
        ceiling = machine_ceiling(chunks, chunk_rows)
        medians = []
        for workers in (1, 2):
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                samples = sample_times(on_cluster(client, loss, data), repeats)
                times[f"dask, {workers} worker{'s' * (workers > 1)}"] += samples
                medians.append(statistics.median(samples))
                if workers == 2:
                    times["fixed cost"] += sample_times(on_cluster(client, loss, small),
                                                       repeats)
        times["ceiling"].append(ceiling)
        print(f"round {round_number} (load average {load:.2f} -> {os.getloadavg()[0]:.2f}): "
              f"1 worker {medians[0] * 1e3:,.0f} ms, 2 workers {medians[1] * 1e3:,.0f} ms, "
              f"{medians[0] / medians[1]:.2f}x; two plain processes / one {ceiling:.2f}x")
    return times


def on_cluster(client: Client, loss: rv.Kernel,
               data: tuple[da.Array | np.ndarray, ...]) -> Callable[[], object]:
    """The data-parallel call on `client`'s cluster, with the rows made and kept in its
    workers' memory first."""
    x, y = client.persist(list(data[:2]))
    wait([x, y])
    parallel = rv.dask.value_and_grad(loss, WRT, batch=("x", "y"), reduce="mean")

    def run() -> object:
        with client.as_current():
            return parallel(x, y, *data[2:])

    return run


def _time_chunks(barrier: multiprocessing.synchronize.Barrier, chunks: int, chunk_rows: int,
                 results: multiprocessing.Queue) -> None:
    """In a spawned process: the wall time of `chunks` gradients over `chunk_rows` rows each,
    started when every process of the measurement has compiled and reached `barrier`."""
    os.environ["REVERIE_NUM_THREADS"] = "1"
    grad = rv.load(MLP).mlp_loss.value_and_grad(WRT)
    x, y, *weights = (a[:chunk_rows].compute(scheduler="sync") if isinstance(a, da.Array)
                      else a for a in problem(chunk_rows, chunk_rows))
    grad(x, y, *weights)
    barrier.wait()
    start = time.perf_counter()
    for _ in range(chunks):
        grad(x, y, *weights)
    results.put(time.perf_counter() - start)


def machine_ceiling(chunks: int, chunk_rows: int) -> float:
    """Rows/s of two plain processes running the gradient at once ÷ rows/s of one alone:
    what two workers could reach on this machine at best (2.0 on two free cores)."""
    context = multiprocessing.get_context("spawn")

    def wall_times(processes: int) -> list[float]:
        barrier, results = context.Barrier(processes), context.Queue()
        started = [context.Process(target=_time_chunks,
                                   args=(barrier, chunks, chunk_rows, results))
                   for _ in range(processes)]
        for process in started:
            process.start()
        times = [results.get() for _ in started]
        for process in started:
            process.join()
        return times

    alone = wall_times(1)[0]
    return 2 * alone / max(wall_times(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--chunk-rows", type=int, default=25_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("REVERIE_NUM_THREADS", "1")  # before any kernel, here or there
    rows = args.chunks * args.chunk_rows
    print(f"{datetime.date.today()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()}")
    print(f"mlp_loss value_and_grad, {rows:,} rows ({args.chunks} chunks of "
          f"{args.chunk_rows:,}) x {FEATURES} -> {HIDDEN} -> {OUTPUTS}, float32")
    loss = rv.load(MLP).mlp_loss
    data = problem(rows, args.chunk_rows)
    local = [a.compute(scheduler="sync") if isinstance(a, da.Array) else a for a in data]
    grad = loss.value_and_grad(WRT)
    times = {"single process": sample_times(lambda: grad(*local), args.repeats)}
    times.update(rounds_of_times(loss, data, problem(args.chunks * 10, 10), args.chunks,
                                 args.chunk_rows, args.rounds, args.repeats))
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    single, one, two, fixed, ceiling = medians.values()
    for name, seconds in list(medians.items())[:3]:
        print(f"{name:16} {seconds * 1e3:8.1f} ms  {rows / seconds:12,.0f} rows/s "
              f"(median of {len(times[name])})")
    print(f"fixed cost of a call (2 workers, {args.chunks} chunks of 10 rows): "
          f"{fixed * 1e3:.1f} ms")
    print(f"2 workers / 1 worker: {one / two:.2f}x the rows/s (target >= 1.6); "
          f"2 plain processes / 1 on this machine: {ceiling:.2f}x (median of rounds)")
    print(f"dask (1 worker) / single process: {one / single:.2f}x the time (target <= 1.3)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
