"""bf16/f16 through the interop layers (issue 37 item 4): `rv.torch.function`,
`rv.jax.function` and `rv.Tensor` take and return bfloat16/float16 and give gradients in
each primal's dtype. A kernel computes in f32 and rounds where values are stored
(docs/language.md §3.4), so it is checked against torch/JAX computing the same ops in that
dtype (rounding after every op) within a few 16-bit roundoffs of the values' scale, and
against f64 central differences; rv.Tensor, one kernel per op, rounds after every op as
torch does, and its gradients are torch's bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.torch_op import to_numpy

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy
ml_dtypes = pytest.importorskip("ml_dtypes")

SOURCE = """
fn wave(x: float[N], w: float[N]) -> float { return sum(sin(x * w) * 2.0 + x); }
fn layer(x: float[B, D], w: float[D, H]) -> float[B, H] { return tanh(x @ w); }
fn mixed(x: bf16[N], s: f32[N]) -> f32 { return sum(f32(x) * s); }
fn halves(x: f16[N]) -> f16[N] { return x * x + 1.0; }
"""
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
NUMPY_DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16)}
EPS = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}  # unit roundoff


@pytest.fixture(scope="module", params=["native", "interp"])
def m(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def central_difference(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """∂f/∂x of a scalar function of an f64 array, by central differences."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = h
        grad[i] = (f(x + step) - f(x - step)) / (2 * h)
    return grad


def as_f64(value) -> np.ndarray:
    """A torch/JAX/Reverie tensor or array's values in f64."""
    if isinstance(value, torch.Tensor):
        return value.detach().double().numpy()
    if isinstance(value, rv.Tensor):
        value = value.detach()
    return np.asarray(value).astype(np.float64)


def close(got, want, dtype: str, ulps: float, scale: float | None = None) -> None:
    """`got` within `ulps` roundoffs of `dtype` of `want`, relative to `scale` (by default
    the largest |want|)."""
    got, want = as_f64(got), as_f64(want)
    scale = float(np.abs(want).max()) if scale is None else scale
    np.testing.assert_allclose(got, want, rtol=0, atol=ulps * EPS[dtype] * max(scale, 1e-3))


# ---------------------------------------------------------------- rv.torch.function

@pytest.mark.parametrize("low", TORCH_DTYPES)
def test_torch_float_kernel_in_bf16_f16_matches_torch_with_gradients(m: rv.Module,
                                                                      low: str) -> None:
    dtype = TORCH_DTYPES[low]
    wave = rv.torch.function(m.wave)
    x = torch.tensor(normal(16), dtype=dtype, requires_grad=True)
    w = torch.tensor(normal(16, seed=1), dtype=dtype, requires_grad=True)
    value = wave(x, w)
    assert value.dtype == dtype
    gx, gw = torch.autograd.grad(value, [x, w])
    assert gx.dtype == gw.dtype == dtype
    want = (torch.sin(x * w) * 2.0 + x).sum()
    want_gx, want_gw = torch.autograd.grad(want, [x, w])
    close(value.detach(), want.detach(), low, 4)  # sums in another order
    close(gx, want_gx, low, 4)  # torch rounds after every op
    close(gw, want_gw, low, 4)
    xs, ws = x.detach().double().numpy(), w.detach().double().numpy()
    exact = central_difference(lambda a: np.sum(np.sin(a * ws) * 2 + a), xs)
    close(gx, exact, low, 4)


@pytest.mark.parametrize("low", TORCH_DTYPES)
def test_torch_matrix_product_accumulates_in_f32_and_rounds_once(m: rv.Module,
                                                                  low: str) -> None:
    dtype = TORCH_DTYPES[low]
    layer = rv.torch.function(m.layer)
    x = torch.tensor(normal(4, 32), dtype=dtype, requires_grad=True)
    w = torch.tensor(normal(32, 3, seed=1) / 4, dtype=dtype, requires_grad=True)
    out = layer(x, w)
    rounded = torch.tanh((x.double() @ w.double()).to(dtype).float()).to(dtype)
    assert out.dtype == dtype
    close(out.detach(), rounded.detach(), low, 2)
    (gw,) = torch.autograd.grad(out.float().sum(), w)
    (want,) = torch.autograd.grad(torch.tanh(x @ w).float().sum(), w)
    assert gw.dtype == dtype
    close(gw, want, low, 8)


def test_torch_bf16_tensors_reach_the_kernel_without_a_copy_and_f32_gradients_come_back(
        m: rv.Module) -> None:
    x = torch.tensor(normal(8, 2), dtype=torch.bfloat16).T  # not contiguous
    array = to_numpy(x)
    assert array.dtype == NUMPY_DTYPES["bf16"]
    assert array.__array_interface__["data"][0] == x.data_ptr()
    np.testing.assert_array_equal(array.astype(np.float32), x.float().numpy())
    mixed = rv.torch.function(m.mixed)
    xs = torch.tensor(normal(5), dtype=torch.bfloat16, requires_grad=True)
    s = torch.tensor(normal(5, seed=1), dtype=torch.float32, requires_grad=True)
    total = mixed(xs, s)
    assert total.dtype == torch.float32
    gx, gs = torch.autograd.grad(total, [xs, s])
    assert (gx.dtype, gs.dtype) == (torch.bfloat16, torch.float32)
    torch.testing.assert_close(gx, s.detach().bfloat16())
    torch.testing.assert_close(gs, xs.detach().float())
    halves = rv.torch.function(m.halves)
    f32 = torch.tensor(normal(4), dtype=torch.float32, requires_grad=True)
    out = halves(f32)  # an f32 tensor for an f16 parameter: converted, as NumPy would
    assert out.dtype == torch.float16
    (g,) = torch.autograd.grad(out.float().sum(), f32)
    assert g.dtype == torch.float32  # in the primal's dtype
    close(g, 2 * f32.detach().half().float(), "f16", 2)


def test_torch_second_order_through_bf16(m: rv.Module) -> None:
    wave = rv.torch.function(m.wave)
    x = torch.tensor(normal(6), dtype=torch.bfloat16, requires_grad=True)
    w = torch.tensor(normal(6, seed=1), dtype=torch.bfloat16)
    (gx,) = torch.autograd.grad(wave(x, w), x, create_graph=True)
    (hv,) = torch.autograd.grad(gx.float().sum(), x)
    assert hv.dtype == torch.bfloat16
    xs, ws = x.detach().double(), w.double()
    close(hv, (-2 * torch.sin(xs * ws) * ws * ws).numpy(), "bf16", 8, scale=4.0)


def test_torch_bf16_through_vmap_func_grad_and_torch_compile(m: rv.Module) -> None:
    layer = rv.torch.function(m.layer)
    xs = torch.tensor(normal(3, 4, 8), dtype=torch.bfloat16)
    w = torch.tensor(normal(8, 2, seed=1) / 3, dtype=torch.bfloat16)
    batched = torch.vmap(layer, in_dims=(0, None))(xs, w)
    assert batched.dtype == torch.bfloat16
    close(batched, torch.tanh(xs @ w), "bf16", 2)
    gw = torch.func.grad(lambda b: layer(xs[0], b).float().sum())(w)
    want = torch.func.grad(lambda b: torch.tanh(xs[0] @ b).float().sum())(w)
    assert gw.dtype == torch.bfloat16
    close(gw, want, "bf16", 8)
    compiled = torch.compile(lambda a, b: layer(a, b).float().sum(), fullgraph=True)
    close(compiled(xs[0], w), layer(xs[0], w).float().sum(), "bf16", 1)


def test_torch_float_parameters_of_two_precisions_are_refused(m: rv.Module) -> None:
    wave = rv.torch.function(m.wave)
    with pytest.raises(rv.ArgumentTypeError, match="bfloat16 .* and float32"):
        wave(torch.ones(3, dtype=torch.bfloat16), torch.ones(3))


# ---------------------------------------------------------------- rv.jax.function

@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("low", NUMPY_DTYPES)
def test_jax_bf16_f16_in_and_out_with_gradients(m: rv.Module, low: str, jit: bool) -> None:
    dtype = NUMPY_DTYPES[low]
    wave = rv.jax.function(m.wave)
    x = jnp.asarray(normal(16), dtype=dtype)
    w = jnp.asarray(normal(16, seed=1), dtype=dtype)
    grad = jax.grad(wave, argnums=(0, 1))
    value, (gx, gw) = (jax.jit(wave) if jit else wave)(x, w), \
        (jax.jit(grad) if jit else grad)(x, w)
    assert value.dtype == gx.dtype == gw.dtype == dtype

    def reference(a, b):
        return jnp.sum(jnp.sin(a * b) * 2.0 + a)

    want_gx, want_gw = jax.grad(reference, argnums=(0, 1))(x, w)
    close(value, reference(x, w), low, 4)
    close(gx, want_gx, low, 4)  # JAX rounds after every op
    close(gw, want_gw, low, 4)


def test_jax_layer_in_bf16_under_vmap_and_declared_storage_parameters(m: rv.Module) -> None:
    layer = rv.jax.function(m.layer)
    xs = jnp.asarray(normal(3, 2, 8), dtype=jnp.bfloat16)
    w = jnp.asarray(normal(8, 4, seed=1) / 3, dtype=jnp.bfloat16)
    batched = jax.vmap(layer, in_axes=(0, None))(xs, w)
    assert batched.dtype == jnp.bfloat16
    close(batched, jnp.tanh(xs @ w), "bf16", 2)
    halves = rv.jax.function(m.halves)
    x = jnp.asarray(normal(5), dtype=jnp.float16)
    assert halves(x).dtype == jnp.float16
    g = jax.grad(lambda a: halves(a).astype(jnp.float32).sum())(x)
    assert g.dtype == jnp.float16
    close(g, 2 * np.asarray(x, np.float64), "f16", 2)


# ---------------------------------------------------------------- rv.Tensor

@pytest.mark.parametrize("low", NUMPY_DTYPES)
def test_tensor_ops_in_bf16_f16_round_as_torch_and_grad_in_the_dtype(low: str) -> None:
    dtype = NUMPY_DTYPES[low]
    xa, wa = normal(5).astype(dtype), normal(5, seed=1).astype(dtype)
    x, w = rv.tensor(xa, requires_grad=True), rv.tensor(wa, requires_grad=True)
    y = ((x * w).sin() * 2.0 + x).sum()
    assert y.dtype == dtype
    gx, gw = rv.grad(y, [x, w])
    assert gx.dtype == gw.dtype == dtype
    tx = torch.tensor(xa.astype(np.float32)).to(TORCH_DTYPES[low]).requires_grad_()
    tw = torch.tensor(wa.astype(np.float32)).to(TORCH_DTYPES[low]).requires_grad_()
    ty = ((tx * tw).sin() * 2.0 + tx).sum()
    want_gx, want_gw = torch.autograd.grad(ty, [tx, tw])
    close(y, ty, low, 4)
    np.testing.assert_array_equal(as_f64(gx), as_f64(want_gx))  # op by op, as torch rounds
    np.testing.assert_array_equal(as_f64(gw), as_f64(want_gw))


def test_tensor_bf16_matrix_product_astype_and_backward() -> None:
    bf16 = NUMPY_DTYPES["bf16"]
    a = rv.tensor(normal(3, 16).astype(bf16), requires_grad=True)
    b = rv.tensor((normal(16, 2, seed=1) / 4).astype(bf16))
    out = (a @ b).astype(np.float32).mean()
    assert (a @ b).dtype == bf16 and out.dtype == np.float32
    out.backward()
    assert a.grad.dtype == bf16
    want = np.broadcast_to(as_f64(b).sum(1) / 6, (3, 16))
    close(a.grad, want, "bf16", 2)
    with pytest.raises(TypeError, match="int8"):
        rv.tensor(np.ones(3, np.int8))
