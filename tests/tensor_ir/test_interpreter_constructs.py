"""Index notation, loops, tuple returns, calls between functions and `float` specialisation.

Programs are compiled with `backend="interp"`, called on NumPy arrays, and compared with
the same computation written in NumPy, in f32 and f64.
"""

from __future__ import annotations

import numpy as np
import pytest
from interpreter_helpers import FLOATS, assert_close, compiled, run, sample

# ---------------------------------------------------------------- index notation


@pytest.mark.parametrize("dtype", FLOATS)
def test_index_matmul_outer_and_transpose(dtype: type) -> None:
    a, b, v = sample((2, 3), dtype), sample((3, 4), dtype, 1), sample((4,), dtype, 2)
    source = """
    fn f(a: float[N, K], b: float[K, M], v: float[M]) -> (float[N, M], float[N, M], float[K, N]) {
        let c[i, j] = sum[k](a[i, k] * b[k, j]);
        let outer[i, j] = a[i, 0] * v[j];
        let t[k, i] = a[i, k];
        return (c, outer, t);
    }"""
    got = run(source, a, b, v)
    want = (a.astype(np.float64) @ b, np.outer(a[:, 0], v), a.T)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12)
        assert g.dtype == dtype


@pytest.mark.parametrize(("op", "ref"), [("sum", np.sum), ("prod", np.prod), ("max", np.max),
                                         ("min", np.min)])
def test_index_reductions(op: str, ref) -> None:
    x = sample((3, 4), np.float64, positive=op == "prod")
    source = (f"fn f(x: f64[N, D]) -> (f64[N], f64) {{ let r[i] = {op}[j](x[i, j]); "
              f"return (r, {op}[i, j](x[i, j])); }}")
    rows, total = run(source, x)
    assert_close(rows, ref(x, axis=1), np.float64)
    assert_close(total, ref(x), np.float64)


def test_index_stencil_reads_zero_outside() -> None:
    x, k = sample((2, 7), np.float64), sample((3,), np.float64, 1)
    source = ("fn f(x: f64[B, L], k: f64[K]) -> f64[B, L] "
              "{ let y[b, i in 0..L] = sum[j](x[b, i + j - K // 2] * k[j]); return y; }")
    padded = np.pad(x, ((0, 0), (1, 1)))
    want = np.stack([padded[:, i:i + 3] @ k for i in range(7)], axis=1)
    assert_close(run(source, x, k), want, np.float64)


def test_index_explicit_ranges_pad_and_offset() -> None:
    x = np.arange(1.0, 5.0)
    source = ("fn f(x: f64[N]) -> (f64[N + 2], f64[N - 1], f64[N]) { "
              "let padded[i in 0..N + 2] = x[i - 1]; "
              "let shifted[i in 1..N] = x[i] - x[i - 1]; "
              "let weights[i in 0..N] = x[i] * i; "
              "return (padded, shifted, weights); }")
    padded, shifted, weights = run(source, x)
    assert_close(padded, np.pad(x, 1), np.float64)
    assert_close(shifted, np.diff(x), np.float64)
    assert_close(weights, x * np.arange(4), np.float64)


@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
def test_index_gather_with_integer_tensor(label_dtype: type) -> None:
    z = sample((4, 3), np.float32)
    labels = np.array([2, 0, 1, 2], label_dtype)
    label_type = "i64" if label_dtype == np.int64 else "i32"
    source = (f"fn f(z: f32[N, C], labels: {label_type}[N]) -> f32[N] "
              "{ let picked[n] = z[n, labels[n]]; return picked; }")
    assert_close(run(source, z, labels), z[np.arange(4), labels], np.float32)


@pytest.mark.parametrize("bad", [3, -1])
def test_index_gather_is_bounds_checked(bad: int) -> None:
    module = compiled("fn f(z: f64[N, C], labels: i64[N]) -> f64[N] "
                      "{ let picked[n] = z[n, labels[n]]; return picked; }")
    with pytest.raises(IndexError, match=str(bad)):
        module.f(np.zeros((2, 3)), np.array([0, bad]))


def test_index_gather_of_rows_and_nested_reduction() -> None:
    table, ids = sample((5, 3), np.float64), np.array([4, 0, 4])
    a, x = sample((2, 3), np.float64, 1), sample((2,), np.float64, 2)
    source = ("fn f(table: f64[V, D], ids: i64[N], a: f64[M, D], x: f64[M]) "
              "-> (f64[N, D], f64[M]) { let rows[n, d] = table[ids[n], d]; "
              "let scaled[i] = x[i] * sum[j](a[i, j]); return (rows, scaled); }")
    rows, scaled = run(source, table, ids, a, x)
    assert_close(rows, table[ids], np.float64)
    assert_close(scaled, x * a.sum(1), np.float64)


def test_index_body_with_builtins_and_hoisted_scalars() -> None:
    x, s = sample((3, 4), np.float64), 0.5
    source = ("fn f(x: f64[N, D], s: f64) -> f64[N] "
              "{ let y[i] = max[j](tanh(x[i, j]) * s + mean(x)); return y; }")
    assert_close(run(source, x, s), (np.tanh(x) * s + x.mean()).max(1), np.float64)


def test_index_bool_body() -> None:
    source = ("fn f(x: f64[N]) -> bool[N, N] "
              "{ let lower[i in 0..N, j in 0..N] = j <= i; return lower; }")
    assert_close(run(source, np.zeros(3)), np.tril(np.ones((3, 3), bool)), np.bool_)


# ---------------------------------------------------------------- loops


@pytest.mark.parametrize("dtype", FLOATS)
def test_loop_carries_several_vars(dtype: type) -> None:
    x = sample((5,), dtype)
    source = ("fn f(x: float[N]) -> (float, float) { var total = 0.0; var best = x[0]; "
              "for t in 0..N { total = total + x[t]; best = max(best, x[t]); } "
              "return (total, best); }")
    total, best = run(source, x)
    assert_close(total, np.cumsum(x)[-1], dtype)
    assert_close(best, x.max(), dtype)


@pytest.mark.parametrize("steps", [0, 1, 6])
def test_loop_bounds_from_arguments(steps: int) -> None:
    u0 = sample((6,), np.float64)
    source = ("fn f(u0: f64[N], lo: i64, hi: i32) -> f64[N] { var u = u0; "
              "for t in lo..hi { u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)); } "
              "return u; }")
    want = u0.copy()
    for _ in range(1, steps):
        want = want + 0.1 * (np.roll(want, 1) - 2 * want + np.roll(want, -1))
    assert_close(run(source, u0, 1, np.int32(steps)), want, np.float64)


def test_nested_loops_and_loop_local_vars() -> None:
    source = ("fn f(x: f64[N]) -> f64 { var s = 0.0; for i in 0..N { var row = 0.0; "
              "for j in 0..i { row = row + x[j]; } s = s + row * x[i]; } return s; }")
    x = sample((5,), np.float64)
    want = sum(x[:i].sum() * x[i] for i in range(5))
    assert_close(run(source, x), want, np.float64)


def test_loop_with_constant_bound_and_matrix_state() -> None:
    a = sample((3, 3), np.float64) / 3
    source = ("fn f(a: f64[N, N]) -> f64[N, N] { var p = a; "
              "for t in 0..3 { p = p @ a; } return p; }")
    assert_close(run(source, a), np.linalg.matrix_power(a, 4), np.float64)


def test_loop_leaves_unassigned_outer_values_alone() -> None:
    source = ("fn f(x: f64[N]) -> (f64[N], f64) { let base = x * 2.0; var acc = 0.0; "
              "for t in 0..N { let step = base[t] + 1.0; acc = acc + step; } "
              "return (base, acc); }")
    x = np.arange(3.0)
    base, acc = run(source, x)
    assert_close(base, 2 * x, np.float64)
    assert_close(acc, (2 * x + 1).sum(), np.float64)


# ---------------------------------------------------------------- calls and tuples

CALLS = """
fn f(x: float[N, D], w: float[D]) -> (float, float[N]) {
    let scores = affine(x, w, 1.0);
    return (summary(scores)[1], scores);
}
fn affine(a: float[M, K], v: float[K], shift: float) -> float[M] { return a @ v + shift; }
fn summary(s: float[M]) -> (float, float, i64) { return (max(s), mean(s), argmax(s)); }
"""


@pytest.mark.parametrize("dtype", FLOATS)
def test_calls_before_definition_with_tuple_selection(dtype: type) -> None:
    x, w = sample((4, 3), dtype), sample((3,), dtype, 1)
    mean_score, scores = compiled(CALLS).f(x, w)
    want = x.astype(np.float64) @ w + 1
    np.testing.assert_allclose(scores, want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(mean_score, want.mean(),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert scores.dtype == dtype and np.asarray(mean_score).dtype == dtype


def test_called_functions_are_callable_directly() -> None:
    module = compiled(CALLS)
    s = np.array([0.5, 3.0, -1.0])
    top, avg, where = module.summary(s)
    assert (top, where) == (3.0, 1)
    assert avg == pytest.approx(s.mean())


def test_callee_float_follows_the_caller() -> None:
    source = ("fn f(x: f32[N]) -> f32 { return g(x) + h(x); } "
              "fn g(y: float[N]) -> float { return sum(y * 0.5); } "
              "fn h(y: float[N]) -> float { return float(N); }")
    x = np.arange(3, dtype=np.float32)
    assert_close(run(source, x), x.sum() / 2 + 3, np.float32)


def test_same_function_called_twice_with_different_shapes() -> None:
    source = ("fn f(a: f64[N], b: f64[M]) -> f64 { return norm2(a) + norm2(b[1:]); } "
              "fn norm2(v: f64[K]) -> f64 { return sum(v * v); }")
    a, b = np.arange(3.0), np.arange(5.0)
    assert_close(run(source, a, b), (a * a).sum() + (b[1:] ** 2).sum(), np.float64)


def test_tuple_bound_to_a_name() -> None:
    source = ("fn f(x: f64[N]) -> (f64, f64) { let both = (sum(x), max(x)); "
              "return (both[1], both[0]); }")
    assert run(source, np.arange(4.0)) == (3.0, 6.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_specialisation_per_call(dtype: type) -> None:
    module = compiled("fn f(x: float[N]) -> float[N] { return x / 3.0 + 0.1; }")
    x = np.arange(4, dtype=dtype)
    got = module.f(x)
    assert_close(got, x / dtype(3.0) + dtype(0.1), dtype)
