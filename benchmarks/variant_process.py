"""One benchmark variant in a process of its own, and the checks that the other ones idle.

`run.py` starts one child per (workload, variant, thread setting) — `run.py --child W3
"jax jit"` — and keeps them all alive while it measures the workload. The child
(`serve`) imports its framework and makes the workload's inputs, says it is ready, then
answers one JSON line per request read from its standard input:

- `{"prepare": ...}`: build the variant and time its first call (setup, compilation and the
  call), then save the result (the NumPy reference) or compare it with a saved reference;
- `{"warm": ...}`: make a warm-up call and choose how many calls make a sample (sent once
  the child has gone quiet: Reverie's default team compiles the optimised kernels on a
  background thread after a first call made with quickly compiled ones);
- `{"sample": true}`: time one sample (that many calls, the garbage collector off) and
  answer the seconds per call.

Between requests a child is blocked reading its pipe. Its frameworks' thread pools may go
on spinning a while after work (OpenBLAS's threads for `OPENBLAS_THREAD_TIMEOUT`, libgomp's
for `GOMP_SPINCOUNT`, XLA's and Reverie's workers briefly), so the parent proves them idle
instead of trusting them: `wait_quiet` polls /proc until no thread of any child is running
or runnable (state R) before it sends the next request, and `cpu_seconds` (each thread's
schedstat run time) tells how much CPU the idle children took while another one was timed.
The children's environments are left as a user's would be: no pool is resized or set to
wait passively.
"""

from __future__ import annotations

import gc
import json
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from workloads import WORKLOADS, as_numpy, relative_error
from workloads.core import import_jax, import_torch

FORWARD_LABEL = "reverie forward"
QUIET_POLL_SECONDS = 0.0005
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ChildSpec:
    """Which variant a child runs: the workload's key, the variant's label, its table row
    ("reverie", "reverie 1 thread", "numpy", "torch", "torch.compile", "jax", "reverie
    forward") and `REVERIE_NUM_THREADS` for it (None: unset, the default team)."""

    workload: str
    label: str
    row: str
    threads: str | None = None

    @property
    def title(self) -> str:
        """The label, with the thread setting where one is set."""
        return self.label + (f", {self.threads} thread" if self.threads else "")


# ---------------------------------------------------------------- the child


def short_reason(error: BaseException) -> str:
    """The first line of an exception, prefixed by its type."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:160] if lines else ''}"


def serve(key: str, label: str, tiny: bool) -> None:
    """The child's life: build workload `key`'s variant `label` on request, then time
    samples of it, answering on the standard output as it was when the child started (the
    variant's own prints, C libraries' included, go to the standard error)."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(**fields: object) -> None:
        protocol.write(json.dumps(fields) + "\n")

    try:
        build, peer, rtol = resolve(key, label, tiny)
    except Exception as error:  # a peer that cannot even start is reported, not fatal
        answer(failure="failed: " + short_reason(error))
        return
    answer(ready=True, peer=peer, threads=reverie_threads())
    thunk, calls = None, 0
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "prepare" in request:
                thunk, reply = prepare(build, **request["prepare"])
            elif "warm" in request and thunk is not None:
                calls = calls_per_sample(thunk, request["warm"]["sample_seconds"])
                reply = {"calls": calls}
            elif "sample" in request and calls:
                reply = {"seconds": sample(thunk, calls)}
            else:
                reply = {"failure": f"unexpected request {line.strip()[:80]}"}
        except Exception as error:
            reply = {"failure": "failed: " + short_reason(error)}
        answer(**reply)
        if "failure" in reply:
            return


def resolve(key: str, label: str, tiny: bool) -> tuple[Callable[[], Callable], str, float]:
    """Workload `key`'s variant `label` (or its Reverie forward): its `build`, its peer and
    the workload's tolerance; the peer's framework is imported here, so that the first call
    times building and calling, not importing."""
    workload = WORKLOADS[key](tiny=tiny)
    if label == FORWARD_LABEL:
        return workload.forward, "reverie", workload.rtol
    variant = next((v for v in workload.variants if v.label == label), None)
    if variant is None:
        raise LookupError(f"{key} has no variant {label!r}")
    if variant.peer.startswith("torch"):
        import_torch()
    elif variant.peer == "jax":
        import_jax()
    return variant.build, variant.peer, workload.rtol


def reverie_threads() -> int:
    """The team Reverie's kernels run on in this process (`REVERIE_NUM_THREADS` or the
    usable CPUs)."""
    from reverie.runtime.native.pool import pool_threads

    return pool_threads()


def prepare(build: Callable[[], Callable], reference: str | None, save: str | None
            ) -> tuple[Callable, dict[str, object]]:
    """Build the variant and time its first call; save its result to `save` or compare it
    with the one saved at `reference` (the relative error)."""
    start = time.perf_counter()
    thunk = build()
    value = thunk()
    first = time.perf_counter() - start
    error = None
    if save is not None:
        np.savez(save, *as_numpy(value))
    if reference is not None:
        with np.load(reference) as saved:
            error = relative_error(value, tuple(saved[name] for name in saved.files))
    return thunk, {"first": first, "error": error}


def calls_per_sample(thunk: Callable, sample_seconds: float) -> int:
    """Time a warm-up call; the calls that make a sample of about `sample_seconds`."""
    start = time.perf_counter()
    thunk()
    return max(1, math.ceil(sample_seconds / max(time.perf_counter() - start, 1e-9)))


def sample(thunk: Callable, calls: int) -> float:
    """Seconds per call over `calls` calls, the garbage collector collected before and off
    during them."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            thunk()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


# ---------------------------------------------------------------- the parent's side


class VariantProcess:
    """A running child, spoken to one request at a time."""

    def __init__(self, spec: ChildSpec, command: list[str], environment: dict[str, str],
                 log: Path) -> None:
        self.spec = spec
        self.log = log
        with open(log, "w") as log_file:
            self.process = subprocess.Popen(command, env=environment, text=True, bufsize=1,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log_file)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def request(self, message: dict[str, object], timeout: float) -> dict[str, object]:
        """Send `message` and wait up to `timeout` seconds for the answer."""
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return self.died()
        return self.receive(timeout)

    def receive(self, timeout: float) -> dict[str, object]:
        """The child's next answer; a failure when it dies or stays silent `timeout` s."""
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not readable:
            self.close()
            return {"failure": f"failed: no answer in {timeout:.0f} s"}
        line = self.process.stdout.readline()
        return json.loads(line) if line else self.died()

    def died(self) -> dict[str, object]:
        """The failure of a child that stopped answering: the last line it wrote."""
        code = self.process.wait()
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return {"failure": f"failed: exited with {code}" + (f": {lines[-1][:160]}"
                                                            if lines else "")}

    def close(self) -> None:
        """End the child (its standard input closed, then killed if it lingers)."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()


def thread_files(pid: int, name: str) -> list[str]:
    """The contents of /proc/PID/task/*/NAME (threads that end meanwhile left out)."""
    contents = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/{name}") as file:
                contents.append(file.read())
        except OSError:
            continue
    return contents


def running_threads(pid: int) -> int:
    """How many of a process's threads are running or waiting for a CPU (state R)."""
    return sum(1 for stat in thread_files(pid, "stat")
               if stat.rpartition(")")[2].split()[:1] == ["R"])


def cpu_seconds(pid: int) -> float:
    """CPU time a process's living threads have run: their schedstat run times (ns), or
    their utime + stime (clock ticks) where the kernel keeps no schedstat."""
    schedstats = thread_files(pid, "schedstat")
    if schedstats:
        return sum(int(text.split()[0]) for text in schedstats) / 1e9
    ticks = 0
    for stat in thread_files(pid, "stat"):
        fields = stat.rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / CLOCK_TICKS


def wait_quiet(pids: list[int], limit: float) -> tuple[float, list[int]]:
    """Poll until no thread of `pids` is in state R, at most `limit` seconds: the seconds
    waited and the processes still busy then."""
    start = time.perf_counter()
    busy = [pid for pid in pids if running_threads(pid)]
    while busy and time.perf_counter() - start < limit:
        time.sleep(QUIET_POLL_SECONDS)
        busy = [pid for pid in busy if running_threads(pid)]
    return time.perf_counter() - start, busy
