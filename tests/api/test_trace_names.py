"""`rv.trace` names (docs/api.md §8–9): no generated name clashes with the language or another.

A Python parameter or function may be named like a keyword (`fn`, `let`, `var`, `true`,
`while`) or built-in (`sum`, `exp`) of the language, or like a generated temporary (`t1`)
or dimension (`X0`); the kernel still compiles, computes what NumPy computes, and is found
by the Python function's name. A keyword parameter gets a trailing `_` (built-in names
are valid parameters); a kernel named like a keyword or built-in too; a lambda's kernel
is `traced`.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

KEYWORDS = ("fn", "let", "var", "true", "false")
CLASHING = ["fn", "let", "var", "true", "false", "t1", "t2", "sum", "exp", "X0", "g0", "f64"]


def function_with_parameter(name: str):
    """`def f(<name>, y)` using `name` as a value, an operand and a subscripted array."""
    namespace: dict = {"np": np}
    exec(f"def f({name}, y, labels):\n"  # noqa: S102 (a parameter name under test)
         f"    return np.exp({name}).sum() * y[-1] + ({name} @ y) + {name}[labels].sum()\n",
         namespace)
    return namespace["f"]


@pytest.mark.parametrize("name", CLASHING)
def test_parameter_named_like_a_language_name(name: str) -> None:
    fn = function_with_parameter(name)
    x, y, labels = np.arange(3.0), np.arange(3.0) + 1.0, np.array([2, 0])
    module = rv.trace(fn, x, y, labels)
    np.testing.assert_allclose(module.f(x, y, labels), fn(x, y, labels), rtol=1e-12)
    big = np.linspace(0.0, 1.0, 6), np.linspace(1.0, 2.0, 6), np.array([5, 1, 1])
    np.testing.assert_allclose(module.f(*big), fn(*big), rtol=1e-12)
    renamed = name + "_" if name in KEYWORDS else name  # built-in names are fine
    assert f"fn f({renamed}: f64[" in module.source
    np.testing.assert_allclose(module.f.grad(wrt=renamed)(x, y, labels),
                               np.exp(x) * y[-1] + y + np.bincount(labels, minlength=3))


@pytest.mark.parametrize("name", ["while", "fn", "let", "sum", "exp", "true", "t1"])
def test_function_named_like_a_language_name(name: str) -> None:
    def fn(x):
        return (x * x).sum()

    fn.__name__ = name
    module = rv.trace(fn, np.ones(3))
    assert module[name](np.ones(4)) == 4.0
    assert getattr(module, name)(np.ones(2)) == 2.0
    assert module.kernel(np.ones(5)) == 5.0
    if name in ("t1",):
        assert list(module.kernels) == [name]
    else:
        assert list(module.kernels) == [name + "_"]


def test_lambda_kernel_is_found_by_every_name() -> None:
    square = lambda v: (v * v).sum()  # noqa: E731 (the lambda is the point)
    module = rv.trace(square, np.ones(3))
    assert list(module.kernels) == ["traced"]
    for kernel in (module[square.__name__], getattr(module, "<lambda>"), module.traced,
                   module.kernel, module["traced"]):
        assert kernel(np.full(4, 2.0)) == 16.0
    assert module.source.startswith("# Traced from <lambda> by rv.trace.\nfn traced(v: f64[V0])")
    with pytest.raises(KeyError, match="no function 'other'"):
        module["other"]


def test_temporaries_skip_parameter_names() -> None:
    def t1(t1, t2, t3):
        return (t1 * t2 + t3).sum()

    args = np.ones(2), np.full(2, 2.0), np.full(2, 3.0)
    module = rv.trace(t1, *args)
    assert module.t1(*args) == 10.0
    assert "let t4 = t1 * t2;" in module.source
