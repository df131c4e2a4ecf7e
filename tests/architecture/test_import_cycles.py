"""No import cycles among Reverie's modules.

Every file is parsed, not imported (`import_graph.py`), and each import is followed at any
depth — inside functions, relative, through `importlib.import_module` or `lazy("...")` —
except under `if TYPE_CHECKING:`, which never runs. A cycle hidden in a function is still
a cycle: its modules can be read, tested and changed only together, and whoever imports
one of them first decides which of them sees the other half-initialised.

`CYCLE_CLOSING_IMPORTS` lists the imports that close the cycles not yet removed (issue
34), each with the change that removes it; the graph without them must have no cycle, and
an entry whose import is gone must be deleted, so the list only shrinks.
"""

from __future__ import annotations

import pytest
from import_graph import Import, find_cycle, import_edges, imports_in

# (importing module, imported module) -> how to remove that import
CYCLE_CLOSING_IMPORTS: dict[tuple[str, str], str] = {}


def import_graph(edges: list[Import]) -> dict[str, set[str]]:
    """Module -> the modules it imports where the import can run."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.type_checking:
            graph.setdefault(edge.source, set()).add(edge.target)
    return graph


def test_the_graph_sees_every_kind_of_import() -> None:
    modules = {"reverie.a", "reverie.b", "reverie.c", "reverie.d", "reverie.p",
               "reverie.p.q"}
    source = ("import reverie.a\nfrom . import b\n"
              "def f():\n    from reverie.p import q\n    return q\n"
              "lazy('reverie.c:name')\n"
              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import reverie.d\n")
    edges = imports_in(source, "reverie.p.m", modules)
    assert [(e.target, e.in_function, e.type_checking) for e in edges] == [
        ("reverie.a", False, False), ("reverie.p", False, False),
        ("reverie.p.q", True, False), ("reverie.c", True, False), ("reverie.d", False, True)]
    assert import_graph(edges) == {"reverie.p.m": {"reverie.a", "reverie.p", "reverie.p.q",
                                                   "reverie.c"}}


def test_a_planted_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    found = import_edges()
    assert len({edge.source for edge in found}) > 150, "expected every module of Reverie"
    return found


def test_no_import_cycles(edges: list[Import]) -> None:
    graph = import_graph(edges)
    for source, target in CYCLE_CLOSING_IMPORTS:
        graph.get(source, set()).discard(target)
    cycle = find_cycle(graph)
    lines = {(e.source, e.target): e.line for e in edges}
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{source} (line {lines[source, target]})"
        for source, target in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether a path of imports leads from `start` to `goal`."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return False


def test_every_listed_import_still_closes_a_cycle(edges: list[Import]) -> None:
    graph = import_graph(edges)
    gone = [(source, target) for source, target in CYCLE_CLOSING_IMPORTS
            if target not in graph.get(source, ()) or not reaches(graph, target, source)]
    assert gone == [], f"delete from CYCLE_CLOSING_IMPORTS (no longer in a cycle): {gone}"
