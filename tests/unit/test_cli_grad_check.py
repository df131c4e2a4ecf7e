"""`reverie grad --check` (issues 30 and 31 item 5): NaN or inf anywhere fails the check.

The check compared one random entry per probe and kept the worst error with
`max(worst, error)`, which keeps 0 against a NaN error: a kernel whose gradient is NaN
passed with "max relative error 0.00e+00 — ok". It now perturbs every entry of a small
parameter and a random sample of a large one, and reports NaN or inf in the value, the
gradients or the differences as a failure with exit status 1. The CLI runs in a
subprocess, as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reverie.cli_grad import EVERY_ENTRY_UP_TO, SAMPLED_ENTRIES, entries_to_check

NAN_GRADIENT = "fn f(x: f64[N], w: f64) -> f64 { return sum(sqrt(x - x)) + w * w; }"
CORRECT = "fn f(x: f64[N, D], w: f64[D], b: f64) -> f64 { return mean(tanh(x @ w - b) ** 2); }"
WRONG_BY_A_LITTLE = "fn f(x: f64[N]) -> f64 { return sum(x * stop_gradient(x)); }"


def grad_check(tmp_path: Path, source: str, *options: str) -> subprocess.CompletedProcess:
    """`reverie grad FILE --fn f --check` on `source`, in a subprocess."""
    path = tmp_path / "kernel.rv"
    path.write_text(source + "\n")
    return subprocess.run([sys.executable, "-m", "reverie", "grad", str(path), "--fn", "f",
                           "--check", *options],
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_nan_gradient_fails_the_check(tmp_path: Path) -> None:
    run = grad_check(tmp_path, NAN_GRADIENT)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED" in run.stdout and "ok" not in run.stdout.split("gradient check")[1]
    assert "d/dx has 8 NaN or inf entries of 8 (first: x[0] = nan)" in run.stdout


def test_a_correct_gradient_passes(tmp_path: Path) -> None:
    run = grad_check(tmp_path, CORRECT, "--dims", "N=20,D=3")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "— ok" in run.stdout
    assert "at 64 entries" in run.stdout  # every entry of x (60), w (3) and b (1)


def test_a_wrong_gradient_fails_the_check(tmp_path: Path) -> None:
    """d/dx of x · stop_gradient(x) is x, not the 2x that finite differences see."""
    run = grad_check(tmp_path, WRONG_BY_A_LITTLE)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED" in run.stdout and "not finite" not in run.stdout


def test_small_parameters_are_checked_entry_by_entry_and_large_ones_sampled() -> None:
    rng = np.random.default_rng(0)
    small = entries_to_check((4, 16), rng)
    assert len(small) == EVERY_ENTRY_UP_TO == 64 and len(set(small)) == 64
    large = entries_to_check((100, 50), rng)
    assert len(large) == SAMPLED_ENTRIES and len(set(large)) == SAMPLED_ENTRIES
    assert all(0 <= i < 100 and 0 <= j < 50 for i, j in large)
    assert entries_to_check((), rng) == [()]


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "f16"])
def test_the_check_passes_in_every_float_dtype(tmp_path: Path, dtype: str) -> None:
    run = grad_check(tmp_path, CORRECT.replace("f64", "float"), "--dims", "N=20,D=3",
                     "--dtype", dtype)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_kernel_declared_bf16_is_refused_by_name(tmp_path: Path) -> None:
    run = grad_check(tmp_path, CORRECT.replace("f64", "bf16"), "--dims", "N=20,D=3")
    assert run.returncode == 1
    assert "'x' of f is declared bf16; declare it float" in run.stderr
