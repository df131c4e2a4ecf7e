"""`rv.jax.function` (docs/api.md §6–7): compiled kernels as JAX functions (values, grad, vmap,
errors); the transformations one by one are in test_interop_jax_transforms.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import reverie as rv

jax = pytest.importorskip("jax")
jnp = jax.numpy

SOURCE = """
fn loss(x: float[B, D], w: float[D, H], b: float[H], y: float[B, H]) -> float {
    return mean((tanh(x @ w + b) - y) ** 2);
}
fn xent(logits: float[N, C], labels: i64[N]) -> (float, i64[N]) {
    let lp = log_softmax(logits, axis=1);
    let picked[n] = lp[n, labels[n]];
    return (-mean(picked), argmax(logits, axis=1));
}
fn stats(x: float[N], k: i64[N]) -> (float, float[N], i64[N]) {
    return (sum(x * x), sin(x) * 2.0, k + 1);
}
fn head(x: f64[N], T: i64) -> f64[T] { let y[i in 0..T] = sin(x[i]); return y; }
fn decay(x: float[N], steps: i64) -> float[N] {
    var u = x;
    for t in 0..steps { u = u * 0.5; }
    return u;
}
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def reference_loss(x: jax.Array, w: jax.Array, b: jax.Array, y: jax.Array) -> jax.Array:
    """`loss` written in jax.numpy."""
    return jnp.mean((jnp.tanh(x @ w + b) - y) ** 2)


def arrays(dtype: type) -> tuple[jax.Array, ...]:
    """Random (x, w, b, y) for `loss`."""
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (3, 4), (4,), (5, 4)]
    return tuple(jnp.asarray(rng.standard_normal(s).astype(dtype)) for s in shapes)


@pytest.mark.parametrize("x64", [False, True])
def test_value_and_grad_under_jit_match_jax(m: rv.Module, x64: bool) -> None:
    with jax.enable_x64(x64):
        dtype, tol = (np.float64, 1e-10) if x64 else (np.float32, 1e-5)
        args = arrays(dtype)
        loss = rv.jax.function(m.loss)
        value = jax.jit(loss)(*args)
        assert value.dtype == dtype and value.shape == ()
        assert abs(value - reference_loss(*args)) < tol
        grads = jax.jit(jax.grad(loss, argnums=(1, 2)))(*args)
        expected = jax.grad(reference_loss, argnums=(1, 2))(*args)
        for ours, theirs in zip(grads, expected, strict=True):
            assert ours.dtype == dtype
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=tol)


def test_grad_of_grad_runs_the_vjp_of_the_vjp(m: rv.Module) -> None:
    with jax.enable_x64(True):
        args = arrays(np.float64)
        loss = rv.jax.function(m.loss)

        def squared_grad_norm(f: object) -> object:
            return lambda w: jnp.sum(jax.grad(f, argnums=1)(args[0], w, *args[2:]) ** 2)

        ours = jax.jit(jax.grad(squared_grad_norm(loss)))(args[1])
        theirs = jax.grad(squared_grad_norm(reference_loss))(args[1])
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("x64", [False, True])
def test_integer_labels_and_tuple_results(m: rv.Module, x64: bool) -> None:
    with jax.enable_x64(x64):
        rng = np.random.default_rng(1)
        logits = jnp.asarray(rng.standard_normal((6, 4)))
        labels = jnp.asarray([0, 3, 1, 1, 2, 0])
        xent = rv.jax.function(m.xent)
        value, predicted = jax.jit(xent)(logits, labels)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
        assert abs(value + jnp.mean(picked)) < 1e-6
        assert predicted.dtype == (np.int64 if x64 else np.int32)
        np.testing.assert_array_equal(predicted, jnp.argmax(logits, axis=1))

        def reference(z: jax.Array) -> jax.Array:
            lp = jax.nn.log_softmax(z)
            return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))

        ours = jax.jit(jax.grad(lambda z: xent(z, labels)[0]))(logits)
        np.testing.assert_allclose(ours, jax.grad(reference)(logits), rtol=0, atol=1e-6)


def test_vmap_and_python_numbers(m: rv.Module) -> None:
    decay = rv.jax.function(m.decay)
    batch = jnp.arange(6.0).reshape(2, 3)
    out = jax.vmap(decay, in_axes=(0, None))(batch, 2)
    np.testing.assert_allclose(out, batch / 4)
    steps = jnp.asarray(3)
    grad = jax.jit(jax.grad(lambda x: decay(x, steps).sum()))(batch[0])
    np.testing.assert_allclose(grad, jnp.full(3, 1 / 8))


def test_value_dimensions_sizing_results_must_be_static(m: rv.Module) -> None:
    with jax.enable_x64(True):
        head = rv.jax.function(m.head)
        x = jnp.arange(5.0)
        np.testing.assert_allclose(jax.jit(head, static_argnums=1)(x, 3), jnp.sin(x[:3]))
        with pytest.raises(ValueError, match="static_argnums"):
            jax.jit(head)(x, 3)


def test_errors(m: rv.Module) -> None:
    with pytest.raises(TypeError, match="compiled kernel"):
        rv.jax.function(jnp.sin)
    loss = rv.jax.function(m.loss)
    x, w, b, y = arrays(np.float32)
    with pytest.raises(rv.ShapeMismatchError):
        jax.jit(loss)(x, w.T, b, y)
    with pytest.raises(rv.ArgumentTypeError):
        rv.jax.function(m.xent)(x, jnp.ones(5))


def test_transformed_kernels(m: rv.Module) -> None:
    with jax.enable_x64(True):
        x, k = jnp.linspace(-1.0, 2.0, 4), jnp.arange(4)
        stats_vjp = rv.jax.function(m.stats.vjp("x"))
        cotangent = (1.0, jnp.ones(4), jnp.zeros(4, dtype=jnp.int64))
        np.testing.assert_allclose(stats_vjp(x, k, cotangent), 2 * x + 2 * jnp.cos(x))
        grad = jax.grad(lambda x: stats_vjp(x, k, cotangent).sum())(x)
        np.testing.assert_allclose(grad, 2 - 2 * jnp.sin(x))
        jacobian = jax.jacrev(lambda x: rv.jax.function(m.stats)(x, k)[1])(x)
        np.testing.assert_allclose(jacobian, jnp.diag(2 * jnp.cos(x)), atol=1e-12)
        forward = jax.jacfwd(lambda x: rv.jax.function(m.stats)(x, k)[1])(x)
        np.testing.assert_allclose(forward, jnp.diag(2 * jnp.cos(x)), atol=1e-12)


def test_import_reverie_does_not_import_jax() -> None:
    code = ("import sys, reverie\n"
            "assert 'jax' not in sys.modules\n"
            "reverie.jax.function\n"
            "assert 'jax' in sys.modules and 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
