"""benchmarks/recording.py (issue 32, item 9) times the same chain of Tensor operations in
Reverie and torch eager: the chain computes the same value and gradients in both, and the
script runs end to end at a tiny size, one round. No time is checked."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.unit.benchmark_scripts import BENCHMARKS, benchmark_module

recording = benchmark_module("recording")


def test_chain_agrees_with_torch() -> None:
    results = {}
    for framework in recording.FRAMEWORKS:
        _, x, w = recording.leaves(framework, 5)
        value = recording.chain(x, w)
        value.backward()
        results[framework] = [np.asarray(t.detach()) for t in (value, x.grad, w.grad)]
    for ours, theirs in zip(*results.values(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert np.abs(results["torch"][1]).max() > 0


def test_timed_calls_record_only_where_they_should() -> None:
    for framework in recording.FRAMEWORKS:
        calls = recording.timed_calls(framework, 4)
        assert not calls["no_grad"]().requires_grad
        assert calls["recorded"]().requires_grad
        assert calls["backward"]() is None


def test_script_runs_one_tiny_round() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "recording.py"), "--rounds", "1", "--size", "4",
         "--inner-rounds", "1"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(recording.ROWS)  # the header and one row per quantity
    assert "Goal (issue 32, item 9)" in done.stdout
    assert "avx2" in done.stdout
