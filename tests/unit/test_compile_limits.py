"""Programs at the edges of the language compile and run (issue 8, finding 5).

Identifiers longer than LLVM keeps in a local name (1,024 characters) compile and run on
every backend; empty `for` ranges run no iterations and contribute nothing to gradients
for every kind of trip count docs/language.md §11 lists, and a negative dimension-expression
trip count is refused at the call.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

BACKENDS = ("native", "interp")


@pytest.mark.parametrize("backend", BACKENDS + ("mlir",))
def test_identifiers_longer_than_llvm_names(backend: str) -> None:
    a, b, size = "a" * 1100, "a" * 1099 + "b", "N" * 1100
    source = (f"fn {'f' * 1100}({a}: f32[{size}], {b}: f32[{size}]) -> f32 {{\n"
              f"  let {a}{a} = {a} * {b};\n  var s = 0.0;\n"
              f"  for t{a} in 0..2 {{ s = s + sum({a}{a}); }}\n  return s;\n}}\n"
              f"fn g({a}: f32[{size}], {b}: f32[{size}]) -> f32 {{\n"
              f"  let y{a}[i{a}] = sum[k{a}]({a}[k{a}] * {b}[i{a}]);\n"
              f"  return sum(y{a}) + {'f' * 1100}({a}, {b});\n}}\n")
    module = rv.compile(source, backend=backend)
    x, y = np.arange(3, dtype=np.float32), np.arange(1, 4, dtype=np.float32)
    assert module["f" * 1100](x, y) == 2 * np.dot(x, y)
    np.testing.assert_allclose(module["f" * 1100].grad(a)(x, y), 2 * y)
    assert module.g(x, y) == x.sum() * y.sum() + 2 * np.dot(x, y)
    np.testing.assert_allclose(module.g.grad(b)(x, y), x.sum() + 2 * x)


BODY = "{ var s = sum(x); for t in %s { s = s * 2.0 + sum(x * x); } return s; }"
LOOPS = "\n".join(f"fn {header} {BODY % bounds}" for header, bounds in [
    ("literal(x: f64[N]) -> f64", "5..2"),
    ("equal(x: f64[N]) -> f64", "3..3"),
    ("count32(x: f64[N], n: i32) -> f64", "0..n"),
    ("computed(x: f64[N], n: i32) -> f64", "0..n * n - 10"),
    ("shifted(x: f64[N], n: i64) -> f64", "0..n * n - 10"),
    ("start64(x: f64[N], n: i64) -> f64", "n..2"),
    ("dims(x: f64[N]) -> f64", "0..N - 5"),
])
X = np.array([1.0, 2.0, 3.0])
EMPTY = {"literal": (X,), "equal": (X,), "count32": (X, np.int32(-3)), "computed": (X, np.int32(3))}


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", EMPTY)
def test_empty_ranges_run_no_iterations(name: str, backend: str, checkpoint: bool) -> None:
    kernel = rv.compile(LOOPS, backend=backend, checkpoint=checkpoint)[name]
    assert kernel(*EMPTY[name]) == X.sum()
    np.testing.assert_array_equal(kernel.grad("x")(*EMPTY[name]), np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_loops_iterate_when_not_empty(backend: str) -> None:
    module = rv.compile(LOOPS, backend=backend)
    once = 2 * X.sum() + (X * X).sum()
    assert module.count32(X, np.int32(1)) == once
    assert module.start64(X, 1) == once
    np.testing.assert_allclose(module.start64.grad("x")(X, 1), 2 + 2 * X)
    assert module.dims(np.arange(6.0)) == 2 * 15.0 + 55.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_dimension_trip_count_is_refused_at_the_call(backend: str) -> None:
    module = rv.compile(LOOPS, backend=backend)
    for kernel, args in ((module.dims, (X,)), (module.start64, (X, 7)), (module.shifted, (X, 3))):
        with pytest.raises(rv.ShapeMismatchError, match="negative trip count"):
            kernel(*args)
