"""A pool that shares the machine (`runtime/native/pool.py`,
`runtime_library/pool_runtime.py`): its team is no larger than the CPUs the process may use
(affinity, cgroup quota); chunks are fixed by the loop, not the thread count, so every
thread count, an oversubscribed team, a core busy with another process and torch training in
the same process all give the same bits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reverie.runtime.native import pool

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("quota, expected", [("50000 100000", 1), ("150000 100000", 2),
                                             ("max 100000", None), ("garbage", None)])
def test_the_team_follows_the_cgroup_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           quota: str, expected: int | None) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(quota + "\n")
    monkeypatch.setattr(pool, "CGROUP_CPU_MAX", str(cpu_max))
    cpus = len(os.sched_getaffinity(0))
    assert pool.usable_cpus() == (cpus if expected is None else min(cpus, expected))
    monkeypatch.delenv("REVERIE_NUM_THREADS", raising=False)
    assert pool.pool_threads() == pool.usable_cpus()


def test_a_missing_quota_file_leaves_the_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "CGROUP_CPU_MAX", "/nonexistent/cpu.max")
    assert pool.usable_cpus() == len(os.sched_getaffinity(0))


SCRIPT = r'''
import subprocess, sys, threading
import numpy as np
import reverie as rv
m = rv.compile("""
fn loss(x: f64[N]) -> f64 { return sum(tanh(x) * sin(x) + exp(-x * x)); }
fn wave(x: f32[N]) -> f32[N] { return tanh(x) * sin(x); }
fn rows(x: f64[M, N]) -> f64[M] { return sum(exp(-x * x), axis=1); }
fn mlp(x: f32[B, D], w: f32[D, H], v: f32[H, O]) -> f32 { return mean(tanh(x @ w) @ v); }
""")
rng = np.random.default_rng(0)
x = rng.standard_normal(1 << 21)
x32 = x.astype(np.float32)
grid = rng.standard_normal((512, 4096))
a, w, v = (rng.standard_normal(s).astype(np.float32) for s in ((512, 256), (256, 512), (512, 10)))
grad = m.mlp.grad(("w", "v"))

def results():
    dw, dv = grad(a, w, v)
    return [m.loss(x), m.loss.grad("x")(x), m.wave(x32), m.rows(grid), dw, dv]

mode = sys.argv[1]
if mode == "busy":  # another process keeps a core busy
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
elif mode == "torch":  # torch trains in a thread of this process
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(),
                                torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(512, 256)
    stop = threading.Event()
    def train():
        while not stop.is_set():
            optimizer.zero_grad()
            model(data).square().mean().backward()
            optimizer.step()
    trainer = threading.Thread(target=train)
    trainer.start()
first = results()
same = all(all(np.array_equal(p, q) for p, q in zip(first, results())) for _ in range(5))
if mode == "busy":
    hog.kill()
elif mode == "torch":
    stop.set()
    trainer.join()
np.savez(sys.argv[2], *first)
print("repeat" if same else "differs")
'''


def run(mode: str, threads: str, out: Path) -> list:
    import numpy as np

    env = {**os.environ, "REVERIE_NUM_THREADS": threads}
    result = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(out)], env=env,
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["repeat"]
    with np.load(out) as saved:
        return [saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


def test_every_thread_count_and_neighbour_gives_the_same_bits(tmp_path: Path) -> None:
    import numpy as np

    reference = run("idle", "1", tmp_path / "one.npz")
    for mode, threads in (("idle", "2"), ("idle", "7"), ("busy", "2"), ("torch", "2")):
        got = run(mode, threads, tmp_path / f"{mode}{threads}.npz")
        for k, (expected, value) in enumerate(zip(reference, got, strict=True)):
            assert np.array_equal(expected, value), (mode, threads, k)
