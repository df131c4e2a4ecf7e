"""Shape built-ins, slices, integer subscripts, `where` and casts, run end to end.

Programs are compiled with `backend="interp"`, called on NumPy arrays, and compared with
the same operation written in NumPy, in f32 and f64.
"""

from __future__ import annotations

import numpy as np
import pytest
from interpreter_helpers import FLOATS, assert_close, compiled, run, sample

# ---------------------------------------------------------------- transpose, reshape


@pytest.mark.parametrize("dtype", FLOATS)
def test_transpose_spellings(dtype: type) -> None:
    x = sample((2, 3), dtype)
    got = run("fn f(x: float[N, D]) -> (float[D, N], float[D, N], float[N, D]) "
              "{ return (x.T, transpose(x), transpose(x, (0, 1))); }", x)
    for g, w in zip(got, (x.T, x.T, x), strict=True):
        assert_close(g, w, dtype)


def test_transpose_of_three_axes() -> None:
    x = sample((2, 3, 4), np.float64)
    got = run("fn f(x: f64[A, B, C]) -> (f64[C, A, B], f64[C, B, A]) "
              "{ return (transpose(x, (2, 0, 1)), x.T); }", x)
    assert_close(got[0], np.transpose(x, (2, 0, 1)), np.float64)
    assert_close(got[1], x.T, np.float64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reshape(dtype: type) -> None:
    x = sample((2, 3, 4), dtype)
    got = run("fn f(x: float[A, B, C]) -> (float[A * B * C], float[A, B * C], float[B * A, C]) "
              "{ return (reshape(x, (A * B * C,)), reshape(x, (A, B * C)), "
              "reshape(x, (B * A, C))); }", x)
    for g, w in zip(got, (x.ravel(), x.reshape(2, 12), x.reshape(6, 4)), strict=True):
        assert_close(g, w, dtype)


def test_reshape_to_constant_shape() -> None:
    x = np.arange(6.0)
    assert_close(run("fn f(x: f64[6]) -> f64[2, 3] { return reshape(x, (2, 3)); }", x),
                 x.reshape(2, 3), np.float64)


# ---------------------------------------------------------------- roll and concat


@pytest.mark.parametrize(("call", "ref"), [
    ("roll(x, 1)", lambda x: np.roll(x, 1)),
    ("roll(x, -2)", lambda x: np.roll(x, -2)),
    ("roll(x, 1, axis=0)", lambda x: np.roll(x, 1, axis=0)),
    ("roll(x, -1, axis=1)", lambda x: np.roll(x, -1, axis=1)),
    ("roll(x, 7, axis=-1)", lambda x: np.roll(x, 7, axis=-1)),
    ("roll(x, D // 2, axis=1)", lambda x: np.roll(x, x.shape[1] // 2, axis=1)),
    ("roll(x, N + 1, axis=0)", lambda x: np.roll(x, x.shape[0] + 1, axis=0)),
])
def test_roll(call: str, ref) -> None:
    x = np.arange(12.0).reshape(3, 4)
    assert_close(run(f"fn f(x: f64[N, D]) -> f64[N, D] {{ return {call}; }}", x), ref(x),
                 np.float64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_concat(dtype: type) -> None:
    a, b, c = sample((2, 3), dtype), sample((1, 3), dtype, 1), sample((2, 2), dtype, 2)
    source = ("fn f(a: float[N, D], b: float[M, D], c: float[N, E]) "
              "-> (float[N + M + N, D], float[N, D + E], float[N, E + D + E]) "
              "{ return (concat((a, b, a), axis=0), concat((a, c), axis=1), "
              "concat((c, a, c), axis=-1)); }")
    got = run(source, a, b, c)
    want = (np.concatenate((a, b, a)), np.concatenate((a, c), 1),
            np.concatenate((c, a, c), -1))
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, dtype)


def test_concat_of_vectors_defaults_to_axis_zero() -> None:
    a, b = np.arange(3.0), np.arange(2.0)
    assert_close(run("fn f(a: f64[N], b: f64[M]) -> f64[N + M] { return concat((a, b)); }",
                     a, b), np.concatenate((a, b)), np.float64)


# ---------------------------------------------------------------- slices and subscripts

SLICES = [
    ("x[1:]", "[N - 1, D]", lambda x: x[1:]),
    ("x[:-1]", "[N - 1, D]", lambda x: x[:-1]),
    ("x[:N - 2]", "[N - 2, D]", lambda x: x[:-2]),
    ("x[-3:]", "[3, D]", lambda x: x[-3:]),
    ("x[1:4]", "[3, D]", lambda x: x[1:4]),
    ("x[::2]", "[(N + 1) // 2, D]", lambda x: x[::2]),
    ("x[1::3]", "[(N + 1) // 3, D]", lambda x: x[1::3]),
    ("x[:, 0]", "[N]", lambda x: x[:, 0]),
    ("x[:, -1]", "[N]", lambda x: x[:, -1]),
    ("x[2]", "[D]", lambda x: x[2]),
    ("x[1:, 1:D - 1]", "[N - 1, D - 2]", lambda x: x[1:, 1:-1]),
    ("x[:, ::2]", "[N, (D + 1) // 2]", lambda x: x[:, ::2]),
    ("x[N - 1, 0]", "", lambda x: x[-1, 0]),
    ("x[:]", "[N, D]", lambda x: x),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("expr", "shape", "ref"), SLICES, ids=[s[0] for s in SLICES])
def test_slices(expr: str, shape: str, ref, dtype: type) -> None:
    x = sample((5, 4), dtype)
    got = run(f"fn f(x: float[N, D]) -> float{shape} {{ return {expr}; }}", x)
    assert_close(got, ref(x), dtype)


@pytest.mark.parametrize("n", [4, 5])
def test_strided_slice_lengths(n: int) -> None:
    x = np.arange(float(n))
    got = run("fn f(x: f64[N]) -> (f64[(N + 1) // 2], f64[N // 2]) "
              "{ return (x[::2], x[1::2]); }", x)
    assert_close(got[0], x[::2], np.float64)
    assert_close(got[1], x[1::2], np.float64)


def test_integer_subscript_with_argument_and_loop_variable() -> None:
    xs = sample((4, 3), np.float64)
    assert_close(run("fn f(xs: f64[T, D], t: i64) -> f64[D] { return xs[t]; }", xs, 2),
                 xs[2], np.float64)
    assert_close(run("fn f(xs: f64[T, D], t: i32) -> f64 { return xs[t, t]; }", xs,
                     np.int32(1)), xs[1, 1], np.float64)
    got = run("fn f(xs: f64[T, D]) -> f64[D] { var s = xs[0] * 0.0; "
              "for t in 0..T { s = s + xs[t] * t; } return s; }", xs)
    assert_close(got, (xs * np.arange(4)[:, None]).sum(0), np.float64)


def test_integer_subscript_is_bounds_checked() -> None:
    module = compiled("fn f(xs: f64[T, D], t: i64) -> f64[2] { return xs[:, 0:2][t]; }")
    xs = np.zeros((3, 4))
    with pytest.raises(IndexError, match="3"):
        module.f(xs, 3)
    with pytest.raises(IndexError):
        module.f(xs, -1)


def test_subscript_then_slice_of_the_result() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    got = run("fn f(x: f64[A, B, C]) -> f64[B - 1] { return x[1][1:, 2]; }", x)
    assert_close(got, x[1][1:, 2], np.float64)


# ---------------------------------------------------------------- where and casts


@pytest.mark.parametrize("dtype", FLOATS)
def test_where_broadcasts_and_accepts_literals(dtype: type) -> None:
    x, row = sample((3, 4), dtype), sample((4,), dtype, 1)
    got = run("fn f(x: float[N, D], row: float[D]) -> (float[N, D], float[N, D]) "
              "{ return (where(x > row, x, row), where(x < 0.0, 0.0, 1)); }", x, row)
    assert_close(got[0], np.where(x > row, x, row), dtype)
    assert_close(got[1], np.where(x < 0, 0.0, 1.0), dtype)


def test_where_on_integers_and_bool_scalars() -> None:
    x = np.array([-2, 0, 3])
    got = run("fn f(x: i64[N], flag: bool) -> i64[N] { return where(flag and x > 0, x, -x); }",
              x, True)
    assert_close(got, np.where(x > 0, x, -x), np.int64)


def test_casts() -> None:
    x = np.array([-1.7, -0.2, 0.0, 0.5, 2.9])
    got = run("fn f(x: f64[N]) -> (f32[N], i32[N], i64[N], f64[N], i64) "
              "{ return (f32(x), i32(x), i64(x > 0.0), f64(i32(x)), i64(2.9)); }", x)
    assert_close(got[0], x.astype(np.float32), np.float32)
    assert_close(got[1], x.astype(np.int32), np.int32)
    assert_close(got[2], (x > 0).astype(np.int64), np.int64)
    assert_close(got[3], x.astype(np.int32).astype(np.float64), np.float64)
    assert_close(got[4], 2, np.int64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_cast_follows_the_specialisation(dtype: type) -> None:
    counts = np.array([1, 2, 4])
    got = run("fn f(x: float[N], counts: i64[N]) -> float[N] "
              "{ return x * float(counts) / float(N); }", np.ones(3, dtype), counts)
    assert_close(got, counts / 3, dtype)


def test_mixed_precision_through_casts() -> None:
    x, w = np.arange(3, dtype=np.float32), np.arange(3.0)
    got = run("fn f(x: f32[N], w: f64[N]) -> (f64, f32) "
              "{ return (sum(f64(x) * w), f32(sum(w)) + sum(x)); }", x, w)
    assert_close(got[0], (x * w).sum(), np.float64)
    assert_close(got[1], w.sum() + x.sum(), np.float32)
