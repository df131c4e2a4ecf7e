"""The LLVM thread: per-process LLVM work started ahead of need, beside the front end.

llvmlite serialises every call into LLVM behind one process-wide lock, but ctypes releases
the GIL during each call, so ONE background thread can run LLVM while the main thread runs
Python (parsing, lowering, the adjoint, building LLVM IR text). This module runs, on that
thread, work that no kernel's code decides and that is computed once per process anyway,
and the optimised modules of kernels whose first tier runs meanwhile:

- the native call entry's module (`helpers._call_entry_module`), started by
  `prepare_native_code` when a native compile becomes likely (a module whose function
  table is not in the disk cache: `reverie/module.py`) or by `prepare_helpers` (a native
  kernel made: `runtime/native/native_kernel.py`). `prepare_native_code` first sets up LLVM's host
  target on the calling thread: that is importing `llvmlite.binding`, Python work
  holding the GIL, which on the thread costs more CPU than inline and gains nothing
  (benchmarks/README.md, "Latency", "The host target stays on the main thread");
- the run-time helpers a kernel's loop program calls (`helpers._helper`, the BLAS
  dispatch of matrix products), started by `prepare_helpers` as soon as that program is
  made, while its LLVM IR is generated;
- a cold kernel's optimised module (`native_kernel.py`, `first_tier.py`), started once
  its first tier is loaded, and swapped in when made.

Jobs run most urgent first (`FIRST_CALL`: the pool and the helpers a first call waits for;
`AFTER_FIRST_CALL`: the call entry, made once its result is out; `OPTIMISED`), in the order
queued within a priority. Each job is the memoised function the main thread would otherwise
call inline, so results are those of the inline path, bit for bit. `wait(key)` is the wait
point, called where the result is first needed (`helpers.load_helpers`,
`helpers.call_entry`): a job not started yet is taken off the queue (the caller then
computes it itself), a running one is waited for, and an exception it raised is raised there
(the same object: type and message as inline; the memo keeps no failure, so a later call
tries again).

No thread where it would not help or could not be safe: `REVERIE_NUM_THREADS=1` or a
single usable CPU (`pool.pool_threads`), `REVERIE_LLVM_THREAD=0` (to compare, on a quiet
machine, what the overlap saves), or while compiler passes are printed or captured
(`print_ir.observing`: the jobs would print from another thread, in another order) —
`start` then does nothing and every result is computed where it is needed (a kernel then
has no first tier). The thread is not a daemon; once the main thread has finished it runs
only the `OPTIMISED` jobs still queued (interpreter exit waits for them, so that the disk
cache holds every kernel's optimised module for the next process). Before `os.fork` the
running job is waited for and the queue held, so a child never inherits a held LLVM lock;
the child keeps only the `OPTIMISED` jobs, on a thread of its own (what else was queued is
computed where it is needed), the parent resumes.

A warm start (every module from the disk cache) never imports this module.

    compile_queue.prepare_helpers(frozenset({"rv_gemm_f64"}))  # as the loop program is made
    compile_queue.wait(helpers.helper_ahead("rv_gemm_f64"))  # then helpers._helper: memoised
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable

from reverie.compiler.print_ir import observing
from reverie.runtime.native import helpers, jit, pool
from reverie.runtime.native.locks import runtime_condition
from reverie.runtime.native.pool import pool_threads

_state = runtime_condition()
# Priorities, most urgent first: what a kernel's first call waits for (the worker pool, the
# helpers it calls); what is wanted once its first result is out (the native call entry);
# a kernel's optimised module (its first tier runs meanwhile, `native_kernel.py`): the
# only jobs run even after the main thread finished (interpreter exit waits for them), so
# that the disk cache holds what the next process needs.
FIRST_CALL, AFTER_FIRST_CALL, OPTIMISED = range(3)
_queue: dict[Hashable, tuple[int, Callable[[], object]]] = {}  # not started: priority, job
_seen: set[Hashable] = set()  # every key ever started (a key runs at most once)
_failures: dict[Hashable, BaseException] = {}
_running: Hashable | None = None
_worker: threading.Thread | None = None
_forking = False


def enabled() -> bool:
    """Whether work may run on the LLVM thread now (more than one usable CPU, not turned
    off, nothing printing or capturing compiler passes)."""
    return (pool_threads() > 1 and os.environ.get("REVERIE_LLVM_THREAD", "1").strip() != "0"
            and not observing())


def start(key: Hashable, job: Callable[[], object], priority: int = FIRST_CALL) -> None:
    """Queue `job` (a memoised computation) under `key` on the LLVM thread, after the jobs
    queued at the same or a more urgent `priority`, unless a job with that key was
    started before or the thread is not `enabled`."""
    global _worker
    if not enabled():
        return
    with _state:
        if key in _seen:
            return
        _seen.add(key)
        _queue[key] = (priority, job)
        if _worker is None and not _forking:
            _worker = threading.Thread(target=_run_jobs, name="reverie-llvm")
            _worker.start()


def wait(key: Hashable) -> None:
    """Make sure the job under `key` is not running elsewhere: take it off the queue if it
    has not started (the caller computes it), wait for it if it runs, and raise what it
    raised. Nothing for a key never started, or when called from the job's own thread."""
    with _state:
        if _queue.pop(key, None) is not None:
            return
        if threading.current_thread() is _worker:
            return
        while _running == key:
            _state.wait()
        failure = _failures.pop(key, None)
    if failure is not None:
        raise failure


def finish() -> None:
    """Wait until the LLVM thread has run every job queued (where there is one and this is
    not it): for measurements and tests, which count what the jobs leave."""
    with _state:
        while (_queue or _running is not None) and _worker is not None \
                and _worker is not threading.current_thread():
            _state.wait()


def _run_jobs() -> None:
    """Run queued jobs in order until none is left (or the main thread has finished)."""
    global _running, _worker
    while True:
        with _state:
            key = _next_job()
            if key is None:
                _worker = None
                _state.notify_all()
                return
            _, job = _queue.pop(key)
            _running = key
        try:
            job()
        except BaseException as error:  # raised again by `wait`, where it is needed
            with _state:
                _failures[key] = error
        finally:
            with _state:
                _running = None
                _state.notify_all()


def _next_job() -> Hashable | None:
    """The key of the job to run next (the caller holds `_state`): the first queued of the
    most urgent priority (once the main thread has finished, of `OPTIMISED` only); None:
    stop."""
    wanted = [(priority, order, key) for order, (key, (priority, _)) in enumerate(_queue.items())
              if threading.main_thread().is_alive() or priority == OPTIMISED]
    return None if _forking or not wanted else min(wanted)[2]


def _before_fork() -> None:
    """Hold the queue and wait for the running job (and its thread), so that no LLVM lock
    is held when the process is copied."""
    global _forking
    with _state:
        _forking = True
        worker = _worker
        if worker is threading.current_thread():
            return
        while _running is not None:
            _state.wait()
    if worker is not None:
        worker.join()


def _after_fork_in_parent() -> None:
    """Resume: a new thread runs what is still queued."""
    global _forking, _worker
    with _state:
        _forking = False
        if _queue:
            _worker = threading.Thread(target=_run_jobs, name="reverie-llvm")
            _worker.start()


def _after_fork_in_child() -> None:
    """Start afresh: no thread, nothing queued (computed where needed) but the `OPTIMISED`
    jobs (the parent's kernels' optimised modules, which the child's copies of those
    kernels swap in too), on a new thread; the condition's lock is new
    (`runtime/native/locks.py`)."""
    global _running, _worker, _forking
    for key in [key for key, (priority, _) in _queue.items() if priority != OPTIMISED]:
        del _queue[key]
    _seen.intersection_update(_queue)
    _failures.clear()
    _running = _worker = None
    _forking = False
    if _queue:
        _worker = threading.Thread(target=_run_jobs, name="reverie-llvm")
        _worker.start()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def prepare_native_code() -> None:
    """Where a cold compile becomes likely (a module's function table not in the disk
    cache): set up LLVM's host target here, then start the worker pool's and the native
    call entry's modules (kept in the disk cache, so a later process loads them)."""
    if not enabled():
        return  # everything where it is first needed, as without this module
    jit.host_target()
    prepare_helpers(frozenset())


def prepare_helpers(names: frozenset[str]) -> None:
    """Start the worker pool's module and the run-time helpers `names` (a kernel's loop
    program calls them), which its first call waits for, then the native call entry's
    module, made after that call; each unless started before. (No host target here: a
    kernel whose code the disk cache holds loads them from shared objects, without
    LLVM.)"""
    start(helpers.POOL_AHEAD, pool.run_time_module)
    for name in sorted(names):
        start(helpers.helper_ahead(name), lambda name=name: helpers._helper(name))
    start(helpers.CALL_ENTRY_AHEAD, helpers.call_entry, AFTER_FIRST_CALL)
