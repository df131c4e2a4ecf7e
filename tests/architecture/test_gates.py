"""Laziness at two gates (CONTRIBUTING.md): `reverie/__init__.py`, whose public names are
imported on first use, and the gate of a warm start, `runtime/native/compiler_gate.py`,
the one module that hands the run time and the public API the compiler on first use.
Behind them, modules import at the top.

Every file is parsed, not imported (`import_graph.py`): `lazy("...")` is called in the gate
alone, and no module of the run time or the public API imports the compiler or the front
end inside a function; they use the gate's handles. What a warm start imports is checked by
running one (tests/runtime/test_startup.py).
"""

from __future__ import annotations

import ast

from import_graph import Import, import_edges, module_files

GATE = "reverie.runtime.native.compiler_gate"
COMPILER = ("reverie.compiler", "reverie.dsl")
# Imports of the compiler inside a function, outside the gate, not yet removed, each with
# the change that removes it; an entry whose import is gone must be deleted.
IN_FUNCTION_IMPORTS: dict[tuple[str, str], str] = {}


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def lazy_callers() -> list[str]:
    """Every module whose source calls `lazy(...)`."""
    found = []
    for module, path in module_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy"
               for node in ast.walk(tree)):
            found.append(module)
    return found


def compiler_imports_in_functions(edges: list[Import]) -> set[tuple[str, str]]:
    """(module, target) of every import of the compiler or the front end inside a function
    (or through `lazy` or `importlib`) by a module of the run time or the public API."""
    return {(edge.source, edge.target) for edge in edges
            if edge.in_function and not edge.type_checking and _in(edge.target, COMPILER)
            and not _in(edge.source, COMPILER)}


def test_only_the_gate_makes_lazy_handles() -> None:
    assert lazy_callers() == [GATE]


def test_the_run_time_and_the_api_reach_the_compiler_lazily_only_through_the_gate() -> None:
    found = compiler_imports_in_functions(import_edges())
    assert {(source, target) for source, target in found if source != GATE} == set(
        IN_FUNCTION_IMPORTS)
    assert {target for source, target in found if source == GATE} >= {
        "reverie.compiler.pipeline", "reverie.compiler.runtime_library.gemm",
        "reverie.compiler.call_boundary.fastcall_entry"}
