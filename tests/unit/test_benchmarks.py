"""The benchmark workloads (benchmarks/workloads/) compute the right gradients.

Every workload at a tiny size: each Reverie variant, and the torch eager and JAX variants
where those are installed, must match the hand-written NumPy gradient. No time is measured.
torch.compile is left out: its first compile alone takes seconds per workload.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.benchmark_scripts import benchmark_module

CHECKED_PEERS = ("reverie", "torch", "jax")


workloads = benchmark_module("workloads")
CASES = [(key, label) for key, make in workloads.WORKLOADS.items()
         for label in [v.label for v in make(tiny=True).variants if v.peer in CHECKED_PEERS]]


@pytest.fixture(scope="module")
def tiny() -> dict[str, object]:
    """Each workload at its tiny size, with its NumPy reference gradient."""
    built = {}
    for key, make in workloads.WORKLOADS.items():
        workload = make(tiny=True)
        built[key] = (workload, workload.of_peer("numpy")[0].build()())
    return built


@pytest.mark.parametrize(("key", "label"), CASES)
def test_gradient_matches_numpy(tiny: dict[str, object], key: str, label: str) -> None:
    workload, reference = tiny[key]
    variant = next(v for v in workload.variants if v.label == label)
    if variant.peer != "reverie":
        pytest.importorskip(variant.peer)
    result = variant.build()()
    assert workloads.relative_error(result, reference) <= workload.rtol


@pytest.mark.parametrize("key", list(workloads.WORKLOADS))
def test_reverie_forward_runs(tiny: dict[str, object], key: str) -> None:
    workload, _ = tiny[key]
    value = workload.forward()()
    assert all(np.isfinite(a).all() for a in workloads.as_numpy(value))


def test_reference_is_not_trivial(tiny: dict[str, object]) -> None:
    for key, (_, reference) in tiny.items():
        arrays = workloads.as_numpy(reference)
        assert arrays and all(np.abs(a).max() > 0 for a in arrays), key


def test_relative_error_sees_a_wrong_gradient() -> None:
    good = (np.ones(4), np.arange(3.0))
    assert workloads.relative_error(good, good) == 0
    assert workloads.relative_error((np.ones(4), np.arange(3.0) + 0.1), good) > 1e-2
    with pytest.raises(ValueError):
        workloads.relative_error((np.ones(4),), good)
