"""The reverse-mode API: signatures, names, zero gradients, errors, f32 programs."""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import run, specialise

from reverie.compiler.transforms import reverse_rules
from reverie.compiler.transforms.reverse import grad_function, vjp_function
from reverie.dsl.diagnostics import CompileError

TWO_RESULTS = """
fn f(x: f64[N], w: f64, k: i64) -> (f64, f64[N]) {
    let y = tanh(x * w);
    return (sum(y), y);
}
"""


def test_vjp_signature_and_names() -> None:
    g = vjp_function(specialise(TWO_RESULTS), [0, 1])
    assert g.name == "f_vjp"
    assert g.param_names == ["x", "w", "k", "out0_bar", "y_bar"]
    assert [str(t) for t in g.result_types] == ["f64", "f64[N]", "f64[N]", "f64"]
    assert vjp_function(specialise(TWO_RESULTS), [1], name="custom").name == "custom"


def test_vjp_sums_over_all_cotangents() -> None:
    g = vjp_function(specialise(TWO_RESULTS), [0])
    x, w = np.array([0.1, -0.4]), np.float64(1.5)
    u0, u1 = np.float64(2.0), np.array([0.5, -1.0])
    (gx,) = run(g, [x, w, np.int64(0), u0, u1], {"N": 2})[2:]
    np.testing.assert_allclose(gx, (u0 + u1) * w * (1 - np.tanh(x * w) ** 2), rtol=1e-15)


def test_grad_signature_value_and_zero_gradient() -> None:
    fn = specialise("fn f(x: f64[N], unused: f64[N, N]) -> f64 { return sum(x * x); }")
    g = grad_function(fn, [1, 0])
    assert g.name == "f_grad" and g.param_names == ["x", "unused"]
    value, g_unused, g_x = run(g, [np.array([1.0, 2.0]), np.ones((2, 2))], {"N": 2})
    assert value == 5.0
    np.testing.assert_array_equal(g_unused, np.zeros((2, 2)))
    np.testing.assert_array_equal(g_x, [2.0, 4.0])


def test_integer_and_piecewise_constant_paths_carry_no_gradient() -> None:
    fn = specialise("""fn f(x: f64[N]) -> f64 {
        return sum(softmax(x) * 0.0 + x) + f64(argmax(x)) + sum(floor(x) + sign(x)); }""")
    x = np.array([0.3, 2.5, -1.0])
    (gx,) = run(grad_function(fn, [0]), [x], {"N": 3})[1:]
    np.testing.assert_array_equal(gx, np.ones(3))


def test_gradient_names_in_the_ir() -> None:
    text = str([v.name for v in grad_function(specialise(TWO_RESULTS.replace(
        "(f64, f64[N])", "f64").replace("(sum(y), y)", "sum(y)")), [0, 1]).body.results])
    assert "x_bar" in text and "w_bar" in text


def test_wrt_must_be_a_float_parameter() -> None:
    with pytest.raises(ValueError, match="'k'.*not a float"):
        vjp_function(specialise(TWO_RESULTS), [2])
    with pytest.raises(ValueError, match="no parameter 7"):
        vjp_function(specialise(TWO_RESULTS), [7])


def test_grad_needs_one_scalar_result() -> None:
    with pytest.raises(ValueError, match="use vjp"):
        grad_function(specialise(TWO_RESULTS), [0])


@pytest.mark.usefixtures("uncached")
def test_missing_rule_is_a_compile_error_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(reverse_rules.VJP_RULES, "tanh")
    with pytest.raises(CompileError, match="cannot differentiate 'tanh'") as info:
        vjp_function(specialise(TWO_RESULTS), [0])
    assert info.value.diagnostics[0].line == 3


@pytest.mark.usefixtures("uncached")
def test_missing_rule_off_the_differentiable_path_is_fine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(reverse_rules.VJP_RULES, "tanh")
    fn = specialise("fn f(x: f64[N], c: f64[N]) -> f64 { return sum(x * tanh(c)); }")
    (gx,) = run(grad_function(fn, [0]), [np.ones(2), np.ones(2)], {"N": 2})[1:]
    np.testing.assert_allclose(gx, np.tanh(np.ones(2)))


def test_f32_programs_stay_f32() -> None:
    source = """fn f(x: float[N], w: float[N, N]) -> float {
        var h = x;
        for t in 0..3 { h = tanh(w @ h); }
        return sum(h * h); }"""
    args = [np.array([0.3, -0.2, 0.5]), 0.4 * np.eye(3) + 0.1]
    single = run(grad_function(specialise(source, dtype="f32"), [0, 1]),
                 [a.astype(np.float32) for a in args], {"N": 3})
    double = run(grad_function(specialise(source), [0, 1]), args, {"N": 3})
    for a, b in zip(single, double, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_input_function_is_left_unchanged() -> None:
    fn = specialise(TWO_RESULTS)
    before = [op.name for op in fn.body.walk()]
    vjp_function(fn, [0, 1], checkpoint=True)
    assert [op.name for op in fn.body.walk()] == before


def test_stop_gradient_blocks_the_derivative_and_keeps_the_value() -> None:
    """d/dx [x * stop_gradient(x)] = stop_gradient(x) = x, not 2x (like JAX / torch detach)."""
    fn = specialise("fn f(x: f64[N]) -> f64 { return sum(x * stop_gradient(x)); }")
    x = np.array([0.5, -2.0, 3.0])
    value, grad = run(grad_function(fn, [0]), [x], {"N": 3})
    np.testing.assert_allclose(value, np.sum(x * x))
    np.testing.assert_allclose(grad, x)
