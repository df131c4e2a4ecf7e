"""The `argsort` op (`ir/ops_sort.py`) at every level, and sort/argsort/topk at length 10⁵.

The permutation must be torch.sort(stable=True)'s, with ties, NaN (last ascending, first
descending, all tied), -0.0 tied with +0.0 and ±inf, for every key dtype, along every
axis of a rank-3 tensor (strided lines), at lengths around the merge sort's insertion
runs: the reference interpreter (NumPy's stable sort), the loop-IR interpreter and the
native kernel (the merge-sort helper, `runtime_library/sort.py`) agree with torch and with each
other; batching moves the axis; where `mlir-opt-19` is installed the MLIR export (which
counts ranks, O(n²)) agrees on small lines. At n = 10⁵ (10¹⁰ comparisons for the old
rank counting) the compiled functions match torch in a second or so; the loop program
holds one `Sort` call per line and no quadratic nest. Gradients are in
`tests/grad/test_grad_sort.py`, the helper on guarded memory in
`tests/native/test_sort_native.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from level_helpers import every_level

import reverie as rv
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.ir.types import NUMPY_DTYPES, ShapeError, TensorType
from reverie.compiler.loops.ir import Loop, Sort
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.transforms.batch import batch_function
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.mlir_to_llvm import mlir_tools
from reverie.runtime.native.native_kernel import native_kernel

DTYPES = ["f32", "f64", "i32", "i64"]


def tied(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Values with many ties; floats also hold NaN (both signs), ±0.0 and ±inf."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("i"):
        info = np.iinfo(NUMPY_DTYPES[dtype])
        pool = np.array([info.min, info.max, -3, -1, 0, 1, 2, 5], NUMPY_DTYPES[dtype])
    else:
        pool = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, -1.5, 1.5, 2.0, 7.0],
                        NUMPY_DTYPES[dtype])
    return rng.choice(pool, shape)


def torch_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    return torch.sort(torch.from_numpy(np.ascontiguousarray(x)), dim=axis,
                      descending=descending, stable=True).indices.numpy()


def argsort_function(dtype: str, shape: tuple[int, ...], axis: int,
                     descending: bool) -> Function:
    """fn f(x: dtype[shape]) -> i64[shape] { return argsort(x); } as tensor IR."""
    x = Value(TensorType(dtype, tuple(map(Dim.const, shape))), name="x")
    block = Block(params=[x])
    block.results = [Scope(block).op("argsort", [x], {"axis": axis,
                                                      "descending": descending})]
    fn = Function("f", block, ["x"])
    verify_function(fn)
    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("descending", [False, True])
def test_every_level_agrees_with_torch(dtype: str, axis: int, descending: bool) -> None:
    shape = [3, 4, 5]
    shape[axis] = 37   # two insertion runs and a partial one, then two merge passes
    fn = argsort_function(dtype, tuple(shape), axis, descending)
    x = tied(tuple(shape), dtype)
    want = torch_argsort(x, axis, descending)
    interpreted, looped, native = every_level(fn, [x])
    for got in (interpreted, looped, native):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 32, 33, 100, 1000])
@pytest.mark.parametrize("descending", [False, True])
def test_lengths_around_the_runs_and_merges(n: int, descending: bool) -> None:
    fn = argsort_function("f64", (2, n), 1, descending)
    x = tied((2, n), "f64", seed=n)
    (native,) = native_kernel(fn)(bind_arguments(fn, [x]))
    np.testing.assert_array_equal(native, torch_argsort(x, 1, descending))


def test_the_native_program_sorts_each_line_with_one_call() -> None:
    source = "fn f(x: f64[B, N]) -> f64[B, N] { return sort(x, axis=0, descending=true); }"
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    program = compile_function(fn, "to_loops")
    sorts = [s for s in program.walk() if isinstance(s, Sort)]
    assert len(sorts) == 1 and sorts[0].descending
    assert sorts[0].keys.strides == (Dim.sym("N"),)        # a column, read in place
    # one loop over the columns around the sort and the gather's nest (two loops): no
    # nest over pairs of elements
    loops = [s for s in program.walk() if isinstance(s, Loop)]
    assert len(loops) == 3, format_program(program)


LONG = """
fn sorted(x: float[N]) -> float[N] { return sort(x); }
fn order(x: float[B, N]) -> i64[B, N] { return argsort(x, descending=true); }
fn top(x: float[B, N]) -> float[B, 5] { return topk(x, 5); }
fn int_order(x: i64[N]) -> i64[N] { return argsort(x); }
"""


@pytest.mark.parametrize("backend", ["interp", "native"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_length_100_000_matches_torch(backend: str, dtype: str) -> None:
    module = rv.compile(LONG, backend=backend)
    n = 10**5
    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal(n), 2).astype(NUMPY_DTYPES[dtype])   # many ties
    x[rng.integers(0, n, 100)] = np.nan
    x[rng.integers(0, n, 100)] = -0.0
    rows = np.stack([x, x[::-1], tied((n,), dtype)])
    t, trows = torch.from_numpy(x), torch.from_numpy(rows)
    np.testing.assert_array_equal(module.sorted(x), torch.sort(t, stable=True).values)
    np.testing.assert_array_equal(module.order(rows),
                                  torch.sort(trows, descending=True, stable=True).indices)
    np.testing.assert_array_equal(
        module.top(rows), torch.sort(trows, descending=True, stable=True).values[:, :5])
    ints = rng.integers(-50, 50, n)
    np.testing.assert_array_equal(module.int_order(ints),
                                  torch.sort(torch.from_numpy(ints), stable=True).indices)


def test_batching_moves_the_axis() -> None:
    fn = argsort_function("f64", (4, 6), 0, True)
    batched = batch_function(fn, [0])
    x = tied((3, 4, 6), "f64")
    (got,) = interpret(batched, [x], {"B": 3})
    want = np.stack([torch_argsort(row, 0, True) for row in x])
    np.testing.assert_array_equal(got, want)


def test_ill_typed_argsorts_are_shape_errors() -> None:
    for dtype, axis, message in (("bool", 0, "numeric"), ("f64", 1, "out of range")):
        x = Value(TensorType(dtype, (Dim.const(3),)), name="x")
        with pytest.raises(ShapeError, match=message):
            Scope(Block(params=[x])).op("argsort", [x], {"axis": axis, "descending": False})


@pytest.mark.skipif(mlir_tools() is None, reason="needs mlir-opt-19 and mlir-translate-19")
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_the_mlir_backend_agrees_at_ties_and_nan(dtype: str) -> None:
    source = """
    fn up(x: float[B, N]) -> i64[B, N] { return argsort(x); }
    fn down0(x: float[B, N]) -> i64[B, N] { return argsort(x, axis=0, descending=true); }
    fn ints(i: i32[N]) -> i64[N] { return argsort(i, descending=true); }
    """
    module = rv.compile(source, backend="mlir")
    x = tied((6, 40), dtype)
    np.testing.assert_array_equal(module.up(x), torch_argsort(x, 1, False))
    np.testing.assert_array_equal(module.down0(x), torch_argsort(x, 0, True))
    i = tied((40,), "i32")
    np.testing.assert_array_equal(module.ints(i), torch_argsort(i, 0, True))
