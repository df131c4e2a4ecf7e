"""Module-level checks that need no types: names of functions and parameters, recursion.

Consumes an `ast.Module` and the names no function may take (the casts and `bool`, which
the lowering hands in as `compiler/lower/module_lowering.py:DTYPE_NAMES`, so the front end
imports nothing of the compiler; a function named like another built-in shadows it);
raises `TypeCheckError` or returns None.
Types, dtypes and shapes are checked while lowering to the tensor IR
(`reverie.compiler.lower`), where every op's shape rule runs.
"""

from __future__ import annotations

from reverie.dsl import ast
from reverie.dsl.diagnostics import Diagnostic, TypeCheckError, diagnostic_at, error_at

# The language's keywords: no name of any kind may be one.
KEYWORDS = frozenset("fn let var for in return true false and or not if else while".split())


def _calls(fn: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> list[ast.Call]:
    """Calls to user functions inside `fn`, in source order."""
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and n.func in functions]


def _check_recursion(functions: dict[str, ast.FunctionDef]) -> None:
    """Reject any cycle in the call graph, pointing at the call that closes it."""
    state: dict[str, str] = {}  # name -> "active" | "done"

    for root in functions:
        stack = [(root, iter(_calls(functions[root], functions)), [root])]
        if state.get(root) == "done":
            continue
        state[root] = "active"
        while stack:
            name, calls, path = stack[-1]
            call = next(calls, None)
            if call is None:
                state[name] = "done"
                stack.pop()
                continue
            if state.get(call.func) == "active":
                cycle = " -> ".join(path[path.index(call.func):] + [call.func])
                raise error_at(call.span, f"recursion is not supported: {cycle}")
            if call.func not in state:
                state[call.func] = "active"
                stack.append((call.func, iter(_calls(functions[call.func], functions)),
                              path + [call.func]))


def check_module(module: ast.Module, reserved: frozenset[str]) -> None:
    """Duplicate names, functions named after a dtype (`reserved`), and recursive calls:
    raises one TypeCheckError with a diagnostic for each such mistake."""
    diagnostics: list[Diagnostic] = []
    functions: dict[str, ast.FunctionDef] = {}
    for fn in module.functions:
        if fn.name in functions:
            diagnostics.append(diagnostic_at(fn.name_span,
                                             f"function '{fn.name}' is defined twice"))
        elif fn.name in reserved:
            diagnostics.append(diagnostic_at(fn.name_span,
                                             f"'{fn.name}' names a dtype; choose another name"))
        seen: set[str] = set()
        for param in fn.params:
            if param.name in seen:
                diagnostics.append(diagnostic_at(param.span,
                                                 f"parameter '{param.name}' appears twice"))
            seen.add(param.name)
        functions.setdefault(fn.name, fn)
    try:
        _check_recursion(functions)
    except TypeCheckError as e:
        diagnostics += e.diagnostics
    if diagnostics:
        raise TypeCheckError(diagnostics, module.source, module.filename)
