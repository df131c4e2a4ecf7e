"""Modules and kernels pickle as source, name and transform (docs/api.md §10), every kind of them.

A pickle names only the module's source and options, function names and transform keys
(checked while unpickling: the only names it looks up are the rebuilding functions);
unpickling gives a kernel that computes what the original does. In a new process with the
disk cache filled, unpickling and calling parses nothing (the module's syntax tree is
never built). Also: `rv.dask` without a distributed client runs on Dask's local scheduler,
and a task that several batch arrays share runs once per chunk.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from dask_programs import SOURCE, kernels_and_arguments, rows

import reverie as rv
from reverie.kernel import Kernel

REBUILDERS = {("reverie.module", "unpickled_module"), ("reverie.kernel", "function_of"),
              ("reverie.kernel", "transform_of")}
ROOT = Path(__file__).resolve().parents[2]


def assert_same(got: object, expected: object) -> None:
    if isinstance(expected, tuple):
        for g, e in zip(got, expected, strict=True):
            assert_same(g, e)
    else:
        np.testing.assert_array_equal(got, expected)


class RecordingUnpickler(pickle.Unpickler):
    """An unpickler that notes every (module, name) the pickle looks up."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.looked_up: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> object:
        self.looked_up.add((module, name))
        return super().find_class(module, name)


def test_every_kernel_kind_round_trips() -> None:
    m = rv.compile(SOURCE)
    for kind, (kernel, args) in kernels_and_arguments(m).items():
        data = pickle.dumps(kernel)
        unpickler = RecordingUnpickler(data)
        copy = unpickler.load()
        assert unpickler.looked_up <= REBUILDERS, kind
        assert len(data) < 2 * len(SOURCE), kind  # a recipe, not code
        assert copy.name == kernel.name and copy.identity == kernel.identity, kind
        assert_same(copy(*args), kernel(*args))


def test_a_process_unpickles_one_module_per_source() -> None:
    m = rv.compile(SOURCE)
    data = pickle.dumps((m.mse.grad("w"), m.predict))
    (first, second), (again, _) = pickle.loads(data), pickle.loads(data)
    assert first.derivation[0].module is second.module is again.derivation[0].module
    assert again is first  # the transform was found in the rebuilt module's cache
    assert pickle.loads(pickle.dumps(m)).kernels.keys() == m.kernels.keys()


def test_a_new_process_rebuilds_from_the_disk_cache_without_parsing(tmp_path: Path) -> None:
    m = rv.compile(SOURCE)
    kinds = kernels_and_arguments(m)
    expected = [kernel(*args) for kernel, args in kinds.values()]  # fills the disk cache
    payload = tmp_path / "kernels.pickle"
    payload.write_bytes(pickle.dumps([(kernel, args) for kernel, args in kinds.values()]))
    script = (f"import pickle, sys\nkernels = pickle.loads(open({str(payload)!r}, 'rb').read())\n"
              "results = [kernel(*args) for kernel, args in kernels]\n"
              "parsed = any('ast' in kernel.module.__dict__ for kernel, _ in kernels)\n"
              f"open({str(tmp_path / 'out')!r}, 'wb').write(pickle.dumps((results, parsed)))\n")
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=300)
    results, parsed = pickle.loads((tmp_path / "out").read_bytes())
    assert not parsed
    for got, want in zip(results, expected, strict=True):
        assert_same(got, want)


def test_a_kernel_made_by_hand_does_not_pickle() -> None:
    m = rv.compile(SOURCE)
    stray = Kernel(m, "stray", ["x"], ["f64"], lambda dtype: m.lowering.specialise("score",
                                                                                   dtype))
    with pytest.raises(pickle.PicklingError, match="cannot be rebuilt"):
        pickle.dumps(stray)


made: list[int] = []


def make_rows(index: int, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunk `index` of (x, y), counted in `made`."""
    made.append(index)
    return x[10 * index:10 * index + 10], y[10 * index:10 * index + 10]


def test_without_a_client_dask_runs_locally_and_shared_work_once() -> None:
    m = rv.compile(SOURCE)
    x, y, w, b = rows()
    pieces = [dask.delayed(make_rows, nout=2)(i, x, y) for i in range(5)]
    xs = da.concatenate([da.from_delayed(p[0], (10, 4), x.dtype) for p in pieces])
    ys = da.concatenate([da.from_delayed(p[1], (10,), y.dtype) for p in pieces])
    got = rv.dask.value_and_grad(m.mse, "w", batch=("x", "y"), reduce="mean")(xs, ys, w, b)
    assert sorted(made) == [0, 1, 2, 3, 4]  # each chunk's task ran once for both arrays
    value, dw = m.mse.value_and_grad("w")(x, y, w, b)
    np.testing.assert_allclose(got[0], value, rtol=1e-12)
    np.testing.assert_allclose(got[1], dw, rtol=1e-12)
