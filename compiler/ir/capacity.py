"""Trip-count dimensions: run-time loop counts that size a history (docs/language.md §11, §11.1).

Reverse mode stores a loop's states in a history whose length the tensor IR writes as a
dimension. A trip count that no dimension expression gives (a `while`'s, or `for t in
0..n` with `n` computed) gets a dimension of its own, a *trip dimension* named `#T0`,
`#T1`, ... (`#` cannot start a user's name). No argument binds it: it is a capacity that
the caller chooses, and the op `trip_dim %T {dim = #T0}` checks at run time that the
count T fits (T ≤ #T0), raising `CapacityError` otherwise.

Every runner (the tensor interpreter, the loop interpreter, native and MLIR kernels)
goes through `run_with_capacity`: it starts each trip dimension at the capacity the
runner remembers (0 at first), and when a call reports that a count did not fit, grows
that capacity to max(T, 2 · old) and calls again. The first call of a kernel therefore
runs its forward loop twice; later calls with counts no larger run once. Results do not
depend on the capacity: rows past the count are never read. Two counts may share a trip
dimension (each is checked against it, so it grows to the larger): reverse mode gives each
loop its own where it can, which only saves memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Block

PREFIX = "#T"
MESSAGE = "trip count {needed} exceeds the capacity of {symbol}"
_MESSAGE_PATTERN = re.compile(r"trip count (-?\d+) exceeds the capacity of (#T\d+)")
Result = TypeVar("Result")


def is_trip_symbol(symbol: str) -> bool:
    """Whether `symbol` is a trip dimension (never bound by an argument)."""
    return symbol.startswith(PREFIX)


def fresh_trip_symbol(taken: Iterable[str]) -> str:
    """The first trip dimension name not in `taken`."""
    used = set(taken)
    k = 0
    while f"{PREFIX}{k}" in used:
        k += 1
    return f"{PREFIX}{k}"


def trip_symbols(body: Block) -> list[str]:
    """The trip dimensions the `trip_dim` ops of `body` (regions included) check, sorted."""
    return sorted({str(op.attrs["dim"]) for op in body.walk() if op.name == "trip_dim"})


class CapacityError(IndexError):
    """A run-time trip count exceeded its trip dimension's capacity (retried, never shown)."""

    def __init__(self, symbol: str, needed: int) -> None:
        super().__init__(MESSAGE.format(needed=needed, symbol=symbol))
        self.symbol = symbol
        self.needed = needed

    @staticmethod
    def parse(message: str) -> CapacityError | None:
        """The error whose message is `message`, if it is one (for runners that report
        errors as text)."""
        match = _MESSAGE_PATTERN.fullmatch(message)
        return CapacityError(match[2], int(match[1])) if match else None


def run_with_capacity(run: Callable[[dict[str, int]], Result], dims: Mapping[str, int],
                      symbols: Iterable[str],
                      remembered: MutableMapping[str, int] | None = None) -> Result:
    """`run(sizes)` with the trip dimensions `symbols` added to `dims`, grown and retried
    until every count fits; `remembered` keeps the capacities between calls."""
    capacity = remembered if remembered is not None else {}
    sizes = dict(dims)
    for symbol in symbols:
        sizes.setdefault(symbol, capacity.get(symbol, 0))
    while True:
        try:
            return run(sizes)
        except CapacityError as error:
            old = sizes.get(error.symbol, 0)
            if error.needed <= old:
                raise RuntimeError(f"{error} although it is {old}") from error
            grown = max(error.needed, 2 * old)
            sizes[error.symbol] = capacity[error.symbol] = grown
