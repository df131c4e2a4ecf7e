"""`lazy("module:name")`: a function that imports its target on first call.

Only the gate of a warm start uses it (`runtime/native/compiler_gate.py`: every handle by
which the warm path reaches the compiler); behind that gate, modules import one another at
the top. The import tests read `lazy("...")` as an import
(tests/architecture/import_graph.py), so it hides no layering fault nor cycle:

    climb = lazy("reverie.compiler.pipeline:climb")
    climb(fn, request)              # imports the ladder here, the first time
    climb.resolve()                 # the function itself (a class: for isinstance)
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol


class Lazy(Protocol):
    """A handle on `module:name`: calling it calls the target; `resolve()` returns it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def resolve(self) -> Any: ...


def lazy(target: str) -> Lazy:
    """The function or class `module:name`, imported on its first call. (A closure over
    the resolved target rather than a `functools.cache` per name: each call looks it up
    with one test instead of a cache call.)"""
    module_name, _, attribute = target.partition(":")
    resolved: Any = None

    def resolve() -> Any:
        nonlocal resolved
        if resolved is None:
            resolved = getattr(importlib.import_module(module_name), attribute)
        return resolved

    def call(*args: Any, **kwargs: Any) -> Any:
        return (resolved or resolve())(*args, **kwargs)

    call.__doc__ = f"`{target}` (imported on first use)."
    call.resolve = resolve  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
