"""`rv.amp.LossScaler`: dynamic loss scaling for bf16/f16 kernels — torch.amp.GradScaler's
update rule step for step, gradients that underflow in f16 recovered by the scale, overflow
skipped and backed off, and a mixed-precision training loop that converges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv

# a loss this small has gradients in f16's subnormals (below 6.1e-5, spaced 6e-8); the
# factor is two f16 literals, multiplied in f32
SOURCE = """
fn loss(x: f16[N, D], w: f16[D], y: f16[N]) -> f16 {
    return mean((x @ w - y) ** 2) * 0.0001 * 0.0001;
}
"""
FACTOR = float(np.float32(np.float16(0.0001)) ** 2)


@pytest.fixture(scope="module", params=["native", "interp"])
def module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


def _data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((64, 8)).astype(np.float16)
    y = (x.astype(np.float32) @ np.linspace(-1, 1, 8).astype(np.float32)).astype(np.float16)
    return x, y


def _f64_gradient(x: np.ndarray, w: np.ndarray, y: np.ndarray) -> np.ndarray:
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    return 2 * x64.T @ (x64 @ w.astype(np.float64) - y64) / len(y64) * FACTOR


def test_the_update_rule_is_torch_grad_scalers() -> None:
    flags = [True, True, False, True, True, True, True, False, False, True, True, True]
    ours = rv.amp.LossScaler(init_scale=1024.0, growth_interval=3)
    scale, tracker = torch.tensor(1024.0), torch.tensor(0, dtype=torch.int32)
    for finite in flags:
        ours.update(finite)
        torch._amp_update_scale_(scale, tracker, torch.tensor(float(not finite)), 2.0, 0.5, 3)
        assert (ours.scale, ours.finite_steps) == (scale.item(), tracker.item())


def test_scaling_recovers_gradients_that_underflow_in_f16(module: rv.Module) -> None:
    x, y = _data(np.random.default_rng(0))
    w = np.zeros(8, np.float16)
    exact = _f64_gradient(x, w, y)
    plain = module.loss.grad("w")(x, w, y).astype(np.float64)
    assert np.abs(plain - exact).max() > 0.3 * np.abs(exact).max()  # lost to f16's subnormals
    scaler = rv.amp.LossScaler(init_scale=2.0 ** 12)
    grads, finite = scaler.gradients(module.loss, "w")(x, w, y)
    assert finite and grads.dtype == np.float32
    np.testing.assert_allclose(grads, exact, rtol=0.02, atol=1e-3 * np.abs(exact).max())


def test_an_overflowing_scale_is_skipped_and_backed_off(module: rv.Module) -> None:
    x, y = _data(np.random.default_rng(1))
    scaler = rv.amp.LossScaler()  # 2**16 is beyond f16's largest finite value, 65504
    grads, finite = scaler.gradients(module.loss, "w")(x, np.zeros(8, np.float16), y)
    assert not finite
    scaler.update(finite)
    assert scaler.scale == 2.0 ** 15 and scaler.finite_steps == 0
    grads, finite = scaler.gradients(module.loss, "w")(x, np.zeros(8, np.float16), y)
    assert finite


def test_mixed_precision_training_converges(module: rv.Module) -> None:
    x, y = _data(np.random.default_rng(2))
    master = np.zeros(8, np.float32)  # f32 master weights, cast to f16 for each step
    scaler = rv.amp.LossScaler(growth_interval=5)
    gradients = scaler.gradients(module.loss, "w")
    skipped = 0
    for _ in range(60):
        grads, finite = gradients(x, master.astype(np.float16), y)
        if finite:
            master -= 0.5 / FACTOR * grads
        skipped += not finite
        scaler.update(finite)
    assert skipped >= 1
    np.testing.assert_allclose(master, np.linspace(-1, 1, 8), atol=0.02)


def test_the_scaler_unscales_several_gradients_and_names_bad_settings() -> None:
    scaler = rv.amp.LossScaler(init_scale=8.0)
    (a, b), finite = scaler.unscale((np.full(2, 8.0, np.float16), np.full(3, 16.0)))
    assert finite and a.dtype == np.float32 and b.dtype == np.float64
    np.testing.assert_array_equal(a, [1.0, 1.0])
    np.testing.assert_array_equal(b, [2.0, 2.0, 2.0])
    assert not scaler.unscale(np.array([np.inf], np.float16))[1]
    with pytest.raises(ValueError, match="backoff_factor"):
        rv.amp.LossScaler(backoff_factor=2.0)
