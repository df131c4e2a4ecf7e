"""Golden tests for the `ast` stage: each tests/golden/ast/*.rv prints as its .ast file.

The expected files are what `format_ast` prints. After an intended change to the parser or
the printer, regenerate them with

    REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/frontend/test_golden_ast.py

and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie.dsl.parser import parse
from reverie.dsl.source_printer import format_ast

GOLDEN_DIR = Path(__file__).parents[1] / "golden" / "ast"
PROGRAMS = sorted(GOLDEN_DIR.glob("*.rv"))


def test_golden_programs_are_present() -> None:
    assert len(PROGRAMS) >= 8


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.stem)
def test_ast_matches_golden_file(program: Path, golden) -> None:  # noqa: ANN001
    printed = format_ast(parse(program.read_text(encoding="utf-8"), program.name))
    golden(printed, program.with_suffix(".ast"))


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.stem)
def test_printing_is_deterministic(program: Path) -> None:
    source = program.read_text(encoding="utf-8")
    assert format_ast(parse(source)) == format_ast(parse(source, "other.rv"))
