"""The vector width setting (`compiler/backend/vector_width.py`): which width and target
features a host gets, and kernels compiled for an AVX2-only CPU (`REVERIE_VECTOR_BITS=256`)
giving the reference results, with no 512-bit register in their code.

The AVX2 kernels compile in a fresh process (the setting is read once per process) with a
disk cache of its own, so nothing compiled for another width is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reverie.compiler.backend.vector_width import (
    VECTOR_BITS_VARIABLE,
    requested_bits,
    target_features,
    vector_bits,
)

AVX512_HOST = {"avx": True, "avx2": True, "avx512f": True}
AVX2_HOST = {"avx": True, "avx2": True, "avx512f": False}
SSE_HOST = {"sse2": True}
TIMEOUT_S = 300


@pytest.fixture
def requested(monkeypatch: pytest.MonkeyPatch):
    """Set REVERIE_VECTOR_BITS (None: unset) and forget the width read before."""

    def request(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(VECTOR_BITS_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(VECTOR_BITS_VARIABLE, value)
        requested_bits.cache_clear()

    yield request
    requested_bits.cache_clear()


def test_the_default_is_the_hosts_widest_and_the_target_does_not_prefer_narrower(
        requested) -> None:
    requested(None)
    assert [vector_bits(host) for host in (AVX512_HOST, AVX2_HOST, SSE_HOST)] == [512, 256, 128]
    assert target_features(AVX512_HOST, "+avx512f") == "+avx512f,-prefer-256-bit"
    assert target_features(AVX2_HOST, "+avx2,-avx512f") == "+avx2,-avx512f"


def test_256_bits_turn_avx512_off_and_never_widen_a_narrower_host(requested) -> None:
    requested("256")
    assert vector_bits(AVX512_HOST) == 256
    assert target_features(AVX512_HOST, "+avx2,+avx512f") == "+avx2,+avx512f,-avx512f"
    assert vector_bits(SSE_HOST) == 128
    requested("512")
    assert vector_bits(AVX2_HOST) == 256
    assert target_features(AVX2_HOST, "+avx2") == "+avx2"


def test_any_other_width_is_refused(requested) -> None:
    requested("1024")
    with pytest.raises(ValueError, match=VECTOR_BITS_VARIABLE):
        requested_bits()


CHILD = r"""
import json
import re
import numpy as np
import reverate_placeholder
"""

CHILD = r"""
import json
import re

import numpy as np

import reverie as rv
from reverie.compiler.backend.irutil import vector_lanes

SOURCE = '''
fn w1(x: f32[N]) -> f32 { return sum(tanh(x) * sin(x) + exp(-x * x)); }
fn heat(u: f64[N]) -> f64[N] { return u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)); }
fn mlp(x: f64[B, I], w: f64[I, H]) -> f64[B, H] { return tanh(x @ w); }
fn rowmax(x: f64[B, H]) -> f64[B] { return max(x, axis=1); }
'''
module = rv.compile(SOURCE)
rng = np.random.default_rng(0)
x32 = rng.standard_normal(1003).astype(np.float32)
u = rng.standard_normal(517)
a, w = rng.standard_normal((37, 19)), rng.standard_normal((19, 23))
x64 = x32.astype(np.float64)
t = np.tanh(x64)
grad = (1 - t * t) * np.sin(x64) + t * np.cos(x64) - 2 * x64 * np.exp(-x64 * x64)
loss = np.sum(t * np.sin(x64) + np.exp(-x64 * x64))
heat = u + 0.1 * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
errors = {
    "w1": abs(float(module.w1(x32)) - loss) / abs(loss),
    "w1 grad": float(np.max(np.abs(module.w1.grad("x")(x32) - grad))),
    "heat": float(np.max(np.abs(module.heat(u) - heat))),
    "mlp": float(np.max(np.abs(module.mlp(a, w) - np.tanh(a @ w)))),
    "rowmax": float(np.max(np.abs(module.rowmax(a) - a.max(axis=1)))),
}
asm = "".join(module.ir("asm", name) for name in ("w1", "heat", "mlp", "rowmax"))
print(json.dumps({"errors": errors, "zmm": len(re.findall(r"%zmm", asm)),
                  "ymm": len(re.findall(r"%ymm", asm)), "lanes": vector_lanes("f32")}))
"""


def run_child(cache_dir: Path, bits: str) -> dict:
    """CHILD's report, run with REVERIE_VECTOR_BITS=`bits` and its own disk cache."""
    environment = {**os.environ, VECTOR_BITS_VARIABLE: bits, "REVERIE_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=environment, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_avx2_kernels_give_the_reference_results_without_512_bit_registers(
        tmp_path: Path) -> None:
    report = run_child(tmp_path, "256")
    assert report["lanes"] == 8
    assert report["zmm"] == 0 and report["ymm"] > 0
    assert all(error < 1e-5 for error in report["errors"].values()), report["errors"]
