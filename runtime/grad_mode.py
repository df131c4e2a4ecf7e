"""Grad mode: whether calls on Tensors are recorded (`rv.no_grad`, `rv.enable_grad`, SPEC §3.3).

Consumes nothing but the `with` blocks and decorated functions that switch it; produces
`grad_enabled()`, which the tape calls before recording a call (`tape.python_call_path`).
As torch's: both are context managers and decorators, they nest, and the mode is the
thread's own (a new thread starts with recording on). It is kept in a `ContextVar`, which
every thread has its own of (each thread runs in its own context) and which is cheaper to
read than a `threading.local` attribute (~40 ns fewer per recorded call); an asyncio task
starts with the mode of the code that created it, and its own blocks do not leak out.

    with rv.no_grad():          # nothing recorded: results do not require grad
        y = x * 2.0
    @rv.enable_grad()           # recorded again inside, even under no_grad
    def step(x): ...
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


_GRAD_ENABLED = contextvars.ContextVar("reverie_grad_enabled", default=True)
# True unless a `no_grad` block is active in this thread (or context)
grad_enabled: Callable[[], bool] = _GRAD_ENABLED.get


class _SetGradMode:
    """A context manager and decorator that sets the grad mode to `ENABLED` inside."""

    ENABLED = True
    __slots__ = ("_previous",)

    def __new__(cls, function: F | None = None) -> _SetGradMode:
        """A new context manager; given a function (`@rv.no_grad` without parentheses),
        that function running with this grad mode."""
        if function is not None:
            return cls()(function)
        return super().__new__(cls)

    def __init__(self, function: F | None = None) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(grad_enabled())
        _GRAD_ENABLED.set(self.ENABLED)

    def __exit__(self, *exc: object) -> None:
        _GRAD_ENABLED.set(self._previous.pop())

    def __call__(self, function: F) -> F:
        """`function` running with this grad mode (as `@rv.no_grad()`)."""
        mode = type(self)

        @functools.wraps(function)
        def with_mode(*args: object, **kwargs: object) -> object:
            with mode():
                return function(*args, **kwargs)
        return with_mode  # type: ignore[return-value]


class no_grad(_SetGradMode):  # noqa: N801 -- spelled as torch.no_grad
    """Record nothing inside: `with rv.no_grad():` or `@rv.no_grad()`."""

    ENABLED = False


class enable_grad(_SetGradMode):  # noqa: N801 -- spelled as torch.enable_grad
    """Record again inside (also inside `no_grad`): `with rv.enable_grad():`."""

    ENABLED = True
