"""Dimension arithmetic that simplifies, weak i64 dimension values, unbindable dimensions.

- `(d·Q + R) // d` is `Q + R // d`: `(2 * L + 1) // 2` is `L`, so a signature can say so;
- an i64 scalar parameter is a dimension, and its value is weak like `N`'s: `0.5 * p`
  is a float (docs/language.md §6);
- a dimension no call can bind (only inside `N * M` or `N // 2`) is a compile error at
  the parameter, not a failure of every call.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.dims import Dim

L, M, N = Dim.sym("L"), Dim.sym("M"), Dim.sym("N")


@pytest.mark.parametrize(("dim", "simplified"), [
    ((2 * L + 1) // 2, L),
    ((4 * L + 6) // 2, 2 * L + 3),
    ((2 * L + 3) // 2, L + 1),
    ((2 * L + N + 1) // 2, L + (N + 1) // 2),
    (N + 1 - 1, N),
])
def test_floor_division_keeps_only_what_it_cannot_divide(dim: Dim, simplified: Dim) -> None:
    assert dim == simplified


@pytest.mark.parametrize("n", [-3, 0, 1, 5, 8])
def test_simplified_floor_divisions_keep_their_values(n: int) -> None:
    for dim, value in (((2 * N + 1) // 2, (2 * n + 1) // 2),
                       ((2 * N + 3) // 4, (2 * n + 3) // 4),
                       ((6 * N + M + 2) // 3, (6 * n + 2 + 2) // 3),
                       ((4 * N - 3) // 2, (4 * n - 3) // 2)):
        assert dim.evaluate({"N": n, "M": 2}) == value, dim


def test_a_signature_may_use_the_simplified_form() -> None:
    module = rv.compile("fn f(x: f64[L]) -> f64[(2 * L + 1) // 2] { return x; }")
    np.testing.assert_array_equal(module.f(np.arange(3.0)), np.arange(3.0))
    half = rv.compile("fn f(x: f64[2 * K + 1]) -> f64[K] { return x[:(2 * K + 1) // 2]; }")
    np.testing.assert_array_equal(half.f(np.arange(5.0)), [0.0, 1.0])


@pytest.mark.parametrize("backend", ["interp", "native"])
def test_i64_dimension_values_are_weak_in_float_arithmetic(backend: str) -> None:
    source = """
    fn scale(x: f64[N], p: i64) -> f64[N] { return 0.5 * p * x; }
    fn times(x: f32[N], p: i64) -> f32[N] { return x * p; }
    fn half(p: i64) -> f64 { return 0.5 * p; }
    fn count(p: i64) -> i64 { return p * 2 + 1; }
    """
    module = rv.compile(source, backend=backend)
    np.testing.assert_allclose(module.scale(np.ones(3), 4), [2.0, 2.0, 2.0])
    assert module.times(np.ones(2, np.float32), 3).dtype == np.float32
    assert module.half(3) == 1.5
    assert module.count(3) == 7 and np.asarray(module.count(3)).dtype == np.int64


def test_a_strong_i64_still_does_not_mix_with_floats() -> None:
    with pytest.raises(rv.CompileError, match="cannot mix f64 and i64"):
        rv.compile("fn f(x: f64[N], n: i64[N]) -> f64[N] { return x * n; }", backend="interp")


@pytest.mark.parametrize(("params", "name"), [
    ("x: f64[N * M]", "M"),
    ("x: f64[N // 2]", "N"),
    ("x: f64[N * N + 1]", "N"),
    ("x: f64[N * M], y: f64[M + 1]", "M"),
])
def test_a_dimension_that_can_never_be_bound_is_a_compile_error(params: str, name: str) -> None:
    with pytest.raises(rv.CompileError, match=f"dimension {name} can never be bound"):
        rv.compile(f"fn f({params}) -> f64 {{ return 0.0; }}", backend="interp")


@pytest.mark.parametrize(("params", "args"), [
    ("x: f64[N * M], y: f64[M]", (np.ones(6), np.ones(3))),
    ("x: f64[2 * K + 1]", (np.ones(7),)),
    ("x: f64[N * M], M: i64", (np.ones(6), 2)),
    ("x: f64[N], y: f64[N // 2]", (np.ones(6), np.ones(3))),
])
def test_dimensions_that_can_be_bound_compile_and_bind(params: str, args: tuple) -> None:
    module = rv.compile(f"fn f({params}) -> f64 {{ return sum(x); }}", backend="interp")
    assert module.f(*args) == np.sum(args[0])
