"""The whole-pipeline cache (`runtime/artifacts.py`): a warm process skips every stage.

A process that finds a source's function table, its kernels' IR and their native
programs and object code in the disk cache computes values and gradients without
parsing, lowering, transforming or generating code, and (its modules' shared objects
opened with dlopen, runtime/shared_objects.py) without loading LLVM — checked here by what a fresh
interpreter has imported when it is done. The cache must never change a result, never
hide a compile error, step aside for REVERIE_PRINT_IR, and rebuild what it cannot read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.runtime import artifacts, cache

ROOT = Path(__file__).parents[2]

CHILD = """
import json, sys
import numpy as np
import reverie as rv
module = rv.load("examples/mlp.rv")
kernel = module["mlp_loss"]
rng = np.random.default_rng(0)
args = [rng.standard_normal(s) for s in [(8, 3), (8, 2), (3, 5), (5,), (5, 2), (2,)]]
value = kernel(*args)
grads = kernel.grad(None)(*args)
hessian_vector = kernel.grad("w2").vjp("w2")(*args, np.ones((5, 2)))
stages = ["reverie.dsl.generated_parser", "reverie.compiler.lower",
          "reverie.compiler.transforms.reverse", "reverie.compiler.transforms.to_loops",
          "reverie.compiler.codegen.llvm", "reverie.compiler.codegen.gemm", "llvmlite.binding"]
print(json.dumps({"value": float(value), "grads": [g.tolist() for g in grads],
                  "hvp": np.asarray(hessian_vector).tolist(),
                  "loaded": [s for s in stages if s in sys.modules]}))
"""


def run_child(cache_dir: Path, **env: str) -> dict:
    """Run CHILD in a fresh interpreter using the cache in `cache_dir`."""
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(cache_dir), **env}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_warm_process_runs_no_stage_of_the_compiler(tmp_path: Path) -> None:
    cold = run_child(tmp_path)
    assert "reverie.dsl.generated_parser" in cold["loaded"]
    warm = run_child(tmp_path)
    assert warm["loaded"] == []
    assert warm["value"] == cold["value"]
    assert warm["grads"] == cold["grads"] and warm["hvp"] == cold["hvp"]


def test_print_ir_runs_the_passes_whatever_the_cache_holds(tmp_path: Path) -> None:
    run_child(tmp_path)
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(tmp_path),
                   "REVERIE_PRINT_IR": "reverse,codegen"}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=300, check=True)
    assert "// ---- after reverse" in done.stderr and "// ---- after codegen" in done.stderr


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(tmp_path))
    return tmp_path


SOURCE = "fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }"


def test_compile_errors_are_never_hidden(private_cache: Path) -> None:
    rv.compile(SOURCE)
    with pytest.raises(rv.CompileError, match="unknown"):
        rv.compile(SOURCE.replace("tanh", "tahn"))


def test_unreadable_entries_are_rebuilt(private_cache: Path) -> None:
    x, w = np.linspace(0, 1, 5), np.linspace(1, 2, 5)
    expected = rv.compile(SOURCE).f.grad("w")(x, w)
    module = rv.compile(SOURCE)
    for dtype in ("f32", "f64"):  # an entry this user wrote, holding no pickle
        cache.store(artifacts.artifact_key("ir", module.key, "f", dtype), b"not a pickle")
    cache.store(module.key, b"\x80\x05garbage")
    again = rv.compile(SOURCE)
    np.testing.assert_array_equal(again.f.grad("w")(x, w), expected)
    assert isinstance(artifacts.load(again.key), list)


def test_keys_follow_the_code_and_what_the_kernel_is(private_cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = rv.compile(SOURCE)
    grad, vjp = module.f.grad("x"), module.f.grad("x").vjp()
    assert module.f.identity != grad.identity != vjp.identity
    assert grad.identity[:2] == module.f.identity and vjp.identity[:3] == grad.identity
    assert rv.compile(SOURCE, checkpoint=True).key != module.key
    before = artifacts.artifact_key("ir", "x")
    monkeypatch.setattr(artifacts, "code_fingerprint", lambda: "edited compiler")
    assert artifacts.artifact_key("ir", "x") != before


def test_disabled_cache_keeps_nothing(private_cache: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_CACHE", "0")
    module = rv.compile(SOURCE)
    module.f(np.ones(3), np.ones(3))
    assert artifacts.load(module.key) is None
