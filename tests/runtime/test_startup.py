"""Start-up work: what `import reverie` and a warm start import, and the parser generated
ahead of time.

No timings: fresh processes report which modules they imported. Laziness sits at two
gates: `import reverie` imports each public name on first use (`reverie/__init__.py`), and
a warm start (a new process whose disk cache holds the module: `runtime/native/fastcall.py`)
reaches the compiler only through `runtime/native/compiler_gate.py`, so it reaches its first
value and gradient without importing the front end, the IR, the passes, the ladder, the
loop IR, the code generators or LLVM, and gets the cold process's results and errors.
dsl/generated_parser.py must be what Lark's stand-alone generator makes of today's
grammar.lark (same code, same grammar hash; `REVERIE_UPDATE_GOLDEN=1` regenerates it), must
parse exactly like a parser Lark builds from the grammar, and parsing must never import Lark
(which builds tables).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lark
import numpy as np
import pytest

import reverie as rv
from reverie.dsl import generated_parser, parser
from reverie.runtime.native import artifacts, fastcall

DSL = Path(parser.__file__).parent
GOLDEN = Path(__file__).parents[1] / "golden"
VALID_PROGRAMS = sorted((GOLDEN / "ast").glob("*.rv"))
BAD_PROGRAMS = sorted((GOLDEN / "errors/parse").glob("*.rv"))
CHILD_TIMEOUT_S = 120
UPDATE = os.environ.get("REVERIE_UPDATE_GOLDEN") == "1"  # as in tests/conftest.py
HEAVY_MODULES = {"lark", "llvmlite", "torch", "jax"}
LARK_OPTIONS = {"lexer": "basic", "propagate_positions": True, "maybe_placeholders": True}
GENERATOR = ["-m", "lark.tools.standalone", "-l", "basic", "--propagate_positions",
             "--maybe_placeholders", str(DSL / "grammar.lark")]
HEADER = """# ruff: noqa
# Generated from grammar.lark by tests/runtime/test_startup.py; after editing the grammar run
#   REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/runtime/test_startup.py
# (Lark's `python -m lark.tools.standalone -l basic --propagate_positions --maybe_placeholders`).
# Its optional `import regex` is left out (tests/runtime/test_startup.py).
GRAMMAR_SHA256 = "{}"
"""
# The generator's optional `import regex` (~20 ms when installed) serves only
# `Lark(regex=True)`, which Reverie never asks for: the shipped file goes without it.
OPTIONAL_REGEX = ("try:\n    import regex\n    _has_regex = True\nexcept ImportError:\n"
                  "    _has_regex = False\n")
WITHOUT_REGEX = "_has_regex = False  # (Reverie never asks for Lark(regex=True))\n"
TABLES = re.compile(r"^(DATA|MEMO) = \(\n.*\n\)$", re.MULTILINE)


def imported_modules(statements: str) -> set[str]:
    """The top-level packages a new Python process has imported after `statements`."""
    code = f"import json, sys\n{statements}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


# A first value and gradient, then a call with a bad argument (its error message), and the
# modules Reverie imported and the threads it started for the first two (arguments are
# made before `import reverie`, without numpy.random, which imports hashlib and with it
# OpenSSL's libcrypto).
WARM_CHILD = """
import json, sys, threading
import numpy as np
started, thread_start = [], threading.Thread.start
threading.Thread.start = lambda thread: (started.append(thread.name), thread_start(thread))[1]
shapes = [(8, 3), (8, 2), (3, 5), (5,), (5, 2), (2,)]
args = [np.sin(np.arange(np.prod(s)) + i).reshape(s) for i, s in enumerate(shapes)]
before = set(sys.modules)
import reverie as rv
kernel = rv.load("examples/mlp.rv")["mlp_loss"]
value = kernel(*args)
grads = kernel.grad()(*args)
imported = sorted(set(sys.modules) - before)
try:
    kernel(args[0][:, :2], *args[1:])
except rv.ShapeMismatchError as error:
    message = str(error)
print(json.dumps({"value": float(value), "grads": [g.tolist() for g in grads],
                  "error": message, "imported": imported, "threads": started}))
"""
# What a warm start must not import: the front end, the IR and its passes, the ladder, the
# loop IR, the code generators, llvmlite (not even its package: the host description is
# remembered under llvmlite's installed files, runtime/native/remembered.py), the native backend's
# IR path and its LLVM thread (runtime/native/compile_queue.py), the pass printer
# (runtime/native/artifacts.py `in_use`) and the tape; nor the standard
# modules that cost it milliseconds (OpenSSL's libcrypto behind hashlib and hmac: the
# cache's MAC is BLAKE2b; dataclasses).
NOT_ON_THE_WARM_PATH = ("_hashlib", "hashlib", "hmac", "secrets", "dataclasses",
                        "lark", "llvmlite", "reverie.compiler.print_ir", "reverie.dsl.parser",
                        "reverie.dsl.generated_parser", "reverie.dsl.ast",
                        "reverie.dsl.diagnostics", "reverie.compiler.ir.core",
                        "reverie.compiler.ir.types", "reverie.compiler.ir.ops",
                        "reverie.compiler.lower", "reverie.compiler.transforms",
                        "reverie.compiler.pipeline", "reverie.compiler.loops",
                        "reverie.compiler.backend.llvm", "reverie.runtime.native.native_kernel",
                        "reverie.runtime.native.compile_queue", "reverie.runtime.tensors.tape",
                        "reverie.runtime.tensors.tensor")
LLVM_THREAD = "reverie-llvm"  # runtime/native/compile_queue.py's


# Every Reverie module a warm start imports (`import reverie`'s first), and no other: each
# costs it time however small (benchmarks/README.md), so a module added to the warm path
# must be added here on purpose. Of the compiler it loads only the tables the native code
# and the run time share (dtypes, the call boundary's ABI and descriptor, the iteration
# limit) and `lazy`, with which the gate (`runtime/native/compiler_gate.py`) hands the warm
# path's modules the rest of the compiler on first use; behind the gate, the compiler's
# modules import one another at the top (tests/architecture/test_gates.py).
WARM_PATH_MODULES = sorted([
    "reverie", "reverie.runtime", "reverie.runtime.native",
    "reverie.runtime.native.kernel_protocol", "reverie.runtime.native.version", "reverie.module",
    "reverie.kernel", "reverie.kernel_transforms", "reverie.compiler", "reverie.compiler.lazy",
    "reverie.compiler.ir", "reverie.compiler.ir.dtypes", "reverie.compiler.ir.iteration_limit",
    "reverie.compiler.call_boundary", "reverie.compiler.call_boundary.abi",
    "reverie.compiler.call_boundary.fastcall_descriptor", "reverie.runtime.native.artifacts",
    "reverie.runtime.native.cache", "reverie.runtime.native.lru", "reverie.runtime.native.locks",
    "reverie.runtime.native.orphans", "reverie.runtime.native.compiler_gate",
    "reverie.runtime.native.call",
    "reverie.runtime.native.output_pool", "reverie.runtime.native.fastcall",
    "reverie.runtime.native.helpers", "reverie.runtime.native.blas",
    "reverie.runtime.native.jit_module", "reverie.runtime.native.pool",
    "reverie.runtime.native.remembered", "reverie.runtime.native.shared_objects",
    # the host settings the host description keys on (asking Linux for the AMX tiles)
    "reverie.compiler.backend", "reverie.compiler.backend.matrix_tiles",
    "reverie.compiler.backend.storage_hardware", "reverie.compiler.backend.vector_width",
])


def run_warm_child(cache_dir: Path) -> dict:
    """Run WARM_CHILD in a fresh interpreter with the disk cache in `cache_dir` (and two
    threads allowed, so a cold start starts its LLVM thread even on one CPU)."""
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(cache_dir),
                   "REVERIE_NUM_THREADS": "2", "REVERIE_LLVM_THREAD": "1"}
    result = subprocess.run([sys.executable, "-c", WARM_CHILD], capture_output=True,
                            text=True, timeout=CHILD_TIMEOUT_S, env=environment,
                            cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def on_the_warm_path(modules: list[str]) -> list[str]:
    """The modules of `modules` that a warm start must not import."""
    return [name for name in modules
            if any(name == banned or name.startswith(banned + ".")
                   for banned in NOT_ON_THE_WARM_PATH)]


def tree_dump(tree: object) -> list:
    """A parse tree as nested lists: rule, positions, children; tokens with their positions."""
    if hasattr(tree, "children"):
        meta = tree.meta
        positions = [getattr(meta, name, None) for name in ("line", "column", "end_line",
                                                             "end_column", "start_pos")]
        return [tree.data, positions, [tree_dump(child) for child in tree.children]]
    if tree is None:
        return [None]
    return [tree.type, str(tree), tree.line, tree.column, tree.end_line, tree.end_column]


def outcome(parse: Callable[[str], object], source: str) -> list:
    """The tree dump of `source`, or where and why the parse failed."""
    try:
        return tree_dump(parse(source))
    except Exception as error:  # both parsers' UnexpectedInput subclasses
        return [type(error).__name__, error.line, error.column,
                sorted(getattr(error, "expected", None) or getattr(error, "allowed", ()))]


def test_import_reverie_imports_neither_front_end_nor_back_end() -> None:
    bare = imported_modules("import reverie")
    assert not {name.split(".")[0] for name in bare} & HEAVY_MODULES
    assert not {"numpy", "reverie.dsl.parser", "reverie.module"} & bare
    used = imported_modules("import reverie as rv\nrv.compile, rv.Kernel, rv.grad, rv.Tensor")
    assert not {name.split(".")[0] for name in used} & HEAVY_MODULES
    assert not {"reverie.dsl.generated_parser", "reverie.compiler.pipeline"} & used


def test_a_warm_start_imports_no_compiler_and_gives_the_cold_results(tmp_path: Path) -> None:
    cold = run_warm_child(tmp_path)
    assert on_the_warm_path(cold["imported"]), "the check must see a cold start's imports"
    assert LLVM_THREAD in cold["threads"], "the check must see a cold start's LLVM thread"
    warm = run_warm_child(tmp_path)
    assert on_the_warm_path(warm["imported"]) == []
    assert LLVM_THREAD not in warm["threads"]
    reverie_modules = [name for name in warm["imported"] if name.split(".")[0] == "reverie"]
    assert reverie_modules == WARM_PATH_MODULES
    assert (warm["value"], warm["grads"], warm["error"]) == (
        cold["value"], cold["grads"], cold["error"])


def test_a_launch_record_not_in_the_shape_written_is_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(tmp_path))
    source = "fn f(x: f64[N]) -> f64 { return sum(x * x); }"
    x = np.arange(3.0)
    kernel = rv.compile(source).f
    assert kernel(x) == 5.0  # writes the launch record
    ir_key = artifacts.artifact_key("ir", *kernel.identity, kernel.dtype_key("f64"))
    assert fastcall.launch_entry(ir_key, kernel, False, str) is not None
    record = artifacts.load(fastcall.launch_key(ir_key))
    symbol, name, signature, helpers, own_kernel, object_key = record
    for forged_signature in [signature._replace(outputs=(("f128", 0),)),
                             signature._replace(params=(("f64", -1),)),
                             signature._replace(symbols=1 << 40),
                             tuple(signature)]:  # (a plain tuple: not a CallSignature)
        artifacts.store(fastcall.launch_key(ir_key), (symbol, name, forged_signature, helpers,
                                                    own_kernel, object_key))
        assert fastcall.launch_entry(ir_key, kernel, False, str) is None, forged_signature
    for forged in [(symbol, name),
                   (symbol, name, signature, ("rv_system",), own_kernel, object_key),
                   (symbol, name, signature, helpers, "yes", object_key),
                   [*record], "not a record"]:
        artifacts.store(fastcall.launch_key(ir_key), forged)
        assert fastcall.launch_entry(ir_key, kernel, False, str) is None, forged
        assert rv.compile(source).f(x) == 5.0  # a new module's kernel: through the IR


def test_parsing_never_imports_lark() -> None:
    sources = ", ".join(repr(str(path)) for path in VALID_PROGRAMS[:3] + BAD_PROGRAMS[:3])
    modules = imported_modules(
        "from reverie.dsl.diagnostics import ParseError\nfrom reverie.dsl.parser import parse\n"
        f"for path in [{sources}]:\n"
        "    try: parse(open(path).read())\n    except ParseError: pass"
    )
    assert "reverie.dsl.generated_parser" in modules
    assert "lark" not in modules
    assert "regex" not in modules  # (the generated parser's optional import, left out)


def test_generated_parser_is_up_to_date() -> None:
    """Generated from today's grammar.lark by the installed Lark, pinned in the test extra
    (its tables are compared by behaviour below: the generator numbers states differently
    from run to run)."""
    grammar = (DSL / "grammar.lark").read_bytes()
    result = subprocess.run([sys.executable, *GENERATOR], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(OPTIONAL_REGEX) == 1, "Lark's stand-alone code changed"
    fresh = HEADER.format(hashlib.sha256(grammar).hexdigest()) + \
        result.stdout.replace(OPTIONAL_REGEX, WITHOUT_REGEX)
    if UPDATE:
        (DSL / "generated_parser.py").write_text(fresh, encoding="utf-8")
    shipped = (DSL / "generated_parser.py").read_text(encoding="utf-8")
    assert TABLES.sub(r"\1 = (...)", shipped) == TABLES.sub(r"\1 = (...)", fresh), (
        "generated_parser.py is stale: run REVERIE_UPDATE_GOLDEN=1 python -m pytest " + __file__)


def test_generated_parser_parses_like_lark_built_from_the_grammar() -> None:
    grammar = (DSL / "grammar.lark").read_text(encoding="utf-8")
    built = lark.Lark(grammar, parser="lalr", **LARK_OPTIONS)
    generated = generated_parser.Lark_StandAlone()
    for path in VALID_PROGRAMS + BAD_PROGRAMS:
        source = path.read_text(encoding="utf-8")
        assert outcome(generated.parse, source) == outcome(built.parse, source), path.name
    assert len(VALID_PROGRAMS) >= 5 and len(BAD_PROGRAMS) >= 20


def test_public_names_resolve_to_their_home_modules() -> None:
    assert sorted(rv.__all__) == sorted(rv.HOME_MODULES)
    for name in rv.__all__:
        home = importlib.import_module(rv.HOME_MODULES[name])
        assert getattr(rv, name) is getattr(home, name), name
    assert set(rv.__all__) <= set(dir(rv))
    with pytest.raises(AttributeError, match="no attribute 'compiles'"):
        rv.compiles  # noqa: B018


def test_type_checking_imports_name_every_public_name() -> None:
    tree = ast.parse(Path(rv.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If))
    imported = {alias.name for statement in block.body for alias in statement.names}
    assert imported == set(rv.__all__)
