"""`rv.dask` on a `distributed.LocalCluster` of 2 worker processes (docs/api.md §10).

One cluster serves the whole module (started and closed by the `client` fixture). Each
data-parallel result is compared with the single-process call on the concatenated rows:
the chunks' partial sums are added in another order, so results agree to float
reassociation — `rtol=1e-12` in f64 and `1e-5` in f32. The local call runs first, so the
workers find its compiled code in the disk cache. The fault test kills a worker process
while the call runs and checks the result does not change; the error tests check that
problems surface on the client as the exceptions, and messages, of a local call.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from dask.task_spec import DataNode, Task
from dask.utils import key_split
from dask_programs import SOURCE, UNEVEN, kernels_and_arguments, rows, split
from distributed import Client, Future, get_task_stream, wait

import reverie as rv
from reverie import dask_call
from reverie.dask import TaskLayer, tree_below_root
from reverie.dask_call import balanced_placement, split_among_threads, split_call

F64, F32 = {"rtol": 1e-12, "atol": 1e-12}, {"rtol": 1e-5, "atol": 1e-6}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dask_fit.py"


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def assert_same(got: object, expected: object, tolerance: dict[str, float]) -> None:
    """Equal structure (tuples, arrays, scalars) and values within `tolerance`."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_same(g, e, tolerance)
    else:
        assert np.shape(got) == np.shape(expected)
        np.testing.assert_allclose(got, expected, **tolerance)


@pytest.mark.parametrize("reduce, loss, dtype, tolerance", [
    ("mean", "mse", np.float64, F64), ("sum", "squared_sum", np.float32, F32)])
def test_value_and_grad_matches_the_call_on_all_rows(
        client: Client, m: rv.Module, reduce: str, loss: str, dtype: type,
        tolerance: dict[str, float]) -> None:
    x, y, w, b = rows(dtype=dtype)
    expected = m[loss].value_and_grad(("w", "b"))(x, y, w, b)  # first: fills the disk cache
    parallel = rv.dask.value_and_grad(m[loss], wrt=("w", "b"), batch=("x", "y"),
                                      reduce=reduce)
    got = parallel(split(x), split(y), w, b)
    assert_same(got, expected, tolerance)
    assert got[1][0].dtype == dtype


def test_mean_weights_chunks_by_their_length(client: Client, m: rv.Module) -> None:
    x, y, w, b = rows()
    # a plain average of the chunks' means would weight the 1-row chunk as the 20-row one
    chunk_means = [m.mse(x[i:j], y[i:j], w, b) for i, j in zip(
        np.cumsum((0, *UNEVEN))[:-1], np.cumsum(UNEVEN), strict=True)]
    value, _ = rv.dask.value_and_grad(m.mse, "w", batch=("x", "y"), reduce="mean")(
        split(x), split(y), w, b)
    assert not np.isclose(value, np.mean(chunk_means))
    np.testing.assert_allclose(value, m.mse(x, y, w, b), **F64)


def test_grad_default_wrt_and_differently_chunked_batches(client: Client,
                                                          m: rv.Module) -> None:
    x, y, w, b = rows()
    gradient = rv.dask.grad(m.mse, batch=("x", "y"), reduce="mean")  # wrt: w and b
    got = gradient(split(x), split(y, (25, 25)), w, b)  # y's chunks are aligned to x's
    assert_same(got, m.mse.grad(("w", "b"))(x, y, w, b), F64)
    single = rv.dask.grad(m.mse, "w", batch=(0, 1), reduce="mean")(split(x), split(y), w, b)
    assert_same(single, m.mse.grad("w")(x, y, w, b), F64)


def test_a_kernel_with_a_loop(client: Client, m: rv.Module) -> None:
    x, _, w, _ = rows(n=60)
    expected = m.recurrent.value_and_grad(("w", "a"))(x, w, 0.7, 5)
    parallel = rv.dask.value_and_grad(m.recurrent, ("w", "a"), batch="x")
    assert_same(parallel(split(x, (16, 16, 16, 12)), w, 0.7, 5), expected, F64)


def test_map_blocks(client: Client, m: rv.Module) -> None:
    x, y, w, b = rows()
    predictions = rv.dask.map_blocks(m.predict, split(x), w)
    assert isinstance(predictions, da.Array) and predictions.shape == (50,)
    np.testing.assert_allclose(predictions.compute(), m.predict(x, w), **F64)
    per_chunk = rv.dask.map_blocks(m.score, split(x), w)  # one scalar per chunk
    assert per_chunk.shape == (len(UNEVEN),)
    np.testing.assert_allclose(per_chunk.sum().compute(), m.score(x, w), **F64)
    dw, db = rv.dask.map_blocks(m.squared_sum.grad(("w", "b")), split(x), split(y), w, b)
    assert dw.shape == (len(UNEVEN), 4) and db.shape == (len(UNEVEN),)  # per chunk
    assert_same((dw.sum(axis=0).compute(), db.sum().compute()),
                m.squared_sum.grad(("w", "b"))(x, y, w, b), F64)


def test_persisted_chunks_are_summed_by_one_task_per_group_on_balanced_workers(
        client: Client, m: rv.Module) -> None:
    x, y, w, b = rows(n=200)
    chunks = (7, 13, 1, 20, 9, 30, 40, 2, 18, 60)
    xs, ys = client.persist([split(x, chunks), split(y, chunks)])
    wait([xs, ys])
    groups = split_call(m.mse, [0, 1], (xs, ys, w, b)).colocated_groups(3)
    assert sorted(c for group in groups for c in group.chunks) == list(range(len(chunks)))
    assert all(1 <= len(group.chunks) <= 3 for group in groups)
    planned = dict.fromkeys(client.nthreads(), 0)
    for group in groups:
        planned[group.worker] += sum(chunks[c] for c in group.chunks)
    assert max(planned.values()) - min(planned.values()) <= max(chunks)
    parallel = rv.dask.value_and_grad(m.mse, ("w", "b"), batch=("x", "y"), reduce="mean",
                                      split_every=3)
    with get_task_stream(client) as stream:
        got = parallel(xs, ys, w, b)
    assert_same(got, m.mse.value_and_grad(("w", "b"))(x, y, w, b), F64)
    tasks = [task for task in stream.data if key_split(task["key"]) == "weighted_value_and_grad"]
    assert len(tasks) == len(groups) < len(chunks)
    assert all(task["worker"] == groups[task["key"][1]].worker  # a key ends in its index
               for task in tasks)


def test_chunks_stay_where_they_are_unless_a_worker_has_a_chunk_too_many() -> None:
    nine_and_seven = [{"a"}] * 9 + [{"b"}] * 7
    placed = balanced_placement(nine_and_seven, [10] * 16, {"a": 1, "b": 1})
    assert placed.count("a") == placed.count("b") == 8
    assert sum(worker not in where for worker, where in zip(placed, nine_and_seven,
                                                            strict=True)) == 1
    even = [{"a"}] * 8 + [{"b"}] * 8
    assert balanced_placement(even, [10] * 16, {"a": 1, "b": 1}) == ["a"] * 8 + ["b"] * 8
    copies = balanced_placement([{"a"}, {"a", "b"}, None], [5, 5, 5], {"a": 1, "b": 1})
    assert copies == ["a", "b", None]  # a chunk on both goes to the idler; None: not in memory
    on_two_threads = balanced_placement([{"a"}] * 6, [10] * 6, {"a": 2, "b": 1})
    assert on_two_threads.count("a") == 4 and on_two_threads.count("b") == 2


def test_a_worker_s_chunks_are_cut_so_that_each_thread_has_a_task() -> None:
    eight = list(range(8))
    assert split_among_threads(eight, 1, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_among_threads(eight, 4, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert split_among_threads(eight, 16, 4) == [[c] for c in eight]
    assert split_among_threads(list(range(10)), 2, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert split_among_threads([5], 1, 4) == [[5]]


def test_small_shared_values_are_one_value_of_the_graph_and_large_ones_are_scattered(
        client: Client, m: rv.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y, w, b = rows()
    call = split_call(m.mse, [0, 1], (split(x), split(y), w, b))
    graph = TaskLayer()
    program, values = call.shared_with_workers(m.mse, graph.keep)
    (key, kept), = graph.values.items()
    assert isinstance(kept, DataNode) and kept.value == (m.mse, w, b)  # one key for all
    taken = [shared({key: kept.value}) for shared in (program, values[2], values[3])]
    assert taken[0] is m.mse and taken[1] is w and taken[2] == b  # each its item, inline
    monkeypatch.setattr(dask_call, "INLINE_BYTES", sum(map(dask_call.sizeof, (m.mse, w, b))))
    assert isinstance(call.shared_with_workers(m.mse, TaskLayer().keep)[1][2], Task)
    monkeypatch.setattr(dask_call, "INLINE_BYTES", dask_call.INLINE_BYTES - 1)  # too many
    program, values = call.shared_with_workers(m.mse, TaskLayer().keep)
    assert all(isinstance(value, Future) for value in (program, values[2], values[3]))
    expected = m.mse.value_and_grad(("w", "b"))(x, y, w, b)
    for limit in (0, 1 << 20):  # scattered, in the graph
        monkeypatch.setattr(dask_call, "INLINE_BYTES", limit)
        parallel = rv.dask.value_and_grad(m.mse, ("w", "b"), batch=("x", "y"), reduce="mean")
        assert_same(parallel(split(x), split(y), w, b), expected, F64)


def test_the_shared_values_reach_each_worker_once_per_call(
        client: Client, m: rv.Module) -> None:
    """The kernel and parameters are one key of the call's graph: whichever worker computes
    it, the other fetches it once for its tasks (its 2 groups of 4 of the 16 chunks), so
    it crosses between the 2 workers exactly once."""
    x, y, w, b = rows(n=16_000)
    persisted = client.persist([split(x, 1_000), split(y, 1_000)])
    wait(persisted)
    client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
    parallel = rv.dask.value_and_grad(m.mse, ("w", "b"), batch=("x", "y"), reduce="mean")
    assert_same(parallel(*persisted, w, b), m.mse.value_and_grad(("w", "b"))(x, y, w, b), F64)
    fetched = client.run(lambda dask_worker: [key_split(key) for transfer in
                                              dask_worker.transfer_incoming_log
                                              for key in transfer["keys"]])
    values = [key for keys in fetched.values() for key in keys if key == "value"]
    assert len(values) == 1  # the program, w and b together, once


def test_the_client_adds_the_root_s_partials() -> None:
    graph = TaskLayer()
    parts = [graph.add("part", int, i) for i in range(10)]
    last = tree_below_root(graph, parts, 3)  # 10 partials -> 4 adds -> 2 adds -> the client
    assert len(last) == 2 and len(graph.tasks) == 10 + 4 + 2
    assert tree_below_root(graph, parts[:3], 3) == parts[:3]


@pytest.mark.parametrize("persisted, shared", [(False, "in the graph"), (True, "in the graph"),
                                               (True, "scattered")])
def test_a_worker_killed_mid_run_does_not_change_the_result(
        client: Client, m: rv.Module, monkeypatch: pytest.MonkeyPatch, persisted: bool,
        shared: str) -> None:
    if shared == "scattered":  # every worker holds the values; the survivor still does
        monkeypatch.setattr(dask_call, "INLINE_BYTES", 0)
    x, _, w, _ = rows(n=24_000, d=8)
    xs = split(x, (1000,) * 24)
    if persisted:  # the chunks on the killed worker are lost and made again
        xs = client.persist(xs)
        wait(xs)
    arguments = (xs, w, 0.5, 300)
    parallel = rv.dask.value_and_grad(m.recurrent, ("w", "a"), batch="x")
    expected = m.recurrent.value_and_grad(("w", "a"))(x, *arguments[1:])
    results: dict[str, object] = {}
    call = threading.Thread(target=lambda: results.update(got=parallel(*arguments)))
    call.start()
    victim = wait_for_a_worker_holding_partials(client)
    pid = client.run(os.getpid, workers=[victim])[victim]
    assert call.is_alive(), "the call ended before the kill: make the work larger"
    os.kill(pid, signal.SIGKILL)
    call.join(timeout=120)
    assert not call.is_alive()
    assert_same(results["got"], expected, F64)
    client.wait_for_workers(2, timeout=60)


def wait_for_a_worker_holding_partials(client: Client, timeout: float = 60) -> str:
    """The address of a worker holding a finished chunk partial of the running call."""
    def holders(dask_scheduler: object) -> list[str]:
        return [ws.address for ts in dask_scheduler.tasks.values()
                if key_split(ts.key) == "weighted_value_and_grad" and ts.state == "memory"
                for ws in ts.who_has]

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = client.run_on_scheduler(holders)
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError("no partial was computed in time")


def test_an_error_on_a_worker_is_raised_on_the_client(client: Client, m: rv.Module) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((30, 4)), rng.standard_normal((4, 3))
    labels = rng.integers(0, 3, 30)
    labels[17] = 3  # out of range for C = 3
    with pytest.raises(IndexError) as local:
        m.xent.grad("w")(x, labels, w)
    with pytest.raises(IndexError) as remote:
        rv.dask.grad(m.xent, "w", batch=("x", "labels"))(split(x, (10, 10, 10)),
                                                          split(labels, (10, 10, 10)), w)
    assert str(remote.value) == str(local.value)


def never_computed(block: np.ndarray) -> np.ndarray:
    raise AssertionError("a task ran before the arguments were checked")


def lazy(array: np.ndarray) -> da.Array:
    """`array` as a dask array whose chunks fail if any task computes them."""
    return split(array).map_blocks(never_computed, dtype=array.dtype)


def test_shape_and_dtype_errors_are_raised_on_the_client_first(client: Client,
                                                               m: rv.Module) -> None:
    x, y, w, b = rows()
    parallel = rv.dask.value_and_grad(m.mse, "w", batch=("x", "y"))
    cases = [
        ((x, y[:40], w, b), (lazy(x), split(y[:40], (20, 20)), w, b)),   # N: 50 and 40
        ((x, y, w[:3], b), (lazy(x), lazy(y), w[:3], b)),               # D: 4 and 3
        ((x, y.astype(complex), w, b), (lazy(x), lazy(y.astype(complex)), w, b)),  # dtype
        ((x, y, w), (lazy(x), lazy(y), w)),                              # arity
    ]
    for local_args, parallel_args in cases:
        with pytest.raises((TypeError, ValueError)) as local:
            m.mse(*local_args)  # the kernel's own messages
        with pytest.raises(type(local.value)) as remote:
            parallel(*parallel_args)
        assert str(remote.value) == str(local.value)


def test_misuse_is_explained(client: Client, m: rv.Module) -> None:
    x, y, w, b = rows()
    with pytest.raises(TypeError, match="takes a dask array"):
        rv.dask.grad(m.mse, "w", batch="x")(x, split(y), w, b)
    with pytest.raises(ValueError, match="batch parameter 'x'"):
        rv.dask.grad(m.mse, "x", batch="x")
    with pytest.raises(ValueError, match="reduce must be one of"):
        rv.dask.grad(m.mse, "w", batch="x", reduce="max")
    with pytest.raises(ValueError, match="name the batch parameters"):
        rv.dask.grad(m.mse, "w")
    with pytest.raises(ValueError, match="no parameter 'z'"):
        rv.dask.grad(m.mse, "w", batch="z")
    with pytest.raises(ValueError, match="vjp"):
        rv.dask.grad(m.predict, "w", batch="x")


def call(kernel: rv.Kernel, args: tuple) -> object:
    """Run on a worker: the kernel, unpickled there, on `args`."""
    return kernel(*args)


def test_every_kernel_kind_runs_on_a_worker(client: Client, m: rv.Module) -> None:
    kinds = kernels_and_arguments(m)
    expected = {kind: kernel(*args) for kind, (kernel, args) in kinds.items()}
    futures = {kind: client.submit(call, kernel, args, pure=False)
               for kind, (kernel, args) in kinds.items()}
    for kind, future in futures.items():
        assert_same(future.result(), expected[kind], F64)


def test_the_example_fits_on_the_cluster(client: Client) -> None:
    spec = importlib.util.spec_from_file_location("dask_fit", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    warm = rv.compile(example.MODEL, name="dask_fit.rv").logistic_loss  # the disk cache
    warm.value_and_grad(("w", "b"))(*example.make_chunk(0, 10, 8, 0), np.zeros(8, "f4"), 0.0)
    losses = example.fit(rows=30_000, chunk_rows=7_000, features=8, steps=4)
    assert len(losses) == 4 and all(b < a for a, b in zip(losses, losses[1:], strict=False))
