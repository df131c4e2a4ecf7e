"""Every repository path that the documentation and the code's prose cite exists.

A reader who meets `compiler/ir/dot.py` or docs/language.md in a docstring, a comment or a
Markdown page should find that file in a clone. The test collects path-like words from the
Markdown pages, the .rv and .lark sources, and the docstrings and comments of the Python
files, and checks each one:

- a path whose first folder is one of the repository's (`compiler/`, `docs/`, ...) or
  of its packages (`ir/`, `native/`) must exist, from the repository root, from one of
  the package folders (`call_boundary/abi.py` is `compiler/call_boundary/abi.py`), or from
  the citing file's folder or a folder above it (`workloads/core.py` in benchmarks/);
  `*`, `{a,b}` and upper-case placeholders (`examples/NAME.rv`) are patterns that must
  match at least one file;
- `file.py:name` must name something `file.py` defines, and benchmarks/README.md, "Name"
  one of that page's headings or bold paragraph titles;
- a Markdown link to a page (`[api.md](api.md)`) must name a file beside the citing one;
- a reference to a file outside the repository (`../shared/...`, `shared/reference/...`,
  `SPEC.md`, `SPEC §2.5`) is always an error: cite docs/language.md or docs/api.md instead.

    python -m pytest tests/docs/test_cited_paths.py
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_FOLDERS = ("dsl", "compiler", "runtime", "reverie", "docs", "tests", "benchmarks",
               "examples", ".ci")
PACKAGE_FOLDERS = tuple(ROOT / name for name in ("compiler", "runtime", "dsl", "reverie"))
SCANNED_FOLDERS = ("dsl", "compiler", "runtime", "reverie", "docs", "tests", "benchmarks",
                   "examples")
PROSE_SUFFIXES = (".md", ".rv", ".lark")  # read whole (a .rv or .lark file's paths are comments)
CODE_SUFFIXES = (".py",)  # only the docstrings and comments are read
THIS_FILE = Path(__file__).resolve()  # its examples of broken citations are on purpose
PLACEHOLDER = re.compile(r"[A-Z]+(?=[._/]|$)")  # NAME in examples/NAME.rv, N in wN_*.py

# A path: a word of path characters with at least one slash, a first part that is a folder
# of the repository (or of one of its packages), and a file name or a trailing slash.
PATH = re.compile(r"(?<![\w./-])((?:[\w.*{},-]+/)+(?:[\w*{},-]+\.(?:py|md|rv|lark|toml|txt)"
                  r"\b|(?=[`\s)]))?)")
SYMBOL = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.py):([A-Za-z_]\w*)")  # `llvm.py:generate`
README_SECTION = re.compile(r"benchmarks/README(?:\.md)?`?,?\s+\"([^\"]+)\"")  # its "Latency"
MARKDOWN_LINK = re.compile(r"\]\(([\w./-]+\.(?:md|py|rv))(?:#[\w-]*)?\)")  # [api.md](api.md)
OUTSIDE = re.compile(r"(?:\.\./)+shared/\S*|(?<![\w./-])shared/(?:reference/)?[\w./-]+"
                     r"|\bSPEC\b(?:\.md| ?§[\d.–-]*)?")



def scanned_files() -> list[Path]:
    """The repository's Markdown pages and its Python, Reverie and grammar sources."""
    files = sorted(ROOT.glob("*.md"))
    for folder in SCANNED_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if (path.suffix in PROSE_SUFFIXES + CODE_SUFFIXES and path != THIS_FILE
                    and "__pycache__" not in path.parts):
                files.append(path)
    return files


def prose(path: Path) -> str:
    """The text of `path` a reader reads as prose: for Python, the docstrings and comments;
    other files whole (a path in a .rv or .lark file can only be in a comment)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix not in CODE_SUFFIXES:
        return text
    pieces = [token.string.lstrip("#").strip()
              for token in tokenize.generate_tokens(io.StringIO(text).readline)
              if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            pieces.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(pieces)


def expand_braces(pattern: str) -> list[str]:
    """`a/{b,c}.py` as `a/b.py` and `a/c.py` (one level of braces)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    return [pattern[:match.start()] + choice + pattern[match.end():]
            for choice in match.group(1).split(",")]


def found_in(base: Path, pattern: str) -> bool:
    """Whether `pattern` (a path, or a glob with `*`) names something under `base`."""
    return any(base.glob(pattern)) if "*" in pattern else (base / pattern).exists()


def found_under_any(bases: list[Path], cited: str) -> bool:
    """Whether every expansion of `cited`'s braces names something under one of `bases`."""
    return all(any(found_in(base, pattern) for base in bases)
               for pattern in expand_braces(cited.rstrip("/")))


def exists(cited: str, citing: Path) -> bool:
    """Whether `cited` names a file or folder from the root, a package folder, the citing
    file's folder or a folder above it; failing that, with its placeholders as `*`."""
    bases = [ROOT, *PACKAGE_FOLDERS,
             *[folder for folder in citing.parents if ROOT in folder.parents]]
    return (found_under_any(bases, cited)
            or found_under_any(bases, PLACEHOLDER.sub("*", cited)))


def defines(source: Path, name: str) -> bool:
    """Whether the Python file `source` defines `name` (a function, class or assignment)."""
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]"
    return re.search(pattern, source.read_text(encoding="utf-8"), re.MULTILINE) is not None


def missing_symbol(cited: str, name: str) -> bool:
    """Whether `cited` (a Python file) exists from the root or a package folder but does
    not define `name`."""
    files = [base / cited for base in (ROOT, *PACKAGE_FOLDERS) if (base / cited).is_file()]
    return bool(files) and not defines(files[0], name)


@cache
def benchmark_sections() -> list[str]:
    """The names a pointer into benchmarks/README.md may quote: its headings and the bold
    titles that open its paragraphs, each with its spaces normalised."""
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    titles = [line.lstrip("#") for line in text.splitlines() if line.startswith("#")]
    titles += re.findall(r"^\W*\*\*(.+?)\*\*", text, re.MULTILINE)
    return [" ".join(title.split()) for title in titles]


def package_folders() -> set[str]:
    """The first parts a cited path may start with: the top folders and their subfolders
    (`native/`, `call_boundary/`, cited relative to their package)."""
    names = set(TOP_FOLDERS)
    for folder in ("compiler", "runtime", "reverie", "tests", "docs", "benchmarks"):
        names |= {child.name for child in (ROOT / folder).iterdir() if child.is_dir()}
    return names - {"__pycache__"}


def broken_citations(text: str, citing: Path, first_parts: set[str]) -> Iterator[str]:
    """The citations in `text` (the prose of the file `citing`) that name no file of the
    repository."""
    yield from (match.group(0).rstrip(".,;:`") for match in OUTSIDE.finditer(text))
    yield from (match.group(1) for match in MARKDOWN_LINK.finditer(text)
                if not (citing.parent / match.group(1)).exists())
    yield from (match.group(0) for match in SYMBOL.finditer(text)
                if missing_symbol(match.group(1), match.group(2)))
    for match in README_SECTION.finditer(text):
        section = " ".join(match.group(1).split())
        if not any(section in title for title in benchmark_sections()):
            yield f'benchmarks/README.md "{section}"'
    for match in PATH.finditer(text):
        cited = match.group(1).rstrip(".,;:")
        if cited.split("/", 1)[0] in first_parts and not exists(cited, citing):
            yield cited


def all_broken() -> dict[str, list[str]]:
    """Every citing file (relative to the root) with the citations that name no file."""
    first_parts = package_folders()
    found = {}
    for path in scanned_files():
        broken = sorted(set(broken_citations(prose(path), path, first_parts)))
        if broken:
            found[path.relative_to(ROOT).as_posix()] = broken
    return found


@pytest.fixture(scope="module")
def broken() -> dict[str, list[str]]:
    return all_broken()


def test_cited_paths_exist(broken: dict[str, list[str]]) -> None:
    """No file cites a missing path or a file outside the repository."""
    assert not broken, "citations of files the repository does not contain:\n" + "\n".join(
        f"  {name}: {', '.join(cited)}" for name, cited in sorted(broken.items()))


def test_the_scanner_finds_citations() -> None:
    """The patterns catch what they are for, and only that."""
    text = ("See `compiler/ir/dot.py`, docs/language.md §10, `compiler/backend/mathlib_*.py`,\n"
            "`ir/{core,dims}.py`, `examples/NAME.rv`, `workloads/wN_*.py`, ../shared/SPEC.md,\n"
            "`compiler/no_such_file.py`, SPEC §2.5 and `shared/reference/peer_baselines.md`;\n"
            "[api](../docs/api.md#3-transforms), [gone](gone.md), `ir/dot.py:format_dot`,\n"
            "`compiler/ir/dot.py:no_such_name`, benchmarks/README.md, \"Latency\" and\n"
            "benchmarks/README.md, \"Nowhere\"; 1/2 and and/or are not paths.")
    page = ROOT / "benchmarks" / "README.md"
    assert list(broken_citations(text, page, package_folders())) == [
        "../shared/SPEC.md", "SPEC §2.5", "shared/reference/peer_baselines.md", "gone.md",
        "compiler/ir/dot.py:no_such_name", 'benchmarks/README.md "Nowhere"',
        "compiler/no_such_file.py"]
