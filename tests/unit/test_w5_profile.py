"""benchmarks/workloads/w5_profile.py times the W5 HVP against kernels of the same memory
traffic: each piece computes what it stands for (the HVP is NumPy's by-hand one, the
streams are `x * v` and `sum(x * x)`), and the profile reports every piece. No time is
checked."""

from __future__ import annotations

import numpy as np

from tests.unit.benchmark_scripts import benchmark_module

workloads = benchmark_module("workloads")
from workloads import w5_profile, w5_rosenbrock_hvp  # noqa: E402  (the package loaded above)

N = 1000


def test_pieces_compute_what_they_stand_for() -> None:
    built = w5_profile.pieces(N)
    rng = np.random.default_rng(5)  # the inputs `pieces` draws
    x, v = rng.standard_normal(N), rng.standard_normal(N)
    np.testing.assert_allclose(built["hvp"](), w5_rosenbrock_hvp.numpy_hvp(x, v), rtol=1e-12)
    np.testing.assert_array_equal(built["x * v"](), x * v)
    np.testing.assert_array_equal(built["numpy x * v, out"](), x * v)
    np.testing.assert_allclose(built["sum(x * x)"](), np.sum(x * x), rtol=1e-12)
    head, tail = x[:-1], x[1:]
    rosenbrock = np.sum(100 * (tail - head**2) ** 2 + (1 - head) ** 2)
    np.testing.assert_allclose(built["forward"](), rosenbrock, rtol=1e-12)


def test_profile_reports_every_piece_per_call() -> None:
    built = w5_profile.pieces(N)
    times = w5_profile.profile(built, rounds=2, calls=3)
    assert set(times) == {"hvp", "forward", "x * v", "numpy x * v, out", "sum(x * x)",
                          "numpy"}
    assert all(t.shape == (2, 3) and (t >= 0).all() for t in times.values())


def test_per_element_covers_every_size() -> None:
    rows = w5_profile.per_element((N, 2 * N), rounds=1)
    assert [n for n, _, _ in rows] == [N, 2 * N]
    assert all(hvp > 0 and forward > 0 for _, hvp, forward in rows)
