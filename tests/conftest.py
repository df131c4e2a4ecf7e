"""Shared test fixtures: golden-file comparison with an update switch; the MLIR tools' gate.

Golden files hold the expected text of a stage (AST, tensor IR, adjoint IR, MLIR). After an
intended change, regenerate them with `REVERIE_UPDATE_GOLDEN=1 python -m pytest ...` and
review the diff.

A test that runs the upstream MLIR tools (`mlir-opt-19`, `mlir-translate-19`) is one
parametrised with backend or level "mlir", or one marked `@pytest.mark.mlir`. Where the
tools are not installed such tests skip, with the command that installs them; where the
environment says it is CI (`CI=true`, which `.ci/run` and hosted CI set) they fail instead,
so that CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reverie.runtime.native.mlir_to_llvm import mlir_tools

UPDATE = os.environ.get("REVERIE_UPDATE_GOLDEN") == "1"
MOST_WORKERS = 8
# every loop program any test lowers is checked after each loop pass (compiler/pipeline.py)
os.environ.setdefault("REVERIE_VERIFY_LOOPS", "1")


def compare_with_golden(printed: str, expected_file: Path) -> None:
    """Assert `printed` equals the file's text (rewriting the file first when updating)."""
    if UPDATE:
        expected_file.write_text(printed, encoding="utf-8")
    assert expected_file.exists(), f"{expected_file.name} missing: run with REVERIE_UPDATE_GOLDEN=1"
    assert printed == expected_file.read_text(encoding="utf-8")


@pytest.fixture
def uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every compiler stage runs (REVERIE_PIPELINE_CACHE=0), for tests that replace one of
    the compiler's rules and must see it used even where the disk cache holds the result."""
    monkeypatch.setenv("REVERIE_PIPELINE_CACHE", "0")


@pytest.fixture(autouse=True, scope="module")
def fresh_torch_compile() -> None:
    """Each test module starts with torch.compile's caches empty (where torch is loaded):
    dynamo counts the recompilations of a code object, its own wrappers' included, across
    the whole process, so under xdist a module's `fullgraph=True` compile hit the limit of
    8 after whichever modules had run before it in the same worker."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


@pytest.fixture
def golden() -> Callable[[str, Path], None]:
    """The golden-file check, as a fixture for tests in any directory."""
    return compare_with_golden


MLIR_TOOLS_MISSING = ("needs mlir-opt-19 and mlir-translate-19, which are not on PATH "
                      "(Debian/Ubuntu: apt-get install mlir-19-tools)")
MLIR_PARAMETERS = ("backend", "level")  # parameters whose value "mlir" runs the MLIR tools
MLIR_REFUSAL = pytest.StashKey[str]()  # why an MLIR test fails under CI=true (xdist workers)


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the kernels run, in order (every path runs them through run_arrays)."""
    from reverie.kernel import Kernel

    calls: list[str] = []
    run_arrays = Kernel.run_arrays

    def spy(self: Kernel, args: object) -> object:
        calls.append(self.name)
        return run_arrays(self, args)

    monkeypatch.setattr(Kernel, "run_arrays", spy)
    return calls


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the README's test command): a worker per CPU this process may run on, at
    most MOST_WORKERS (each imports torch and JAX). xdist's own count, with psutil present,
    is the machine's physical cores, which a container's CPU affinity may cut to two."""
    return max(1, min(len(os.sched_getaffinity(0)), MOST_WORKERS))


def pytest_configure(config: pytest.Config) -> None:
    """Registers the `mlir` marker."""
    config.addinivalue_line(
        "markers", "mlir: the test runs the MLIR tools (skipped without them; fails if CI=true)")


def runs_mlir_tools(item: pytest.Item) -> bool:
    """Whether the test item is marked `mlir` or parametrised with backend/level "mlir"."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return (item.get_closest_marker("mlir") is not None
            or any(params.get(name) == "mlir" for name in MLIR_PARAMETERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the MLIR tools every MLIR test is skipped, or under CI=true the run refused."""
    if mlir_tools() is not None:
        return
    mlir_items = [item for item in items if runs_mlir_tools(item)]
    if mlir_items and os.environ.get("CI", "").lower() == "true":
        refusal = (f"CI=true, so the {len(mlir_items)} MLIR tests collected must run, "
                   f"but each {MLIR_TOOLS_MISSING}")
        if not hasattr(config, "workerinput"):
            raise pytest.UsageError(refusal)
        # an xdist worker (the README's command): a UsageError here would crash it and lose
        # the reason, so each MLIR test fails saying it (`pytest_runtest_setup`)
        for item in mlir_items:
            item.stash[MLIR_REFUSAL] = refusal
        return
    for item in mlir_items:
        item.add_marker(pytest.mark.skip(reason=MLIR_TOOLS_MISSING))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """An MLIR test refused under CI=true in an xdist worker fails, saying why."""
    if MLIR_REFUSAL in item.stash:
        pytest.fail(item.stash[MLIR_REFUSAL], pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    """One line for all the MLIR tests skipped, saying how to run them."""
    # counted from the reports (they reach this process from xdist's workers too): a
    # skip whose reason names the tool, this gate's or a test file's own (`needs_tools`)
    skipped = sum("mlir-opt-19" in str(report.longrepr)
                  for report in terminalreporter.stats.get("skipped", []))
    if skipped:
        tests = "test" if skipped == 1 else "tests"
        terminalreporter.write_line(f"{skipped} MLIR {tests} skipped: each {MLIR_TOOLS_MISSING}",
                                    yellow=True)
