"""`nonnegative(d)`: the max(d, 0) atom a loop's trip count becomes (issue 8, finding 5)."""

from __future__ import annotations

import pytest

from reverie.compiler.ir.dims import Dim, nonnegative, python_expr

N, M, n = Dim.sym("N"), Dim.sym("M"), Dim.sym("n")


@pytest.mark.parametrize("dim, clamped", [
    (Dim.const(-3), "0"), (Dim.const(4), "4"), (N, "N"), (2 * N + M * N + 1, "2 * N + M * N + 1"),
    ((N + 1) // 2, "(N + 1) // 2"), (n, "max(n, 0)"), (N - 5, "max(N - 5, 0)"),
    (2 - n, "max(-n + 2, 0)"), (n * n - 10, "max(n * n - 10, 0)"),
])
def test_clamps_only_what_can_be_negative(dim: Dim, clamped: str) -> None:
    assert str(nonnegative(dim, {"N", "M"})) == clamped


def test_a_clamp_is_non_negative_and_folds() -> None:
    trip = nonnegative(N - 5)
    assert nonnegative(2 * trip + 1) == 2 * trip + 1
    assert nonnegative(trip * M, {"M"}) == trip * M
    assert trip.symbols() == {"N"}
    assert trip + N - trip == N
    assert trip.substitute({"N": Dim.const(3)}) == Dim.const(0)
    assert trip.substitute({"N": Dim.const(8)}) == Dim.const(3)
    assert str(trip.substitute({"N": M + 1})) == "max(M - 4, 0)"


@pytest.mark.parametrize("size", [0, 4, 5, 9])
def test_evaluates_like_python_max(size: int) -> None:
    dim = 3 * nonnegative(N - 5) + nonnegative((N - 6) // 2) + N
    expected = 3 * max(size - 5, 0) + max((size - 6) // 2, 0) + size
    assert dim.evaluate({"N": size}) == expected
    assert eval(python_expr(dim, lambda s: s), {"N": size}) == expected
