"""`collector_paused()`: Python's cyclic garbage collector paused while a compile runs.

A cold compile allocates long-lived objects by the hundred thousand (the IR of every
stage, the classes and tables of the passes it imports). Each collection those
allocations trigger walks the young objects again, and the full collection they end in
walks every object of the process, a visible share of a cold compile (benchmarks/README.md,
"Latency"). What a compile frees is almost all acyclic, so
reference counting frees it at once; the few cycles it leaves are found by the first
collection after it. Nesting and threads are safe: only the outermost pause that found
the collector on turns it back on (so a compile in a second thread that began inside a
first thread's pause may end unpaused), and a collector off when the pause begins stays off.

    with collector_paused():
        ...                       # allocate freely
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with automatic garbage collection off (back on afterwards if it was on)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
