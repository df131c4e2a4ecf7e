"""Shared helper: the imports between Reverie's own modules, read from the source.

Nothing is imported: every file of the four packages (`reverie/`, `dsl/`, `compiler/`,
`runtime/`, installed as `reverie`, `reverie.dsl`, `reverie.compiler`, `reverie.runtime`)
is parsed, and each import in it is resolved to the Reverie module it loads, at any depth:
inside functions, relative (`from .. import kernel`), and through `importlib.import_module`,
`__import__` or `lazy` (`compiler/lazy.py`) called with a literal name. `from package
import name` imports `package.name` when that is a module, else `package` (whose
`__init__.py` defines the name). Each import says whether it sits inside a function and
whether under `if TYPE_CHECKING:` (never run):

    edges = import_edges()
    [e.target for e in edges if e.source == "reverie.dsl.check"]   # ["reverie.dsl.ast", ...]
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPOSITORY = Path(__file__).parents[2]
PACKAGE_FOLDERS = {"reverie": "reverie", "reverie.dsl": "dsl", "reverie.compiler": "compiler",
                   "reverie.runtime": "runtime"}
# Lark's stand-alone parser, generated into the front end: its relative imports name Lark's
# own modules (in code Reverie never runs), not Reverie's.
GENERATED = {"reverie.dsl.generated_parser"}
DYNAMIC_IMPORTS = {"import_module", "__import__", "lazy"}


class Import(NamedTuple):
    """One import of module `target` by module `source`, at `line` of its file."""

    source: str
    target: str
    line: int
    in_function: bool
    type_checking: bool


def module_files() -> dict[str, Path]:
    """Every Reverie module (`reverie.compiler.ir.core`; a package by its own name) → file."""
    files = {}
    for package, folder in PACKAGE_FOLDERS.items():
        root = REPOSITORY / folder
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if package == "reverie" and f"reverie.{parts[0]}" in PACKAGE_FOLDERS:
                continue  # (not there in an installed tree; a stray copy would be no module)
            name = ".".join([package, *parts])
            files[name.removesuffix(".__init__")] = path
    return files


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _statements(tree: ast.AST, in_function: bool = False,
                type_checking: bool = False) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Each import statement or literal dynamic import in `tree`, with where it sits."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function, type_checking
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in DYNAMIC_IMPORTS):
            yield node, True, type_checking  # (resolved when called)
        nested = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                           | ast.Lambda)
        yield from _statements(node, nested, type_checking or _is_type_checking(node))


def _names(node: ast.AST, package: str, modules: set[str]) -> list[str]:
    """The dotted names one import statement loads (`package`: the importing file's)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.Call):
        return [node.args[0].value.partition(":")[0]]
    base = node.module or ""
    if node.level:
        parent = package.rsplit(".", node.level - 1)[0]
        base = f"{parent}.{base}" if base else parent
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
            for alias in node.names]


def _nearest_module(name: str, modules: set[str]) -> str | None:
    """The module `name` loads: itself, or the package that defines it (None: not Reverie's)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def imports_in(source: str, module: str, modules: set[str], is_package: bool = False
               ) -> list[Import]:
    """The imports of Reverie modules (of `modules`) in `source`, the text of `module`."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node, in_function, type_checking in _statements(ast.parse(source)):
        for name in _names(node, package, modules):
            target = _nearest_module(name, modules)
            if target is not None and target != module:
                found.append(Import(module, target, node.lineno, in_function, type_checking))
    return found


def import_edges() -> list[Import]:
    """Every import of a Reverie module by a Reverie module (but the generated parser)."""
    files = module_files()
    modules = set(files)
    return [edge for module, path in files.items() if module not in GENERATED
            for edge in imports_in(path.read_text(encoding="utf-8"), module, modules,
                                   path.name == "__init__.py")]


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
