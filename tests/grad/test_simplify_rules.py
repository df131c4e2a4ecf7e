"""Simplification: folding and identities that keep IEEE semantics, CSE, DCE, pruning.

Each rewritten program must give bitwise the same results as NumPy on inf, NaN and −0.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import run, specialise

from reverie.compiler.transforms.reverse import vjp_function

SPECIAL = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan])


def op_names(source: str) -> list[str]:
    return [op.name for op in specialise(source).body.walk()]


IDENTITIES = {
    "x * 1.0": lambda x: x, "1.0 * x": lambda x: x, "x / 1.0": lambda x: x,
    "x - 0.0": lambda x: x, "-(-x)": lambda x: x, "max(x, x)": lambda x: x,
    "where(x > 0.0, x, x)": lambda x: x, "reshape(reshape(x, (1, N)), (N,))": lambda x: x,
    "x.T.T": lambda x: x, "x * (2.0 * 3.0 - 5.0)": lambda x: x,
}


@pytest.mark.parametrize("expr", sorted(IDENTITIES))
def test_identities_disappear_and_keep_ieee_values(expr: str) -> None:
    source = f"fn f(x: f64[N]) -> f64[N] {{ return {expr}; }}"
    fn = specialise(source)
    assert fn.body.results[0] is fn.params[0], op_names(source)
    (got,) = run(fn, [SPECIAL], {"N": len(SPECIAL)})
    np.testing.assert_array_equal(got, IDENTITIES[expr](SPECIAL))


KEPT = {
    "x * 0.0": lambda x: x * 0.0, "x - x": lambda x: x - x, "0.0 * x + 1.0": lambda x: 0.0 * x + 1,
    "x * (1.0 / 0.0)": lambda x: x * np.inf, "x / x": lambda x: x / x,
}


@pytest.mark.parametrize("expr", sorted(KEPT))
def test_unsafe_rewrites_are_not_made(expr: str) -> None:
    fn = specialise(f"fn f(x: f64[N]) -> f64[N] {{ return {expr}; }}")
    (got,) = run(fn, [SPECIAL], {"N": len(SPECIAL)})
    with np.errstate(all="ignore"):
        want = KEPT[expr](SPECIAL)
    np.testing.assert_array_equal(got, want)  # NaN where inf · 0 or inf − inf


def test_scalar_constants_fold() -> None:
    names = op_names("fn f(x: f64[3]) -> f64[3] { return x * (2.0 + 1.0) / f64(3); }")
    assert names.count("const") == 1 and "cast" not in names and "dim" not in names
    assert names.count("add") == 0


def test_division_by_a_constant_zero_is_not_folded() -> None:
    names = op_names("fn f(x: f64) -> f64 { return x + 1.0 / 0.0; }")
    assert "div" in names


def test_common_subexpressions_merge() -> None:
    names = op_names("fn f(x: f64[N]) -> f64[N] { return exp(x) * exp(x) + exp(x); }")
    assert names.count("exp") == 1


def test_unread_region_operands_are_pruned() -> None:
    source = "fn f(A: f64[N, K], B: f64[K, M]) -> f64[N, M] " \
             "{ let C[i, j] = sum[k](A[i, k] * B[k, j]); return C; }"
    g = vjp_function(specialise(source), [0, 1])
    adjoints = [op for op in g.body.ops if op.name == "generic"][1:]
    assert [[v.name for v in op.operands] for op in adjoints] == [["B", "C_bar"], ["A", "C_bar"]]
    for op in adjoints:
        region = op.regions[0]
        assert len(region.params) == 3 + len(op.operands)
