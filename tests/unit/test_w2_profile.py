"""benchmarks/workloads/w2_profile.py times the W2 gradient's pieces: each piece computes
what it stands for (the products are the gradient's products, the softmax part is the
gradient with respect to the logits). No time is checked."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.benchmark_scripts import benchmark_module

workloads = benchmark_module("workloads")
from workloads import w2_profile, w2_softmax_xent  # noqa: E402  (the package loaded above)


def test_products_are_the_gradients_products() -> None:
    X, W, _, _ = w2_softmax_xent.arguments(tiny=True)
    G = np.random.default_rng(1).standard_normal((X.shape[0], W.shape[1])).astype(np.float32)
    found = w2_profile.products(X, W, G)
    if not found:
        pytest.skip("no BLAS with ILP64 ?gemm in this process")
    np.testing.assert_allclose(found["X @ W"](), X.astype(np.float64) @ W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(found["X^T @ G"](), X.T.astype(np.float64) @ G, rtol=1e-5,
                               atol=1e-5)


def test_softmax_part_is_the_gradient_wrt_logits() -> None:
    X, W, b, labels = w2_softmax_xent.arguments(tiny=True)
    softmax = w2_profile.rv.compile(w2_profile.LOGITS_SOURCE).xent.grad(("L", "b"))
    logits = X @ W
    d_logits, db = softmax(logits, b, labels)
    reference_dW, reference_db = w2_softmax_xent.numpy_grad(X, W, b, labels)
    np.testing.assert_allclose(X.T @ d_logits, reference_dW, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(db, reference_db, rtol=1e-4, atol=1e-6)


def test_profile_times_every_piece() -> None:
    built = w2_profile.pieces(tiny=True)
    times = w2_profile.profile(built, rounds=2)
    assert set(times) >= {"gradient", "forward", "softmax part", "read X", "numpy"}
    assert all(t.shape == (2, 2) and (t >= 0).all() for t in times.values())
