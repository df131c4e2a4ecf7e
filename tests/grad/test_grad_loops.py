"""Reverse mode through `for` loops: stored histories, checkpoints, recomputation.

All three strategies must give the same gradients, bit for bit, and match differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import assert_jacobians_match, grad, run, specialise

from reverie.compiler.ir.core import Function
from reverie.compiler.transforms.reverse import grad_function

RNG = np.random.default_rng(3)

RNN = """
fn f(W: f64[H, H], xs: f64[T, H], h0: f64[H]) -> f64 {
    var h = h0;
    for t in 0..T { h = tanh(W @ h + xs[t]); }
    return sum(h * h);
}
"""
RNN_ARG = """
fn f(W: f64[H, H], xs: f64[T, H], h0: f64[H], steps: i64) -> f64 {
    var h = h0;
    for t in 0..steps { h = tanh(W @ h + xs[t]); }
    return sum(h * h);
}
"""
TWO_STATES = """
fn f(W: f64[H, H], xs: f64[T, H], h0: f64[H]) -> f64 {
    var h = h0;
    var energy = 0.0;
    var count = 0;
    for t in 0..11 {
        h = tanh(W @ h + xs[t % T]);
        energy = energy + sum(h * h);
        count = count + 1;
    }
    return sum(h) + energy / f64(count);
}
"""
NESTED = """
fn f(W: f64[H, H], h0: f64[H]) -> f64 {
    var h = h0;
    for s in 0..3 {
        var g = h * 0.5;
        for t in 0..4 { g = sin(W @ g) + h; }
        h = tanh(g);
    }
    return sum(h);
}
"""
STENCIL_IN_LOOP = """
fn f(u0: f64[N], k: f64[3]) -> f64 {
    var u = u0;
    for t in 0..4 {
        let v[i in 0..N] = sum[j](u[i + j - 1] * k[j]);
        u = 0.5 * u + tanh(v);
    }
    return sum(u * u);
}
"""
HEAT = """
fn f(u0: f64[N], alpha: f64, steps: i64) -> f64 {
    var u = u0;
    for t in 0..steps {
        u = u + alpha * (roll(u, 1) - 2.0 * u + roll(u, -1));
    }
    return sum(u * u);
}
"""


def _args(fn: Function, dims: dict[str, int]) -> list[np.ndarray]:
    args = []
    for p in fn.params:
        if p.type.is_float:
            shape = tuple(d.evaluate(dims) for d in p.type.shape)
            args.append(0.6 * RNG.standard_normal(shape))
        else:
            args.append(np.int64(dims["steps"]))
    return args


LOOPS = {
    "rnn": (RNN, {"H": 3, "T": 5}),
    "rnn_runtime_trip": (RNN_ARG, {"H": 3, "T": 6, "steps": 5}),
    "two_states": (TWO_STATES, {"H": 2, "T": 3}),
    "nested": (NESTED, {"H": 2, "T": 3}),
    "stencil_in_loop": (STENCIL_IN_LOOP, {"N": 4}),
    "heat": (HEAT, {"N": 5, "steps": 7}),
}


@pytest.mark.parametrize("case", sorted(LOOPS))
def test_loop_gradient_matches_differences(case: str) -> None:
    source, dims = LOOPS[case]
    fn = specialise(source)
    args = _args(fn, dims)
    if case == "heat":
        args[1] = np.float64(0.2)
    assert_jacobians_match(fn, args, dims, wrt=[i for i, p in enumerate(fn.params)
                                                if p.type.is_float])


@pytest.mark.parametrize("case", sorted(LOOPS))
def test_checkpointed_gradients_equal_stored_ones_exactly(case: str) -> None:
    source, dims = LOOPS[case]
    fn = specialise(source)
    args = _args(fn, dims)
    wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    stored = grad(fn, wrt, args, dims)
    checkpointed = grad(fn, wrt, args, dims, checkpoint=True)
    for a, b in zip(stored, checkpointed, strict=True):
        np.testing.assert_array_equal(a, b)


def _history_rows(fn: Function) -> list[str]:
    return [str(op.attrs["rows"]) for op in fn.body.walk() if op.name == "for_history"]


def test_stored_mode_keeps_every_state() -> None:
    assert _history_rows(grad_function(specialise(RNN), [0])) == ["T"]


@pytest.mark.parametrize("trip", [1, 2, 9, 10, 17])
def test_checkpointing_keeps_about_sqrt_t_states(trip: int) -> None:
    source = RNN.replace("0..T", f"0..{trip}").replace("xs[t]", "xs[t % T]")
    fn = specialise(source)
    g = grad_function(fn, [0, 1, 2], checkpoint=True)
    segment = int(np.ceil(np.sqrt(trip)))
    segments = -(-trip // segment)
    assert _history_rows(g) == ([str(segments), str(segment)] if segment > 1 else ["1"])
    args = _args(fn, {"H": 2, "T": 3})
    dims = {"H": 2, "T": 3}
    stored = grad(fn, [0, 1, 2], args, dims)
    for a, b in zip(stored, run(g, args, dims)[1:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_i64_trip_counts_are_dimensions_and_store_history() -> None:
    g = grad_function(specialise(RNN_ARG), [0])
    assert _history_rows(g) == ["max(steps, 0)"]


def test_runtime_trip_counts_store_a_history_of_a_trip_dimension() -> None:
    """An i32 trip count is a run-time value, not a dimension: its history is sized by a
    trip dimension (`ir/capacity.py`) that the call grows to the count."""
    g = grad_function(specialise(RNN_ARG.replace("steps: i64", "steps: i32")), [0])
    assert _history_rows(g) == ["#T0"]


def test_zero_iterations_pass_the_cotangent_through() -> None:
    fn = specialise(RNN_ARG)
    W, xs, h0 = (RNG.standard_normal(s) for s in [(2, 2), (3, 2), (2,)])
    grads = grad(fn, [0, 1, 2], [W, xs, h0, np.int64(0)], {"H": 2, "T": 3})
    np.testing.assert_array_equal(grads[0], np.zeros((2, 2)))
    np.testing.assert_array_equal(grads[2], 2 * h0)


def test_loop_invariant_without_dependence_gets_zeros() -> None:
    fn = specialise("""
        fn f(x: f64[N], unused: f64[N]) -> f64 {
            var u = x;
            for t in 0..3 { u = u * u; }
            return sum(u);
        }""")
    x = RNG.uniform(0.5, 1.0, 3)
    gx, gu = grad(fn, [0, 1], [x, x], {"N": 3})
    np.testing.assert_allclose(gx, 8 * x ** 7)
    np.testing.assert_array_equal(gu, np.zeros(3))
