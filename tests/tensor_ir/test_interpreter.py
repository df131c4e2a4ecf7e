"""Built-ins, operators, typing, broadcasting, reductions and shape ops, run end to end.

Every program goes through `rv.compile(..., backend="interp")` and a call, and its result
is compared with NumPy (or PyTorch where NumPy lacks the function, e.g. erf), in f32 and
f64. Index notation, loops, calls and tuples are in `test_interpreter_constructs.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter_helpers import FLOATS, assert_close, run, sample

# ---------------------------------------------------------------- elementwise built-ins


def _torch(fn):
    return lambda x: fn(torch.from_numpy(np.ascontiguousarray(x))).numpy()


UNARY = {
    "abs": np.abs, "sign": np.sign, "exp": np.exp, "expm1": np.expm1, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil,
    "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "sigmoid": _torch(torch.sigmoid), "relu": _torch(torch.relu),
    "softplus": _torch(torch.nn.functional.softplus), "erf": _torch(torch.erf),
}
POSITIVE_DOMAIN = {"log", "log1p", "sqrt", "rsqrt"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_builtin(name: str, dtype: type) -> None:
    x = sample((3, 4), dtype, positive=name in POSITIVE_DOMAIN)
    got = run(f"fn f(x: float[N, D]) -> float[N, D] {{ return {name}(x); }}", x)
    assert_close(got, UNARY[name](x), dtype)


@pytest.mark.parametrize("name", ["sigmoid", "softplus", "relu", "tanh", "exp"])
def test_unary_builtin_extremes(name: str) -> None:
    x = np.array([-800.0, -50.0, -0.0, 0.0, 50.0, 800.0])
    with np.errstate(over="ignore"):
        want = UNARY[name](x)
    got = run(f"fn f(x: f64[N]) -> f64[N] {{ return {name}(x); }}", x)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert not np.isnan(got).any()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_abs_sign_and_negation_on_integers(dtype: type) -> None:
    x = np.array([-3, 0, 5], dtype)
    source = "fn f(x: {t}[N]) -> ({t}[N], {t}[N], {t}[N]) {{ return (abs(x), sign(x), -x); }}"
    got = run(source.format(t="i32" if dtype == np.int32 else "i64"), x)
    for g, w in zip(got, (np.abs(x), np.sign(x), -x), strict=True):
        assert_close(g, w, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_builtins(dtype: type) -> None:
    a, b = sample((4,), dtype, 1), sample((4,), dtype, 2)
    source = ("fn f(a: float[N], b: float[N]) -> (float[N], float[N], float[N]) "
              "{ return (max(a, b), min(a, b), pow(abs(a), b)); }")
    got = run(source, a, b)
    for g, w in zip(got, (np.maximum(a, b), np.minimum(a, b), np.abs(a) ** b), strict=True):
        assert_close(g, w, dtype)


# ---------------------------------------------------------------- operators


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("op", "ref"), [
    ("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.divide),
    ("//", np.floor_divide), ("%", np.mod), ("**", lambda a, b: np.abs(a) ** b),
])
def test_float_arithmetic(op: str, ref, dtype: type) -> None:
    a, b = sample((5,), dtype, 3), sample((5,), dtype, 4)
    lhs = "abs(a)" if op == "**" else "a"
    got = run(f"fn f(a: float[N], b: float[N]) -> float[N] {{ return {lhs} {op} b; }}", a, b)
    assert_close(got, ref(a, b), dtype)


@pytest.mark.parametrize(("op", "ref"), [
    ("+", np.add), ("-", np.subtract), ("*", np.multiply), ("//", np.floor_divide),
    ("%", np.mod),
])
def test_integer_arithmetic_floors_like_numpy(op: str, ref) -> None:
    a, b = np.array([7, -7, 7, -7, 0]), np.array([2, 2, -2, -2, 3])
    got = run(f"fn f(a: i64[N], b: i64[N]) -> i64[N] {{ return a {op} b; }}", a, b)
    assert_close(got, ref(a, b), np.int64)


def test_power_two_and_negative_exponents() -> None:
    x = sample((4,), np.float64, positive=True)
    source = "fn f(x: f64[N]) -> f64[N] { return x ** 2 + x ** -1 + 2.0 ** x - x ** 0.5; }"
    assert_close(run(source, x), x ** 2 + 1 / x + 2.0 ** x - np.sqrt(x), np.float64)


def test_unary_minus_and_precedence() -> None:
    x = np.array([1.5, -2.0, 3.0])
    got = run("fn f(x: f64[N]) -> f64[N] { return -x ** 2 + 2.0 * x - 1.0 / 4.0; }", x)
    assert_close(got, -(x ** 2) + 2 * x - 0.25, np.float64)


@pytest.mark.parametrize(("op", "ref"), [("<", np.less), ("<=", np.less_equal),
                                         (">", np.greater), (">=", np.greater_equal),
                                         ("==", np.equal), ("!=", np.not_equal)])
def test_comparisons_give_bool(op: str, ref) -> None:
    a, b = np.array([1.0, 2.0, 3.0, 2.0]), np.array([2.0, 2.0, 1.0, np.nan])
    got = run(f"fn f(a: f64[N], b: f64[N]) -> bool[N] {{ return a {op} b; }}", a, b)
    assert_close(got, ref(a, b), np.bool_)


def test_boolean_logic() -> None:
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    source = ("fn f(a: bool[N], b: bool[N]) -> (bool[N], bool[N], bool[N], bool[N]) "
              "{ return (a and b, a or b, not a, not a and b or a == b); }")
    got = run(source, a, b)
    want = (a & b, a | b, ~a, (~a & b) | (a == b))
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, np.bool_)


def test_comparison_chained_with_logic_on_tensors() -> None:
    x = np.linspace(-2, 2, 9)
    got = run("fn f(x: f64[N]) -> bool[N] { return x > -1.0 and x < 1.0 or x == 2.0; }", x)
    assert_close(got, ((x > -1) & (x < 1)) | (x == 2), np.bool_)


# ---------------------------------------------------------------- weak typing


@pytest.mark.parametrize("dtype", FLOATS)
def test_literals_take_the_other_operands_dtype(dtype: type) -> None:
    x = sample((3,), dtype)
    got = run("fn f(x: float[N]) -> float[N] { return 2 * x + 0.1 - 1e-3 / x; }", x)
    assert_close(got, 2 * x + dtype(0.1) - dtype(1e-3) / x, dtype)


def test_integer_literals_keep_narrow_integers() -> None:
    x = np.array([1, 2, 3], np.int32)
    assert_close(run("fn f(x: i32[N]) -> i32[N] { return x * 3 - 1; }", x), x * 3 - 1, np.int32)


def test_i32_and_i64_promote_to_i64() -> None:
    a, b = np.array([1, 2], np.int32), np.array([10, 20])
    assert_close(run("fn f(a: i32[N], b: i64[N]) -> i64[N] { return a + b; }", a, b),
                 a + b, np.int64)


def test_lone_literals_get_the_function_float_dtype() -> None:
    x32, x64 = np.ones(2, np.float32), np.ones(2)
    assert_close(run("fn f(x: f64[N]) -> f64 { return 0.1; }", x64), 0.1, np.float64)
    assert_close(run("fn f(x: f32[N]) -> f32 { return 0.1; }", x32), np.float32(0.1),
                 np.float32)
    assert_close(run("fn f(x: f32[N], y: f64[N]) -> f32 { return 0.1; }", x32, x64),
                 np.float32(0.1), np.float32)
    assert_close(run("fn f(x: f64[N]) -> i64 { return 7; }", x64), 7, np.int64)


def test_dimensions_and_loop_variables_are_weak_integers() -> None:
    x = np.arange(4, dtype=np.float32)
    got = run("fn f(x: f32[N]) -> f32[N] { return x / N + N * 0.5; }", x)
    assert_close(got, x / 4 + 2.0, np.float32)
    got = run("fn f(x: f32[N]) -> f32[N] { var s = x; for t in 0..N { s = s + t * 0.5; } "
              "return s; }", x)
    assert_close(got, x + 3.0, np.float32)
    assert run("fn f(x: f64[N, D]) -> i64 { return N * D - 1; }", np.ones((3, 5))) == 14


def test_integer_literal_division_gives_a_float() -> None:
    assert_close(run("fn f(x: f64[N]) -> f64 { return 1 / 4; }", np.ones(1)), 0.25, np.float64)


# ---------------------------------------------------------------- broadcasting


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcasting_like_numpy(dtype: type) -> None:
    x, row, col = sample((3, 4), dtype), sample((4,), dtype, 1), sample((3, 1), dtype, 2)
    source = ("fn f(x: float[N, D], row: float[D], col: float[N, 1]) -> float[N, D] "
              "{ return x * row + col - 1.0; }")
    assert_close(run(source, x, row, col), x * row + col - 1, dtype)


def test_broadcasting_outer_and_three_dimensional() -> None:
    a, b, c = sample((3, 1), np.float64), sample((1, 4), np.float64, 1), sample((2, 1, 1),
                                                                                 np.float64, 2)
    source = ("fn f(a: f64[N, 1], b: f64[1, M], c: f64[B, 1, 1]) -> f64[B, N, M] "
              "{ return a * b + c; }")
    assert_close(run(source, a, b, c), a * b + c, np.float64)


def test_scalar_parameters_broadcast() -> None:
    x = sample((2, 3), np.float64)
    got = run("fn f(x: f64[N, D], s: f64) -> f64[N, D] { return s * x + s; }", x, 1.5)
    assert_close(got, 1.5 * x + 1.5, np.float64)


# ---------------------------------------------------------------- reductions

REDUCTIONS = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min,
              "logsumexp": lambda x, axis=None, keepdims=False: torch.logsumexp(
                  torch.from_numpy(np.ascontiguousarray(x)),
                  dim=tuple(range(x.ndim)) if axis is None else axis,
                  keepdim=keepdims).numpy()}
AXES = [(None, ""), (0, ", axis=0"), (-1, ", axis=-1"), ((0, 2), ", axis=(0, 2)"),
        ((1,), ", axis=(1,)")]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize(("axis", "axis_src"), AXES, ids=[a for _, a in AXES])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name: str, axis, axis_src: str, keepdims: bool, dtype: type) -> None:
    x = sample((2, 3, 4), dtype, positive=name == "prod")
    want = np.asarray(REDUCTIONS[name](x, axis=axis, keepdims=keepdims))
    kw = axis_src + (", keepdims=true" if keepdims else "")
    shape = ", ".join(str(n) for n in want.shape)
    ret = f"float[{shape}]" if shape else "float"
    got = run(f"fn f(x: float[2, 3, 4]) -> {ret} {{ return {name}(x{kw}); }}", x)
    assert np.asarray(got).shape == want.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.asarray(got).dtype == dtype


def test_integer_reductions() -> None:
    x = np.array([[3, -1, 4], [1, 5, -9]])
    source = ("fn f(x: i64[N, D]) -> (i64, i64[N], i64[D], i64) "
              "{ return (sum(x), max(x, axis=1), min(x, axis=0), prod(x)); }")
    got = run(source, x)
    for g, w in zip(got, (x.sum(), x.max(1), x.min(0), x.prod()), strict=True):
        assert_close(g, w, np.int64)


def test_logsumexp_is_stable() -> None:
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, 0.0]])
    got = run("fn f(x: f64[N, D]) -> f64[N] { return logsumexp(x, axis=1); }", x)
    np.testing.assert_allclose(got, [1000 + np.log(2), -1000 + np.log(2), 0.0])
    all_inf = np.full((1, 2), -np.inf)
    got = run("fn f(x: f64[N, D]) -> f64[N] { return logsumexp(x, axis=1); }", all_inf)
    assert got[0] == -np.inf


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name: str) -> None:
    x = np.array([[1.0, 7.0, 7.0, -2.0], [4.0, -3.0, 0.0, -3.0], [5.0, 5.0, 5.0, 5.0]])
    ref = getattr(np, name)
    source = (f"fn f(x: f64[N, D]) -> (i64, i64[D], i64[N], i64[N, 1]) {{ return ({name}(x), "
              f"{name}(x, axis=0), {name}(x, axis=-1), {name}(x, axis=1, keepdims=true)); }}")
    got = run(source, x)
    want = (ref(x), ref(x, axis=0), ref(x, axis=-1), ref(x, axis=1, keepdims=True))
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, np.int64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_and_log_softmax(dtype: type) -> None:
    x = sample((3, 4), dtype) * 10
    t = torch.from_numpy(x.astype(np.float64))
    source = ("fn f(x: float[N, D]) -> (float[N, D], float[N, D], float[N, D], float[N, D]) "
              "{ return (softmax(x), softmax(x, axis=0), log_softmax(x), "
              "log_softmax(x, axis=-2)); }")
    got = run(source, x)
    want = (torch.softmax(t, -1), torch.softmax(t, 0), torch.log_softmax(t, -1),
            torch.log_softmax(t, 0))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-6 if dtype == np.float32 else 1e-13)


def test_softmax_of_huge_logits_does_not_overflow() -> None:
    x = np.array([[1e4, 0.0, -1e4]])
    got = run("fn f(x: f64[N, D]) -> f64[N, D] { return softmax(x); }", x)
    np.testing.assert_allclose(got, [[1.0, 0.0, 0.0]])


# ---------------------------------------------------------------- matrix products


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("a_shape", "b_shape", "a_type", "b_type", "out"), [
    ((2, 3), (3, 4), "[N, K]", "[K, M]", "[N, M]"),
    ((2, 3), (3,), "[N, K]", "[K]", "[N]"),
    ((3,), (3, 4), "[K]", "[K, M]", "[M]"),
    ((3,), (3,), "[K]", "[K]", ""),
])
def test_matmul(a_shape, b_shape, a_type, b_type, out, dtype: type) -> None:
    a, b = sample(a_shape, dtype), sample(b_shape, dtype, 1)
    source = f"fn f(a: float{a_type}, b: float{b_type}) -> float{out} {{ return a @ b; }}"
    got = run(source, a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5 if dtype == np.float32
                               else 1e-12)
    assert np.asarray(got).dtype == dtype


def test_integer_matmul() -> None:
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    assert_close(run("fn f(a: i64[N, K], b: i64[K, M]) -> i64[N, M] { return a @ b; }", a, b),
                 a @ b, np.int64)
