"""Shared test fixtures: golden-file comparison with an update switch.

Golden files hold the expected text of a stage (AST, tensor IR, adjoint IR, MLIR). After an
intended change, regenerate them with `REVERIE_UPDATE_GOLDEN=1 python -m pytest ...` and
review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

UPDATE = os.environ.get("REVERIE_UPDATE_GOLDEN") == "1"
# every loop program any test lowers is checked after each loop pass (to_loops.after_loop_pass)
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


@pytest.fixture
def golden() -> Callable[[str, Path], None]:
    """The golden-file check, as a fixture for tests in any directory."""
    return compare_with_golden
