"""Native code against the reference interpreter, op by op: elementwise built-ins with
broadcasting, operators on floats and integers, casts, reductions, matmul, shape ops,
index notation, loops, in f32 and f64 and at awkward sizes (0, 1, 7, 33, 1000)."""

from __future__ import annotations

import numpy as np
import pytest
from native_helpers import check, sample

FLOATS = ["f32", "f64"]
SIZES = [0, 1, 7, 33, 1000]
UNARY = ["abs", "sign", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
         "tanh", "sigmoid", "relu", "softplus", "erf", "floor", "ceil"]
POSITIVE = {"log", "log1p", "sqrt", "rsqrt"}


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_builtins(dtype: str) -> None:
    results = ", ".join(f"{name}({'p' if name in POSITIVE else 'x'})" for name in UNARY)
    types = ", ".join(["float[N, D]"] * len(UNARY))
    source = f"fn f(x: float[N, D], p: float[N, D]) -> ({types}) {{ return ({results}); }}"
    x = sample((5, 33), dtype) * 3
    p = sample((5, 33), dtype, low=0.05, high=4.0)
    check(source, x, p, dtype=dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", SIZES)
def test_fused_elementwise_with_broadcasting(n: int, dtype: str) -> None:
    source = """fn f(x: float[N, D], b: float[D], s: float) -> float[N, D] {
        return where(x > b, x * b + s, max(x, -b) - min(b, s)) / (abs(b) + 1.0) ** 2; }"""
    check(source, sample((n, 3), dtype, 1), sample((3,), dtype, 2), 0.5, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_operators(dtype: str) -> None:
    a, b = sample((40,), dtype, 3) * 4, sample((40,), dtype, 4)
    a[:3], b[:3] = [5.0, -5.0, 0.0], [0.0, 0.0, 0.0]
    source = """fn f(a: float[N], b: float[N]) -> (float[N], float[N], float[N], float[N],
                                                 float[N], float[N], float[N]) {
        return (a + b, a - b, a * b, a / b, a // b, a % b, abs(a) ** b); }"""
    check(source, a, b, dtype=dtype, scale=4)


@pytest.mark.parametrize("itype", ["i32", "i64"])
def test_integer_arithmetic_follows_numpy(itype: str) -> None:
    info = np.iinfo(itype.replace("i", "int"))
    a = np.array([7, -7, 7, -7, 0, 5, info.min, info.max, 3, -3], dtype=info.dtype)
    b = np.array([2, 2, -2, -2, 3, 0, -1, -1, 0, 1], dtype=info.dtype)
    source = (f"fn f(a: {itype}[N], b: {itype}[N]) -> ({itype}[N], {itype}[N], {itype}[N], "
              f"{itype}[N], bool[N]) {{ return (a // b, a % b, a * b - a + b, max(a, b), "
              f"a < b or a == b); }}")
    check(source, a, b)


def test_integer_unary_and_reductions() -> None:
    x = np.array([-3, 0, 5, -9, 2], dtype=np.int64)
    source = """fn f(x: i64[N]) -> (i64[N], i64[N], i64[N], i64, i64, i64, i64, i64) {
        return (abs(x), sign(x), -x, sum(x), prod(x), max(x), min(x), argmin(x)); }"""
    check(source, x)


def test_casts_between_all_dtypes() -> None:
    x = np.array([-2.7, -0.5, 0.0, 0.4, 1.5, 3.9, 1e3])
    source = """fn f(x: f64[N]) -> (f32[N], i32[N], i64[N], f64[N], f64[N], f32[N]) {
        let i = i32(x);
        return (f32(x), i, i64(x), f64(i), f64(x > 0.0), f32(i64(f32(x)))); }"""
    check(source, x)


def test_float_to_int_cast_of_nan_and_inf_is_defined() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1e30, 2.5])
    got = check("fn f(x: f64[N]) -> f64[N] { return f64(i32(x)) * 0.0 + x; }", x)
    assert got[0].shape == x.shape


@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_and_inf_behave_like_numpy(dtype: str) -> None:
    x = np.array([1.0, np.nan, -np.inf, 3.0, np.inf, -0.0], dtype=np.float32 if dtype == "f32"
                 else np.float64)
    source = """fn f(x: float[N], y: float[N]) -> (float[N], float[N], float, float, float,
                                                    i64, i64, bool[N]) {
        return (max(x, y), min(y, x), max(x), min(y), sum(y), argmax(x), argmin(y),
                x != x); }"""
    y = x[::-1].copy()
    check(source, x, y, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", ["0", "1", "(0, 1)", "(0, 2)", "2"])
def test_reductions_over_axes(axis: str, dtype: str) -> None:
    x = sample((4, 7, 33), dtype, 5)
    reductions = ["sum(x", "mean(x", "prod(0.3 * x", "max(x", "min(x", "logsumexp(x"]
    terms = " + ".join(f"sum({r}, axis={axis}, keepdims=true) ** 2)" for r in reductions)
    check(f"fn f(x: float[A, B, C]) -> float {{ return {terms}; }}", x, dtype=dtype, scale=10)


@pytest.mark.parametrize("n", SIZES)
def test_full_reductions_and_argmax(n: int) -> None:
    x = sample((n,), "f32", 6)
    source = "fn f(x: f32[N]) -> (f32, f32, f32, f32) { return (sum(x), max(x), min(x), prod(x)); }"
    check(source, x, dtype="f32", scale=10)
    if n:
        source = "fn f(x: f32[N, D]) -> (i64, i64[D], i64[N]) { return (argmax(x), " \
                 "argmin(x, axis=0), argmax(x, axis=1)); }"
        check(source, x.reshape(n, 1) * np.arange(3), dtype="f32")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (7, 33, 5), (33, 7, 40), (70, 300, 1100),
                                           (0, 5, 3), (4, 0, 6), (130, 150, 140),
                                           (700, 200, 20)])
def test_matmul_shapes(m: int, k: int, n: int, dtype: str) -> None:
    a, b = sample((m, k), dtype, 7), sample((k, n), dtype, 8)
    source = "fn f(a: float[M, K], b: float[K, N]) -> float[M, N] { return a @ b; }"
    check(source, a, b, dtype=dtype, scale=10 * (1 + k))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_vector_and_transposed_forms(dtype: str) -> None:
    a, b, v = sample((9, 20), dtype, 1), sample((9, 13), dtype, 2), sample((20,), dtype, 3)
    source = """fn f(a: float[M, K], b: float[M, N], v: float[K]) ->
                    (float[M], float[K], float, float[K, N], float[M, M]) {
        return (a @ v, v @ a.T @ a, v @ v, a.T @ b, a @ a.T); }"""
    check(source, a, b, v, dtype=dtype, scale=100)


def test_integer_matmul() -> None:
    a = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
    b = np.arange(8, dtype=np.int64).reshape(4, 2)
    check("fn f(a: i64[M, K], b: i64[K, N]) -> i64[M, N] { return a @ b; }", a, b)


@pytest.mark.parametrize("n", [1, 7, 33])
def test_slices_transpose_reshape(n: int) -> None:
    x = sample((n, 6), seed=9)
    source = """fn f(x: f64[N, D]) -> (f64[N - 1, D], f64[N], f64[D, N], f64[N * D],
                                    f64[N, D // 2]) {
        return (x[1:] - x[:N - 1], x[:, 0] * 2.0, x.T + 1.0, reshape(x.T, (N * D,)),
                x[:, 1::2]); }"""
    check(source, x)


@pytest.mark.parametrize("shift", ["1", "-1", "7", "-12", "N + 2", "0"])
def test_roll(shift: str) -> None:
    x = sample((5, 6), seed=10)
    check(f"fn f(x: f64[N, D]) -> (f64[N, D], f64[N, D]) {{ "
          f"return (roll(x, {shift}, axis=1), roll(exp(x), {shift}, axis=0)); }}", x)


def test_concat_and_pad_from_slices() -> None:
    a, b = sample((3, 4), seed=11), sample((2, 4), seed=12)
    source = """fn f(a: f64[N, D], b: f64[M, D]) -> (f64[N + M, D], f64[N, 2 * D]) {
        return (concat((a, tanh(b)), axis=0), concat((a, a * 2.0), axis=1)); }"""
    check(source, a, b)


def test_integer_subscripts_in_and_out_of_range() -> None:
    x = sample((5, 3), seed=13)
    source = "fn f(x: f64[N, D], t: i64) -> f64[D] { return x[t] * 2.0 + x[N - 1 - t]; }"
    check(source, x, 2)
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 of 'x'"):
        check(source, x, 5)


def test_stencil_gather_and_index_reductions() -> None:
    x, k = sample((3, 20), seed=14), sample((5,), seed=15)
    z, labels = sample((6, 4), seed=16), np.array([0, 3, 1, 1, 2, 3])
    source = """fn f(x: f64[B, N], k: f64[K], z: f64[M, C], labels: i64[M])
                  -> (f64[B, N], f64[M], f64[B, K], f64[M]) {
        let y[b, i in 0..N] = sum[j](x[b, i + j - K // 2] * k[j]);
        let picked[m] = z[m, labels[m]];
        let top[b, j] = max[i](x[b, i] * k[j]);
        let p[m] = prod[c](z[m, c]) + min[e](z[m, e]);
        return (y, picked, top, p); }"""
    check(source, x, k, z, labels)
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 of 'z' "
                                         "with size 4"):
        check(source, x, k, z, np.array([0, 3, 1, 4, 2, 3]))


def test_loops_with_state_dynamic_index_and_zero_trips() -> None:
    xs, w = sample((6, 4), seed=17), sample((4, 4), seed=18)
    source = """fn f(xs: f64[T, D], w: f64[D, D], steps: i64) -> (f64[D], f64) {
        var h = xs[0];
        var total = 0.0;
        for t in 0..steps {
            h = tanh(w @ h + xs[t]);
            total = total + sum(h * h);
        }
        return (h, total); }"""
    for steps in (0, 1, 6):
        check(source, xs, w, steps)
    with pytest.raises(IndexError, match="of 'xs' with size 6"):
        check(source, xs, w, 7)


def test_non_contiguous_inputs() -> None:
    x = sample((8, 10), seed=19)
    source = "fn f(a: f64[N, D], b: f64[D, N]) -> f64[N, D] { return a * 2.0 + b.T; }"
    check(source, x[::2, 1::2], x.T[1:6, ::2])


def test_i32_subscripts_and_loop_bounds() -> None:
    xs = sample((6, 3), seed=20)
    source = """fn f(xs: f64[T, D], t: i32, steps: i32) -> (f64[D], f64) {
        var total = 0.0;
        for k in 0..steps { total = total + sum(xs[k]); }
        return (xs[t] + xs[T - 1 - t], total); }"""
    check(source, xs, np.int32(4), np.int32(5))


def test_sibling_nests_share_producers_and_keep_checks() -> None:
    x, y = sample((50,), seed=21), sample((50,), seed=22)
    source = """fn f(x: f64[N], y: f64[N]) -> (f64, f64[N], f64[N]) {
        let t = tanh(x) * y;
        return (mean(t * t), t + x, t * 2.0); }"""
    check(source, x, y)
    gather = """fn f(x: f64[N]) -> (f64, f64[N]) {
        let s = sum(exp(x));
        return (x[i64(s) % 3 + 60], exp(x)); }"""
    with pytest.raises(IndexError, match="out of bounds for axis 0 of 'x'"):
        check(gather, x)
