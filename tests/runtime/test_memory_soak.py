"""Long runs keep memory flat: a loop that asks for a gradient kernel on every step, and
many compile-and-call cycles of distinct sources. Each runs in a fresh interpreter so the
memory of other tests does not count. The distinct-source test runs 700 cycles, not the
2,000 of the issue: with the disk cache off each costs ~40 ms (mostly LLVM's O3 pipeline),
and 600 measured cycles already tell 7 KB per compile (now) from 85 KB (before)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PRELUDE = textwrap.dedent("""
    import gc, json, os, sys
    import numpy as np
    import reverie as rv
    from reverie.runtime.native import compile_queue, jit

    def rss_kb():
        gc.collect()
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024

    total, warm_up = int(sys.argv[1]), int(sys.argv[2])
""")

GRADIENT_LOOP = PRELUDE + textwrap.dedent("""
    m = rv.compile("fn f(x: f64[N], w: f64[N], y: f64) -> f64 {"
                   " return (sum(x * w) - y) ** 2.0; }")
    x, w = np.linspace(0.0, 1.0, 16), np.ones(16)
    for step in range(total):
        if step == warm_up:
            start, libraries = rss_kb(), jit.live_library_count()
        g = m.f.grad("w")(x, w, 0.5)
    assert np.allclose(g, 2 * (x @ w - 0.5) * x)
    print(json.dumps({"growth_kb": rss_kb() - start,
                      "new_libraries": jit.live_library_count() - libraries}))
""")

DISTINCT_COMPILES = PRELUDE + textwrap.dedent("""
    x = np.arange(4.0)
    for k in range(total):
        if k == warm_up:
            start = rss_kb()
        m = rv.compile(f"fn f(x: f64[N]) -> f64[N] {{ return x * {k}.0; }}")
        assert m.f(x)[3] == 3.0 * k
    del m
    compile_queue.finish()  # (the last kernels' optimised modules, made and dropped)
    print(json.dumps({"growth_kb": rss_kb() - start, "libraries": jit.live_library_count()}))
""")


def run_fresh(script: str, total: int, warm_up: int, tmp_path: Path) -> dict:
    """Run `script` (`total` steps, measured after `warm_up`) in a new interpreter with the
    disk cache off; its JSON report."""
    env = dict(os.environ, REVERIE_CACHE="0", REVERIE_CACHE_DIR=str(tmp_path / "cache"))
    command = [sys.executable, "-c", script, str(total), str(warm_up)]
    result = subprocess.run(command, capture_output=True, text=True,
                            env=env, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gradient_kernel_asked_for_in_a_loop_keeps_memory_flat(tmp_path: Path) -> None:
    report = run_fresh(GRADIENT_LOOP, 100_000, 2_000, tmp_path)
    assert report["new_libraries"] == 0
    assert report["growth_kb"] <= 2_048, report


def test_distinct_compiles_keep_at_most_30_kb_each(tmp_path: Path) -> None:
    compiles, warm_up = 700, 100
    report = run_fresh(DISTINCT_COMPILES, compiles, warm_up, tmp_path)
    assert report["growth_kb"] / (compiles - warm_up) <= 30, report
    assert report["libraries"] <= 2, report  # the run-time helpers, and nothing else
