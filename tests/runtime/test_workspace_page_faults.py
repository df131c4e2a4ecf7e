"""The native entry keeps a kernel's workspace for its next call
(`runtime_library/workspace_cache.py`).

A large workspace allocated fresh per call is faulted in and zeroed page by page on every
call; kept, the next call touches no new page. These tests check that a kept workspace is
reused (no new page faults), that results do not depend on what an earlier call left in
it (smaller and larger calls in turn), and that calls from several threads at once, each
needing a block, stay right.
"""

from __future__ import annotations

import resource
import threading

import numpy as np
import pytest

import reverie as rv

# `a @ a` lives in a temporary (a matmul result); its square is summed.
SOURCE = "fn f(a: f64[N, N]) -> f64 { let b = a @ a; return sum(b * b); }"


@pytest.fixture(scope="module")
def f() -> rv.Kernel:
    return rv.compile(SOURCE).f


def _expected(a: np.ndarray) -> float:
    b = a @ a
    return float((b * b).sum())


def _page_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_a_kept_workspace_faults_in_no_new_pages(f: rv.Kernel) -> None:
    a = np.random.default_rng(0).uniform(-1, 1, (1024, 1024))  # an 8 MB temporary
    f(a)
    f(a)  # the first call through the native entry allocates the workspace
    before = _page_faults()
    f(a)
    # a fresh 8 MB workspace would fault in 2048 pages (4 KB each)
    assert _page_faults() - before < 256


def test_results_do_not_depend_on_what_a_reused_workspace_held(f: rv.Kernel) -> None:
    rng = np.random.default_rng(1)
    for n in (300, 40, 300, 700, 5, 700):
        a = rng.uniform(-1, 1, (n, n))
        np.testing.assert_allclose(f(a), _expected(a), rtol=1e-12)


def test_concurrent_calls_each_get_a_workspace(f: rv.Kernel) -> None:
    rng = np.random.default_rng(2)
    inputs = [rng.uniform(-1, 1, (n, n)) for n in (200, 260, 330, 410) for _ in range(2)]
    failures: list[str] = []

    def work(a: np.ndarray) -> None:
        for _ in range(5):
            got, want = f(a), _expected(a)
            if not np.isclose(got, want, rtol=1e-12):
                failures.append(f"{a.shape}: {got} != {want}")

    threads = [threading.Thread(target=work, args=(a,)) for a in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
