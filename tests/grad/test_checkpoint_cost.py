"""Checkpointing whose segment length is computed at call time (SPEC §2.6, issue 12 item 5).

A checkpointed loop whose trip count T is a dimension (`for t in 0..T - 1`, an i64
argument) keeps ⌈√T⌉ checkpoints and re-runs one segment of ⌈√T⌉ states at a time, so
its gradient costs O(T) body evaluations, at most about twice the stored-states gradient,
whatever T is. The cost is counted in the reference interpreter as evaluated ops; ⌈√T⌉
itself must be exact, and the same, in the workspace layout (Python) and the kernel (LLVM).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llvmlite.binding as llvm
import numpy as np
import pytest
from grad_helpers import grad, specialise
from llvmlite import ir

from reverie.compiler.codegen.irutil import I64, index_value
from reverie.compiler.ir.core import Block, Function
from reverie.compiler.ir.dims import Dim, ceil_sqrt, nonnegative, python_expr
from reverie.compiler.ir.interpreter import Interpreter
from reverie.compiler.transforms.reverse import grad_function

SCAN = """
fn f(xs: f64[C], w: f64, h0: f64) -> f64 {
    var h = h0;
    for t in 0..C - 1 { h = tanh(w * h + xs[t]); }
    return h * h;
}
"""
STEPS = """
fn f(xs: f64[C], w: f64, h0: f64, steps: i64) -> f64 {
    var h = h0;
    for t in 0..steps { h = tanh(w * h + xs[t % C]); }
    return h * h;
}
"""
RUNTIME = STEPS.replace("steps: i64", "steps: i32")


class CountingInterpreter(Interpreter):
    """The reference interpreter, counting every op it evaluates."""

    evaluated = 0

    def run_block(self, block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.evaluated += len(block.ops)
        return super().run_block(block, args)


def _cost(fn: Function, args: list, dims: dict[str, int]) -> int:
    """Ops evaluated by one call of `fn` (dimensions bound by i64 arguments included)."""
    interpreter = CountingInterpreter({**dims, **{s: int(args[i]) for s, i in fn.value_dims}})
    with np.errstate(all="ignore"):
        interpreter.run_block(fn.body, [np.asarray(a) for a in args])
    return interpreter.evaluated


def _args(steps: int, integer: type = np.int64) -> tuple[list, dict[str, int]]:
    rng = np.random.default_rng(steps)
    xs = 0.5 * rng.standard_normal(max(steps, 1))
    return [xs, np.float64(0.8), np.float64(0.3), integer(steps)], {"C": xs.size}


def test_ceil_sqrt_is_the_least_root_bound() -> None:
    """ceil_sqrt(n) is the least s ≥ 0 with s² ≥ n, also symbolically and as Python source."""
    for n in [*range(-3, 200), 2**52 - 1, 2**52, 2**52 + 1, (2**26 + 1) ** 2]:
        s = ceil_sqrt(n)
        assert s * s >= n and (s == 0 or (s - 1) ** 2 < n), n
    t = Dim.sym("T")
    dim = ceil_sqrt(nonnegative(t - 1))
    assert str(dim) == "ceil_sqrt(T - 1)"
    for n in range(0, 50):
        assert dim.evaluate({"T": n}) == eval(python_expr(dim, lambda name: name), {"T": n}) \
            == ceil_sqrt(n - 1)
    assert ceil_sqrt(Dim.const(17)) == Dim.const(5)


@pytest.mark.parametrize("trip", [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 30])
def test_dimension_trip_counts_checkpoint_with_the_same_gradients(trip: int) -> None:
    fn = specialise(SCAN)
    xs = 0.5 * np.random.default_rng(trip).standard_normal(trip + 1)
    args, dims = [xs, np.float64(0.8), np.float64(0.3)], {"C": trip + 1}
    for a, b in zip(grad(fn, [0, 1, 2], args, dims),
                    grad(fn, [0, 1, 2], args, dims, checkpoint=True), strict=True):
        np.testing.assert_array_equal(a, b)


def test_checkpoints_and_segments_are_sized_at_call_time() -> None:
    g = grad_function(specialise(SCAN), [0, 1, 2], checkpoint=True)
    rows = [str(op.attrs["rows"]) for op in g.body.walk() if op.name == "for_history"]
    assert rows == ["ceil_sqrt(C - 1)", "ceil_sqrt(C - 1)"]


@pytest.mark.parametrize("steps", [100, 400])
def test_checkpointed_cost_is_at_most_twice_the_stored_cost(steps: int) -> None:
    fn = specialise(STEPS)
    args, dims = _args(steps)
    stored = _cost(grad_function(fn, [0, 1, 2]), args, dims)
    checkpointed = _cost(grad_function(fn, [0, 1, 2], checkpoint=True), args, dims)
    assert stored < checkpointed <= 2 * stored


def test_runtime_trip_counts_still_recompute_from_the_start() -> None:
    """An i32 trip count is no dimension: its states are recomputed, O(T^1.5) (the bound
    above is what the dimension case gains)."""
    fn = specialise(RUNTIME)
    args, dims = _args(400, np.int32)
    stored = _cost(grad_function(specialise(STEPS), [0, 1, 2]), _args(400)[0], dims)
    assert _cost(grad_function(fn, [0, 1, 2], checkpoint=True), args, dims) > 4 * stored


def test_compiled_ceil_sqrt_is_exact() -> None:
    """The kernel's ceil_sqrt (an f64 estimate, corrected) agrees with the workspace
    layout's integer one, also where the f64 square root rounds (near 2^52)."""
    module = ir.Module("ceil_sqrt")
    fn = ir.Function(module, ir.FunctionType(I64, [I64]), "f")
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.ret(index_value(builder, ceil_sqrt(Dim.sym("T")), lambda _: fn.args[0]))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), target)
    engine.finalize_object()
    compiled = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("f"))
    squares = [k * k + d for k in (1, 2, 3, 1000, 2**26 - 1, 2**26, 2**26 + 1)
               for d in (-1, 0, 1)]
    for n in [-5, 0, 1, 2, 3, *squares, 2**52 - 1, 2**53 + 1]:
        assert compiled(n) == ceil_sqrt(n), n
