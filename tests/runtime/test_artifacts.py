"""The whole-pipeline cache (`runtime/native/artifacts.py`): a warm process skips every stage.

A process that finds a source's function table, its kernels' IR and their native programs
and object code in the disk cache computes values and gradients without parsing, lowering,
transforming or generating code, and (its modules' shared objects opened with dlopen,
runtime/native/shared_objects.py) without loading LLVM — checked here by what a fresh
interpreter has imported when it is done. The cache must never change a result, never hide a
compile error, step aside for REVERIE_PRINT_IR, and rebuild what it cannot read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.native import artifacts, cache

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
          "reverie.compiler.transforms.reverse", "reverie.compiler.to_loops.lower_blocks",
          "reverie.compiler.backend.llvm", "reverie.compiler.runtime_library.gemm",
          "llvmlite.binding"]
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


def fresh_fingerprint() -> str:
    """The code fingerprint computed now (not the one this process remembered)."""
    artifacts.code_fingerprint.cache_clear()
    return artifacts.code_fingerprint()


@pytest.fixture
def source_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for Reverie's sources, which the code fingerprint covers instead."""
    root = tmp_path / "sources"
    (root / "passes").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "core.py").write_text("x = 1\n")
    (root / "passes" / "fold.py").write_text("y = 2\n")
    (root / "passes" / "grammar.lark").write_text("start: NAME\n")
    (root / "notes.txt").write_text("not source\n")
    monkeypatch.setattr(artifacts, "_source_roots", lambda: frozenset({str(root)}))
    yield root
    artifacts.code_fingerprint.cache_clear()  # the next test's fingerprint: the real one


def test_the_fingerprint_changes_with_any_source_file(source_tree: Path) -> None:
    first = fresh_fingerprint()
    assert fresh_fingerprint() == first
    (source_tree / "notes.txt").write_text("still not source, longer\n")
    (source_tree / "__pycache__" / "core.cpython-311.py").write_text("bytecode's folder\n")
    assert fresh_fingerprint() == first
    edited = source_tree / "passes" / "fold.py"  # in place, same size: only the time moves
    before = edited.stat()
    edited.write_text("y = 3\n")
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
    assert edited.stat().st_size == before.st_size
    fingerprints = [first, fresh_fingerprint()]
    (source_tree / "core.py").write_text("x = 10\n")
    fingerprints.append(fresh_fingerprint())
    (source_tree / "passes" / "grammar.lark").write_text("start: NUMBER\n")
    fingerprints.append(fresh_fingerprint())
    (source_tree / "passes" / "new_pass.py").write_text("")
    fingerprints.append(fresh_fingerprint())
    assert len(set(fingerprints)) == len(fingerprints)
    (source_tree / "passes" / "new_pass.py").unlink()  # the sources as they were before it
    assert fresh_fingerprint() == fingerprints[-2]


def test_a_source_edit_rebuilds_instead_of_loading(private_cache: Path,
                                                   source_tree: Path) -> None:
    x, w = np.linspace(-1, 1, 5), np.linspace(0, 2, 5)
    cold = rv.compile(SOURCE)
    expected = cold.f.grad("w")(x, w)
    assert artifacts.load(cold.key) is not None
    edited = source_tree / "core.py"
    before = edited.stat()
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000))
    fresh_fingerprint()
    rebuilt = rv.compile(SOURCE)
    assert rebuilt.key != cold.key
    np.testing.assert_array_equal(rebuilt.f.grad("w")(x, w), expected)
    assert artifacts.load(rebuilt.key) is not None


def test_the_fingerprint_covers_every_package_of_reverie() -> None:
    import reverie.compiler
    import reverie.dsl
    import reverie.runtime

    roots = artifacts._source_roots()
    for package in (reverie, reverie.compiler, reverie.dsl, reverie.runtime):
        directory = os.path.abspath(os.path.dirname(package.__file__))
        assert any(directory == root or directory.startswith(root + os.sep)
                   for root in roots), (package.__name__, roots)


def test_print_ir_is_seen_before_the_pass_printer_is_imported() -> None:
    """`in_use` answers a warm start without importing compiler/print_ir.py, by the name of
    its variable: which must be the printer's, and be seen in a process that set it."""
    from reverie.compiler import print_ir

    assert (artifacts._PRINT_IR_MODULE, artifacts._PRINT_IR_VARIABLE) == (
        print_ir.__name__, print_ir.ENVIRONMENT_VARIABLE)
    code = ("import json, sys\nfrom reverie.runtime.native import artifacts\n"
            "print(json.dumps([artifacts.in_use(), 'reverie.compiler.print_ir' in sys.modules]))")
    outcomes = {}
    for setting in ("", "0", "lower"):
        environment = {**os.environ, "REVERIE_PRINT_IR": setting}
        environment.pop("REVERIE_PIPELINE_CACHE", None)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=environment, timeout=120, check=True)
        outcomes[setting] = json.loads(done.stdout)
    assert outcomes == {"": [True, False], "0": [True, False], "lower": [False, True]}
