"""Scans and orderings (docs/language.md §8) and triangular ranges (docs/language.md §10): values.

`cumsum`, `cumprod`, `sort`, `argsort` and `topk` against torch (ties as
`torch.sort(stable=True)`, NaN largest) on the interpreter, the native backend and the
MLIR backend; triangular ranges in index notation against NumPy; and the errors for
calls that cannot work. Gradients are in `tests/grad/test_grad_scans.py`.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn cumsum0(x: float[B, N]) -> float[B, N] { return cumsum(x, axis=0); }
fn cumsum1(x: float[B, N]) -> float[B, N] { return cumsum(x, axis=1); }
fn cumprod1(x: float[B, N]) -> float[B, N] { return cumprod(x, axis=-1); }
fn sort_last(x: float[B, N]) -> float[B, N] { return sort(x); }
fn sort_down0(x: float[B, N]) -> float[B, N] { return sort(x, axis=0, descending=true); }
fn argsort_last(x: float[B, N]) -> i64[B, N] { return argsort(x); }
fn argsort_down(x: float[B, N]) -> i64[B, N] { return argsort(x, descending=true); }
fn top3(x: float[B, N]) -> float[B, 3] { return topk(x, 3); }
fn top_k0(x: float[B, N], w: float[K]) -> float[K, N] { return topk(x, K, axis=0); }
fn int_sort(x: i64[N]) -> i64[N] { return sort(x); }
fn int_cumsum(x: i32[N]) -> i32[N] { return cumsum(x); }
"""

TIES = np.array([[3.0, 1.0, 2.0, 1.0, np.nan, 0.0],
                 [0.0, -1.0, 5.0, 5.0, np.nan, 5.0],
                 [-0.0, 0.0, -2.0, np.inf, -np.inf, 2.0],
                 [1.0, np.nan, 1.0, np.nan, 1.0, -1.0]])


def _references(x: torch.Tensor) -> dict[str, object]:
    def topk_along(t: torch.Tensor, k: int, dim: int) -> torch.Tensor:
        return torch.sort(t, dim=dim, descending=True, stable=True).values.narrow(dim, 0, k)

    return {
        "cumsum0": torch.cumsum(x, 0), "cumsum1": torch.cumsum(x, 1),
        "cumprod1": torch.cumprod(x, 1),
        "sort_last": torch.sort(x, stable=True).values,
        "sort_down0": torch.sort(x, dim=0, descending=True, stable=True).values,
        "argsort_last": torch.sort(x, stable=True).indices,
        "argsort_down": torch.sort(x, descending=True, stable=True).indices,
        "top3": topk_along(x, 3, 1), "top_k0": topk_along(x, 2, 0),
    }


def _check(module: rv.Module, x: np.ndarray) -> None:
    expected = _references(torch.tensor(x))
    for name, want in expected.items():
        args = (x, np.ones(2, x.dtype)) if name == "top_k0" else (x,)
        got = np.asarray(module[name](*args))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", ["interp", "native"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_values_match_torch_with_ties_nan_and_inf(backend: str, dtype: type) -> None:
    module = rv.compile(SOURCE, backend=backend)
    _check(module, TIES.astype(dtype))
    _check(module, np.random.default_rng(0).standard_normal((3, 7)).astype(dtype))


@pytest.mark.skipif(shutil.which("mlir-opt-19") is None, reason="needs the MLIR tools")
def test_the_mlir_backend_agrees() -> None:
    _check(rv.compile(SOURCE, backend="mlir"), TIES)


@pytest.mark.parametrize("backend", ["interp", "native"])
def test_integer_operands(backend: str) -> None:
    module = rv.compile(SOURCE, backend=backend)
    x = np.array([4, -1, 7, -1, 0])
    np.testing.assert_array_equal(module.int_sort(x), np.sort(x))
    np.testing.assert_array_equal(module.int_cumsum(x.astype(np.int32)), np.cumsum(x))
    assert module.int_cumsum(x.astype(np.int32)).dtype == np.int32


def test_empty_axes() -> None:
    module = rv.compile(SOURCE, backend="native")
    empty = np.zeros((2, 0))
    for name in ("cumsum1", "cumprod1", "sort_last", "argsort_last"):
        assert np.asarray(module[name](empty)).shape == (2, 0)


def test_topk_needs_k_at_most_the_axis_length() -> None:
    module = rv.compile(SOURCE, backend="native")
    with pytest.raises(rv.ShapeMismatchError, match="topk needs k <= N"):
        module.top3(np.zeros((2, 2)))


def test_topk_takes_an_i64_argument() -> None:
    module = rv.compile("fn f(x: f64[N], k: i64) -> f64[k] { return topk(x, k); }")
    np.testing.assert_array_equal(module.f(np.array([1.0, 4.0, 2.0, 3.0]), 2), [4.0, 3.0])
    with pytest.raises(rv.ShapeMismatchError, match="topk needs k >= 0"):
        module.f(np.zeros(3), -1)


@pytest.mark.parametrize(("body", "message"), [
    ("cumsum(x)", "'cumsum' of f64\\[N, M\\] needs an axis"),
    ("sort(x, axis=2)", "axis 2 is out of range"),
    ("sort(x, descending=1)", "descending must be true or false"),
    ("sort(x > 0.0)", "'sort' needs a numeric tensor"),
    ("topk(x, 1.5)", "k of 'topk' must be an integer literal"),
    ("argsort(x, stable=true)", "'argsort' has no keyword 'stable'"),
    ("cumprod(sum(x))", "needs a numeric tensor with at least one axis"),
])
def test_bad_calls_are_compile_errors(body: str, message: str) -> None:
    with pytest.raises(rv.CompileError, match=message):
        rv.compile(f"fn f(x: f64[N, M]) -> f64 {{ return sum({body}); }}", backend="interp")


def test_a_user_function_shadows_the_names() -> None:
    """A module's own `sort` is what its calls reach; other modules keep the built-in."""
    mine = rv.compile("fn sort(x: f64[N]) -> f64[N] { return x * 2.0; }\n"
                      "fn f(x: f64[N]) -> f64[N] { return sort(x); }", backend="interp")
    np.testing.assert_array_equal(mine.f(np.array([3.0, 1.0])), [6.0, 2.0])
    builtin = rv.compile("fn f(x: f64[N]) -> f64[N] { return sort(x); }", backend="interp")
    np.testing.assert_array_equal(builtin.f(np.array([3.0, 1.0])), [1.0, 3.0])


# ---------------------------------------------------------------- triangular ranges

TRIANGULAR = """
fn prefix(x: f64[N]) -> f64[N] { let c[i in 0..N] = sum[j in 0..i + 1](x[j]); return c; }
fn suffix(x: f64[N]) -> f64[N] { let c[i in 0..N] = sum[j in i..N](x[j]); return c; }
fn strict(x: f64[N]) -> f64[N] { let c[i in 0..N] = sum[j in 0..i](x[j]); return c; }
fn band(x: f64[N]) -> f64[N] { let c[i in 0..N] = sum[j in i - 1..i + 2](x[j]); return c; }
fn running_max(x: f64[N]) -> f64[N] { let c[i] = x[i] * max[j in 0..i + 1](x[j]); return c; }
fn lower_prod(a: f64[N, N]) -> f64[N] { let c[i] = prod[j in 0..i + 1](a[i, j]); return c; }
fn twice(x: f64[N]) -> f64[N] {
    let c[i in 0..N] = sum[j in 0..i + 1](sum[k in 0..j + 1](x[k]));
    return c;
}
fn descending(x: f64[N]) -> f64[N] {
    let c[i in 0..N] = sum[j in 0..N - i](x[j]);
    return c;
}
"""


@pytest.mark.parametrize("backend", ["interp", "native"])
@pytest.mark.parametrize("n", [0, 1, 6])
def test_triangular_ranges(backend: str, n: int) -> None:
    module = rv.compile(TRIANGULAR, backend=backend)
    rng = np.random.default_rng(n)
    x, a = rng.standard_normal(n), rng.standard_normal((n, n))
    np.testing.assert_allclose(module.prefix(x), np.cumsum(x))
    np.testing.assert_allclose(module.suffix(x), np.cumsum(x[::-1])[::-1])
    np.testing.assert_allclose(module.strict(x), np.cumsum(x) - x, atol=1e-12)
    np.testing.assert_allclose(module.band(x), [x[max(i - 1, 0):i + 2].sum() for i in range(n)])
    np.testing.assert_allclose(module.running_max(x), x * np.maximum.accumulate(x))
    np.testing.assert_allclose(module.lower_prod(a), [np.prod(a[i, :i + 1]) for i in range(n)])
    np.testing.assert_allclose(module.twice(x), np.cumsum(np.cumsum(x)))
    np.testing.assert_allclose(module.descending(x), np.cumsum(x)[::-1] if n else x)


@pytest.mark.parametrize(("source", "message"), [
    ("let c[i in 0..N, j in 0..i + 1] = x[j]; return sum(c, axis=1);",
     "output index 'j' cannot depend on another index"),
    ("let c[i in 0..N] = sum[j in 0..i * i](x[j]); return c;", "affine in index 'i'"),
    ("let c[i in 0..N] = sum[j in 0..i // 2](x[j]); return c;", "affine in index 'i'"),
])
def test_bad_triangular_ranges(source: str, message: str) -> None:
    with pytest.raises(rv.CompileError, match=message):
        rv.compile(f"fn f(x: f64[N]) -> f64[N] {{ {source} }}", backend="interp")
