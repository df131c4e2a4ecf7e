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

# Files that still cite a missing path or a file outside the repository (SPEC.md, the
# reference notes, tests from before tests/unit was split). They are being fixed (issue 34,
# item 5); remove a row when its file is. A citation not listed here fails the test.
KNOWN_EXCEPTIONS: dict[str, tuple[str, ...]] = {
    "CONTRIBUTING.md": ("tests/unit/test_layering_runtime.py", "tests/unit/test_mathlib.py"),
    "benchmarks/workloads/__init__.py": ("shared/reference/peer_baselines.md",),
    "compiler/export/mlir.py": ("SPEC §3.4",),
    "compiler/export/mlir_control.py": ("SPEC §2.7",),
    "compiler/ir/ops_control.py": ("SPEC §2.7",),
    "compiler/ir/views.py": ("SPEC §2.7",),
    "compiler/lower/__init__.py": ("SPEC §2.1–2.3",),
    "compiler/lower/builtins.py": ("SPEC §2.3",),
    "compiler/lower/scans_sorts.py": ("SPEC §2.3",),
    "compiler/pipeline.py": ("SPEC §2.6",),
    "compiler/print_ir.py": ("SPEC §3.4", "compiler/lower*.py"),
    "compiler/transforms/batch_control.py": ("SPEC §2.7",),
    "compiler/transforms/forward_rules.py": ("SPEC §2.4",),
    "compiler/transforms/reverse_control.py": ("SPEC §2.7",),
    "compiler/transforms/reverse_rules.py": ("SPEC §2.4",),
    "compiler/transforms/reverse_structured.py": ("SPEC §2.5",),
    "docs/pipeline.md":
        ("SPEC §2.3",
         "SPEC §2.7",
         "tests/unit/test_artifacts.py",
         "tests/unit/test_layering_runtime.py"),
    "dsl/ast.py": ("SPEC", "SPEC §2.7"),
    "dsl/diagnostics.py": ("SPEC §5",),
    "dsl/grammar.lark": ("SPEC §2", "SPEC §2.5", "SPEC §2.7"),
    "dsl/parser.py": ("SPEC §2", "SPEC §5"),
    "reverie/__init__.py": ("SPEC §3.3", "SPEC §3.5"),
    "reverie/__main__.py": ("SPEC §4",),
    "reverie/autograd/__init__.py": ("SPEC §3.3",),
    "reverie/autograd/functional.py": ("SPEC §3.3",),
    "reverie/autograd/functional_traced.py": ("SPEC §3.2", "SPEC §3.7"),
    "reverie/dask.py": ("SPEC §3.1", "SPEC §3.6"),
    "reverie/dask_call.py": ("SPEC §3.1", "SPEC §3.6"),
    "reverie/demo.py": ("SPEC §4",),
    "reverie/interop_jax/__init__.py": ("SPEC §3.5",),
    "reverie/interop_torch.py": ("SPEC §3.5",),
    "reverie/kernel.py": ("SPEC", "SPEC §2.6", "SPEC §3.1–3.2"),
    "reverie/kernel_transforms.py": ("SPEC §2.6", "SPEC §3.2"),
    "reverie/module.py": ("SPEC §2.6", "SPEC §2.7", "SPEC §3.4"),
    "reverie/torch_op.py": ("SPEC §3.1",),
    "reverie/tracing.py": ("SPEC §2.1", "SPEC §2.3", "SPEC §3.2", "SPEC §3.7"),
    "reverie/tracing_sizes.py": ("SPEC §3.7",),
    "runtime/native/artifacts.py": ("SPEC §3.1",),
    "runtime/native/call.py": ("SPEC §3.1",),
    "runtime/native/mlir_backend.py": ("SPEC §3.1",),
    "runtime/native/version.py": ("tests/unit/test_cache_security.py",),
    "runtime/tensors/autograd_api.py": ("shared/reference/torch_grad_semantics.md",),
    "runtime/tensors/grad_mode.py": ("SPEC §3.3",),
    "runtime/tensors/indexing.py": ("SPEC §3.3",),
    "runtime/tensors/inplace.py": ("SPEC §3.3",),
    "runtime/tensors/operator_kernels.py": ("SPEC §2.3",),
    "runtime/tensors/tensor.py": ("SPEC §3.3",),
    "runtime/tensors/tensor_ops.py": ("SPEC §2.3", "SPEC §3.3"),
    "tests/api/test_fx.py": ("SPEC §3.7",),
    "tests/api/test_fx_arguments.py": ("SPEC §3.7",),
    "tests/api/test_fx_batched_matmul.py": ("SPEC §3.7",),
    "tests/api/test_grad_semantics.py": ("shared/reference/torch_grad_semantics.md",),
    "tests/api/test_interop_jax.py": ("SPEC §3.5",),
    "tests/api/test_interop_torch.py": ("SPEC §3.5",),
    "tests/api/test_tensor_ops.py": ("SPEC §3.3",),
    "tests/api/test_torch_op.py": ("SPEC §3.5",),
    "tests/api/test_trace.py": ("SPEC §3.7",),
    "tests/api/test_trace_names.py": ("SPEC §3.7",),
    "tests/api/test_trace_sizes.py": ("SPEC §3.7",),
    "tests/autograd/conftest.py": ("SPEC §3.3",),
    "tests/dask/test_dask_gradients.py": ("SPEC §3.6",),
    "tests/dask/test_dask_pickle.py": ("SPEC §3.6",),
    "tests/frontend/test_compile_fuzz.py": ("SPEC §5",),
    "tests/frontend/test_parse_fuzz.py": ("SPEC §5",),
    "tests/frontend/test_parser.py": ("SPEC §2",),
    "tests/frontend/test_type_errors.py": ("SPEC §5",),
    "tests/fx_zoo/test_zoo.py": ("SPEC §3.7",),
    "tests/golden/ast/control_flow.rv": ("SPEC §2.7",),
    "tests/golden/ast/conv1d.rv": ("SPEC §2.5",),
    "tests/golden/ast/expressions.rv": ("SPEC §2.3",),
    "tests/golden/ast/heat.rv": ("SPEC §2.6",),
    "tests/golden/ast/index_notation.rv": ("SPEC §2.5",),
    "tests/golden/ast/mlp_loss.rv": ("SPEC §2.2",),
    "tests/golden/ast/rnn.rv": ("SPEC §2.3",),
    "tests/golden/ast/softmax_xent.rv": ("SPEC §2.5",),
    "tests/golden/ast/types.rv": ("SPEC §2.1",),
    "tests/golden/errors/type/return_inside_if.rv": ("SPEC §2.7",),
    "tests/grad/test_batched_matmul.py": ("SPEC §2.3",),
    "tests/grad/test_checkpoint_cost.py": ("SPEC §2.6",),
    "tests/grad/test_checkpoint_memory.py": ("SPEC §2.6",),
    "tests/grad/test_grad_control_flow.py": ("SPEC §2.7",),
    "tests/grad/test_grad_scans.py": ("SPEC §2.3", "SPEC §2.5"),
    "tests/grad/test_grad_update.py": ("SPEC §2",),
    "tests/grad/test_jacobian_identity.py": ("tests/unit/test_identity_products.py",),
    "tests/grad/test_trip_dimensions.py": ("SPEC §2.6",),
    "tests/native/test_fastcall_generic.py": ("tests/unit/test_native_entry.py",),
    "tests/unit/test_call_boundary.py": ("SPEC §3.1",),
    "tests/unit/test_control_flow.py": ("SPEC §2.7",),
    "tests/unit/test_demo.py": ("SPEC §4",),
    "tests/unit/test_float_precision.py": ("SPEC §2.1",),
    "tests/unit/test_pipeline.py": ("SPEC §3.4",),
    "tests/unit/test_scans.py": ("SPEC §2.3", "SPEC §2.5"),
}


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
    """No file cites a missing path or a file outside the repository, but the known ones."""
    new = {name: [c for c in cited if c not in KNOWN_EXCEPTIONS.get(name, ())]
           for name, cited in broken.items()}
    new = {name: cited for name, cited in new.items() if cited}
    assert not new, "citations of files the repository does not contain:\n" + "\n".join(
        f"  {name}: {', '.join(cited)}" for name, cited in sorted(new.items()))


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
