"""Workspace reuse between calls (`runtime_library/workspace_cache.py`,
`runtime/native/fastcall.py`, `runtime/native/native_kernel.py`).

A kernel's temporaries live in one workspace; both call paths keep the last one and reuse
it when it fits (`abi.workspace_fits`). These tests check that the block really is reused,
that a much smaller call does not keep a large block alive, that a reused block's old
contents never reach a result, that calls from several threads at once each get a block of
their own, and that the spare is freed when the entry goes.
"""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.call_boundary.abi import SPARE_WORKSPACE, WORKSPACE_SLACK, workspace_fits
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel

SOURCE = """
fn growth_loss(x: f64[N], w: f64[N]) -> f64 { return sum(cumprod(1.0 + x) * w); }
"""

@pytest.fixture(scope="module")
def gradient() -> rv.Kernel:
    return rv.compile(SOURCE).growth_loss.grad(wrt="x")


def inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) * 1e-3, rng.standard_normal(n)


def spare_cell(kernel: rv.Kernel) -> np.ndarray:
    """The native entry's spare-workspace cell (the kernel must have been called once)."""
    assert type(kernel._call).__name__ == "builtin_function_or_method"
    return kernel._call.__self__[SPARE_WORKSPACE]


def capacity(block: int) -> int:
    """The capacity a workspace block records in its header."""
    return ctypes.c_int64.from_address(block).value


def test_the_fit_rule() -> None:
    assert workspace_fits(100, 100) and workspace_fits(100, 100 // WORKSPACE_SLACK)
    assert not workspace_fits(100, 101)
    assert not workspace_fits(100, 100 // WORKSPACE_SLACK - 1)


def test_the_native_entry_reuses_its_block(gradient: rv.Kernel) -> None:
    x, w = inputs(5000, 0)
    expected = gradient._call_python(x, w)
    gradient(x, w)
    block = int(spare_cell(gradient)[0])
    assert block and capacity(block) > 5000 * 8
    for _ in range(5):
        np.testing.assert_array_equal(gradient(x, w), expected)
        assert int(spare_cell(gradient)[0]) == block


def test_sizes_that_do_not_fit_get_a_new_block(gradient: rv.Kernel) -> None:
    large, small = inputs(40_000, 1), inputs(400, 2)
    gradient(*large)
    large_capacity = capacity(int(spare_cell(gradient)[0]))
    np.testing.assert_array_equal(gradient(*small), gradient._call_python(*small))
    small_capacity = capacity(int(spare_cell(gradient)[0]))
    assert small_capacity * WORKSPACE_SLACK < large_capacity  # the large block was freed
    np.testing.assert_array_equal(gradient(*large), gradient._call_python(*large))
    assert capacity(int(spare_cell(gradient)[0])) == large_capacity


def test_old_contents_of_a_reused_block_do_not_leak(gradient: rv.Kernel) -> None:
    """A block reused for other inputs (and a slightly smaller size) gives their results."""
    for n, seed in [(3000, 3), (2900, 4), (3000, 5), (1000, 6), (3000, 7)]:
        x, w = inputs(n, seed)
        np.testing.assert_array_equal(gradient(x, w), gradient._call_python(x, w))


def test_threads_calling_at_once_get_their_own_blocks(gradient: rv.Kernel) -> None:
    cases = [inputs(n, seed) for seed, n in enumerate([20_000, 30_000, 25_000, 20_000] * 2)]
    expected = [gradient._call_python(*case) for case in cases]
    failures: list[int] = []

    def work(k: int) -> None:
        for _ in range(15):
            if not np.array_equal(gradient(*cases[k]), expected[k]):
                failures.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert int(spare_cell(gradient)[0])  # one block stays for the next call


def test_the_spare_block_is_freed_with_the_entry() -> None:
    kernel = rv.compile(SOURCE.replace("growth_loss", "once")).once.grad(wrt="x")
    for _ in range(2):  # the first call installs the native entry
        kernel(*inputs(1000, 8))
    cell = spare_cell(kernel)
    assert int(cell[0])
    del kernel
    gc.collect()
    assert int(cell[0]) == 0


def test_the_python_path_reuses_its_workspace() -> None:
    fn = rv.compile(SOURCE).growth_loss.grad(wrt="x").ir_for("f64")
    kernel = native_kernel(fn)
    x, w = inputs(3000, 9)
    first = kernel(bind_arguments(fn, [x, w]))
    (spare,) = kernel._spare
    again = kernel(bind_arguments(fn, [x, w]))
    assert len(kernel._spare) == 1 and kernel._spare[0] is spare
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    kernel(bind_arguments(fn, list(inputs(300, 10))))
    assert kernel._spare[0] is not spare and kernel._spare[0].nbytes < spare.nbytes
