"""Programs at the edges of the language compile and run (issue 8, finding 5).

Identifiers longer than LLVM keeps in a local name (1,024 characters) compile and run on
every backend; empty `for` ranges (a negative or zero trip count, whether constant, an
`i32` value, an `i64` dimension or a dimension expression) run no iterations and contribute
nothing to gradients (stored, checkpointed or forward mode), as docs/language.md §11 says.
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


BODY = "{ var h = x; for t in %s { h = sin(h) * x; } return sum(h); }"
LOOPS = "\n".join(f"fn {header} {BODY % bounds}" for header, bounds in [
    ("literal(x: f64[N]) -> f64", "5..2"),
    ("equal(x: f64[N]) -> f64", "3..3"),
    ("count32(x: f64[N], n: i32) -> f64", "0..n"),
    ("computed(x: f64[N], n: i32) -> f64", "0..n * n - 10"),
    ("count64(x: f64[N], n: i64) -> f64", "0..n"),
    ("shifted(x: f64[N], n: i64) -> f64", "0..n * n - 10"),
    ("start64(x: f64[N], n: i64) -> f64", "n..2"),
    ("dims(x: f64[N]) -> f64", "0..N - 5"),
])
X = np.array([1.0, 2.0, 3.0])
# A negative count far from zero: a history sized by it would overrun its buffer.
EMPTY = {"literal": (X,), "equal": (X,), "count32": (X, np.int32(-3)),
         "computed": (X, np.int32(3)), "count64": (X, -3), "shifted": (X, 3),
         "start64": (X, 10**6), "dims": (X,)}


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("backend", BACKENDS + ("mlir",))
@pytest.mark.parametrize("name", EMPTY)
def test_empty_ranges_run_no_iterations(name: str, backend: str, checkpoint: bool) -> None:
    kernel = rv.compile(LOOPS, backend=backend, checkpoint=checkpoint)[name]
    args = EMPTY[name]
    assert kernel(*args) == X.sum()
    np.testing.assert_array_equal(kernel.grad("x")(*args), np.ones(3))
    value, tangent = kernel.jvp("x")(*args, np.array([1.0, 10.0, 100.0]))
    assert (value, tangent) == (X.sum(), 111.0)


def reference(x: np.ndarray, trips: int) -> tuple[float, np.ndarray]:
    """sum(h) after `trips` steps h = sin(h) * x from h = x, and its gradient in x."""
    h, dh = x, np.ones_like(x)
    for _ in range(trips):
        h, dh = np.sin(h) * x, np.cos(h) * dh * x + np.sin(h)
    return h.sum(), dh


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("backend", BACKENDS + ("mlir",))
def test_the_same_loops_iterate_when_not_empty(backend: str, checkpoint: bool) -> None:
    module = rv.compile(LOOPS, backend=backend, checkpoint=checkpoint)
    cases = [(module.count32, (X, np.int32(2)), 2), (module.count64, (X, 3), 3),
             (module.start64, (X, 0), 2), (module.shifted, (X, -4), 6),
             (module.dims, (np.linspace(0.1, 0.8, 8),), 3)]
    for kernel, args, trips in cases:
        value, gradient = reference(args[0], trips)
        np.testing.assert_allclose(kernel(*args), value)
        np.testing.assert_allclose(kernel.grad("x")(*args), gradient)
