"""`rv.jax.function` under each JAX transformation (jvp, jacfwd, jacrev, hessian, grad of
grad, linear_transpose, vmap, jit), checked against the same maths in jax.numpy, and the
XLA custom call it lowers to (its bounds errors included)."""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

jax = pytest.importorskip("jax")
jnp = jax.numpy

SOURCE = """
fn loss(x: float[B, D], w: float[D, H], b: float[H], y: float[B, H]) -> float {
    return mean((tanh(x @ w + b) - y) ** 2);
}
fn wave(x: float[N], y: float[N]) -> float[N] { return sin(x) * y + x * x * x; }
fn stats(x: float[N], k: i64[N]) -> (float, float[N], i64[N]) {
    return (sum(x * x), sin(x) * 2.0, k + 1);
}
fn pick(x: float[N], i: i32[K]) -> float[K] { let y[k] = x[i[k]]; return y; }
fn evens(x: float[2 * K]) -> float[K] { let z[k in 0..K] = x[2 * k] ** 2; return z; }
fn decay(x: float[N], steps: i32) -> float[N] {
    var u = x;
    for t in 0..steps { u = u * 0.5 + sin(u); }
    return u;
}
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


@pytest.fixture(autouse=True)
def enable_x64() -> object:
    with jax.enable_x64(True):
        yield


def reference_loss(x: jax.Array, w: jax.Array, b: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ w + b) - y) ** 2)


def reference_wave(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.sin(x) * y + x * x * x


def reference_decay(x: jax.Array, steps: int) -> jax.Array:
    for _ in range(steps):
        x = x * 0.5 + jnp.sin(x)
    return x


def random(*shape: int, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed + sum(shape)).standard_normal(shape))


def loss_args() -> tuple[jax.Array, ...]:
    return random(5, 3), random(3, 4, seed=1), random(4, seed=2), random(5, 4, seed=3)


def close(ours: object, theirs: object, tol: float = 1e-10) -> None:
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_jvp(m: rv.Module) -> None:
    wave = rv.jax.function(m.wave)
    x, y, dx, dy = random(6), random(6, seed=1), random(6, seed=2), random(6, seed=3)
    for f in (wave, jax.jit(wave)):
        close(jax.jvp(f, (x, y), (dx, dy)), jax.jvp(reference_wave, (x, y), (dx, dy)))
        close(jax.jvp(lambda x, f=f: f(x, y), (x,), (dx,)),
              jax.jvp(lambda x: reference_wave(x, y), (x,), (dx,)))


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev"])
def test_jacobians(m: rv.Module, mode: str) -> None:
    jacobian = getattr(jax, mode)
    wave, loss = rv.jax.function(m.wave), rv.jax.function(m.loss)
    x, y = random(5), random(5, seed=1)
    close(jax.jit(jacobian(wave, argnums=(0, 1)))(x, y),
          jacobian(reference_wave, argnums=(0, 1))(x, y))
    close(jacobian(loss, argnums=(1, 2))(*loss_args()),
          jacobian(reference_loss, argnums=(1, 2))(*loss_args()))


def test_hessian_and_mixed_orders(m: rv.Module) -> None:
    loss = rv.jax.function(m.loss)
    args = loss_args()
    close(jax.jit(jax.hessian(loss, argnums=1))(*args),
          jax.hessian(reference_loss, argnums=1)(*args))
    for outer, inner in [(jax.jacfwd, jax.jacfwd), (jax.jacrev, jax.jacrev),
                         (jax.jacrev, jax.jacfwd)]:
        close(outer(inner(loss, argnums=2), argnums=2)(*args),
              outer(inner(reference_loss, argnums=2), argnums=2)(*args))


def test_grad_of_grad_of_grad(m: rv.Module) -> None:
    wave = rv.jax.function(m.wave)
    y = random(1, seed=4)

    def scalar(f: object) -> object:
        return lambda t: f(t * jnp.ones(1), y)[0]

    ours, theirs = scalar(wave), scalar(reference_wave)
    for _ in range(3):
        ours, theirs = jax.grad(ours), jax.grad(theirs)
        close(jax.jit(ours)(0.7), theirs(0.7))


def test_linearize_and_transpose(m: rv.Module) -> None:
    wave = rv.jax.function(m.wave)
    x, y, t = random(4), random(4, seed=1), random(4, seed=2)
    value, linear = jax.linearize(lambda x: wave(x, y), x)
    close(value, reference_wave(x, y))
    close(linear(t), jax.jvp(lambda x: reference_wave(x, y), (x,), (t,))[1])
    transposed = jax.linear_transpose(linear, x)
    close(transposed(t), jax.vjp(lambda x: reference_wave(x, y), x)[1](t))


def test_integer_results_get_zero_tangents(m: rv.Module) -> None:
    stats = rv.jax.function(m.stats)
    x, k, dx = random(4), jnp.arange(4), random(4, seed=1)
    (total, waves, counts), (d_total, d_waves, d_counts) = jax.jvp(
        lambda x: stats(x, k), (x,), (dx,))
    np.testing.assert_array_equal(counts, k + 1)
    assert d_counts.dtype == jax.dtypes.float0
    close((d_total, d_waves), (jnp.sum(2 * x * dx), 2 * jnp.cos(x) * dx))


def test_vmap_runs_a_batched_kernel(m: rv.Module) -> None:
    wave, loss = rv.jax.function(m.wave), rv.jax.function(m.loss)
    xs, y = random(3, 5), random(5, seed=1)
    batched = jax.vmap(wave, in_axes=(0, None))
    close(jax.jit(batched)(xs, y), jax.vmap(reference_wave, in_axes=(0, None))(xs, y))
    assert "wave_batched" in str(jax.make_jaxpr(batched)(xs, y))
    close(jax.vmap(wave, in_axes=(1, 0), out_axes=1)(xs, xs.T),
          jax.vmap(reference_wave, in_axes=(1, 0), out_axes=1)(xs, xs.T))
    ws = random(2, 3, 4, seed=5)
    per_w = jax.vmap(jax.grad(loss, argnums=1), in_axes=(None, 0, None, None))
    args = loss_args()
    close(jax.jit(per_w)(args[0], ws, *args[2:]),
          jax.vmap(jax.grad(reference_loss, argnums=1), in_axes=(None, 0, None, None))(
              args[0], ws, *args[2:]))


def test_vmap_over_a_loop_count(m: rv.Module) -> None:
    decay = rv.jax.function(m.decay)
    x, steps = random(4), jnp.array([0, 1, 3], dtype=jnp.int32)
    batched = jax.vmap(decay, in_axes=(None, 0))
    assert str(jax.make_jaxpr(batched)(x, steps)).count("reverie_call") == 1
    out = jax.jit(batched)(x, steps)
    close(out, jnp.stack([reference_decay(x, int(s)) for s in steps]))
    grads = jax.vmap(jax.grad(lambda x, s: decay(x, s).sum()), in_axes=(None, 0))(x, steps)
    expected = jnp.stack([jax.grad(lambda x, s=int(s): reference_decay(x, s).sum())(x)
                          for s in steps])
    close(grads, expected)


@pytest.mark.parametrize("x64", [False, True])
def test_jit_lowers_to_an_ffi_custom_call(m: rv.Module, x64: bool) -> None:
    with jax.enable_x64(x64):
        dtype = np.float64 if x64 else np.float32
        loss = rv.jax.function(m.loss)
        args = tuple(a.astype(dtype) for a in loss_args())
        text = jax.jit(jax.value_and_grad(loss, argnums=1)).lower(*args).as_text()
        assert text.count("stablehlo.custom_call @reverie.") == 2  # the call and its VJP
        assert "callback" not in text
        close(jax.jit(loss)(*args), reference_loss(*args), 1e-5)


def test_64_bit_kernels_without_x64_narrow_inside_the_custom_call(m: rv.Module) -> None:
    with jax.enable_x64(False):
        stats = jax.jit(rv.jax.function(m.stats))
        x, k = jnp.linspace(-1.0, 2.0, 4, dtype=jnp.float32), jnp.arange(4, dtype=jnp.int32)
        assert "callback" not in stats.lower(x, k).as_text()
        total, waves, counts = stats(x, k)
        assert counts.dtype == np.int32 and waves.dtype == np.float32
        np.testing.assert_array_equal(counts, k + 1)
        np.testing.assert_allclose(waves, 2 * np.sin(np.asarray(x)), rtol=1e-6)
        np.testing.assert_allclose(total, np.sum(np.asarray(x) ** 2), rtol=1e-6)
        decay = jax.jit(rv.jax.function(rv.compile(SOURCE.replace("steps: i32", "steps: i64")
                                                   ).decay))
        np.testing.assert_allclose(decay(x, jnp.int32(3)), reference_decay(x, 3), rtol=1e-6)


def test_a_kernel_without_a_native_boundary_runs_through_a_callback(m: rv.Module) -> None:
    evens = rv.jax.function(m.evens)  # K is bound only by solving 2 * K = 6
    x = random(6)
    assert "callback" in jax.jit(evens).lower(x).as_text()
    close(jax.jit(evens)(x), x[::2] ** 2)
    close(jax.grad(lambda x: evens(x).sum())(x), jnp.zeros(6).at[::2].set(2 * x[::2]))


def test_out_of_range_subscripts_raise_an_ffi_error(m: rv.Module) -> None:
    pick = jax.jit(rv.jax.function(m.pick))
    x = jnp.arange(4.0)
    np.testing.assert_array_equal(pick(x, jnp.array([3, 0], jnp.int32)), [3.0, 0.0])
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError),  # by XLA's error code
                       match="OUT_OF_RANGE: "
                             "index 7 is out of bounds for axis 0 of 'x' with size 4"):
        pick(x, jnp.array([1, 7], jnp.int32)).block_until_ready()
