"""The process's worker pool, which native kernels call to run chunks of work on threads.

The pool is OpenMP's run time, libgomp (GCC's; found as `libgomp.so.1`, the copy on the
library path, which NumPy and torch wheels also carry). Generated code calls its
`GOMP_parallel(fn, data, threads, 0)`, the entry GCC's own `#pragma omp parallel` compiles
to: every thread of the team (the caller among them) runs `fn(data)`, and it returns when
all have. libgomp creates a team's threads on first use and keeps them parked between calls
(spinning briefly, then sleeping), one team per calling thread, so kernels called from
several Python threads at once each get their own. It is used rather than a hand-written
pool because it is a well-kept library with a plain C ABI: the JIT code reaches it through
an address in the helper table (`pool_entry`), so nothing is linked by name and a process
without libgomp still runs every kernel, on one thread.

The pool's threads wait passively (`OMP_WAIT_POLICY=PASSIVE`, read by libgomp when it is
loaded, unless the user set it or `GOMP_SPINCOUNT`): a parked thread sleeps instead of
spinning for a while after each parallel region. Waking it costs some microseconds, little
beside the milliseconds a split loop takes; spinning, on a machine whose cores are shared,
took the CPU the calling thread needed between kernels (W3 ran 2-3x slower, measured).
The system's copy is loaded by path, so the pool keeps these settings where torch has already
loaded the copy it bundles; a torch imported afterwards links to the pool's copy (the
dynamic loader matches libraries by name), and its OpenMP threads then wait passively too.

`REVERIE_NUM_THREADS` caps the threads a kernel uses (default: the CPUs this process may
run on); `REVERIE_NUM_THREADS=1` runs the one-thread code paths and never starts the pool.
"""

from __future__ import annotations

import _ctypes  # dlopen and dlsym, which ctypes.CDLL wraps (see pool_entry)
import ctypes
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager

MAX_THREADS = 256


def pool_threads() -> int:
    """Threads a kernel may use: `REVERIE_NUM_THREADS`, else the usable CPUs."""
    requested = os.environ.get("REVERIE_NUM_THREADS", "").strip()
    count = int(requested) if requested.isdigit() else len(os.sched_getaffinity(0))
    return max(1, min(count, MAX_THREADS))


@functools.cache
def pool_entry() -> int:
    """The address of libgomp's `GOMP_parallel`, or 0 when libgomp cannot be loaded (or one
    thread is wanted: the pool is then never loaded). Opened with ctypes' own `dlopen` and
    `dlsym`: a `ctypes.CDLL` would build a class and a function object for one address
    (0.6-0.9 ms of CPU in a warm start against 0.4-0.5)."""
    if pool_threads() <= 1:
        return 0
    for name in (*_system_copies(), "libgomp.so.1", None):
        if name is None:  # the last resort: ctypes.util imports subprocess (~10 ms)
            from ctypes.util import find_library

            name = find_library("gomp")
        if not name:
            continue
        try:
            with _passive_waiting():
                library = _ctypes.dlopen(name, ctypes.DEFAULT_MODE)  # never closed
            return _ctypes.dlsym(library, "GOMP_parallel")
        except OSError:
            continue
    return 0


def _system_copies() -> list[str]:
    """Paths of the system's libgomp (its multiarch and lib64 folders). Loading it by path
    gives this pool its own copy even where torch has loaded the one it bundles (with
    spinning threads): the dynamic loader matches a bare `libgomp.so.1` to that copy."""
    folders = [f"/usr/lib/{os.uname().machine}-linux-gnu", f"/lib/{os.uname().machine}-linux-gnu",
               "/usr/lib64", "/lib64", "/usr/lib"]
    return [path for path in (os.path.join(f, "libgomp.so.1") for f in folders)
            if os.path.exists(path)]


@contextmanager
def _passive_waiting() -> Iterator[None]:
    """`OMP_WAIT_POLICY=PASSIVE` in the environment for the with-block (while libgomp
    loads and reads it), unless the user chose a waiting policy."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        del os.environ["OMP_WAIT_POLICY"]
