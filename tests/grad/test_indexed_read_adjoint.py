"""The adjoint of `xs[t]` in a loop adds one row per step (`compiler/to_loops/accumulate.py`).

The reverse sweep accumulates x̄s += scatter(v, t) as a loop state; lowered as a carried
state, each step rewrote all of x̄s (O(T²) for the loop: 0.18 ms at T = 1000, 90 ms at
T = 16384). These tests check the work without timing it — no loop nested in a loop over
T iterates over T again — and the gradients against finite differences, the interpreter
and torch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import ForLoop, If, Loop, Program, WhileLoop
from reverie.runtime.native.native_kernel import native_kernel

SOURCE = """
fn scalar(xs: f64[T], w: f64, h0: f64) -> f64 {
    var h = h0;
    for t in 0..T { h = tanh(w * h + xs[t]); }
    return h;
}
fn lagged(xs: f64[T], w: f64, h0: f64) -> f64 {
    var h = h0;
    for t in 1..T { h = tanh(w * h + xs[t] - 0.5 * xs[t - 1]); }
    return h;
}
fn rows(xs: f64[T, D], h0: f64[H], wx: f64[D, H], wh: f64[H, H]) -> f64 {
    var h = h0;
    for t in 0..T { h = tanh(xs[t] @ wx + h @ wh); }
    return sum(h * h);
}
fn columns(xs: f64[D, T], h0: f64[D], w: f64) -> f64 {
    var h = h0;
    for t in 0..T { h = sin(w * h + xs[:, t]); }
    return sum(h);
}
"""

T, D, H = 9, 3, 4


def arguments(name: str, steps: int = T) -> tuple:
    rng = np.random.default_rng(7)
    normal = rng.standard_normal
    return {
        "scalar": (normal(steps) * 0.5, 0.7, 0.1),
        "lagged": (normal(steps) * 0.5, 0.7, 0.1),
        "rows": (normal((steps, D)) * 0.5, normal(H) * 0.5, normal((D, H)) * 0.5,
                 normal((H, H)) * 0.3),
        "columns": (normal((D, steps)) * 0.5, normal(D), 0.8),
    }[name]


@pytest.fixture(scope="module")
def module() -> rv.Module:
    return rv.compile(SOURCE)


def _loops(stmts: list) -> list:
    """Every `Loop`, `ForLoop` and `WhileLoop` in `stmts`, nested ones included."""
    found = []
    for stmt in stmts:
        if isinstance(stmt, Loop | ForLoop | WhileLoop):
            found.append(stmt)
        if isinstance(stmt, Loop | ForLoop | WhileLoop | If):
            found += _loops(stmt.body)
    return found


def _spans(loop: Loop | ForLoop, symbol: str) -> bool:
    return isinstance(loop, Loop | ForLoop) and symbol in (loop.hi - loop.lo).symbols()


def loops_over_t_inside_loops_over_t(program: Program) -> list[str]:
    """The variables of loops over T (or a range sized by T) nested in a loop over T."""
    return [inner.var for outer in _loops(program.body) if _spans(outer, "T")
            for inner in _loops(outer.body) if _spans(inner, "T")]


@pytest.mark.parametrize("name", ["scalar", "lagged", "rows", "columns"])
def test_the_reverse_sweep_does_constant_work_per_step(module: rv.Module, name: str) -> None:
    gradient = getattr(module, name).grad(wrt="xs")
    program = native_kernel(gradient.ir_for("f64")).program
    reverse_loops = [loop for loop in _loops(program.body)
                     if isinstance(loop, ForLoop) and _spans(loop, "T")]
    assert len(reverse_loops) == 2  # the primal loop and its reverse sweep
    assert loops_over_t_inside_loops_over_t(program) == []


def test_the_check_finds_a_quadratic_sweep() -> None:
    """The structural check itself: a T-loop inside a T-loop is reported."""
    t = Dim.sym("T")
    inner = Loop("%i1", Dim.const(0), t)
    program = Program("p", [], [], [], [], [ForLoop("%i0", Dim.const(0), t, [], [inner])], [])
    assert loops_over_t_inside_loops_over_t(program) == ["%i1"]


@pytest.mark.parametrize("name", ["scalar", "lagged", "rows", "columns"])
def test_gradients_match_finite_differences(module: rv.Module, name: str) -> None:
    args = arguments(name)
    tensors = tuple(rv.tensor(np.asarray(a), requires_grad=k == 0) for k, a in enumerate(args))
    assert rv.gradcheck(getattr(module, name), tensors)


@pytest.mark.parametrize("name", ["scalar", "lagged", "rows", "columns"])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_gradients_match_the_interpreter(name: str, checkpoint: bool) -> None:
    args = arguments(name, steps=40)
    native = rv.compile(SOURCE, checkpoint=checkpoint)
    interp = rv.compile(SOURCE, backend="interp", checkpoint=checkpoint)
    np.testing.assert_allclose(getattr(native, name).grad(wrt="xs")(*args),
                               getattr(interp, name).grad(wrt="xs")(*args),
                               rtol=1e-12, atol=1e-14)


def test_the_rows_gradient_matches_torch(module: rv.Module) -> None:
    xs, h0, wx, wh = (torch.tensor(a) for a in arguments("rows", steps=200))
    xs.requires_grad_(True)
    h = h0
    for t in range(xs.shape[0]):
        h = torch.tanh(xs[t] @ wx + h @ wh)
    (expected,) = torch.autograd.grad((h * h).sum(), xs)
    got = module.rows.grad(wrt="xs")(*arguments("rows", steps=200))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-13)


def test_a_long_sequence_keeps_every_step(module: rv.Module) -> None:
    """T = 20000: the gradient of h_T wrt each xs[t] is the product of the later steps'
    derivatives, as the recurrence written out in NumPy gives it."""
    xs, w, h0 = arguments("scalar", steps=20_000)
    hs = np.empty(len(xs) + 1)
    hs[0] = h0
    for t, x in enumerate(xs):
        hs[t + 1] = np.tanh(w * hs[t] + x)
    expected, bar = np.empty(len(xs)), 1.0
    for t in reversed(range(len(xs))):
        bar *= 1.0 - hs[t + 1] ** 2
        expected[t] = bar
        bar *= w
    np.testing.assert_allclose(module.scalar.grad(wrt="xs")(xs, w, h0), expected,
                               rtol=1e-12, atol=1e-300)
