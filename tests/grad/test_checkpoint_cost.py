"""Checkpointing whose segment length is computed at call time (docs/language.md §11, issue 12
item 5).

A checkpointed loop whose trip count T is a dimension (`for t in 0..T - 1`, an i64
argument) keeps ⌈√T⌉ checkpoints and re-runs one segment of ⌈√T⌉ states at a time, so
its gradient costs O(T) body evaluations, at most about twice the stored-states gradient,
whatever T is. A count known only at run time (an i32 argument, a `while`'s) gets a trip
dimension (`ir/capacity.py`) and the same two strategies: stored within 1.5× and
checkpointed within 2× of the dimension case's stored gradient. The cost is counted in the
reference interpreter as evaluated ops; ⌈√T⌉ itself must be exact, and the same, in the
workspace layout (Python) and the kernel (LLVM).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llvmlite.binding as llvm
import numpy as np
import pytest
from grad_helpers import grad, specialise
from llvmlite import ir

from reverie.compiler.backend.irutil import I64, index_value
from reverie.compiler.ir.capacity import run_with_capacity, trip_symbols
from reverie.compiler.ir.core import Block, Function
from reverie.compiler.ir.dims import Dim, ceil_sqrt, nonnegative, python_expr
from reverie.compiler.ir.tensor_interpreter import Interpreter
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
WHILE = """
fn f(xs: f64[C], w: f64, h0: f64, steps: i64) -> f64 {
    var h = h0;
    var t = 0;
    while t < steps { h = tanh(w * h + xs[t % C]); t = t + 1; }
    return h * h;
}
"""


class CountingInterpreter(Interpreter):
    """The reference interpreter, counting every op it evaluates."""

    evaluated = 0

    def run_block(self, block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.evaluated += len(block.ops)
        return super().run_block(block, args)


def _cost(fn: Function, args: list, dims: dict[str, int]) -> int:
    """Ops evaluated by one call of `fn` (dimensions bound by i64 arguments included), with
    its trip dimensions already large enough (as in every call after a kernel's first)."""
    runs: list[CountingInterpreter] = []

    def run(sizes: dict[str, int]) -> list[np.ndarray]:
        runs.append(CountingInterpreter(sizes))
        with np.errstate(all="ignore"):
            return runs[-1].run_block(fn.body, [np.asarray(a) for a in args])

    bound = {**dims, **{s: int(args[i]) for s, i in fn.value_dims}}
    run_with_capacity(run, bound, trip_symbols(fn.body))
    return runs[-1].evaluated


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


@pytest.mark.parametrize("steps", [100, 400, 1600])
@pytest.mark.parametrize(("source", "bound"), [(RUNTIME, 1.1), (WHILE, 1.6)],
                         ids=["i32", "while"])
def test_runtime_trip_counts_cost_as_much_as_dimension_counts(source: str, bound: float,
                                                              steps: int) -> None:
    """Against the dimension loop's stored gradient: an i32 count costs a few ops more; a
    `while` runs once more forward (its condition and counter included: 1.54× in ops,
    1.35-1.46× in time, benchmarks/README.md), since its states are stored once its count
    is known. Checkpointed: within 2× its own stored gradient."""
    integer = np.int32 if source == RUNTIME else np.int64
    args, dims = _args(steps, integer)
    reference = _cost(grad_function(specialise(STEPS), [0, 1, 2]), _args(steps)[0], dims)
    fn = specialise(source)
    stored = _cost(grad_function(fn, [0, 1, 2]), args, dims)
    checkpointed = _cost(grad_function(fn, [0, 1, 2], checkpoint=True), args, dims)
    assert reference < stored <= bound * reference
    assert stored < checkpointed <= 2 * stored


@pytest.mark.parametrize("trip", [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 30])
@pytest.mark.parametrize("source", [RUNTIME, WHILE], ids=["i32", "while"])
def test_runtime_trip_counts_checkpoint_with_the_same_gradients(source: str, trip: int) -> None:
    fn = specialise(source)
    args, dims = _args(trip, np.int32 if source == RUNTIME else np.int64)
    want = grad(specialise(STEPS), [0, 1, 2], _args(trip)[0], dims)
    for checkpoint in (False, True):
        for a, b in zip(grad(fn, [0, 1, 2], args, dims, checkpoint=checkpoint), want,
                        strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("source", "rows"), [
    (WHILE, ["#T0"]), (RUNTIME, ["#T0"])], ids=["while", "i32"])
def test_runtime_trip_counts_store_a_history_of_their_trip_dimension(
        source: str, rows: list[str]) -> None:
    fn = specialise(source)
    stored = grad_function(fn, [0, 1, 2])
    assert [str(op.attrs["rows"]) for op in stored.body.walk()
            if op.name == "for_history"] == rows
    checkpointed = grad_function(fn, [0, 1, 2], checkpoint=True)
    assert [str(op.attrs["rows"]) for op in checkpointed.body.walk()
            if op.name == "for_history"] == ["ceil_sqrt(#T0)"] * 2


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
