"""Rule tables: one kind, filled in one place, and a missing rule names the op and the table.

Each per-op table is a `RuleTable` (`compiler/ir/rule_table.py`). Importing the module that
reads a table (the pass, which names every module that registers into it), alone in a
fresh interpreter, must give the whole table: the same keys as once every module of the
compiler is imported, so that no rule exists only because some other module happened to
be imported first. (`test_op_table.py` checks that the whole table has every op it needs.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module

import pytest

# every module of the compiler, so that the tables seen here are whole
import reverie.compiler.export.mlir  # noqa: F401
import reverie.compiler.pipeline  # noqa: F401
from reverie.compiler.ir.rule_table import RuleTable
from reverie.dsl.diagnostics import CompileError

# (the module that reads it, table) for every per-op table
TABLES = [
    ("reverie.compiler.transforms.reverse", "VJP_RULES"),
    ("reverie.compiler.transforms.forward", "JVP_RULES"),
    ("reverie.compiler.transforms.batch", "BATCH_RULES"),
    ("reverie.compiler.to_loops.emitter", "FUSED_RULES"),
    ("reverie.compiler.to_loops.emitter", "VIEW_RULES"),
    ("reverie.compiler.to_loops.lower_blocks", "ROOT_LOWERINGS"),
    ("reverie.compiler.backend.scalar_ops", "RULES"),
    ("reverie.compiler.export.mlir", "LOWERINGS"),
]

KEYS_ALONE = """
import importlib, json, sys
table = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
print(json.dumps(sorted(map(repr, table))))
"""


@pytest.mark.parametrize(("module", "name"), TABLES)
def test_a_table_is_whole_when_its_module_is_imported_alone(module: str, name: str) -> None:
    whole = getattr(import_module(module), name)
    assert isinstance(whole, RuleTable)
    found = subprocess.run([sys.executable, "-c", KEYS_ALONE, module, name],
                           capture_output=True, text=True, check=True)
    alone = set(json.loads(found.stdout))
    assert alone == set(map(repr, whole)), sorted(set(map(repr, whole)) ^ alone)


def test_a_key_has_one_rule() -> None:
    table: RuleTable[str, int] = RuleTable("the test level")
    table.register("a", "b")(1)
    with pytest.raises(AssertionError, match="the test level: two rules for b"):
        table.register("b")(2)
    assert dict(table) == {"a": 1, "b": 1}


def test_a_missing_rule_names_the_op_and_the_table() -> None:
    table: RuleTable[tuple[str, str], int] = RuleTable("the test level")
    with pytest.raises(CompileError, match="the test level for f64 has no rule for 'tanh'"):
        table.lookup(("tanh", "float"), detail=" for f64")
    own = RuleTable("batching", "cannot batch '{op}'")
    with pytest.raises(CompileError, match="cannot batch 'tanh'"):
        own.lookup("tanh")
