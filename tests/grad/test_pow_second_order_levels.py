"""The second derivatives of `x ** y` at x = 0 (issue 36: reverse-over-reverse gave NaN
where `hessian` and forward-over-reverse gave 0) at every level: reverse-over-reverse
(`f.grad(i).grad(j)`) equals the Hessian (forward over reverse) wherever that is finite, on
the interpreter, native code and the MLIR export. torch's double backward is NaN at every
one of these points with x = 0 (its masks multiply 0 by inf); the values here are the
derivatives of the functions x ↦ 0ʸ (0 for y > 0) and y ↦ 0ʸ (0 for y > 0, the limit).
The mixed derivative at x = 0, 0 < y < 1 is −inf (x^(y−1)(y log x + 1)): the Hessian's
forward mode masks it to 0, reverse mode gives NaN, as torch's; not compared.
`test_pow_second_order.py` compares with torch where torch is finite.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.native.mlir_to_llvm import mlir_tools

LEVELS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
SOURCE = "fn f(x: f64, y: f64) -> f64 { return x ** y; }"
POINTS = [(0.0, 0.5), (0.0, 2.5), (0.0, 2.0), (0.0, 1.0), (0.0, 3.0), (1.5, 0.5), (2.0, -1.0)]


@pytest.mark.parametrize("level", LEVELS)
def test_the_reported_values_are_zero(level: str) -> None:
    f = rv.compile(SOURCE, backend=level).f
    assert f.grad(1).grad(1)(0.0, 0.5) == 0.0
    assert f.grad(1).grad(0)(0.0, 2.5) == 0.0


@pytest.mark.parametrize("level", LEVELS)
def test_reverse_over_reverse_equals_the_hessian(level: str) -> None:
    f = rv.compile(SOURCE, backend=level).f
    for x, y in POINTS:
        hessian = np.array(f.hessian((0, 1))(x, y), dtype=float)
        for i in (0, 1):
            for j in (0, 1):
                want = hessian[i, j]
                if x == 0 and 0 < y < 1 and i != j:
                    continue          # −inf; see test_pow_second_order.py
                if np.isfinite(want):
                    assert f.grad(i).grad(j)(x, y) == pytest.approx(want, rel=1e-12,
                                                                    abs=1e-300), (x, y, i, j)
