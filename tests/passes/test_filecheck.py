"""The FileCheck helper (tests/passes/filecheck.py) passes on matching IR and fails, with the
IR and the directive in its message, on every kind of mismatch."""

from __future__ import annotations

import pytest

from passes.filecheck import filecheck

IR = """func @f(%x: f64[N]) -> f64 {
  %0 = tanh %x : f64[N]
  %1 = reduce_sum %0 {axes = [0]} : f64
  return %1
}"""


def test_directives_match_in_order() -> None:
    filecheck(IR, """
        // the function, then its two ops one after the other
        CHECK: func @f
        CHECK: tanh %x
        CHECK-NEXT: reduce_sum %0
        CHECK-NOT: exp
        CHECK: return %1
        CHECK-NOT: tanh
    """)


def test_a_missing_line_fails_showing_the_ir_and_the_directive() -> None:
    with pytest.raises(AssertionError) as failure:
        filecheck(IR, "CHECK: exp %x")
    message = str(failure.value)
    assert "CHECK: exp %x (check line 1) did not match" in message
    assert ">   1 | func @f(%x: f64[N]) -> f64 {" in message
    assert "    4 |   return %1" in message


def test_check_does_not_look_back_before_the_last_match() -> None:
    with pytest.raises(AssertionError, match="CHECK: tanh"):
        filecheck(IR, "CHECK: reduce_sum\nCHECK: tanh")


def test_check_next_needs_the_very_next_line() -> None:
    with pytest.raises(AssertionError, match=r"CHECK-NEXT: return %1 \(check line 2\)"):
        filecheck(IR, "CHECK: tanh\nCHECK-NEXT: return %1")


@pytest.mark.parametrize("checks", ["CHECK: func\nCHECK-NOT: tanh\nCHECK: reduce_sum",
                                    "CHECK: tanh\nCHECK-NOT: return"])
def test_check_not_fails_between_its_neighbours_and_to_the_end(checks: str) -> None:
    with pytest.raises(AssertionError, match="CHECK-NOT: .* matched line"):
        filecheck(IR, checks)


@pytest.mark.parametrize("checks", ["CHECK-NXT: tanh", "CHECK:", "no directive here",
                                    "CHECK-NEXT: func"])
def test_malformed_checks_are_errors_not_silent_passes(checks: str) -> None:
    with pytest.raises(ValueError):
        filecheck(IR, checks)
