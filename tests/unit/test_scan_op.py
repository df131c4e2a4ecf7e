"""The `scan` op (cumsum and cumprod, `ir/ops_scan.py`) at every level, and its O(n) cost.

Forward and reverse scans along every axis of a rank-3 tensor, in f32 (which accumulates
in f64), f64 and i32, agree between NumPy, the reference interpreter, the loop-IR
interpreter and the native JIT; where `mlir-opt-19` is installed the MLIR backend agrees
too, and the export carries the running value in `scf.for`'s `iter_args`. Batching moves
the axis (a Jacobian against torch's, at zeros). Long axes: a cumsum of 10⁶ elements and
its gradient run as single passes (checked for their values, not timed). Gradients at
zeros and ties to second order are in `tests/grad/test_grad_scans.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from level_helpers import every_level

import reverie as rv
from reverie.compiler.export.mlir import export_mlir
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops_scan import scan_array
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.ir.types import TensorType
from reverie.runtime.native.mlir_to_llvm import mlir_tools

SHAPE = (3, 4, 5)
CASES = [(kind, axis, reverse) for kind in ("sum", "prod") for axis in range(3)
         for reverse in (False, True)]


def scan_function(dtype: str, kind: str, axis: int, reverse: bool) -> Function:
    """fn f(x: dtype[3, 4, 5]) -> dtype[3, 4, 5] { return scan(x); } as tensor IR."""
    x = Value(TensorType(dtype, tuple(map(Dim.const, SHAPE))), name="x")
    block = Block(params=[x])
    scope = Scope(block)
    block.results = [scope.op("scan", [x], {"axis": axis, "kind": kind, "reverse": reverse})]
    fn = Function("f", block, ["x"])
    verify_function(fn)
    return fn


def operand(dtype: str, kind: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype == "i32":
        return rng.integers(-3, 4, SHAPE).astype(np.int32)
    x = rng.uniform(0.5, 1.5, SHAPE) if kind == "prod" else rng.standard_normal(SHAPE)
    return x.astype(np.float32 if dtype == "f32" else np.float64)


def numpy_scan(x: np.ndarray, kind: str, axis: int, reverse: bool) -> np.ndarray:
    wide = x.astype(np.float64) if x.dtype == np.float32 else x
    run = np.cumsum if kind == "sum" else np.cumprod
    out = np.flip(run(np.flip(wide, axis), axis), axis) if reverse else run(wide, axis)
    return out.astype(x.dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32"])
@pytest.mark.parametrize(("kind", "axis", "reverse"), CASES)
def test_every_level_agrees_with_numpy(dtype: str, kind: str, axis: int, reverse: bool) -> None:
    fn = scan_function(dtype, kind, axis, reverse)
    x = operand(dtype, kind)
    want = numpy_scan(x, kind, axis, reverse)
    interpreted, looped, native = every_level(fn, [x])
    for got in (interpreted, looped, native):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(native, looped)


def test_f32_accumulates_in_f64() -> None:
    x = np.full(10**5, 0.1, dtype=np.float32)
    exact = np.cumsum(x.astype(np.float64)).astype(np.float32)
    assert not np.array_equal(np.cumsum(x), exact)   # an f32 accumulator drifts
    np.testing.assert_array_equal(scan_array("sum", x, 0, False), exact)
    module = rv.compile("fn f(x: f32[N]) -> f32[N] { return cumsum(x); }")
    np.testing.assert_array_equal(module.f(x), exact)


def test_a_million_elements_in_one_pass() -> None:
    module = rv.compile("""
    fn running(x: f64[N]) -> f64[N] { return cumsum(x); }
    fn growth(x: f64[N]) -> f64[N] { return cumprod(1.0 + x); }
    """)
    x = np.random.default_rng(3).standard_normal(10**6) * 1e-6
    np.testing.assert_allclose(module.running(x), np.cumsum(x), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(module.growth(x), np.cumprod(1.0 + x), rtol=1e-9)
    assert module.lowering.specialise("running", "f64").body.ops[0].name == "scan"


def test_the_gradient_of_a_long_cumsum_is_a_reverse_scan() -> None:
    module = rv.compile("fn f(x: f64[N], w: f64[N]) -> f64 { return sum(cumsum(x) * w); }")
    x, w = np.zeros(10**6), np.random.default_rng(4).standard_normal(10**6)
    want = np.flip(np.cumsum(np.flip(w)))
    np.testing.assert_allclose(module.f.grad(wrt="x")(x, w), want, rtol=1e-9, atol=1e-9)


def test_batching_moves_the_axis() -> None:
    """The Jacobian is the JVP batched over the basis tangents (`transforms/jacobian.py`)."""
    module = rv.compile("fn f(x: f64[N]) -> f64[N] { return cumprod(x) + cumsum(x * x); }")
    x = np.array([2.0, 0.0, -1.0, 0.5, 0.0, 3.0])

    def reference(t: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(t, 0) + torch.cumsum(t * t, 0)

    want = torch.autograd.functional.jacobian(reference, torch.tensor(x)).numpy()
    np.testing.assert_allclose(module.f.jacobian(wrt="x")(x), want, atol=1e-12)


def test_mlir_export_carries_the_running_value_in_iter_args() -> None:
    text = export_mlir(scan_function("f32", "sum", 1, True))
    assert "iter_args" in text and "arith.extf" in text and "arith.truncf" in text


@pytest.mark.skipif(mlir_tools() is None, reason="mlir-opt-19 not installed "
                    "(apt-get install mlir-19-tools)")
def test_the_mlir_backend_agrees() -> None:
    module = rv.compile("""
    fn f(x: f64[B, N], w: f64[B, N]) -> f64[B, N] {
        return cumsum(x, axis=0) * cumprod(x, axis=1) + cumsum(w, axis=1);
    }""", backend="mlir")
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    want = np.cumsum(x, 0) * np.cumprod(x, 1) + np.cumsum(w, 1)
    np.testing.assert_allclose(module.f(x, w), want, rtol=1e-12)
    gradient = rv.compile("fn g(x: f64[N], w: f64[N]) -> f64 { return sum(cumsum(x) * w); }",
                          backend="mlir").g.grad(wrt="x")   # a reverse scan
    np.testing.assert_allclose(gradient(x[0], w[0]), np.flip(np.cumsum(np.flip(w[0]))),
                               rtol=1e-12)
