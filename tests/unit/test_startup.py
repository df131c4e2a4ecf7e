"""Start-up work: what `import reverie` imports, and the parser generated ahead of time.

No timings: fresh processes report which modules they imported. dsl/generated_parser.py
must be what Lark's stand-alone generator makes of today's grammar.lark (same code, same
grammar hash; `REVERIE_UPDATE_GOLDEN=1` regenerates it), must parse exactly like a parser
Lark builds from the grammar, and parsing must never import Lark (which builds tables).
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
import pytest

import reverie as rv
from reverie.dsl import generated_parser, parser

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
# Generated from grammar.lark by tests/unit/test_startup.py; after editing the grammar run
#   REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_startup.py
# (Lark's `python -m lark.tools.standalone -l basic --propagate_positions --maybe_placeholders`).
GRAMMAR_SHA256 = "{}"
"""
TABLES = re.compile(r"^(DATA|MEMO) = \(\n.*\n\)$", re.MULTILINE)


def imported_modules(statements: str) -> set[str]:
    """The top-level packages a new Python process has imported after `statements`."""
    code = f"import json, sys\n{statements}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


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
    assert "reverie.dsl.generated_parser" not in used


def test_parsing_never_imports_lark() -> None:
    sources = ", ".join(repr(str(path)) for path in VALID_PROGRAMS[:3] + BAD_PROGRAMS[:3])
    modules = imported_modules(
        "from reverie.dsl.diagnostics import ParseError\nfrom reverie.dsl.parser import parse\n"
        f"for path in [{sources}]:\n"
        "    try: parse(open(path).read())\n    except ParseError: pass"
    )
    assert "reverie.dsl.generated_parser" in modules
    assert "lark" not in modules


def test_generated_parser_is_up_to_date() -> None:
    """Generated from today's grammar.lark by the installed Lark, pinned in the test extra
    (its tables are compared by behaviour below: the generator numbers states differently
    from run to run)."""
    grammar = (DSL / "grammar.lark").read_bytes()
    result = subprocess.run([sys.executable, *GENERATOR], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    fresh = HEADER.format(hashlib.sha256(grammar).hexdigest()) + result.stdout
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
