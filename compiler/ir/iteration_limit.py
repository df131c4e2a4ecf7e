"""The iteration limit of `while` loops (SPEC §2.7): how it is chosen and what it says.

A `while` op carries its limit as an attribute (`limit`), set when it is lowered from
`rv.compile(..., max_iterations=)`, else the environment variable REVERIE_MAX_ITERATIONS,
else 10^9. Every backend raises `RuntimeError(limit_error(limit))` when a loop would start
iteration limit + 1. Plain Python, so the runtime can import it cheaply.
"""

from __future__ import annotations

import numbers
import os

DEFAULT_MAX_ITERATIONS = 10**9


def max_iterations(given: int | None = None) -> int:
    """The iteration limit of a `while`: `given` (`rv.compile(max_iterations=)`), else
    REVERIE_MAX_ITERATIONS, else 10^9. ValueError unless it is a positive integer."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, numbers.Integral) or given < 1:
            raise ValueError(f"max_iterations must be a positive integer, got {given!r}")
        return int(given)
    text = os.environ.get("REVERIE_MAX_ITERATIONS", "").strip()
    if not text:
        return DEFAULT_MAX_ITERATIONS
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"REVERIE_MAX_ITERATIONS must be a positive integer, got {text!r}")
    return limit


LIMIT_PREFIX = "a 'while' loop ran past "


def limit_error(limit: int) -> str:
    """The message of the RuntimeError raised by a `while` that runs past `limit`."""
    return (f"{LIMIT_PREFIX}{limit} iterations (REVERIE_MAX_ITERATIONS, or "
            "rv.compile(..., max_iterations=)); check its condition")


def error_for(message: str) -> Exception:
    """The exception for a failed run-time check reported as `message`: RuntimeError for
    the iteration limit (SPEC §2.7), IndexError for the others (bounds checks)."""
    return (RuntimeError if message.startswith(LIMIT_PREFIX) else IndexError)(message)
