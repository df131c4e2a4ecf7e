"""`lazy("module:name")`: a function that imports its target on first call.

It keeps the passes and back ends out of a warm start (a source whose results are in the
disk cache, or that uses no transform, does not load them; tests/runtime/test_startup.py
checks what `import reverie` and a warm start load); behind that gate, modules import
one another at the top. The import tests read `lazy("...")` as an import
(tests/architecture/import_graph.py), so it hides no layering fault nor cycle:

    grad_function = lazy("reverie.compiler.transforms.reverse:grad_function")
    grad_function(fn, [0])          # imports the reverse pass here, the first time
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy(target: str) -> Callable[..., Any]:
    """The function or class `module:name`, imported on its first call. (A closure over
    the resolved target rather than a `functools.cache` per name: each call looks it up
    with one test instead of a cache call.)"""
    module_name, _, attribute = target.partition(":")
    resolved: Callable[..., Any] | None = None

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal resolved
        if resolved is None:
            resolved = getattr(importlib.import_module(module_name), attribute)
        return resolved(*args, **kwargs)

    call.__doc__ = f"`{target}` (imported on first use)."
    return call
