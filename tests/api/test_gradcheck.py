"""`rv.gradcheck` / `rv.gradgradcheck`: torch's defaults and failure behaviour."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.tensors.gradcheck import GradcheckError

SOURCE = """
fn loss(x: f64[N, D], w: f64[D], labels: i64[N]) -> f64 {
    let z = tanh(x * w);
    let picked[n] = z[n, labels[n]];
    return sum(picked * picked) + sum(sin(w));
}
fn pair(x: float[N]) -> (float[N], float) { return (exp(x) * x, sum(x * x * x)); }
fn product(a: f64[N], b: f64[N]) -> f64[N] { return a * b; }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def half_blind(x: rv.Tensor) -> rv.Tensor:
    """sum(x * x) whose gradient misses the detached factor: x instead of 2x."""
    return (x.detach() * x).sum()


def blind_cube(m: rv.Module, x: rv.Tensor) -> rv.Tensor:
    """x**3 through a compiled product, one factor detached."""
    return m.product(x * x, x.detach())


def test_defaults_match_torch() -> None:
    torch = pytest.importorskip("torch")
    ours = inspect.signature(rv.gradcheck).parameters
    theirs = inspect.signature(torch.autograd.gradcheck).parameters
    for name in ("eps", "atol", "rtol", "raise_exception"):
        assert ours[name].default == theirs[name].default, name


def test_passes_for_compiled_gradients(m: rv.Module) -> None:
    rng = np.random.default_rng(0)
    x = rv.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    w = rv.tensor(rng.normal(size=3), requires_grad=True)
    labels = np.array([0, 2, 1, 2])
    assert rv.gradcheck(m.loss, (x, w, labels))
    assert rv.gradcheck(m.pair, rv.tensor(rng.normal(size=5), requires_grad=True))


def test_passes_for_python_functions_of_tensors(m: rv.Module) -> None:
    a = rv.tensor([[0.5, -1.0], [2.0, 0.3]], requires_grad=True)
    b = rv.tensor([1.5, 0.7], requires_grad=True)
    assert rv.gradcheck(lambda a, b: (a @ b) ** 2 / (b.sum() + 3.0), (a, b))


def test_wrong_gradient_raises_naming_output_and_input() -> None:
    c = rv.tensor([1.0, 2.0])
    x = rv.tensor([0.5, -1.5, 2.0], requires_grad=True)
    with pytest.raises(GradcheckError, match="output 0 with respect to input 1") as info:
        rv.gradcheck(lambda c, x: half_blind(x) + c.sum(), (c, x))
    assert isinstance(info.value, RuntimeError)
    assert "numerical" in str(info.value) and "analytical" in str(info.value)


def test_raise_exception_false_returns_false() -> None:
    x = rv.tensor([0.5, -1.5], requires_grad=True)
    assert rv.gradcheck(half_blind, (x,), raise_exception=False) is False


def test_tolerances_are_used() -> None:
    x = rv.tensor([0.5, 1.0], requires_grad=True)
    assert rv.gradcheck(half_blind, (x,), atol=1.5, rtol=0.0)


def test_float32_inputs_warn(m: rv.Module) -> None:
    x = rv.tensor([0.5, 1.0], dtype=np.float32, requires_grad=True)
    with pytest.warns(UserWarning, match="float64"):
        rv.gradcheck(m.pair, (x,), atol=1e-2, rtol=1e-2, eps=1e-3)


def test_needs_an_input_requiring_grad(m: rv.Module) -> None:
    with pytest.raises(ValueError, match="requires_grad"):
        rv.gradcheck(m.pair, (rv.tensor([1.0]),))


def test_gradgradcheck_passes_for_compiled_second_derivatives(m: rv.Module) -> None:
    rng = np.random.default_rng(1)
    x = rv.tensor(rng.normal(size=(3, 2)), requires_grad=True)
    w = rv.tensor(rng.normal(size=2), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rv.gradgradcheck(m.loss, (x, w, np.array([1, 0, 1])))
    assert rv.gradgradcheck(m.pair, rv.tensor(rng.normal(size=4), requires_grad=True))


def test_gradgradcheck_catches_a_wrong_second_derivative(m: rv.Module) -> None:
    x = rv.tensor([0.5, -1.0, 1.5], requires_grad=True)
    assert not rv.gradgradcheck(lambda x: blind_cube(m, x), (x,), raise_exception=False)
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        rv.gradgradcheck(lambda x: blind_cube(m, x), (x,))
