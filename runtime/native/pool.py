"""The process's worker pool, which native kernels run chunks of work on, and the signal
handler that lets a running kernel stop.

Both are the native run time of `compiler/runtime_library/pool_runtime.py` (LLVM IR, compiled once
per process, disk-cached like the helpers): kernels reach them through the helper table
(`abi.py`'s SIGNALS_SLOT, ARM_AT_SLOT, ARM_SLOT, THREADS_SLOT, POOL_SLOT), which
`fill_table` fills. The pool's chunks are claimed, by the workers and by the calling thread
alike, so a worker that is asleep or descheduled (a core busy with another process, with
torch's or OpenBLAS's threads) delays nothing: the caller waits only for chunks a worker
actually took. Workers spin briefly after a job, then sleep on a futex.

The team: `REVERIE_NUM_THREADS` threads (the caller among them), else the CPUs this process
may use (`usable_cpus`: its affinity mask, capped by the cgroup's CPU quota);
`REVERIE_NUM_THREADS=1` starts no worker and leaves the pool's entry 0 (kernels then run
their chunks in order on the calling thread).

Signals: `fill_table` arms the handler (`rv_signals_arm`: in front of CPython's C handler
of SIGINT and the other watched signals); kernels re-arm it as they run, since CPython
puts its own back whenever `signal.signal` is called. A kernel that sees a signal returns
`abi.INTERRUPTED`; its caller then runs the Python handlers (`check_signals`), which
raise `KeyboardInterrupt` (or the handler's own exception), or calls the kernel again
when no handler raises.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os

import numpy as np

from reverie.compiler.call_boundary.abi import ARM_SLOT, POOL_SLOT, SIGNALS_SLOT, THREADS_SLOT
from reverie.runtime.native.artifacts import artifact_key
from reverie.runtime.native.compiler_gate import pool_runtime_module
from reverie.runtime.native.jit_module import Pipeline
from reverie.runtime.native.remembered import host_description, remembered_module

MAX_THREADS = 256
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
_ADDRESS_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_COUNT_CALL = ctypes.CFUNCTYPE(None, ctypes.c_int64)
_NO_ARGUMENT_CALL = ctypes.CFUNCTYPE(None)


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by the cgroup v2 CPU quota
    (`cpu.max`, "quota period" in µs, rounded up; "max": no cap)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open(CGROUP_CPU_MAX, encoding="ascii") as file:
            quota, period = file.read().split()[:2]
    except (OSError, ValueError):
        return cpus
    if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return cpus
    return max(1, min(cpus, math.ceil(int(quota) / int(period))))


def pool_threads() -> int:
    """Threads a kernel may use: `REVERIE_NUM_THREADS`, else the usable CPUs."""
    requested = os.environ.get("REVERIE_NUM_THREADS", "").strip()
    count = int(requested) if requested.isdigit() else usable_cpus()
    return max(1, min(count, MAX_THREADS))


@functools.cache
def run_time_module() -> object:
    """The loaded run-time module (a `JitModule`)."""
    pipeline = Pipeline(speed_level=2, slp_vectorization=False)
    key = artifact_key("helper", "rv_pool", pipeline, host_description())
    return remembered_module(key, pool_runtime_module, name="rv_pool", pipeline=pipeline)


@functools.cache
def pool_entry() -> int:
    """The address of the pool's `rv_pool_run`, its workers started; 0 when one thread is
    wanted (no worker is started)."""
    threads = pool_threads()
    if threads <= 1:
        return 0
    _COUNT_CALL(run_time_module().address("rv_pool_start"))(threads - 1)
    return run_time_module().address("rv_pool_run")


def fill_table(table: np.ndarray) -> None:
    """Fill the run time's slots of the helper table `table` (kept alive by the caller for
    the life of the process: the signal handler writes into it) and arm the handler."""
    module = run_time_module()
    table[SIGNALS_SLOT] = 0
    table[ARM_SLOT] = module.address("rv_signals_arm")
    table[THREADS_SLOT] = pool_threads()
    table[POOL_SLOT] = pool_entry()
    _ADDRESS_CALL(module.address("rv_signals_init"))(table.ctypes.data)
    arm_signals()


def arm_signals() -> None:
    """Put the kernels' signal handler in front of the C handler of each watched signal
    that has one (again, where `signal.signal` replaced it)."""
    _NO_ARGUMENT_CALL(run_time_module().address("rv_signals_arm"))()


_check = ctypes.pythonapi.PyErr_CheckSignals
_check.restype, _check.argtypes = ctypes.c_int, []


def check_signals() -> None:
    """Run the Python handlers of the signals that arrived (on the main thread): raises
    what a handler raises (`KeyboardInterrupt` for SIGINT's default one)."""
    _check()
