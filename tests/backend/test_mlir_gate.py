"""The MLIR tools' gate of tests/conftest.py, run on a small test file in a fresh pytest.

A test parametrised with backend "mlir" or marked `mlir` skips when `mlir-opt-19` is not on
PATH, with one summary line naming the package; under CI=true the run is refused; with the
tools it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
TESTS = """
import pytest

@pytest.mark.parametrize("backend", ["native", "mlir"])
def test_backend(backend):
    pass

@pytest.mark.parametrize("level", ["interp", "mlir"])
def test_level(level):
    pass

@pytest.mark.mlir
def test_marked():
    pass
"""


def run_pytest(directory: Path, path: str, ci: bool,
               flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """pytest on `directory` (holding a copy of tests/conftest.py and TESTS) with PATH, CI
    and the command line's `flags` as given."""
    shutil.copy(CONFTEST, directory / "conftest.py")
    (directory / "test_gate.py").write_text(TESTS, encoding="utf-8")
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment["PATH"] = path
    if ci:
        environment["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *flags, str(directory)], cwd=directory, env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def no_tools(tmp_path: Path) -> str:
    """A PATH without the MLIR tools (an empty directory)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return str(empty)


@pytest.mark.parametrize("flags", [(), ("-n", "2", "--dist", "loadfile")],
                         ids=["serial", "xdist"])  # the README's command runs xdist workers
def test_without_the_tools_mlir_tests_skip_with_one_line(tmp_path: Path, no_tools: str,
                                                         flags: tuple[str, ...]) -> None:
    result = run_pytest(tmp_path, no_tools, ci=False, flags=flags)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed, 3 skipped" in result.stdout
    assert "3 MLIR tests skipped" in result.stdout
    assert "apt-get install mlir-19-tools" in result.stdout


def test_under_ci_missing_tools_fail_the_run(tmp_path: Path, no_tools: str) -> None:
    result = run_pytest(tmp_path, no_tools, ci=True)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "CI=true, so the 3 MLIR tests collected must run" in result.stderr
    assert "apt-get install mlir-19-tools" in result.stderr


def test_under_ci_and_xdist_missing_tools_fail_each_mlir_test(tmp_path: Path,
                                                              no_tools: str) -> None:
    """A worker cannot refuse the run (it would crash and lose the reason): each MLIR test
    fails, saying why."""
    result = run_pytest(tmp_path, no_tools, ci=True, flags=("-n", "2", "--dist", "loadfile"))
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
    assert result.stdout.count("CI=true, so the 3 MLIR tests collected must run") >= 3
    assert "2 passed, 3 errors" in result.stdout


@pytest.mark.mlir
def test_with_the_tools_mlir_tests_run(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, os.environ.get("PATH", ""), ci=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout
