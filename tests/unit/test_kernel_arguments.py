"""Keyword arguments of kernels and of their transforms, bound like a Python function's.

`m.f(x=a, w=b)`, `m.f(a, w=b)` and `m.f(w=b, x=a)` are `m.f(a, b)`, before and after the
native entry is in the call path (it passes calls with keywords to the Python path), on
the interpreter too, for Tensors, and for every transform (a grouped transform takes its
group as one tuple after the other arguments, or each member by its own name). An unknown,
repeated or missing name is a TypeError naming the kernel, as Python's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import reverie as rv

SOURCE = "fn f(x: f64[N], w: f64[N]) -> f64 { return sum(x * x * w); }"
A, B = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
_modules = iter(range(1_000_000))


@pytest.fixture(params=["native", "interp"])
def m(request: pytest.FixtureRequest) -> rv.Module:
    """A module whose kernels nothing has called yet."""
    return rv.compile(SOURCE, name=f"arguments{next(_modules)}", backend=request.param)


def same(a: object, b: object) -> bool:
    """Whether two results (arrays, scalars, nested tuples) are equal, dtype included."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)


# Each transform of f: how it is made, its positional call, and the same call by keyword.
TRANSFORMS: dict[str, tuple[Callable[[rv.Kernel], rv.Kernel], tuple, list[tuple]]] = {
    "forward": (lambda f: f, (A, B), [((), {"x": A, "w": B}), ((A,), {"w": B}),
                                      ((), {"w": B, "x": A})]),
    "grad": (lambda f: f.grad(), (A, B), [((), {"w": B, "x": A})]),
    "grad x": (lambda f: f.grad("x"), (A, B), [((A,), {"w": B})]),
    "value_and_grad": (lambda f: f.value_and_grad(), (A, B), [((), {"x": A, "w": B})]),
    "vjp": (lambda f: f.vjp(), (A, B, 2.0), [((A, B), {"cotangent": 2.0}),
                                             ((), {"cotangent": 2.0, "x": A, "w": B})]),
    "jvp": (lambda f: f.jvp(), (A, B, (B, A)), [((), {"x": A, "w": B, "x_dot": B,
                                                      "w_dot": A}),
                                                ((A,), {"w": B, "w_dot": A, "x_dot": B})]),
    "hvp": (lambda f: f.hvp("x"), (A, B, B), [((A, B), {"v": B}), ((), {"v": B, "w": B,
                                                                        "x": A})]),
    "jacobian": (lambda f: f.jacobian(), (A, B), [((), {"w": B, "x": A})]),
    "hessian": (lambda f: f.hessian("w"), (A, B), [((A,), {"w": B})]),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_keywords_bind_by_name(m: rv.Module, transform: str) -> None:
    make, positional, by_keyword = TRANSFORMS[transform]
    kernel = make(m.f)
    results = [kernel(*args, **keywords) for args, keywords in by_keyword]  # first calls
    expected = kernel(*positional)  # the native entry in front from here on
    results += [kernel(*args, **keywords) for args, keywords in by_keyword]
    assert all(same(result, expected) for result in results)


BAD_CALLS = [
    ((A,), {"y": B}, "f() got an unexpected keyword argument 'y'"),
    ((A, B), {"x": A}, "f() got multiple values for argument 'x'"),
    ((A,), {"x": A}, "f() got multiple values for argument 'x'"),
    ((), {"w": B}, "f() missing 1 required argument(s): 'x'"),
    ((), {"y": B}, "f() got an unexpected keyword argument 'y'"),
    ((A, B, A), {"w": B}, "f() takes 2 argument(s) (x, w), got 3"),
]


@pytest.mark.parametrize(("args", "keywords", "message"), BAD_CALLS)
def test_a_bad_keyword_call_is_a_type_error_naming_the_kernel(
        m: rv.Module, args: tuple, keywords: dict, message: str) -> None:
    for _ in range(2):  # before and after the native entry is in the call path
        with pytest.raises(TypeError) as raised:
            m.f(*args, **keywords)
        assert message in str(raised.value)
        assert "_python_path" not in str(raised.value)
        m.f(A, B)


def test_a_transform_names_itself_in_a_bad_keyword_call(m: rv.Module) -> None:
    with pytest.raises(TypeError, match=r"f_grad\(\) got an unexpected keyword argument 'y'"):
        m.f.grad()(A, y=B)
    with pytest.raises(TypeError, match=r"f_jvp\(\) missing 1 required argument\(s\): 'w_dot'"):
        m.f.jvp()(A, B, x_dot=A)


def test_keywords_record_tensor_calls(m: rv.Module) -> None:
    x = rv.Tensor(A, requires_grad=True)
    m.f(w=B, x=x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * A * B)
