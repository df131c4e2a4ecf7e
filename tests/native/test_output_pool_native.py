"""Both call paths of native kernels allocate outputs of `abi.POOLED_OUTPUT_BYTES` or more
from the output pool (`runtime/native/output_pool.py`) and smaller ones with `numpy.empty`.

These tests check where the native entry's size test puts the line, that the Python path
(`runtime/native/native_kernel.py`) does the same, that results are bitwise those of NumPy whichever
block they land in, that an output (or a view of it) the caller holds is never handed out
again, that a loop of calls reuses one block (and faults in no new page), and that
threads calling at once get distinct blocks.
"""

from __future__ import annotations

import resource
import threading

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.call_boundary.abi import POOLED_EMPTY, POOLED_OUTPUT_BYTES
from reverie.runtime.native import output_pool

SOURCE = """
fn double(x: f64[N]) -> f64[N] { return 2.0 * x; }
fn pair(x: f32[N, D]) -> (f32[N, D], f32[N, D]) { return (x + 1.0, x * x); }
"""
LARGE = POOLED_OUTPUT_BYTES // 8  # f64 elements of the smallest pooled output


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def values(n: int, seed: int, dtype: type = np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def pooled(out: np.ndarray) -> bool:
    """Whether `out` is a view of one of the pool's blocks."""
    return any(out.base is block for block in output_pool.POOL._blocks)


def entry(kernel: rv.Kernel, x: np.ndarray) -> rv.Kernel:
    """`kernel` after a first call, which installs its native entry."""
    kernel(x)
    assert type(kernel._call).__name__ == "builtin_function_or_method"
    assert kernel._call.__self__[POOLED_EMPTY] is output_pool.empty
    return kernel


@pytest.mark.parametrize("call", ["native entry", "python path"])
def test_outputs_from_the_threshold_up_come_from_the_pool(m: rv.Module, call: str) -> None:
    kernel = entry(m.double, values(4, 0))
    run = kernel if call == "native entry" else kernel._call_python
    small, large = values(LARGE - 1, 1), values(LARGE, 2)
    out = run(small)
    assert out.base is None and out.flags.owndata
    np.testing.assert_array_equal(out, 2.0 * small)
    out = run(large)
    assert pooled(out) and out.flags.c_contiguous and out.flags.writeable
    assert out.dtype == np.float64 and out.shape == (LARGE,)
    np.testing.assert_array_equal(out, 2.0 * large)


def test_a_loop_of_calls_reuses_one_block(m: rv.Module) -> None:
    kernel = entry(m.double, values(4, 0))
    inputs = [values(LARGE, seed) for seed in range(3)]
    addresses = set()
    for x in inputs * 2:
        out = kernel(x)
        np.testing.assert_array_equal(out, 2.0 * x)  # a reused block's old contents never show
        addresses.add(out.ctypes.data)
        del out
    assert len(addresses) == 1


def test_a_reused_output_faults_in_no_new_pages(m: rv.Module) -> None:
    kernel = entry(m.double, values(4, 0))
    x = values(LARGE, 6)
    kernel(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        kernel(x)
    # a fresh 32 MiB output faults in 8192 pages of 4 KB a call (~17 with huge pages)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 12


@pytest.mark.parametrize("hold", [lambda out: out, lambda out: out[1::2], memoryview])
def test_an_output_the_caller_holds_is_never_reused(m: rv.Module, hold) -> None:
    kernel = entry(m.double, values(4, 0))
    first, second = values(LARGE, 3), values(LARGE, 4)
    kept = hold(kernel(first))
    again = [kernel(second), kernel._call_python(second)]
    for out in again:
        assert not np.shares_memory(out, np.asarray(kept))
        np.testing.assert_array_equal(out, 2.0 * second)
    np.testing.assert_array_equal(np.asarray(kept), np.asarray(hold(2.0 * first)))


def test_several_large_outputs_get_blocks_of_their_own(m: rv.Module) -> None:
    rows = POOLED_OUTPUT_BYTES // 4 // 256
    x = values(rows * 256, 5, np.float32).reshape(rows, 256)
    kernel = m.pair
    kernel(x[:2])  # installs the native entry
    for plus, square in (kernel(x), kernel._call_python(x)):
        assert pooled(plus) and pooled(square) and not np.shares_memory(plus, square)
        np.testing.assert_array_equal(plus, x + np.float32(1.0))
        np.testing.assert_array_equal(square, x * x)


def test_threads_calling_at_once_get_distinct_blocks(m: rv.Module) -> None:
    kernel = entry(m.double, values(4, 0))
    inputs = [values(LARGE, 10 + k) for k in range(3)]
    barrier = threading.Barrier(len(inputs))
    results: list[list[np.ndarray]] = [[] for _ in inputs]

    def work(k: int) -> None:
        for _ in range(3):
            barrier.wait()
            results[k].append(kernel(inputs[k]))  # the kernel runs without the GIL

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [out for outs in results for out in outs]
    assert sum(map(pooled, held)) == output_pool.MAX_BLOCKS  # the rest: plain arrays
    for k, outs in enumerate(results):
        for out in outs:
            np.testing.assert_array_equal(out, 2.0 * inputs[k])
            assert not any(np.shares_memory(out, other) for other in held if other is not out)
