"""Float → int casts: one rule on every backend (docs/language.md §6).

Issue 8: natively, NaN/±inf/out-of-range values saturated (`[0, INT64_MAX]`) where the
interpreter and NumPy give INT_MIN. The rule: truncation towards zero where the result
fits the target type (NumPy's result), else the target's smallest value, INT_MIN — what
NumPy gives on x86. Checked on the interpreter, the native backend and the MLIR backend,
f32 and f64 sources, i32 and i64 targets, arrays long enough for the vector loops and
their tails, casts of literals folded at compile time, and without any warning.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.native.mlir_to_llvm import mlir_tools

BACKENDS = ["interp", "native", pytest.param("mlir", marks=pytest.mark.skipif(
    mlir_tools() is None, reason="mlir-opt-19/mlir-translate-19 not installed"))]
SOURCE = """
fn to_i32(x: float[N]) -> i32[N] { return i32(x); }
fn to_i64(x: float[N]) -> i64[N] { return i64(x); }
fn literals(x: f64) -> (i32, i64, i32, i64, i32, i64) {
    return (i32(1e300), i64(-1e300), i32(3000000000.0), i64(1e19), i32(-2.7), i64(0.5));
}
"""
VALUES = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e19, -1e19, 2.0 ** 63, -2.0 ** 63,
          9.2e18, 3e9, -3e9, 2.0 ** 31, 2.0 ** 31 - 1, -2.0 ** 31, -2.0 ** 31 - 0.5,
          -2.0 ** 31 - 1, 1e10, 2.5, -2.5, -0.7, 0.7, -0.0, 0.0, 123456.9]
BITS = {"to_i32": 32, "to_i64": 64}


@pytest.fixture(scope="module", params=BACKENDS)
def m(request: pytest.FixtureRequest) -> rv.Module:
    """The casts, compiled once per backend."""
    return rv.compile(SOURCE, backend=request.param)


def rule(value: float, bits: int) -> int:
    """The documented cast of one value: truncated if that fits `bits`, else INT_MIN."""
    limit = 2 ** (bits - 1)
    return int(value) if -limit <= value < limit else -limit


def call_without_warnings(kernel: rv.Kernel, *args: object) -> object:
    """`kernel(*args)`, failing on any warning (a RuntimeWarning from NumPy's cast)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return kernel(*args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(BITS))
def test_float_to_int_follows_the_rule(m: rv.Module, name: str, dtype: type) -> None:
    with np.errstate(over="ignore"):  # 1e300 and 1e19 are inf in f32
        x = np.resize(np.array(VALUES).astype(dtype), 7 * len(VALUES) + 3)
    want = np.array([rule(float(v), BITS[name]) for v in x], f"int{BITS[name]}")
    got = call_without_warnings(m[name], x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    fits = want != np.iinfo(want.dtype).min
    np.testing.assert_array_equal(got[fits], x[fits].astype(want.dtype))  # NumPy's result


def test_casts_of_literals_follow_the_rule(m: rv.Module) -> None:
    got = call_without_warnings(m.literals, 1.0)
    values_and_bits = [(1e300, 32), (-1e300, 64), (3e9, 32), (1e19, 64), (-2.7, 32), (0.5, 64)]
    assert [int(g) for g in got] == [rule(v, bits) for v, bits in values_and_bits]
    assert [np.asarray(g).dtype for g in got] == [np.int32, np.int64] * 3
