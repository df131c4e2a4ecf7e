"""The output pool (`runtime/native/output_pool.py`) on its own: which requests it serves, when a
block is free again, that threads get distinct blocks, and that what it keeps is bounded.

Blocks are at least 32 MiB but `numpy.empty` maps them without touching their pages, so
these tests cost memory only where they write.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from reverie.compiler.call_boundary.abi import POOLED_OUTPUT_BYTES
from reverie.runtime.native import output_pool
from reverie.runtime.native.call import finish_results
from reverie.runtime.native.output_pool import SLACK, OutputPool

LARGE = POOLED_OUTPUT_BYTES // 8  # f64 elements of the smallest pooled output


@pytest.fixture
def pool() -> OutputPool:
    return OutputPool(max_blocks=3, max_bytes=4 * POOLED_OUTPUT_BYTES)


def test_small_outputs_are_plain_arrays(pool: OutputPool) -> None:
    out = pool.empty((LARGE - 1,), np.dtype(np.float64))
    assert out.base is None and out.flags.owndata
    assert pool.held_bytes() == 0


@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "i8", "?"])
def test_large_outputs_are_writable_contiguous_views_of_a_block(pool: OutputPool,
                                                                 dtype: str) -> None:
    shape = (1024, POOLED_OUTPUT_BYTES // 1024 // np.dtype(dtype).itemsize)
    out = pool.empty(shape, np.dtype(dtype))
    assert out.shape == shape and out.dtype == np.dtype(dtype)
    assert out.flags.c_contiguous and out.flags.writeable and not out.flags.owndata
    assert isinstance(out.base, np.ndarray) and out.base.dtype == np.uint8
    assert out.base.nbytes == out.nbytes == pool.held_bytes()
    out[-1, -1] = 1
    with pytest.raises(ValueError):
        out.resize(3)


def test_a_block_is_reused_once_nothing_holds_it(pool: OutputPool) -> None:
    first = pool.empty((LARGE,), np.float64)
    address = first.ctypes.data  # (holding `first.base` would keep the block in use)
    second = pool.empty((LARGE,), np.float64)
    assert not np.shares_memory(first, second)
    del first
    third = pool.empty((LARGE,), np.float64)
    assert third.ctypes.data == address
    assert pool.held_bytes() == 2 * LARGE * 8


@pytest.mark.parametrize("hold", [
    lambda out: out[::3],
    lambda out: out.reshape(2, -1).T,
    memoryview,
    lambda out: np.frombuffer(out, np.float64),
])
def test_whatever_refers_to_an_output_keeps_its_block(pool: OutputPool, hold) -> None:
    out = pool.empty((LARGE,), np.float64)
    out[:4] = 7.0
    kept = np.asarray(hold(out))
    del out
    for _ in range(3):
        other = pool.empty((LARGE,), np.float64)
        other[:4] = -1.0
        assert not np.shares_memory(other, kept)
    assert kept.flat[0] == 7.0


def test_a_block_serves_requests_at_most_an_eighth_smaller(pool: OutputPool) -> None:
    capacity = 8 * LARGE * 8 // 7  # bytes; an eighth of them is the most left unused
    address = pool.empty((capacity,), np.uint8).ctypes.data
    assert pool.empty((capacity - capacity // SLACK,), np.uint8).ctypes.data == address
    assert pool.empty((capacity - capacity // SLACK - 1,), np.uint8).ctypes.data != address
    assert pool.empty((capacity + 1,), np.uint8).ctypes.data != address


def test_retention_is_bounded_and_drops_the_least_recently_used(pool: OutputPool) -> None:
    sizes = [LARGE, LARGE + 1000, LARGE + 2000]  # each larger than the blocks before
    held = [pool.empty((n,), np.float64) for n in sizes]
    addresses = [out.ctypes.data for out in held]  # (the blocks themselves would hold them)
    assert len(set(addresses)) == 3
    overflow = pool.empty((LARGE,), np.float64)  # three blocks in use: no room
    assert overflow.base is None
    del held, overflow
    assert pool.free_bytes() == pool.held_bytes() == sum(sizes) * 8
    pool.empty((sizes[1],), np.float64)  # the middle block is now the most recent
    new = pool.empty((LARGE + 3000,), np.float64)  # no free block fits: one must go
    kept = {block.ctypes.data for block in pool._blocks}
    assert kept == {new.ctypes.data, addresses[1], addresses[2]}  # the oldest went
    assert pool.held_bytes() <= pool.max_bytes and len(pool._blocks) <= pool.max_blocks


def test_an_output_larger_than_the_byte_cap_is_not_kept(pool: OutputPool) -> None:
    out = pool.empty((pool.max_bytes // 8 + 1,), np.float64)
    assert out.base is None and pool.held_bytes() == 0


def test_clear_releases_only_free_blocks(pool: OutputPool) -> None:
    held = pool.empty((LARGE,), np.float64)
    pool.empty((LARGE,), np.float64)
    assert pool.clear() == LARGE * 8
    assert pool.held_bytes() == LARGE * 8 and pool._blocks[0] is held.base


def test_threads_taking_at_once_get_distinct_blocks() -> None:
    pool = OutputPool(max_blocks=8, max_bytes=8 * POOLED_OUTPUT_BYTES)
    threads, rounds = 6, 20
    barrier = threading.Barrier(threads)
    taken: list[list[np.ndarray]] = [[] for _ in range(threads)]
    overlaps: list[int] = []

    def work(k: int) -> None:
        for _ in range(rounds):
            barrier.wait()  # every output of the last round is dropped
            taken[k].append(pool.empty((LARGE,), np.float64))
            taken[k][0][:: LARGE // 4] = k  # touch a few pages only
            barrier.wait()  # every thread holds its output now
            if any(np.shares_memory(taken[k][0], taken[j][0]) for j in range(threads)
                   if j != k):
                overlaps.append(k)
            barrier.wait()
            taken[k].clear()

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert overlaps == []
    assert len(pool._blocks) == threads  # reused round after round, none added


def test_the_environment_variable_turns_the_pool_off() -> None:
    script = ("import numpy as np; from reverie.runtime.native import output_pool as p; "
              "print(p.empty is np.empty)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={**os.environ, "REVERIE_OUTPUT_POOL": "0"}, check=True)
    assert result.stdout.strip() == "True"
    assert output_pool.empty == output_pool.POOL.empty  # on in this process


def test_the_byte_cap_drops_the_least_recently_used(pool: OutputPool) -> None:
    older, newer = (pool.empty((LARGE,), np.float64) for _ in range(2))
    addresses = older.ctypes.data, newer.ctypes.data
    del older, newer
    large = pool.empty((3 * LARGE,), np.float64)  # 96 MiB more than 128 MiB allow: one goes
    kept = [block.ctypes.data for block in pool._blocks]
    assert kept == [addresses[1], large.ctypes.data]
    assert pool.held_bytes() == pool.max_bytes


def test_results_are_copied_unless_they_are_blocks_of_their_own() -> None:
    """`call.finish_results` returns a pool output as it is, but copies a result that shares
    its block with an input or another result (as it copies any other view)."""
    output = output_pool.empty((LARGE,), np.float64)
    assert finish_results(None, [output], [np.zeros(3)]) is output
    for results, inputs in [([output], [output[1:]]), ([output[:4], output[4:]], [])]:
        returned = finish_results(None, results, inputs)
        for result in returned if isinstance(returned, tuple) else (returned,):
            assert result.base is None and not np.shares_memory(result, output)
