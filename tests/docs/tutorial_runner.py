"""The tutorial's doc-test runner: every command in `docs/tutorial/*.md` runs, and its output
must match the text that follows it in the chapter.

Two kinds of fenced block run; every other block (```rv, ```text, ...) is only shown.

    ```console                          ```pycon
    $ reverie check kernels/loss.rv     >>> import reverie as rv
    kernels/loss.rv: ok (...)           >>> for n in (1, 2):
    ```                                 ...     print(n)
                                        1
                                        2
                                        ```

- ```console: each `$ ` line is a shell command (bash, in the repository root, with this
  interpreter's `reverie` first on PATH, stderr merged into stdout); the lines up to the
  next `$ ` are its expected output.
- ```pycon: Python run as at the interactive prompt, `>>> ` then `... ` continuation lines,
  each example's expected output after it. The examples of one chapter share one namespace,
  in order, across blocks; expressions print their repr. An exception prints as
  `Traceback (most recent call last):`, then `...`, then its last line.

Outputs that vary (timings, addresses, paths) are elided with `...`: inside a line it
matches any text on that line; a line that is `...` alone matches any lines, or none.
Trailing spaces are ignored. With REVERIE_UPDATE_GOLDEN=1, `update_chapter` rewrites the
expected output of every example that does not match (review the diff, then put `...`
back where output varies).
"""

from __future__ import annotations

import code
import contextlib
import io
import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
ELISION = "..."
RUNNABLE = ("console", "pycon")
COMMAND_SECONDS = 120


@dataclass
class Example:
    """One command (console) or statement (pycon), its expected output and where it is."""

    kind: str
    source: str
    expected: str
    line: int  # 1-based line of the command in the chapter
    output_lines: tuple[int, int]  # the chapter's lines [start, end) holding `expected`


def parse_chapter(text: str) -> list[Example]:
    """The runnable examples of a chapter, in order."""
    examples: list[Example] = []
    lines = text.split("\n")
    kind = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            kind = line[3:].strip() if kind is None else None
            if kind is not None and kind not in RUNNABLE:
                kind = "shown"
            continue
        if kind == "console":
            _parse_console_line(line, number, examples)
        elif kind == "pycon":
            _parse_pycon_line(line, number, examples)
    return examples


def _parse_console_line(line: str, number: int, examples: list[Example]) -> None:
    if line.startswith("$ "):
        examples.append(Example("console", line[2:], "", number + 1, (number + 1, number + 1)))
    elif examples and examples[-1].kind == "console":
        _add_output(examples[-1], line, number)


def _parse_pycon_line(line: str, number: int, examples: list[Example]) -> None:
    last = examples[-1] if examples and examples[-1].kind == "pycon" else None
    if line.startswith(">>> ") or line == ">>>":
        examples.append(Example("pycon", line[4:], "", number + 1, (number + 1, number + 1)))
    elif last is not None and line.startswith("... ") and last.output_lines[0] == number \
            and not last.expected:
        last.source += "\n" + line[4:]
        last.output_lines = (number + 1, number + 1)
    elif last is not None:
        _add_output(last, line, number)


def _add_output(example: Example, line: str, number: int) -> None:
    example.expected += line + "\n"
    example.output_lines = (example.output_lines[0], number + 1)


def matches(expected: str, actual: str) -> bool:
    """Whether `actual` is `expected`, reading each `...` as elided text."""
    pattern = []
    for line in expected.rstrip("\n").split("\n") if expected.strip() else []:
        line = line.rstrip()
        if line == ELISION:
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(map(re.escape, line.split(ELISION))) + r"\n")
    normalised = "".join(line.rstrip() + "\n" for line in actual.rstrip("\n").split("\n")
                         if actual.strip())
    return re.fullmatch("".join(pattern), normalised, flags=re.DOTALL) is not None


def run_console(command: str) -> str:
    """A shell command's stdout and stderr, run from the repository root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERIE_PRINT_IR")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=COMMAND_SECONDS, check=False)
    return done.stdout


class Session:
    """One chapter's Python prompt: a namespace that its pycon examples share."""

    def __init__(self) -> None:
        self.namespace: dict[str, object] = {"__name__": "__tutorial__"}

    def run(self, source: str) -> str:
        """What the interactive prompt would print for `source`."""
        output = io.StringIO()
        previous = os.getcwd()
        os.chdir(ROOT)
        try:
            with contextlib.redirect_stdout(output):
                compiled = code.compile_command(source + "\n", "<tutorial>", "single")
                if compiled is None:
                    raise SyntaxError(f"incomplete statement: {source!r}")
                exec(compiled, self.namespace)
        except Exception as error:  # the example's own exception is its output
            last = traceback.format_exception_only(type(error), error)[-1]
            output.write(f"Traceback (most recent call last):\n{ELISION}\n{last}")
        finally:
            os.chdir(previous)
        return output.getvalue()


def run_chapter(path: Path) -> list[tuple[Example, str]]:
    """Every example of a chapter with the output it printed, in order."""
    session = Session()
    return [(example, run_console(example.source) if example.kind == "console"
             else session.run(example.source)) for example in parse_chapter(path.read_text())]


def failures(path: Path) -> list[str]:
    """A report for each example of the chapter whose output differs from its text."""
    return [f"{path.name}:{example.line}: {example.source}\n--- expected\n{example.expected}"
            f"--- got\n{actual}" for example, actual in run_chapter(path)
            if not matches(example.expected, actual)]


def update_chapter(path: Path) -> None:
    """Rewrite the expected output of every example of the chapter that does not match."""
    lines = path.read_text().split("\n")
    for example, actual in reversed(run_chapter(path)):
        if not matches(example.expected, actual):
            start, end = example.output_lines
            lines[start:end] = actual.rstrip("\n").split("\n") if actual.strip() else []
    path.write_text("\n".join(lines))
