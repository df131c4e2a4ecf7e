"""Layering of the lowering package (`compiler/lower/`): its files import only downward.

The imports of every `compiler/lower/*.py` are read with Python's `ast`, not by importing:
an import inside a function (a way to hide a cycle) fails, and so does any cycle in the
graph of imports between the package's own files. The parts of `Lowerer` are classes
combined by inheritance: each may use only what it or the parts it extends define (so it
depends downward in fact, not only in its imports), and a method defined by two of them
would silently shadow the other. The checkers are first shown to catch a planted fault.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from reverie.compiler.lower import Lowerer
from reverie.compiler.lower.base import LowererBase

PACKAGE = Path(__file__).parents[2] / "compiler" / "lower"
ABSOLUTE = "reverie.compiler.lower"


def _sources(directory: Path) -> dict[str, str]:
    """Module name (file stem) → source text, for every file of the package."""
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(directory.glob("*.py"))}


def imports_inside_functions(sources: dict[str, str]) -> list[str]:
    """`module:line` of every import statement that sits inside a function."""
    found = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found += [f"{module}:{inner.lineno}" for inner in ast.walk(node)
                          if isinstance(inner, ast.Import | ast.ImportFrom)]
    return found


def _targets(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The package's own modules that one import statement imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level == 1:
        if node.module is not None:
            return {node.module.split(".")[0]}
        return {alias.name if alias.name in modules else "__init__" for alias in node.names}
    elif node.level == 0 and node.module is not None:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return set()  # `from ..ir import ...`: outside the package
    prefix = ABSOLUTE + "."
    inside = {name[len(prefix):].split(".")[0] for name in names if name.startswith(prefix)}
    return {name for name in inside if name in modules} | (
        {"__init__"} if ABSOLUTE in names else set())


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere in its text."""
    modules = set(sources)
    return {module: set().union(*[_targets(node, modules) for node in ast.walk(ast.parse(source))
                                  if isinstance(node, ast.Import | ast.ImportFrom)])
            for module, source in sources.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, str] = {}  # "active" while on the path, then "done"

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "active"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "active":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[node] = "done"
        return None

    for root in sorted(graph):
        if root not in state and (cycle := visit(root, [root])):
            return cycle
    return None


def test_checkers_catch_a_planted_cycle_and_a_hidden_import() -> None:
    planted = {
        "a": "from .b import f\n",
        "b": "import reverie.compiler.lower.c\n",
        "c": "def g():\n    from .a import f\n    return f\n",
        "d": "from ..ir import core\nfrom . import a\n",
    }
    assert imports_inside_functions(planted) == ["c:2"]
    assert import_graph(planted) == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(import_graph(planted)) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_inside_a_function() -> None:
    sources = _sources(PACKAGE)
    assert "lowerer" in sources and "module" in sources
    assert imports_inside_functions(sources) == []


def test_package_imports_form_no_cycle() -> None:
    graph = import_graph(_sources(PACKAGE))
    assert graph["module"] >= {"lowerer"} and graph["lowerer"] >= {"expressions"}
    assert find_cycle(graph) is None


def test_no_method_is_defined_by_two_parts_of_the_lowerer() -> None:
    parts = [cls for cls in Lowerer.__mro__ if cls.__module__.startswith(ABSOLUTE)]
    assert len(parts) > 3
    owners: dict[str, list[str]] = {}
    for cls in parts:
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("__"):
                owners.setdefault(name, []).append(cls.__name__)
    abstract = LowererBase.__abstractmethods__
    shadowed = {name: owner for name, owner in owners.items()
                if len(owner) > 1 and not (name in abstract and len(owner) == 2)}
    assert shadowed == {}


def _self_attributes(cls: type) -> set[str]:
    """Every `self.NAME` that the methods of `cls` (its own body only) read or write."""
    (node,) = [n for n in ast.walk(ast.parse(inspect.getsource(inspect.getmodule(cls))))
               if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"}


def test_each_part_uses_only_itself_and_the_parts_it_extends() -> None:
    state = _self_attributes(LowererBase)  # the attributes `LowererBase.__init__` sets
    for cls in Lowerer.__mro__:
        if cls.__module__.startswith(ABSOLUTE):
            upward = _self_attributes(cls) - set(dir(cls)) - state
            assert upward == set(), f"{cls.__name__} uses {sorted(upward)} from above it"
