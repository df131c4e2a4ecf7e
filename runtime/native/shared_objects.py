"""Object code linked into shared objects, so a warm start loads native code without LLVM.

Consumes the relocatable object code `jit.py` emits for a module; produces, through the
system C compiler driver (`cc`, else `gcc` or `clang`, as `cc -shared -nostdlib ... -lgcc`),
the bytes of a shared object, and later loads such bytes with `dlopen` (ctypes' own) as a
`SharedLibrary` whose `library[symbol]` is the native address of an exported function
(the interface of a JIT library). Importing `llvmlite.binding` loads LLVM, which is slow;
a process whose modules all come from shared objects (a warm start) never does.

- Security: bytes are only ever loaded after `runtime/native/cache.py` returned them, i.e. after
  their MAC under the user's secret verified (nothing another user planted, nothing
  truncated or copied from another key). `SharedLibrary` writes the verified bytes to a
  fresh file (O_EXCL, mode 0600) in a private per-process directory (mode 0700), opens
  that and unlinks it at once: what `dlopen` maps is exactly what was verified.
- Each loaded file name is new, so `dlopen` never mistakes one library for another it
  loaded before; libraries stay loaded for the life of the process (nothing closes
  them), so their files' inodes cannot be reused either.
- Symbols a module leaves undefined (CPython's API for the native call entries, libm,
  libc) resolve against the process when the library is opened, as with the JIT.
- `REVERIE_SHARED_OBJECTS=0`, or no C compiler driver on PATH, turns linking off; modules
  then load through the JIT. Linking runs on a background thread
  (`link_later`), so a cold compile never waits for it; a failure (or a job dropped from
  a full queue) only means the next process loads the object code through the JIT, and
  links it then. The child of an `os.fork` starts with no linking thread and an empty
  queue (the parent links what it had queued), and its own library directory.
- A process killed while libraries were open leaves its directory (and a library file, if
  killed between writing and opening it); the next process that opens a library removes
  the directories of processes that are gone (`runtime/native/orphans.py`).
"""

from __future__ import annotations

import _ctypes  # dlopen and dlsym, which ctypes.CDLL wraps (see SharedLibrary)
import atexit
import contextlib
import ctypes
import functools
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable

from reverie.runtime.native.locks import runtime_lock
from reverie.runtime.native.orphans import is_orphan, owner_pid

LINK_TIMEOUT_S = 60
DIRECTORY_PREFIX = "reverie-so-"  # then the pid and a random part: `_directory_of`
# No start files nor default libraries (linking is much faster without them); only libgcc's
# arithmetic helpers are linked in, everything else resolves from the process when opened.
# Code and read-only data share one segment and the static symbol table is left out
# (`dlsym` reads the dynamic one), so images are smaller: a warm start MACs and writes every
# image it opens (`SharedLibrary`).
LINK_FLAGS = ("-shared", "-nostdlib", "-Wl,-z,noseparate-code", "-s")
MAX_PENDING_LINKS = 8  # more waiting jobs than this: new ones are dropped (best effort)
_DRIVERS = ("cc", "gcc", "clang")
_file_numbers = itertools.count()
_jobs: list[Callable[[], None]] = []
_jobs_lock = runtime_lock()
_worker: threading.Thread | None = None


def enabled() -> bool:
    """Whether modules are linked into, and loaded from, shared objects
    (`REVERIE_SHARED_OBJECTS=0`: neither)."""
    return os.environ.get("REVERIE_SHARED_OBJECTS", "1").strip() != "0"


@functools.cache
def linker() -> str | None:
    """The C compiler driver that links shared objects, or None when there is none."""
    return next(filter(None, map(shutil.which, _DRIVERS)), None)


def link(object_code: bytes) -> bytes | None:
    """The shared object made of relocatable `object_code`, or None if linking failed."""
    import subprocess  # (slow to import, and a warm start never links)

    driver = linker()
    if driver is None:
        return None
    with tempfile.TemporaryDirectory(prefix="reverie-link-") as work:
        source, target = os.path.join(work, "module.o"), os.path.join(work, "module.so")
        with open(source, "wb") as file:
            file.write(object_code)
        try:
            done = subprocess.run([driver, *LINK_FLAGS, "-o", target, source, "-lgcc"],
                                  capture_output=True, timeout=LINK_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode:
            return None
        with open(target, "rb") as file:
            return file.read()


def link_later(job: Callable[[], None]) -> None:
    """Run `job` (which links and stores) on the background linking thread, in order;
    dropped when MAX_PENDING_LINKS jobs are already waiting (a process compiling many
    modules at once, such as a test suite, then links only some of them).

    The thread is not a daemon: at exit, Python waits for the jobs already queued."""
    global _worker
    if linker() is None:
        return
    with _jobs_lock:
        if len(_jobs) >= MAX_PENDING_LINKS:
            return
        _jobs.append(job)
        if _worker is None:
            _worker = threading.Thread(target=_run_jobs, name="reverie-linker")
            _worker.start()


def _run_jobs() -> None:
    """Run queued jobs until none is left, then end the thread."""
    global _worker
    while True:
        with _jobs_lock:
            if not _jobs:
                _worker = None
                return
            job = _jobs.pop(0)
        try:
            job()
        except Exception:  # best effort: the next process loads through the JIT
            pass


def _start_afresh_in_child() -> None:
    """After `os.fork`, in the child: the linking thread was not copied (what it had queued
    is the parent's to link); no jobs, no thread (its lock is new: `runtime/native/locks.py`)."""
    global _worker
    _jobs.clear()
    _worker = None


os.register_at_fork(after_in_child=_start_afresh_in_child)


def wait_for_links() -> None:
    """Block until every queued linking job is done (for tests and benchmarks)."""
    worker = _worker
    while worker is not None:
        worker.join()
        worker = _worker


def _private_directory() -> str:
    """This process's directory for its library files (a fork's child makes its own)."""
    return _directory_of(os.getpid())


@functools.cache
def _directory_of(pid: int) -> str:
    """A new directory (mode 0700, a random name: `mkdir` fails rather than reuse anything)
    for the library files of process `pid` (this one), in $TMPDIR (else /tmp), removed at
    its exit; first, those that crashed processes left there are removed."""
    base = os.environ.get("TMPDIR") or "/tmp"
    _remove_orphan_directories(base)
    directory = os.path.join(base, f"{DIRECTORY_PREFIX}{pid}-{os.urandom(8).hex()}")
    os.mkdir(directory, 0o700)
    atexit.register(_remove_directory, directory, pid)
    return directory


def _remove_directory(directory: str, pid: int) -> None:
    """Remove the (empty: each file is unlinked once opened) library directory of process
    `pid`, at its exit (not at the exit of a fork's child, which copied the handler)."""
    if os.getpid() == pid:
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _remove_orphan_directories(base: str) -> None:
    """Remove, with the files left in them, the library directories in `base` whose
    process is gone (`runtime/native/orphans.py`; never one of a live process)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            pid = owner_pid(DIRECTORY_PREFIX, entry.name)
            with contextlib.suppress(OSError):
                if (pid is not None and entry.is_dir(follow_symlinks=False)
                        and is_orphan(pid, entry.stat(follow_symlinks=False), by_age=False)):
                    _remove_library_directory(entry.path)


def _remove_library_directory(path: str) -> None:
    """Remove directory `path` and the files in it (not following links; OSError if it
    holds a directory, which is not a library directory's)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for entry in os.scandir(fd):
            os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


class SharedLibrary:
    """A shared object opened from bytes that the disk cache verified."""

    def __init__(self, image: bytes) -> None:
        path = os.path.join(_private_directory(), f"{os.getpid()}-{next(_file_numbers)}.so")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(image)
            # the handle, not a ctypes.CDLL: what callers need is addresses, and a CDLL
            # makes a class per library and a function object per symbol looked up, on
            # every warm start
            self._handle = _ctypes.dlopen(path, ctypes.DEFAULT_MODE)
        finally:
            os.unlink(path)

    def __getitem__(self, symbol: str) -> int:
        """The address of the exported function `symbol` (AttributeError if undefined)."""
        try:
            return _ctypes.dlsym(self._handle, symbol)
        except OSError as error:
            raise AttributeError(f"shared object defines no {symbol!r}") from error
