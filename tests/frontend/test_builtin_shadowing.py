"""A user function named like a built-in shadows it in its module (docs/language.md §1).

Only the casts and `bool`, which name dtypes, are refused; the other built-ins give way to
the module's own function of that name, as a Python `def` shadows a built-in, so a program
that defined `norm` or `gamma` keeps working as the language gains built-ins.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

SHADOWING = """
fn norm(v: f64[N]) -> f64 {
    return sum(abs(v));
}
fn softmax(x: f64[N]) -> f64[N] {
    return x * 2.0;
}
fn f(x: f64[N]) -> f64 {
    return norm(softmax(x));
}
"""


def test_user_functions_shadow_built_ins() -> None:
    m = rv.compile(SHADOWING)
    x = np.array([1.0, -2.0, 3.0])
    assert m.f(x) == pytest.approx(12.0)
    assert m.norm(x) == pytest.approx(6.0)
    np.testing.assert_allclose(m.f.grad("x")(x), 2.0 * np.sign(x))


def test_other_modules_keep_the_built_in() -> None:
    m = rv.compile("fn g(a: f64[N, N]) -> f64 { return norm(a); }")
    a = np.arange(9.0).reshape(3, 3)
    assert m.g(a) == pytest.approx(np.linalg.norm(a))


@pytest.mark.parametrize("name", ["f32", "f64", "i32", "i64", "float", "bool"])
def test_dtype_names_stay_reserved(name: str) -> None:
    with pytest.raises(rv.CompileError, match=f"'{name}' names a dtype; choose another name"):
        rv.compile(f"fn {name}(x: f64) -> f64 {{ return x; }}")
