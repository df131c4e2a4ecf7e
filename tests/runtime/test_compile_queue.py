"""The LLVM thread (`runtime/native/compile_queue.py`): per-process LLVM work run ahead, beside
the front end, with the inline path's results and errors.

In this process: the queue's contract with plain jobs (a wait point waits, takes back a
job not started, raises the job's exception; no thread with one CPU or while passes are
captured). In fresh processes with an empty cache (two threads allowed, whatever the
machine): which modules the thread compiles, the same IR as inline, an error raised
ahead surfacing as inline, and no hang at exit or across `os.fork`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reverie.compiler.print_ir import capture
from reverie.runtime.native import compile_queue

ROOT = Path(__file__).parents[2]
CHILD_TIMEOUT_S = 120
LLVM_THREAD = "reverie-llvm"


def run_child(code: str, cache: Path, threads: str = "2") -> dict:
    """Run `code` in a fresh interpreter with an empty cache in `cache` and `threads`
    threads allowed; its last line of output, as JSON."""
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(cache),
                   "REVERIE_NUM_THREADS": threads, "REVERIE_LLVM_THREAD": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S, env=environment, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_NUM_THREADS", "2")
    monkeypatch.setenv("REVERIE_LLVM_THREAD", "1")


def test_a_job_runs_on_the_llvm_thread_and_its_wait_point_waits(two_threads: None) -> None:
    running, release, ran_on = threading.Event(), threading.Event(), []
    key = object()

    def job() -> None:
        running.set()
        release.wait(10)
        ran_on.append(threading.current_thread().name)

    compile_queue.start(key, job)
    assert running.wait(10)
    threading.Timer(0.05, release.set).start()
    compile_queue.wait(key)  # returns once the job is done
    assert ran_on == [LLVM_THREAD]
    compile_queue.start(key, job)  # a key runs once
    compile_queue.wait(key)
    assert ran_on == [LLVM_THREAD]


def test_an_error_raised_ahead_is_raised_at_the_wait_point(two_threads: None) -> None:
    key, running = object(), threading.Event()
    error = ValueError("the helper's IR could not be made")

    def job() -> None:
        running.set()
        raise error

    compile_queue.start(key, job)
    assert running.wait(10)
    with pytest.raises(ValueError, match="could not be made") as raised:
        compile_queue.wait(key)
    assert raised.value is error
    compile_queue.wait(key)  # raised once: a later call computes (and fails) inline


def test_a_job_not_started_is_taken_back_by_its_wait_point(two_threads: None) -> None:
    busy, release, ran = object(), threading.Event(), []
    queued = object()
    compile_queue.start(busy, lambda: release.wait(10))
    compile_queue.start(queued, lambda: ran.append("queued"))
    compile_queue.wait(queued)  # behind `busy`: taken off the queue, not waited for
    release.set()
    compile_queue.wait(busy)
    assert ran == []


def test_a_job_may_wait_for_its_own_key(two_threads: None) -> None:
    key, running, done = object(), threading.Event(), []

    def job() -> None:
        running.set()
        compile_queue.wait(key)  # its own thread: returns at once
        done.append(threading.current_thread().name)

    compile_queue.start(key, job)
    assert running.wait(10)
    compile_queue.wait(key)
    assert done == [LLVM_THREAD]


@pytest.mark.parametrize("setting", ["one thread", "turned off", "a capture"])
def test_no_thread_with_one_cpu_turned_off_or_while_passes_are_captured(
        setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ran, key = [], object()
    monkeypatch.setenv("REVERIE_NUM_THREADS", "1" if setting == "one thread" else "2")
    monkeypatch.setenv("REVERIE_LLVM_THREAD", "0" if setting == "turned off" else "1")
    with capture("llvm-opt") if setting == "a capture" else contextlib.nullcontext():
        assert not compile_queue.enabled()
        compile_queue.start(key, lambda: ran.append(1))
    compile_queue.wait(key)
    assert ran == []
    monkeypatch.setenv("REVERIE_NUM_THREADS", "2")
    monkeypatch.setenv("REVERIE_LLVM_THREAD", "1")
    assert compile_queue.enabled(), "the check must see the thread allowed otherwise"


# A cold compile and gradient of the MLP, recording which thread compiled each LLVM module,
# and the optimised IR of each (the helpers', the entry's, the kernels').
COLD_CHILD = """
import json, threading
import numpy as np
import reverie as rv
from reverie.runtime.native import jit
compiled, compile_module = {}, jit.compile_module
def recording(llvm_ir, *, name, **options):
    module = compile_module(llvm_ir, name=name, **options)
    compiled[name] = [threading.current_thread().name, module.llvm_ir]
    return module
jit.compile_module = recording
kernel = rv.load("examples/mlp.rv")["mlp_loss"]
rng = np.random.default_rng(1)
args = [rng.standard_normal(s) for s in [(8, 3), (8, 2), (3, 5), (5,), (5, 2), (2,)]]
value = kernel(*args)
grads = kernel.grad()(*args)
print(json.dumps({"compiled": compiled, "value": float(value)}))
"""


def test_the_llvm_thread_compiles_the_helpers_and_the_entry_as_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_FIRST_TIER", "0")  # kernels optimised where called (as inline)
    ahead = run_child(COLD_CHILD, tmp_path / "ahead")
    inline = run_child(COLD_CHILD, tmp_path / "inline", threads="1")
    threads = {name: thread for name, (thread, _) in ahead["compiled"].items()}
    assert threads == {"rv_vectorcall": LLVM_THREAD, "rv_gemm_f64": LLVM_THREAD,
                       "rv_pool": LLVM_THREAD,
                       "rv_mlp_loss": "MainThread", "rv_mlp_loss_grad": "MainThread"}
    assert {thread for thread, _ in inline["compiled"].values()} == {"MainThread"}
    assert ({name: ir for name, (_, ir) in ahead["compiled"].items()} ==
            {name: ir for name, (_, ir) in inline["compiled"].items()})
    assert ahead["value"] == inline["value"]


# The matrix helper's IR generator failing: what the first call raises.
FAILING_HELPER_CHILD = """
import json
import numpy as np
import reverie as rv
from reverie.compiler.runtime_library import gemm
def broken(name):
    raise ValueError(f"no IR for {name}")
gemm.helper_module = broken
kernel = rv.load("examples/mlp.rv")["mlp_loss"]
args = [np.ones(s) for s in [(8, 3), (8, 2), (3, 5), (5,), (5, 2), (2,)]]
try:
    kernel(*args)
except Exception as error:
    print(json.dumps([type(error).__name__, str(error)]))
"""


def test_an_error_in_work_run_ahead_surfaces_as_inline(tmp_path: Path) -> None:
    ahead = run_child(FAILING_HELPER_CHILD, tmp_path / "ahead")
    inline = run_child(FAILING_HELPER_CHILD, tmp_path / "inline", threads="1")
    assert ahead == inline == ["ValueError", "no IR for rv_gemm_f64"]


# A source loaded cold, and the process ending while its LLVM thread still works (on the
# host target and the entry, started again just before the end).
EXIT_CHILD = """
import json, threading
import reverie as rv
from reverie.runtime.native import compile_queue
rv.compile("fn f(x: f64[N]) -> f64 { return sum(x * x); }")
compile_queue.start("last", lambda: __import__("time").sleep(0.5))
print(json.dumps([thread.name for thread in threading.enumerate()]))
"""


def test_a_process_that_loads_cold_and_exits_at_once_ends(tmp_path: Path) -> None:
    assert LLVM_THREAD in run_child(EXIT_CHILD, tmp_path)


# Fork while the thread works (just after the load started it); both processes compile
# and differentiate, the child through LLVM of its own, and send their results.
FORK_CHILD = """
import json, os
import numpy as np
import reverie as rv
module = rv.load("examples/mlp.rv")
reading, writing = os.pipe()
pid = os.fork()
kernel = module["mlp_loss"]
args = [np.ones(s) for s in [(8, 3), (8, 2), (3, 5), (5,), (5, 2), (2,)]]
value = float(kernel(*args)) + float(sum(g.sum() for g in kernel.grad()(*args)))
if pid == 0:
    os.write(writing, repr(value).encode())
    os._exit(0)
os.close(writing)
child_value = float(os.read(reading, 100).decode())
_, status = os.waitpid(pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), child_value, value]))
"""


def test_fork_while_the_llvm_thread_works(tmp_path: Path) -> None:
    status, child_value, parent_value = run_child(FORK_CHILD, tmp_path)
    assert status == 0
    assert child_value == parent_value
