"""A row of the `rv.fx` target table (`fx_targets.py`, `fx_rows_*.py`): the `Rule`.

A `Rule` records one torch target on `reverie.tracing` stand-ins and checks a graph node's
arguments first: they are bound to its recording function's parameters (torch's names, in
torch's order), those in `only` are accepted at that one value, and an argument it has no
parameter for, or a tensor eager PyTorch computed, raises `UnsupportedArgument`. A module
row calls the rule of its functional form, so a module's attributes are checked alike:

    rule_in(FUNCTIONS, F.layer_norm)(x, m.normalized_shape, weight, bias, m.eps)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from reverie.fx_functional import UnsupportedArgument, refuse
from reverie.tracing import Traced

Emit = Callable[..., Any]


@dataclass(frozen=True)
class Rule:
    """One mapped target, named `target` in errors. `emit` records it; its parameters are
    the arguments honoured, except that those in `only` are accepted at that value alone."""

    target: str
    emit: Emit
    only: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("out", 0) is None:  # torch's default, spelled out
            del kwargs["out"]
        bound = self._bind(args, kwargs)
        for name, value in bound.arguments.items():
            self._check(name, value)
        return self.emit(*bound.args, **bound.kwargs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        signature = inspect.signature(self.emit)
        try:
            return signature.bind(*args, **kwargs)
        except TypeError as error:
            unknown = [k for k in kwargs if k not in signature.parameters]
            what = f"argument '{unknown[0]}'" if unknown else f"these arguments ({error})"
            raise UnsupportedArgument(f"{self.target}: {what} is not supported by "
                                      f"Reverie's mapping") from None

    def _check(self, name: str, value: Any) -> None:
        if name in self.only and not _equal(value, self.only[name]):
            raise refuse(self.target, name, value,
                         f"Reverie honours only {name}={self.only[name]!r}")
        if _holds_tensor(value):
            raise UnsupportedArgument(
                f"{self.target}: argument '{name}' is a tensor computed outside the compiled "
                f"graph (by eager PyTorch), not a value Reverie records")


def _equal(value: Any, accepted: Any) -> bool:
    if isinstance(value, Traced | torch.Tensor):
        return False
    return value is accepted or value == accepted


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, tuple | list):
        return any(_holds_tensor(v) for v in value)
    return isinstance(value, dict) and any(_holds_tensor(v) for v in value.values())


def target_name(target: Any) -> str:
    """A function target as it is written: `torch.tanh`, `_operator.add`."""
    module = getattr(target, "__module__", None) or "torch"
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def rule_in(table: Mapping[Any, tuple[Emit, Mapping[str, Any]]], target: Any) -> Rule:
    """The rule of function `target` in `table` (a family's `FUNCTIONS`, whose rows
    `fx_targets.py` merges into its own table unchanged)."""
    emit, only = table[target]
    return Rule(target_name(target), emit, only)
