"""Every command of every tutorial chapter prints what the chapter says (docs/tutorial/).

The chapters are run by `tutorial_runner.py` (its docstring gives the format); with
REVERIE_UPDATE_GOLDEN=1 the expected outputs that differ are rewritten in place. The runner
is first shown to catch a wrong output, and every path a chapter names must exist.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from tutorial_runner import ROOT, failures, matches, parse_chapter, run_chapter, update_chapter

TUTORIAL = ROOT / "docs" / "tutorial"
CHAPTERS = sorted(TUTORIAL.glob("[0-9][0-9]-*.md"))
# a path in backquotes, optionally followed by `:name` (a function or class it defines)
NAMED_PATH = re.compile(r"`((?:compiler|dsl|runtime|reverie|tests|examples|docs|benchmarks)"
                        r"/[\w./-]*\w)(?::(\w+))?`")


def chapter_param(chapter: Path) -> object:
    """The chapter as a test parameter, marked `mlir` if it runs the MLIR tools."""
    text = chapter.read_text()
    runs_mlir = "mlir-opt-19" in text or 'backend="mlir"' in text
    return pytest.param(chapter, id=chapter.stem, marks=[pytest.mark.mlir] if runs_mlir else [])


def test_there_are_ten_chapters() -> None:
    assert [p.name[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, 11)]


@pytest.mark.parametrize("chapter", [chapter_param(chapter) for chapter in CHAPTERS])
def test_chapter_prints_what_it_says(chapter: Path) -> None:
    if os.environ.get("REVERIE_UPDATE_GOLDEN") == "1":
        update_chapter(chapter)
    assert parse_chapter(chapter.read_text()), f"{chapter.name} runs no command"
    assert not failures(chapter), "\n\n".join(failures(chapter))


def test_elision_matches_what_varies_and_nothing_else() -> None:
    assert matches("compiled in ... s\n", "compiled in 0.25 s\n")
    assert matches("first\n...\nlast\n", "first\nsecond\nthird\nlast\n")
    assert matches("first\n...\nlast\n", "first\nlast\n")
    assert not matches("compiled in ... s\n", "compiled in 0.25 ms\nmore\n")
    assert not matches("first\nlast\n", "first\nmiddle\nlast\n")
    assert not matches("", "something\n")


def test_a_wrong_output_is_reported(tmp_path: Path) -> None:
    chapter = tmp_path / "01-wrong.md"
    chapter.write_text("```console\n$ echo hello\ngoodbye\n```\n\n"
                       "```pycon\n>>> for n in (1, 2):\n...     print(n)\n1\n3\n```\n")
    reports = failures(chapter)
    assert len(reports) == 2 and "goodbye" in reports[0] and "--- got\n1\n2\n" in reports[1]


def test_update_rewrites_only_what_differs(tmp_path: Path) -> None:
    chapter = tmp_path / "01-update.md"
    chapter.write_text("```console\n$ echo one\nwrong\n$ echo two\nt...\n```\n")
    update_chapter(chapter)
    assert chapter.read_text() == "```console\n$ echo one\none\n$ echo two\nt...\n```\n"


def test_prompt_sessions_share_a_namespace_and_show_exceptions(tmp_path: Path) -> None:
    chapter = tmp_path / "01-session.md"
    chapter.write_text("```pycon\n>>> x = 41\n```\ntext\n```pycon\n>>> x + 1\n42\n"
                       ">>> 1 / 0\nTraceback (most recent call last):\n...\n"
                       "ZeroDivisionError: division by zero\n```\n")
    assert [actual for _, actual in run_chapter(chapter)][1:] == [
        "42\n", "Traceback (most recent call last):\n...\nZeroDivisionError: division by zero\n"]
    assert not failures(chapter)


def test_every_path_a_chapter_names_exists() -> None:
    named = [(chapter.name, path, name) for chapter in [*CHAPTERS, TUTORIAL / "README.md"]
             for path, name in NAMED_PATH.findall(chapter.read_text())]
    assert len(named) > 30
    missing = [f"{chapter}: {path}" for chapter, path, _ in named if not (ROOT / path).exists()]
    assert not missing
    undefined = [f"{chapter}: {path}:{name}" for chapter, path, name in named if name
                 and not re.search(rf"^\s*(?:def|class)\s+{name}\b|^{name}\b.*=",
                                   (ROOT / path).read_text(), re.MULTILINE)]
    assert not undefined
