"""Reverse mode per op and per built-in: full Jacobians against central differences.

Each case is a small `.rv` program; inputs are drawn from the op's safe domain (positive
for log and sqrt, away from kinks and ties) so finite differences are accurate.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import assert_jacobians_match, grad, specialise

RNG = np.random.default_rng(7)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.3, 2.0, shape)


def away_from_zero(*shape: int) -> np.ndarray:
    return RNG.uniform(0.2, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)


UNARY = {
    "abs": away_from_zero, "exp": normal, "expm1": normal, "log": positive, "log1p": positive,
    "sqrt": positive, "rsqrt": positive, "sin": normal, "cos": normal,
    "tan": lambda *s: RNG.uniform(-1.2, 1.2, s), "tanh": normal, "sigmoid": normal,
    "relu": away_from_zero, "softplus": normal, "erf": normal, "sign": away_from_zero,
    "floor": lambda *s: RNG.uniform(0.1, 0.9, s) + RNG.integers(-3, 3, s),
    "ceil": lambda *s: RNG.uniform(0.1, 0.9, s) + RNG.integers(-3, 3, s),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_builtin(name: str) -> None:
    fn = specialise(f"fn f(x: f64[N]) -> f64[N] {{ return {name}(x); }}")
    assert_jacobians_match(fn, [UNARY[name](4)], {"N": 4})


BINARY = {
    "a + b": (normal, normal), "a - b": (normal, normal), "a * b": (normal, normal),
    "a / b": (normal, away_from_zero), "a ** b": (positive, normal),
    "pow(a, b)": (positive, normal), "max(a, b)": (normal, normal),
    "min(a, b)": (normal, normal), "a % b": (normal, positive), "-a + a * a": (normal, normal),
    "a ** 2 + a ** 3.0": (normal, normal),
}


@pytest.mark.parametrize("expr", sorted(BINARY))
def test_binary_operator(expr: str) -> None:
    fn = specialise(f"fn f(a: f64[N], b: f64[N]) -> f64[N] {{ return {expr}; }}")
    draw_a, draw_b = BINARY[expr]
    args = [draw_a(5), draw_b(5)]
    if "%" in expr:  # stay away from the jumps of a mod b
        args[0] = (np.floor(args[0] / args[1]) + RNG.uniform(0.2, 0.8, 5)) * args[1]
    assert_jacobians_match(fn, args, {"N": 5})


REDUCTIONS = [
    "sum(x)", "sum(x, axis=1)", "sum(x, axis=(0, 1), keepdims=true)", "mean(x, axis=0)",
    "prod(x, axis=1)", "prod(x)", "max(x, axis=1)", "min(x, axis=0)", "max(x)",
    "logsumexp(x, axis=1)", "logsumexp(x)", "softmax(x, axis=1)", "log_softmax(x, axis=0)",
    "sum(x * x, axis=1, keepdims=true) / x",
]


@pytest.mark.parametrize("expr", REDUCTIONS)
def test_reduction(expr: str) -> None:
    fn = specialise(f"fn f(x: f64[N, M]) {{ return {expr}; }}")
    assert_jacobians_match(fn, [away_from_zero(3, 4)], {"N": 3, "M": 4})


def test_product_with_zeros_is_exact() -> None:
    fn = specialise("fn f(x: f64[N, M]) -> f64[N] { return prod(x, axis=1); }")
    x = away_from_zero(4, 3)
    x[1, 0] = 0.0
    x[2, 0] = x[2, 2] = 0.0
    assert_jacobians_match(fn, [x], {"N": 4, "M": 3})


SHAPES = [
    ("x.T", (3, 4)), ("transpose(x, (1, 0)) @ x", (3, 4)), ("reshape(x, (N * M,))", (3, 4)),
    ("x[1:, ::2]", (3, 4)), ("x[:, 0]", (3, 4)), ("x[:N-1] - x[1:]", (3, 4)),
    ("concat((x, x * x), axis=1)", (3, 4)), ("concat((x[:1], x), axis=0)", (3, 4)),
    ("roll(x, 1, axis=1)", (3, 4)), ("roll(x, -2)", (3, 4)), ("x[1]", (3, 4)),
    ("x[-1, 2]", (3, 4)),
]


@pytest.mark.parametrize(("expr", "shape"), SHAPES, ids=[s for s, _ in SHAPES])
def test_shape_op(expr: str, shape: tuple[int, int]) -> None:
    fn = specialise(f"fn f(x: f64[N, M]) {{ return {expr}; }}")
    assert_jacobians_match(fn, [normal(*shape)], {"N": shape[0], "M": shape[1]})


MATMULS = {"2-D @ 2-D": ("N, K", "K, M"), "1-D @ 2-D": ("K", "K, M"),
           "2-D @ 1-D": ("N, K", "K"), "1-D @ 1-D": ("K", "K")}


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_matmul(case: str) -> None:
    a, b = MATMULS[case]
    fn = specialise(f"fn f(a: f64[{a}], b: f64[{b}]) {{ return a @ b; }}")
    dims = {"N": 2, "K": 3, "M": 4}
    shapes = [[dims[d.strip()] for d in t.split(",")] for t in (a, b)]
    assert_jacobians_match(fn, [normal(*shapes[0]), normal(*shapes[1])], dims)


def test_broadcasting_sums_over_stretched_axes() -> None:
    fn = specialise("fn f(a: f64[N, 1], b: f64[M], c: f64) -> f64[N, M] "
                    "{ return a * b + c; }")
    assert_jacobians_match(fn, [normal(3, 1), normal(4), normal()], {"N": 3, "M": 4})


def test_where_routes_by_condition() -> None:
    fn = specialise("fn f(a: f64[N], b: f64[N]) -> f64[N] "
                    "{ return where(a > b, a * b, exp(b)); }")
    assert_jacobians_match(fn, [normal(6), normal(6)], {"N": 6})


def test_dynamic_index_with_an_integer_argument() -> None:
    fn = specialise("fn f(xs: f64[T, D], t: i64) -> f64[D] { return xs[t] * xs[t]; }")
    assert_jacobians_match(fn, [normal(4, 3), np.int64(2)], {"T": 4, "D": 3}, wrt=[0])


def test_casts_between_float_types_pass_the_cotangent_through() -> None:
    fn = specialise("fn f(x: f64[N]) -> f64 { return sum(f64(f32(x)) * x); }")
    x = np.array([0.5, -1.25, 2.0])  # exactly representable in f32
    (gx,) = grad(fn, [0], [x], {"N": 3})
    np.testing.assert_array_equal(gx, 2 * x)


def test_user_function_calls_are_inlined_and_differentiated() -> None:
    source = """
        fn square(v: f64[N]) -> f64[N] { return v * v; }
        fn f(x: f64[N]) -> f64 { return sum(square(sin(x))); }
    """
    assert_jacobians_match(specialise(source), [normal(4)], {"N": 4})


def test_tuple_results_get_one_cotangent_each() -> None:
    fn = specialise("fn f(x: f64[N]) -> (f64, f64[N]) { return (sum(x * x), exp(x)); }")
    assert_jacobians_match(fn, [normal(3)], {"N": 3})
