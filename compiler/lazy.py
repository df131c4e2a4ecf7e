"""`lazy("module:name")`: a function that imports its target on first call.

Reverie's passes and back ends are imported only when a program needs them, so that
`rv.compile` of a source whose results are in the disk cache, or that uses no transform,
does not load them (tests/unit/test_startup.py checks what `import reverie` and a warm
compile load):

    grad_function = lazy("reverie.compiler.transforms.reverse:grad_function")
    grad_function(fn, [0])          # imports the reverse pass here, the first time
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any


def lazy(target: str) -> Callable[..., Any]:
    """The function or class `module:name`, imported on its first call."""
    module_name, _, attribute = target.partition(":")

    @functools.cache
    def resolve() -> Callable[..., Any]:
        return getattr(importlib.import_module(module_name), attribute)

    def call(*args: Any, **kwargs: Any) -> Any:
        return resolve()(*args, **kwargs)

    call.__doc__ = f"`{target}` (imported on first use)."
    return call
