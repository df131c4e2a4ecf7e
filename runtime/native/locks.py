"""The run time's locks, made safe across `os.fork` in one place.

`os.fork` copies the process with only the thread that forked: a lock another thread held
at that moment stays held in the child for ever, and the child's first compile or call
that takes it hangs. So every lock of the run time is made here (`runtime_lock`,
`runtime_condition`) and kept in one registry, and one fork handler:

- before the fork, waits until no thread is inside LLVM (it takes llvmlite's own lock,
  which every call into LLVM holds, once `llvmlite.binding` is imported), so the child
  never inherits LLVM's internal state half-changed nor one of its mutexes held;
- in the child, reinitialises every registered lock (unheld, no waiters), as the standard
  library does for its own locks after a fork; llvmlite's lock is released in the
  child and in the parent.

A lock made later (an `LruCache`'s, say) is covered as soon as it is made. Work a thread
had begun under a lock is not resumed in the child (only the forking thread runs there):
state such as the compile queue's (`compile_queue.py`) and the linking queue's
(`shared_objects.py`) is reset by those modules' own handlers. One lock is beyond reach:
Python's lock on a module another thread is importing at that moment (the compiler's
modules are imported on first use), so a process forking beside a compiling thread
should compile once first.

    LOCK = runtime_lock(reentrant=True)  # instead of threading.RLock()
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import weakref
from typing import Any

_LLVMLITE_FFI = "llvmlite.binding.ffi"
# each has `_at_fork_reinit`, the standard library's way to make a lock new after a fork
_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()
_held_across_fork: list[Any] = []  # llvmlite's lock, taken before the fork


def runtime_lock(*, reentrant: bool = False) -> _thread.LockType | _thread.RLock:
    """A new `threading.Lock` (or `RLock` if `reentrant`), reinitialised in a fork's child."""
    lock = threading.RLock() if reentrant else threading.Lock()
    _REGISTERED.add(lock)
    return lock


def runtime_condition() -> threading.Condition:
    """A new `threading.Condition`, reinitialised (unheld, no waiters) in a fork's child."""
    condition = threading.Condition()
    _REGISTERED.add(condition)
    return condition


def _llvm_lock() -> Any | None:
    """llvmlite's lock around every call into LLVM (a context manager), or None while
    `llvmlite.binding` is not imported (then no thread can be inside LLVM)."""
    ffi = sys.modules.get(_LLVMLITE_FFI)
    return None if ffi is None else ffi.lib._lock


def _before_fork() -> None:
    """Wait until no thread is inside LLVM, and keep it so until the fork is done."""
    lock = _llvm_lock()
    if lock is not None:
        lock.__enter__()
        _held_across_fork.append(lock)


def _release_llvm() -> None:
    """Let LLVM be called again (in the parent, and in the child by its one thread)."""
    while _held_across_fork:
        _held_across_fork.pop().__exit__(None, None, None)


def _after_fork_in_child() -> None:
    """Every registered lock new (threads that held one were not copied); LLVM free."""
    for lock in list(_REGISTERED):
        lock._at_fork_reinit()
    _release_llvm()


# Registered when this module is first imported, before any module that makes its locks
# here registers its own handler: `before` handlers run in the reverse order, so
# `compile_queue`'s (which waits for the LLVM thread's job) runs before LLVM is held.
os.register_at_fork(before=_before_fork, after_in_parent=_release_llvm,
                    after_in_child=_after_fork_in_child)
