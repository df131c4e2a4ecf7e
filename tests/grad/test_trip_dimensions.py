"""Reverse mode through run-time trip counts stores their states (docs/language.md §11, §2.7).

A `while`'s trip count, or a `for` bound no dimension expression gives, sizes its history
by a trip dimension (`compiler/ir/capacity.py`): every runner starts it at the capacity it
remembers and grows it when a count does not fit. These tests check the gradients on every
backend (against finite differences of the primal and against each other), the capacity a
native kernel keeps between calls, the memory it takes (every state by default, O(√T)
with `checkpoint=True`), the iteration limit, nested and repeated loops, and batching.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import assert_jacobians_match, run, specialise, vjp_jacobian

import reverie as rv
from reverie.compiler.ir.capacity import CapacityError, run_with_capacity
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.reverse import grad_function, vjp_function
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.mlir_to_llvm import mlir_tools
from reverie.runtime.native.native_kernel import NativeKernel

BACKENDS = ["interp", "native"] + (["mlir"] if mlir_tools() is not None else [])

DECAY = """
fn f(x: f64[N], w: f64[N]) -> f64 {
    var u = x;
    var r = max(abs(x));
    while r > 0.01 { u = tanh(u * w) + 0.1; r = r * 0.5; }
    return sum(u * u);
}
"""
# A `while` inside a `for`: its trip count changes from one outer iteration to the next.
NESTED = """
fn f(x: f64[N], w: f64[N]) -> f64 {
    var u = x;
    for k in 0..3 {
        var r = 1.0 + f64(k) * max(abs(u));
        while r > 0.1 { u = sin(u * w) + 0.2; r = r * 0.5; }
    }
    return sum(u * u);
}
"""
# Two loops with run-time counts: a `while` then a `for` up to a computed bound.
SEQUENCE = """
fn f(x: f64[N], w: f64[N]) -> f64 {
    var u = x;
    var n = 0;
    while n < 4 { u = tanh(u * w); n = n + 1; }
    for t in 0..n * 2 { u = u * w + 0.1 * cos(u); }
    return sum(u * u);
}
"""
HEAT = """
fn heat(u0: f64[N], steps: i64) -> f64 {
    var u = u0;
    var t = 0;
    while t < steps {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)) - 0.01 * u * u * u;
        t = t + 1;
    }
    return sum(u * u);
}
"""
PROGRAMS = {"decay": DECAY, "nested": NESTED, "sequence": SEQUENCE}


def _args(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(5) * 1.5, rng.uniform(0.5, 1.0, 5)]


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("name", PROGRAMS)
def test_gradients_match_finite_differences(name: str, checkpoint: bool) -> None:
    fn, args = specialise(PROGRAMS[name]), _args(0)
    assert_jacobians_match(fn, args, {"N": 5}, rtol=1e-5, atol=1e-7)
    for a, b in zip(vjp_jacobian(fn, args, {"N": 5}, [0, 1], checkpoint=checkpoint),
                    vjp_jacobian(fn, args, {"N": 5}, [0, 1]), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", PROGRAMS)
def test_backends_and_checkpointing_agree(name: str) -> None:
    args = _args(1)
    want = rv.compile(PROGRAMS[name], backend="interp").f.grad()(*args)
    for backend in BACKENDS:
        for checkpoint in (False, True):
            got = rv.compile(PROGRAMS[name], backend=backend, checkpoint=checkpoint).f.grad()(
                *args)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_native_kernels_remember_the_capacity_they_grew_to() -> None:
    """The first call grows the trip dimension to its count; a smaller count fits; a larger
    one grows it to at least twice the old capacity (so growing counts retry rarely)."""
    module = rv.compile(HEAT)
    grad = module.heat.grad("u0")
    u0 = np.random.default_rng(2).uniform(-1, 1, 16)
    fn = grad.ir_for("f64")
    kernel = module.executable(fn)
    state = 16 * 8
    sizes = []
    for steps in (10, 4, 11, 40):
        grad(u0, np.int64(steps))
        sizes.append(kernel.workspace_bytes(bind_arguments(fn, [u0, np.int64(steps)]).dims))
    assert sizes[0] == sizes[1] >= 10 * state
    assert sizes[2] - sizes[1] >= 10 * state  # capacity 10 → 20
    assert sizes[3] - sizes[2] >= 20 * state  # 20 → 40


def _heat_gradient(checkpoint: bool, steps: int, n: int) -> tuple[np.ndarray, int]:
    module = rv.compile(HEAT, checkpoint=checkpoint)
    grad = module.heat.grad("u0")
    u0 = np.random.default_rng(0).uniform(-1, 1, n)
    result = grad(u0, np.int64(steps))
    fn = grad.ir_for("f64")
    dims = bind_arguments(fn, [u0, np.int64(steps)]).dims
    return result, module.executable(fn).workspace_bytes(dims)


def test_a_while_stores_every_state_or_checkpoints_root_t_of_them() -> None:
    steps, n = 400, 1000
    stored, stored_bytes = _heat_gradient(False, steps, n)
    checkpointed, checkpointed_bytes = _heat_gradient(True, steps, n)
    np.testing.assert_array_equal(checkpointed, stored)
    state = n * 8
    assert stored_bytes >= steps * state
    assert checkpointed_bytes <= 8 * int(np.sqrt(steps)) * state


@pytest.mark.parametrize("steps", [0, 1, 3, 4, 5, 15, 16, 17, 99, 100, 101])
def test_native_while_segments_match_stored_gradients_around_squares(steps: int) -> None:
    u0 = np.random.default_rng(steps).uniform(-1, 1, 8)
    stored = rv.compile(HEAT).heat.grad("u0")(u0, np.int64(steps))
    checkpointed = rv.compile(HEAT, checkpoint=True).heat.grad("u0")(u0, np.int64(steps))
    np.testing.assert_array_equal(checkpointed, stored)


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_iteration_limit_still_raises_in_reverse_mode(backend: str,
                                                          checkpoint: bool) -> None:
    module = rv.compile(HEAT, backend=backend, checkpoint=checkpoint, max_iterations=5)
    u0 = np.linspace(-1, 1, 4)
    assert np.all(np.isfinite(module.heat.grad("u0")(u0, np.int64(5))))
    with pytest.raises(RuntimeError, match="ran past 5 iterations"):
        module.heat.grad("u0")(u0, np.int64(6))


@pytest.mark.parametrize("backend", ["interp", "native"])
def test_batched_adjoints_of_a_while_match_each_element(backend: str) -> None:
    """The VJP batched over x and the cotangent, each element with its own trip count: one
    history of the largest count, each element reversing its own steps."""
    fn = specialise(DECAY)
    batched = batch_function(vjp_function(fn, [0, 1]), [0, 2])
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((4, 5)) * np.array([[0.1], [1.0], [3.0], [10.0]])
    w, cotangents = rng.uniform(0.5, 1.0, 5), rng.standard_normal(4)
    args = [xs, w, cotangents]
    bound = bind_arguments(batched, args)
    run = NativeKernel(batched) if backend == "native" else \
        (lambda b: interpret(batched, b.arrays, b.dims))
    _, x_bars, w_bars = run(bound)
    single = rv.compile(DECAY, backend="interp").f.grad()
    for b in range(4):
        x_bar, w_bar = single(xs[b], w)
        np.testing.assert_allclose(x_bars[b], cotangents[b] * x_bar, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(w_bars[b], cotangents[b] * w_bar, rtol=1e-10, atol=1e-14)


def test_capacity_errors_grow_the_trip_dimension_and_retry() -> None:
    calls = []

    def run(sizes: dict[str, int]) -> int:
        """A call whose counts need 9 rows (the first attempt meets a count of 7 first)."""
        calls.append(sizes["#T0"])
        if sizes["#T0"] < 9:
            raise CapacityError("#T0", 7 if sizes["#T0"] == 0 else 9)
        return sizes["#T0"]

    remembered: dict[str, int] = {}
    assert run_with_capacity(run, {"N": 3}, ["#T0"], remembered) == 14
    assert calls == [0, 7, 14] and remembered == {"#T0": 14}
    assert run_with_capacity(run, {"N": 3}, ["#T0"], remembered) == 14
    assert calls[3:] == [14]


@pytest.mark.parametrize("checkpoint", [False, True])
def test_reverse_over_reverse_through_a_while(checkpoint: bool) -> None:
    """The gradient's own `while` and trip-dimension histories differentiate again: the VJP
    of x ↦ f(x) + Σ x̄(x) matches its central differences."""
    fn = specialise(DECAY)
    g = grad_function(fn, [0, 1], checkpoint=checkpoint)
    second = vjp_function(g, [0], checkpoint=checkpoint)
    x, w = _args(6)
    seeds = [np.float64(1.0), np.ones(5), np.zeros(5)]
    got = run(second, [x, w, *seeds], {"N": 5})[-1]
    eps, want = 1e-6, []
    for i in range(5):
        step = np.eye(5)[i] * eps
        (fp, xp, _), (fm, xm, _) = (run(g, [x + sign * step, w], {"N": 5}) for sign in (1, -1))
        want.append((fp - fm + xp.sum() - xm.sum()) / (2 * eps))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
