"""benchmarks/run.py's method (issue 35, item 1): each variant in a process of its own, the
idle ones proved idle, medians with their spread, and the host named.

The host line is read from /proc/cpuinfo text; the idleness checks see a spinning process
as busy and a blocked one as quiet; a child built by `run.py --child` prepares, checks and
samples a tiny workload; the report names the best peer and compares Reverie's default
team with one thread; and `run.py --tiny` runs end to end. No time is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.benchmark_scripts import BENCHMARKS, benchmark_module

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 vaes

processor\t: 1
model name\t: another CPU
"""


run = benchmark_module("run")
host = sys.modules["host"]
variant_process = sys.modules["variant_process"]


def test_cpu_description_names_the_model_and_the_vector_features() -> None:
    cpu = host.cpu_description(CPUINFO)
    assert cpu["model"] == "AMD EPYC 9R14"
    assert cpu["identity"] == "family 25 model 17 stepping 1"
    assert cpu["vector_features"] == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                                      "avx512_bf16"]


def test_host_line_holds_cpu_features_cpus_and_versions() -> None:
    info = host.host_info()
    line = host.host_line(info)
    assert line.startswith("Host: ") and "vector: " in line and "usable" in line
    assert f"numpy {info['libraries']['numpy']}" in line and "load average" in line
    assert "CPUs, load average" in run.machine_line()  # (recording.py's report line)


def spawn(code: str) -> subprocess.Popen:
    """A Python process running `code`, its standard input a pipe."""
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def test_a_spinning_process_is_busy_and_a_blocked_one_quiet() -> None:
    spinning, blocked = spawn("while True: pass"), spawn("import sys; sys.stdin.read()")
    try:
        time.sleep(0.3)
        assert variant_process.running_threads(spinning.pid) >= 1
        before = variant_process.cpu_seconds(spinning.pid)
        waited, busy = variant_process.wait_quiet([spinning.pid, blocked.pid], 0.05)
        assert busy == [spinning.pid] and waited >= 0.05
        assert variant_process.cpu_seconds(spinning.pid) > before
        assert variant_process.wait_quiet([blocked.pid], 1.0)[1] == []
    finally:
        for process in (spinning, blocked):
            process.kill()
            process.wait()


def settings(tmp_path: Path, **changes: object) -> object:
    """Tiny-size settings writing into `tmp_path`."""
    values = dict(rounds=2, sample_seconds=0.001, skipped={}, peers=("numpy", "reverie"),
                  warm_cache=False, tiny=True, workdir=tmp_path) | changes
    return run.Settings(**values)


def test_a_child_prepares_checks_and_samples_its_variant(tmp_path: Path) -> None:
    chosen = settings(tmp_path)
    numpy = run.start_child(variant_process.ChildSpec("W4", "numpy (hand-written)", "numpy"),
                            0, chosen)
    one_thread = run.start_child(
        variant_process.ChildSpec("W4", "reverie", "reverie 1 thread", "1"), 1, chosen)
    reference = str(tmp_path / "reference.npz")
    try:
        assert numpy.receive(120)["ready"]
        assert one_thread.receive(120)["threads"] == 1
        saved = numpy.request({"prepare": {"reference": None, "save": reference}}, 120)
        assert saved["error"] is None
        checked = one_thread.request({"prepare": {"reference": reference, "save": None}}, 120)
        assert checked["error"] == 0 and checked["first"] > 0
        assert one_thread.request({"warm": {"sample_seconds": 0.001}}, 60)["calls"] >= 1
        assert one_thread.request({"sample": True}, 60)["seconds"] > 0
    finally:
        numpy.close()
        one_thread.close()


def test_a_child_asked_for_a_sample_before_its_warm_up_refuses(tmp_path: Path) -> None:
    child = run.start_child(variant_process.ChildSpec("W4", "numpy (hand-written)", "numpy"),
                            0, settings(tmp_path))
    try:
        assert child.receive(120)["ready"]
        assert "unexpected request" in child.request({"sample": True}, 60)["failure"]
    finally:
        child.close()


def test_a_child_that_cannot_start_says_why(tmp_path: Path) -> None:
    child = run.start_child(variant_process.ChildSpec("W4", "no such variant", "numpy"), 0,
                            settings(tmp_path))
    try:
        assert "no such variant" in child.receive(120)["failure"]
    finally:
        child.close()


def measurement(row: str, samples: list[float], key: str = "W1") -> object:
    """A measurement of workload `key` with these samples."""
    return run.Measurement(key, row, row, samples=samples, first=0.5, error=0.0)


def test_summary_names_the_best_peer_and_compares_thread_settings() -> None:
    workload = run.WORKLOADS["W1"](tiny=True)
    results = [measurement("reverie", [0.010, 0.012, 0.020]),
               measurement("reverie 1 thread", [0.020, 0.019, 0.021]),
               measurement("numpy", [0.050, 0.040, 0.060]),
               measurement("jax", [0.030, 0.025, 0.035])]
    text = run.summary([workload], results)
    assert "| Reverie / best peer | 0.40 (JAX) |" in text
    assert "| Reverie default threads / 1 thread | 0.60 |" in text
    assert "| Reverie | 10–20 |" in text and "| JAX jit | 25–35 |" in text


def test_a_gradient_past_the_tolerance_is_flagged(capsys: pytest.CaptureFixture) -> None:
    workload = run.WORKLOADS["W1"](tiny=True)
    wrong = measurement("jax", [0.03])
    wrong.error = 10 * workload.rtol
    run.print_row(workload, wrong)
    assert "MISMATCH" in capsys.readouterr().out


def test_run_py_end_to_end_at_tiny_sizes(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--tiny", "--only", "W4",
                           "--rounds", "2", "--peers", "reverie", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("Host: ") and "Reverie / best peer" in done.stdout
    assert "MISMATCH" not in done.stdout and "Idle children" in done.stdout
    report = json.loads(out.read_text())
    rows = {m["row"]: m for m in report["measurements"]}
    assert set(rows) == {"numpy", "reverie", "reverie 1 thread", "reverie forward"}
    assert all(len(m["samples"]) == 2 and m["failure"] is None for m in rows.values())
    assert rows["reverie 1 thread"]["threads"] == 1
    assert isinstance(report["host"]["vector_features"], list)
