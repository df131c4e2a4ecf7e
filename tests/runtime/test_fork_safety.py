"""`os.fork` while other threads compile (runtime/native/locks.py).

The child of a fork has only the forking thread; a lock another thread held at that moment
would stay held there for ever. Every run-time lock is reinitialised in the child, and a
fork waits until no thread is inside LLVM, so the child compiles and calls kernels of its
own. Each scenario runs in a fresh interpreter (a hang must not hang the suite): a child
that does not finish within CHILD_LIMIT_S prints its threads' stacks and exits with 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT_TIMEOUT_S = 300

# What every script starts with: a child's work (compile and call a kernel no thread
# compiled before) and the fork that runs it and reports how the child ended.
PRELUDE = """
import faulthandler, json, os, threading, time
import numpy as np
import reverie as rv
CHILD_LIMIT_S = 60

def compile_and_call(number):
    module = rv.compile(f"fn h(x: f64[N]) -> f64 {{ return sum(x * x) + {number}.25; }}")
    return float(module["h"](np.ones(4))) == 4 + number + 0.25

def fork_and_wait(number):
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(CHILD_LIMIT_S, exit=True)
        os._exit(0 if compile_and_call(number) else 3)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

compile_and_call(0)  # every compiler module imported (an import under way is Python's limit)
"""


def run_script(body: str, cache: Path) -> object:
    """Run PRELUDE + `body` in a fresh interpreter; the JSON its last output line holds."""
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(cache),
                   "REVERIE_NUM_THREADS": "2", "REVERIE_LLVM_THREAD": "1"}
    result = subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True,
                            text=True, timeout=SCRIPT_TIMEOUT_S, env=environment, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# A thread compiles and calls new kernels without pause; the main thread forks five times
# meanwhile (the issue: 4 of 4 children hung on the compile lock held by that thread).
WHILE_A_THREAD_COMPILES = """
stop = threading.Event()

def compile_new_kernels():
    number = 100
    while not stop.is_set():
        number += 1
        compile_and_call(number)

worker = threading.Thread(target=compile_new_kernels)
worker.start()
statuses = []
for number in range(1, 6):
    time.sleep(0.05 * number)
    statuses.append(fork_and_wait(number))
stop.set()
worker.join()
print(json.dumps(statuses))
"""


def test_children_forked_while_a_thread_compiles_compile_and_call(tmp_path: Path) -> None:
    assert run_script(WHILE_A_THREAD_COMPILES, tmp_path) == [0] * 5


# Another thread holds `lock` (made by the expression LOCK) when the process forks.
WHILE_A_LOCK_IS_HELD = """
held, release = threading.Event(), threading.Event()

def hold():
    with LOCK:
        held.set()
        release.wait()

threading.Thread(target=hold).start()
held.wait()
status = fork_and_wait(1)
release.set()
print(json.dumps(status))
"""


def test_a_child_forked_while_the_compile_lock_is_held_compiles(tmp_path: Path) -> None:
    body = WHILE_A_LOCK_IS_HELD.replace(
        "LOCK", "__import__('reverie.runtime.native.helpers').runtime.native.helpers.LOCK")
    assert run_script(body, tmp_path) == 0


# Another thread is inside LLVM (holds llvmlite's lock, as every call into LLVM does) for
# half a second after the fork was asked for: the fork waits until it is out.
WHILE_A_THREAD_IS_INSIDE_LLVM = """
from llvmlite.binding import ffi
inside, asked = threading.Event(), threading.Event()
left_at = []

def be_inside_llvm():
    with ffi.lib._lock:
        inside.set()
        asked.wait()
        time.sleep(0.5)
        left_at.append(time.monotonic())

threading.Thread(target=be_inside_llvm).start()
inside.wait()
asked.set()
status = fork_and_wait(1)
print(json.dumps([status, time.monotonic() >= left_at[0]]))
"""


def test_a_fork_waits_until_no_thread_is_inside_llvm(tmp_path: Path) -> None:
    assert run_script(WHILE_A_THREAD_IS_INSIDE_LLVM, tmp_path) == [0, True]


# Locks made after start-up, through the registry and by an LruCache, each held by another
# thread at the fork; the child takes every one (within a second).
NEW_LOCKS_HELD = """
from reverie.runtime.native import locks
from reverie.runtime.native.lru import LruCache
cache = LruCache(4)
made = [locks.runtime_lock(), locks.runtime_lock(reentrant=True), locks.runtime_condition(),
        cache._lock]
held, release = threading.Event(), threading.Event()

def hold_all():
    for lock in made:
        lock.acquire()
    held.set()
    release.wait()

threading.Thread(target=hold_all, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    taken = [lock.acquire(timeout=1) for lock in made]
    os._exit(0 if all(taken) else 1)
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
release.set()
print(json.dumps(status))
"""


def test_every_runtime_lock_is_new_in_a_forked_child(tmp_path: Path) -> None:
    assert run_script(NEW_LOCKS_HELD, tmp_path) == 0
