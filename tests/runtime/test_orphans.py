"""What killed processes leave behind is removed by the next process (runtime/native/orphans.py).

A process SIGKILLed while writing a disk-cache entry leaves its `.tmp-<pid>-…` file; one
killed while it had shared objects open leaves its `reverie-so-<pid>-…` directory. The
next process that stores in that cache, or opens its first library, removes them, and
never what a live process still uses (however old) nor what changed a moment ago.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reverie.runtime.native import cache
from reverie.runtime.native.orphans import DEAD_OWNER_QUIET_S, ORPHAN_AGE_S

ROOT = Path(__file__).parents[2]
# Stores an entry, stopped after writing its temporary file (before the rename).
STOPPED_WRITER = """
import os, time
from reverie.runtime.native import cache
def stop(*args, **keywords):
    print("written", flush=True)
    time.sleep(600)
os.replace = stop
cache.store("victim", b"x" * 1000)
"""
# Opens its library directory, with a library file written but not yet unlinked in it.
STOPPED_LOADER = """
import os, time
from reverie.runtime.native import shared_objects
directory = shared_objects._private_directory()
open(os.path.join(directory, f"{os.getpid()}-0.so"), "wb").close()
print("written", flush=True)
time.sleep(600)
"""
SWEEPER = """
import os
from reverie.runtime.native import cache, shared_objects
cache.store("sweeper", b"y")
print(shared_objects._private_directory())
"""


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    """A fresh cache directory and temporary folder for the processes of one test."""
    (tmp_path / "tmp").mkdir()
    return {**os.environ, "REVERIE_CACHE_DIR": str(tmp_path / "cache"),
            "TMPDIR": str(tmp_path / "tmp")}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """The processes a test starts, killed at its end if still running."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def start_stopped(script: str, environment: dict[str, str],
                  processes: list[subprocess.Popen]) -> subprocess.Popen:
    """Start `script` and wait until it has written what it leaves behind."""
    process = subprocess.Popen([sys.executable, "-c", script], env=environment, cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    processes.append(process)
    assert process.stdout is not None and process.stdout.readline() == "written\n"
    return process


def kill(process: subprocess.Popen) -> None:
    """SIGKILL `process` (no handler, no exit code runs) and reap it."""
    process.send_signal(signal.SIGKILL)
    process.wait()


def age(path: Path, seconds: float) -> None:
    """Make `path` look unchanged for `seconds`."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def sweep(environment: dict[str, str]) -> Path:
    """Start a process that stores an entry and opens its library directory; that
    directory's path (removed at its exit)."""
    done = subprocess.run([sys.executable, "-c", SWEEPER], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    return Path(done.stdout.strip())


def temporary_files(root: Path, pid: int) -> list[Path]:
    """The temporary files process `pid` left in the cache `root`."""
    return list(root.rglob(f".tmp-{pid}-*"))


def test_a_killed_writer_s_temporary_file_is_removed_and_a_live_one_s_kept(
        environment: dict[str, str], processes: list[subprocess.Popen]) -> None:
    root = Path(environment["REVERIE_CACHE_DIR"])
    killed = start_stopped(STOPPED_WRITER, environment, processes)
    live = start_stopped(STOPPED_WRITER, environment, processes)
    kill(killed)
    left, writing = temporary_files(root, killed.pid), temporary_files(root, live.pid)
    assert len(left) == 1 and len(writing) == 1
    for path in (*left, *writing):
        age(path, DEAD_OWNER_QUIET_S + 30)
    sweep(environment)
    assert not left[0].exists()
    assert writing[0].exists()


def test_temporary_files_go_when_their_writer_is_gone_a_while_or_untouched_an_hour(
        environment: dict[str, str]) -> None:
    root = Path(environment["REVERIE_CACHE_DIR"])
    assert cache.store("a first entry", b"z", root=root)
    dead_pid = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that is gone
    dead_pid.wait()
    files = {name: root / name for name in (
        f".tmp-{dead_pid.pid}-quiet", f".tmp-{dead_pid.pid}-just-written",
        f".tmp-{os.getpid()}-an-hour-old", f".tmp-{os.getpid()}-fresh", ".tmp-0a1b2c-old",
        ".tmp-0a1b2c")}
    for path in files.values():
        path.write_bytes(b"partial")
    age(files[f".tmp-{dead_pid.pid}-quiet"], DEAD_OWNER_QUIET_S + 30)
    age(files[f".tmp-{os.getpid()}-an-hour-old"], ORPHAN_AGE_S + 60)
    age(files[".tmp-0a1b2c-old"], ORPHAN_AGE_S + 60)
    sweep(environment)
    kept = sorted(name for name, path in files.items() if path.exists())
    assert kept == sorted([f".tmp-{dead_pid.pid}-just-written", f".tmp-{os.getpid()}-fresh",
                           ".tmp-0a1b2c"])


def test_a_killed_process_s_library_directory_is_removed_and_a_live_one_s_kept(
        environment: dict[str, str], processes: list[subprocess.Popen]) -> None:
    folder = Path(environment["TMPDIR"])
    killed = start_stopped(STOPPED_LOADER, environment, processes)
    live = start_stopped(STOPPED_LOADER, environment, processes)
    just_killed = start_stopped(STOPPED_LOADER, environment, processes)
    for process in (killed, just_killed):
        kill(process)
    directories = {p: next(folder.glob(f"reverie-so-{p.pid}-*")) for p in processes}
    for process in (killed, live):
        age(directories[process], DEAD_OWNER_QUIET_S + 30)
    age(directories[live], ORPHAN_AGE_S + 60)  # a live process's, however old
    own = sweep(environment)
    assert not directories[killed].exists()
    assert directories[live].exists() and directories[just_killed].exists()
    assert own.parent == folder and not own.exists()  # its own, removed at its exit


# A fork's child that exits normally runs the exit handlers it copied: the parent's
# library directory must survive that.
FORK_EXITS = """
import os, sys
from reverie.runtime.native import shared_objects
directory = shared_objects._private_directory()
pid = os.fork()
if pid == 0:
    child_directory = shared_objects._private_directory()
    sys.exit(0 if child_directory != directory else 1)
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(status, os.path.isdir(directory))
"""


def test_a_fork_s_child_has_its_own_directory_and_leaves_the_parent_s(
        environment: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", FORK_EXITS], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["0", "True"]
    assert not list(Path(environment["TMPDIR"]).iterdir())  # both removed at exit


def test_import_reverie_removes_nothing_yet(environment: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, reverie; print(sorted("
                           "m for m in sys.modules if m.endswith('orphans')))"],
                          env=environment, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"
