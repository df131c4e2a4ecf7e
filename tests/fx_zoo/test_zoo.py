"""The zoo: twenty canonical models trained through `torch.compile(backend="reverie")`
beside eager PyTorch (issue 33; docs/api.md §8–9).

Each (model, dtype, route) case trains the model for `harness.STEPS` steps, optimiser
included, compiled and eagerly from one initial state, and compares at every step the
outputs, losses, second-order results, every parameter gradient, every buffer and the
parameters after the step, then the same in eval mode (`tests/fx_zoo/harness.py`), in
each dtype of `harness.DTYPES` (or those `models.CASE_DTYPES` names for the case). The
routes: `fullgraph` (`torch.compile(model, backend="reverie", fullgraph=True)`, one Reverie
graph or an error) and `fallback` (`options={"fallback": True}`: unmapped nodes run in eager
PyTorch between compiled segments).

`KNOWN_FAILURES` is the one table of what fails today, one row per cause: the cause (what
is missing or wrong), a regular expression of its error message, and the cases that fail
first from it. Those cases are strict xfails that count only the error of their row: a
case that starts to pass (XPASS) or fails another way (its next missing piece) fails the
run, so as features land, delete a row or move its cases to the row of their next cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

from .harness import DTYPES, ROUTES, train_side_by_side
from .models import CASE_DTYPES, ZOO

ANY = "*"
Case = tuple[str, str, str]  # (model, dtype, route); ANY in a row matches every value


@dataclass(frozen=True)
class Failure:
    """A cause of failure: the error it raises (a regular expression its message matches)
    and the cases that fail first from it."""

    error: str
    cases: list[Case]


KNOWN_FAILURES: dict[str, Failure] = {}


class KnownFailure(Exception):
    """The error of a case's row in KNOWN_FAILURES (any other error fails the test)."""


def matches(case: Case, row_case: Case) -> bool:
    return all(want in (ANY, got) for want, got in zip(row_case, case, strict=True))


def cause_of(case: Case) -> str | None:
    causes = [cause for cause, failure in KNOWN_FAILURES.items()
              if any(matches(case, row_case) for row_case in failure.cases)]
    assert len(causes) <= 1, f"{case} is in {len(causes)} rows of KNOWN_FAILURES"
    return causes[0] if causes else None


def zoo_cases() -> list:
    cases = []
    for case in ((name, dtype, route) for name in ZOO
                 for dtype in CASE_DTYPES.get(name, DTYPES) for route in ROUTES):
        cause = cause_of(case)
        marks = [pytest.mark.xfail(strict=True, reason=cause, raises=KnownFailure)] \
            if cause else []
        cases.append(pytest.param(*case, marks=marks, id="-".join(case)))
    return cases


@pytest.mark.filterwarnings("ignore::UserWarning")  # backward(create_graph=True)'s cycle
@pytest.mark.parametrize(("name", "dtype", "route"), zoo_cases())
def test_trains_like_eager(name: str, dtype: str, route: str) -> None:
    cause = cause_of((name, dtype, route))
    try:
        train_side_by_side(ZOO[name], DTYPES[dtype], route)
    except Exception as error:
        if cause is not None and re.search(KNOWN_FAILURES[cause].error, str(error), re.DOTALL):
            raise KnownFailure(cause) from error
        raise


def test_every_row_names_zoo_cases() -> None:
    """No row of the table names a model, dtype or route the zoo does not have."""
    for cause, failure in KNOWN_FAILURES.items():
        for name, dtype, route in failure.cases:
            assert name in (ANY, *ZOO) and dtype in (ANY, *DTYPES) and \
                route in (ANY, *ROUTES), f"{cause}: {name} {dtype} {route}"


# ---------------------------------------------------------------- the harness can fail

def off_by_rounding(module: torch.nn.Module, route: str):
    """A 'compiled' model whose outputs are off by one part in 10⁹."""
    return lambda *args: module(*args) * (1 + 1e-9)


def twice(module: torch.nn.Module, route: str):
    """A 'compiled' model that runs its forward twice (buffers updated twice)."""
    return lambda *args: (module(*args), module(*args))[1]


@pytest.mark.parametrize(("name", "compile_with"), [("mlp_adam", off_by_rounding),
                                                     ("resnet_block", twice)])
def test_harness_sees_a_difference(name: str, compile_with) -> None:
    with pytest.raises(AssertionError):
        train_side_by_side(ZOO[name], torch.float64, "wrong", compile_with=compile_with)
