"""Forward mode: `jvp_function` on whole programs, and the kernel transforms built on it
(`jvp`, `jacobian`, `hessian`, `hvp`) against torch.func.

JVPs are checked against central differences and, on every example program, against
reverse mode with the dot-product test ⟨u, J v⟩ = ⟨Jᵀ u, v⟩. Everything runs in float64
through the interpreter.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from forward_helpers import (
    EXAMPLE_SIZES,
    example_args,
    float_params,
    jvp_error,
    run,
)

import reverie as rv
from reverie import kernel_transforms as tf
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.transforms import forward_rules
from reverie.compiler.transforms.forward import jvp_function
from reverie.compiler.transforms.jacobian import jacobian_function
from reverie.compiler.transforms.reverse import vjp_function

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.rv"))

SOURCE = """
fn layer(A: f64[N, M], x: f64[M]) -> f64[N] { return tanh(A @ x); }
fn rosenbrock(x: f64[N]) -> f64 {
    return sum(100.0 * (x[1:] - x[:N - 1] ** 2) ** 2 + (1.0 - x[:N - 1]) ** 2);
}
fn mlp_loss(x: f64[B, D], y: f64[B], w1: f64[D, H], b1: f64[H], w2: f64[H]) -> f64 {
    return mean((tanh(x @ w1 + b1) @ w2 - y) ** 2);
}
fn pair(x: f64[N], w: f64[N]) -> (f64, f64[N]) { return (sum(sin(x) * w), x * w); }
fn counts(x: f64[N]) -> (f64[N], i64) { return (exp(x), argmax(x)); }
"""


@functools.cache
def module() -> rv.Module:
    return rv.compile(SOURCE, backend="interp")


def t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


def torch_layer(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(A @ x)


def torch_rosenbrock(x: torch.Tensor) -> torch.Tensor:
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def torch_mlp_loss(x, y, w1, b1, w2):  # noqa: ANN001, ANN201 - torch tensors
    return ((torch.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()


RNG = np.random.default_rng(3)
A, X = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
ROSEN = RNG.uniform(-1.5, 1.5, 5)
MLP = [RNG.standard_normal(s) for s in [(6, 3), (6,), (3, 4), (4,), (4,)]]


# ---------------------------------------------------------------- the IR pass


def test_jvp_function_signature_and_names() -> None:
    fn = module().lowering.specialise("pair", "f64")
    jvp = jvp_function(fn, [0])
    assert jvp.name == "pair_jvp"
    assert jvp.param_names == ["x", "w", "x_dot"]
    assert [p.type for p in jvp.params] == [p.type for p in fn.params] + [fn.params[0].type]
    assert jvp.result_types == fn.result_types * 2
    assert format_function(jvp) == format_function(jvp_function(fn, [0]))


def test_integer_results_get_zero_tangents() -> None:
    fn = module().lowering.specialise("counts", "f64")
    x, v = RNG.standard_normal(4), RNG.standard_normal(4)
    value, index, dvalue, dindex = run(jvp_function(fn, [0]), [x, v], {"N": 4})
    np.testing.assert_allclose(dvalue, np.exp(x) * v)
    assert dindex.dtype == np.int64 and dindex == 0 and index == np.argmax(x)


def test_results_independent_of_wrt_get_zero_tangents() -> None:
    fn = module().lowering.specialise("pair", "f64")
    _, _, dsum, dprod = run(jvp_function(fn, [1]), [X, X, np.zeros(3)], {"N": 3})
    assert dsum == 0 and np.all(dprod == 0)


def test_only_float_parameters_can_be_differentiated() -> None:
    fn = rv.compile("fn f(x: f64[N], k: i64) -> f64 { return sum(x) * f64(k); }",
                    backend="interp").lowering.specialise("f", "f64")
    with pytest.raises(ValueError, match="'k'"):
        jvp_function(fn, [1])


@pytest.mark.usefixtures("uncached")
def test_a_missing_rule_is_a_compile_error_naming_the_op(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delitem(forward_rules.JVP_RULES, "tanh")
    fn = module().lowering.specialise("layer", "f64")
    with pytest.raises(rv.CompileError, match="'tanh'"):
        jvp_function(fn, [1])


def test_second_order_forward_mode_matches_differences_of_the_first() -> None:
    fn = module().lowering.specialise("rosenbrock", "f64")
    first = jvp_function(fn, [0])
    v = RNG.standard_normal(5)
    for tangent, central in jvp_error(first, [ROSEN, v], {"N": 5}):
        np.testing.assert_allclose(tangent, central, rtol=1e-6, atol=1e-6)


def _example_functions() -> list[tuple[str, str]]:
    found = []
    for path in EXAMPLES:
        for fn in rv.load(path, backend="interp").lowering.module.functions:
            found.append((path.name, fn.name))
    return found


@functools.cache
def _example(path: str, name: str):  # noqa: ANN202 - a Function
    module = rv.load(Path(EXAMPLES[0].parent, path), backend="interp")
    return module.lowering.specialise(name, "f64")


@pytest.mark.parametrize(("path", "name"), [(p, n) for p, n in _example_functions()
                                            if float_params(_example(p, n))])
def test_examples_forward_and_reverse_agree(path: str, name: str) -> None:
    """⟨u, J v⟩ from the JVP equals ⟨Jᵀ u, v⟩ from the VJP, for random u and v (every
    example function with a float parameter)."""
    fn = _example(path, name)
    wrt = float_params(fn)
    args = example_args(fn, seed=0)
    rng = np.random.default_rng(1)
    outputs = run(fn, args, EXAMPLE_SIZES)
    vs = [rng.standard_normal(np.shape(args[i])).astype(args[i].dtype) for i in wrt]
    us = [rng.standard_normal(o.shape).astype(o.dtype) if o.dtype.kind == "f"
          else np.zeros_like(o) for o in outputs]
    tangents = run(jvp_function(fn, wrt), args + vs, EXAMPLE_SIZES)[len(outputs):]
    grads = run(vjp_function(fn, wrt), args + us, EXAMPLE_SIZES)[len(outputs):]
    forward = sum(float(np.sum(u * d)) for u, d, o in zip(us, tangents, outputs, strict=True)
                  if o.dtype.kind == "f")
    backward = sum(float(np.sum(g * v)) for g, v in zip(grads, vs, strict=True))
    single = any(a.dtype == np.float32 for a in args)
    assert forward == pytest.approx(backward, rel=1e-4 if single else 1e-10, abs=1e-6)


# ---------------------------------------------------------------- kernel transforms


def test_jvp_kernel_gives_value_and_tangent() -> None:
    v = RNG.standard_normal(3)
    value, tangent = tf.jvp(module().layer, "x")(A, X, v)
    want_value, want_tangent = torch.func.jvp(lambda x: torch_layer(t(A), x), (t(X),), (t(v),))
    np.testing.assert_allclose(value, want_value.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent.numpy(), rtol=1e-12)


def test_jvp_kernel_takes_a_tuple_of_tangents_for_several_parameters() -> None:
    da, dx = RNG.standard_normal(A.shape), RNG.standard_normal(3)
    value, tangent = tf.jvp(module().layer, ("A", "x"))(A, X, (da, dx))
    _, want = torch.func.jvp(torch_layer, (t(A), t(X)), (t(da), t(dx)))
    np.testing.assert_allclose(tangent, want.numpy(), rtol=1e-12)
    with pytest.raises(TypeError, match="tuple"):
        tf.jvp(module().layer, ("A", "x"))(A, X, da)


def test_default_wrt_takes_and_gives_tuples_like_grad() -> None:
    v = RNG.standard_normal(5)
    value, tangent = tf.jvp(module().rosenbrock)(ROSEN, (v,))
    _, want = tf.jvp(module().rosenbrock, "x")(ROSEN, v)
    assert tangent == want
    (product,) = tf.hvp(module().rosenbrock)(ROSEN, (v,))
    np.testing.assert_array_equal(product, tf.hvp(module().rosenbrock, "x")(ROSEN, v))


def test_jvp_kernel_of_a_tuple_return_gives_tuples() -> None:
    w, dx = RNG.standard_normal(3), RNG.standard_normal(3)
    (total, product), (dtotal, dproduct) = tf.jvp(module().pair, "x")(X, w, dx)
    assert total == pytest.approx(np.sum(np.sin(X) * w))
    assert dtotal == pytest.approx(np.sum(np.cos(X) * dx * w))
    np.testing.assert_allclose(dproduct, dx * w)


def test_jacobian_matches_torch_for_both_parameters() -> None:
    jac_a, jac_x = tf.jacobian(module().layer, ("A", "x"))(A, X)
    want_a, want_x = torch.func.jacrev(torch_layer, argnums=(0, 1))(t(A), t(X))
    assert jac_a.shape == (4, 4, 3) and jac_x.shape == (4, 3)
    np.testing.assert_allclose(jac_a, want_a.numpy(), atol=1e-13)
    np.testing.assert_allclose(jac_x, want_x.numpy(), atol=1e-13)


def test_jacobian_of_a_tuple_return_is_nested_like_torch() -> None:
    w = RNG.standard_normal(3)
    blocks = tf.jacobian(module().pair)(X, w)
    want = torch.func.jacrev(lambda x, w: ((torch.sin(x) * w).sum(), x * w),
                             argnums=(0, 1))(t(X), t(w))
    for got_row, want_row in zip(blocks, want, strict=True):
        for got, expected in zip(got_row, want_row, strict=True):
            np.testing.assert_allclose(got, expected.numpy(), atol=1e-13)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_both_jacobian_constructions_agree(mode: str) -> None:
    fn = module().lowering.specialise("mlp_loss", "f64")
    blocks = run(jacobian_function(fn, [2, 3, 4], mode), MLP, {"B": 6, "D": 3, "H": 4})
    want = torch.func.jacrev(torch_mlp_loss, argnums=(2, 3, 4))(*map(t, MLP))
    for got, expected in zip(blocks, want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-13)


def test_jacobian_picks_the_mode_with_the_smaller_batch(monkeypatch) -> None:  # noqa: ANN001
    cases = [(tf.jacobian(module().rosenbrock, "x"), [ROSEN], "reverse"),  # 1 out, 5 in
             (tf.jacobian(module().layer, "x"), [A[:, :1], X[:1]], "forward")]  # 4 out, 1 in
    for kernel, args, mode in cases:
        ran = []
        execute = kernel.execute
        monkeypatch.setattr(kernel, "execute",
                            lambda fn, a, e=execute, ran=ran: ran.append(fn) or e(fn, a))
        kernel(*args)
        assert ran == [kernel.reverse_ir_for("f64") if mode == "reverse"
                       else kernel.ir_for("f64")]


def test_full_jacobian_of_a_256_layer_is_one_batched_call(monkeypatch) -> None:  # noqa: ANN001
    """W6: J = diag(1 − y²) A for y = tanh(A x), A 256×256, from a single interpreter run."""
    from reverie.runtime.native import compiler_gate

    rng = np.random.default_rng(0)
    a, x = rng.standard_normal((256, 256)) / 16, rng.standard_normal(256)
    calls = []
    interpret = compiler_gate.interpret
    monkeypatch.setattr(compiler_gate, "interpret",
                        lambda fn, *rest: calls.append(fn.name) or interpret(fn, *rest))
    jac = tf.jacobian(module().layer, "x")(a, x)
    assert calls == ["layer_jacobian"]
    y = np.tanh(a @ x)
    np.testing.assert_allclose(jac, (1 - y ** 2)[:, None] * a, atol=1e-13)


def test_hessian_and_hvp_of_rosenbrock_match_torch() -> None:
    want = torch.func.hessian(torch_rosenbrock)(t(ROSEN)).numpy()
    np.testing.assert_allclose(tf.hessian(module().rosenbrock, "x")(ROSEN), want, rtol=1e-12)
    v = RNG.standard_normal(5)
    np.testing.assert_allclose(tf.hvp(module().rosenbrock, "x")(ROSEN, v), want @ v,
                               rtol=1e-10)


def test_hessian_and_hvp_of_an_mlp_loss_with_several_parameters() -> None:
    wrt = ("w1", "b1", "w2")
    blocks = tf.hessian(module().mlp_loss, wrt)(*MLP)
    want = torch.func.hessian(torch_mlp_loss, argnums=(2, 3, 4))(*map(t, MLP))
    for got_row, want_row in zip(blocks, want, strict=True):
        for got, expected in zip(got_row, want_row, strict=True):
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-9, atol=1e-12)
    vs = tuple(RNG.standard_normal(np.shape(a)) for a in MLP[2:])
    products = tf.hvp(module().mlp_loss, wrt)(*MLP, vs)
    _, want_products = torch.func.jvp(
        lambda *ps: torch.func.grad(torch_mlp_loss, argnums=(2, 3, 4))(*map(t, MLP[:2]), *ps),
        tuple(map(t, MLP[2:])), tuple(map(t, vs)))
    for got, expected in zip(products, want_products, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-9, atol=1e-12)


def test_transforms_compose_jacobian_of_jacobian() -> None:
    second = tf.jacobian(tf.jacobian(module().layer, "x"), "x")(A, X)
    want = torch.func.jacfwd(torch.func.jacrev(lambda x: torch_layer(t(A), x)))(t(X))
    assert second.shape == (4, 3, 3)
    np.testing.assert_allclose(second, want.numpy(), atol=1e-12)


def test_hvp_equals_the_jvp_of_the_gradient() -> None:
    v = RNG.standard_normal(5)
    _, direct = tf.jvp(module().rosenbrock.grad("x"), "x")(ROSEN, v)
    np.testing.assert_allclose(tf.hvp(module().rosenbrock, "x")(ROSEN, v), direct,
                               rtol=1e-12)


def test_hessian_needs_a_scalar_function() -> None:
    with pytest.raises(ValueError, match="scalar"):
        tf.hessian(module().layer, "x")
