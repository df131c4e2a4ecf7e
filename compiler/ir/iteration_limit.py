"""The iteration limit of `while` loops: how it is chosen and what it says.

A `while` op carries its limit as an attribute (`limit`), set when it is lowered from
`rv.compile(..., max_iterations=)`, else the environment variable REVERIE_MAX_ITERATIONS,
else 10^9. Every backend raises `RuntimeError(limit_error(limit))` when a loop would start
iteration limit + 1 (docs/language.md §11.1). Plain Python, so the runtime can import it
cheaply.
"""

from __future__ import annotations

import numbers
import os

DEFAULT_MAX_ITERATIONS = 10**9
LARGEST_LIMIT = (1 << 63) - 1  # compiled code counts iterations in int64


def max_iterations(given: int | None = None) -> int:
    """The iteration limit of a `while`: `given` (`rv.compile(max_iterations=)`), else
    REVERIE_MAX_ITERATIONS, else 10^9. ValueError unless it is an integer from 1 to
    LARGEST_LIMIT (checked when the source is compiled, so every backend counts alike)."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, numbers.Integral):
            raise ValueError(f"max_iterations must be a positive integer, got {given!r}")
        return _checked(int(given), "max_iterations")
    text = os.environ.get("REVERIE_MAX_ITERATIONS", "").strip()
    if not text:
        return DEFAULT_MAX_ITERATIONS
    try:
        limit = int(text)
    except ValueError:
        raise ValueError("REVERIE_MAX_ITERATIONS must be a positive integer, "
                         f"got {text!r}") from None
    return _checked(limit, "REVERIE_MAX_ITERATIONS")


def _checked(limit: int, name: str) -> int:
    """`limit`, unless it is not positive or more than a compiled loop counter holds."""
    if limit < 1:
        raise ValueError(f"{name} must be a positive integer, got {limit!r}")
    if limit > LARGEST_LIMIT:
        raise ValueError(f"{name} must be at most 2**63 - 1 (compiled code counts iterations "
                         f"in int64), got {limit!r}")
    return limit


LIMIT_PREFIX = "a 'while' loop ran past "


def limit_error(limit: int) -> str:
    """The message of the RuntimeError raised by a `while` that runs past `limit`."""
    return (f"{LIMIT_PREFIX}{limit} iterations (REVERIE_MAX_ITERATIONS, or "
            "rv.compile(..., max_iterations=)); check its condition")


def error_for(message: str) -> Exception:
    """The exception for a failed run-time check reported as `message`: RuntimeError for
    the iteration limit, IndexError for the others (bounds checks)."""
    return (RuntimeError if message.startswith(LIMIT_PREFIX) else IndexError)(message)
