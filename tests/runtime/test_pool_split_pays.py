"""The pool splits a chunk function's jobs only while splitting pays
(`compiler/runtime_library/pool_runtime.py`, `_judge_split`): a job whose split took longer
than its chunks would on one thread makes the next jobs of that function run alone on the
caller, and a split that paid keeps the workers in.

The chunk function is native (LLVM IR below): chunk `c` writes the id of the thread that
ran it (`pthread_self`) to `context[c]` and spins until `context[SPIN]` cycles have passed.
It runs in a fresh process with a team of two threads.

Tiny chunks: the first job splits and loses, so the next RETRY_AFTER jobs run alone by the
pool's rule whatever else the machine runs. Long chunks: whether a split pays depends on
the other core being free for the worker (another process on it, as in CI's parallel
workers, can stall one split, and then the next jobs run alone as they should), so the
child runs up to ATTEMPTS times and splits must pay in one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
ATTEMPTS = 3

CHILD = r"""
import ctypes
import json

import numpy as np

import reverie as rv
from reverie.compiler.call_boundary.abi import NO_SIGNAL_CHECK
from reverie.compiler.runtime_library.pool_runtime import RETRY_AFTER
from reverie.runtime.native import jit, pool

CHUNKS, SPIN = 8, 8
CHUNK_IR = '''
declare i64 @pthread_self()
declare i64 @llvm.readcyclecounter()
define i32 @chunk(ptr %context, i64 %c) {
entry:
  %self = call i64 @pthread_self()
  %slot = getelementptr i64, ptr %context, i64 %c
  store i64 %self, ptr %slot
  %spin_slot = getelementptr i64, ptr %context, i64 8
  %spin = load i64, ptr %spin_slot
  %start = call i64 @llvm.readcyclecounter()
  br label %wait
wait:
  %now = call i64 @llvm.readcyclecounter()
  %passed = sub i64 %now, %start
  %more = icmp slt i64 %passed, %spin
  br i1 %more, label %wait, label %done
done:
  ret i32 0
}
'''
rv.compile("fn f(x: f64[N]) -> f64 { return sum(x); }").f(np.ones(3))  # fills the table
run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_int64)(pool.pool_entry())
main = ctypes.CDLL(None).pthread_self
main.restype = ctypes.c_uint64
me = main()


def jobs(cycles, count):
    '''For each of `count` jobs of a fresh copy of the chunk function spinning `cycles`
    cycles a chunk: how many of its chunks ran on another thread than this one.'''
    module = jit.compile_module(CHUNK_IR.replace("@chunk", f"@chunk{cycles}"),
                                name=f"chunk{cycles}")
    chunk = module.address(f"chunk{cycles}")
    context = np.zeros(SPIN + 1, dtype=np.uint64)
    context[SPIN] = cycles
    elsewhere = []
    for _ in range(count):
        context[:CHUNKS] = 0
        assert run(chunk, context.ctypes.data, CHUNKS, NO_SIGNAL_CHECK) == 0
        assert context[:CHUNKS].all()
        elsewhere.append(int((context[:CHUNKS] != me).sum()))
    return elsewhere

print(json.dumps({"threads": pool.pool_threads(), "tiny": jobs(0, 1 + RETRY_AFTER),
                  "long": jobs(20_000_000, 6)}))
"""


def _child_report() -> dict[str, list[int]]:
    environment = {**os.environ, "REVERIE_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=environment, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["threads"] == 2
    return report


def test_a_split_that_does_not_pay_is_not_repeated_and_one_that_pays_is() -> None:
    long_runs = []
    for _ in range(ATTEMPTS):
        report = _child_report()
        # chunks that take no time: a split costs more than it saves (or a spinning worker
        # claims them all), so after the first split they all run here
        assert sum(report["tiny"][1:]) == 0, report["tiny"]
        # chunks of several ms: the worker halves the job, so it keeps getting chunks
        long_runs.append(report["long"])
        if sum(count > 0 for count in report["long"][1:]) >= 2:
            return
    raise AssertionError(f"no run's long jobs kept splitting: {long_runs}")
