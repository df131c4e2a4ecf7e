"""The loop passes of scan bodies (compiler/loops/outer_products.py, loop_fusion.py,
dead_code.py): what they remove and merge in the LSTM gradient, what they must keep apart
in hand-built scans, and that results are unchanged at every level (tensor interpreter,
loop interpreter, native) and gradients match finite differences."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.dead_code import remove_dead_code
from reverie.compiler.loops.effects import can_move_above, effects, walk
from reverie.compiler.loops.ir import (
    Accumulate,
    Accumulator,
    Buffer,
    Check,
    Const,
    ExitUnless,
    ForLoop,
    Let,
    Load,
    Loop,
    LoopState,
    Matmul,
    Program,
    Stmt,
    Store,
    Var,
    View,
)
from reverie.compiler.loops.loop_fusion import fuse_sequential_loops
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel
from tests.unit.level_helpers import loop_program

LSTM = Path(__file__).resolve().parents[2] / "examples" / "lstm_update.rv"
LSTM_SIZES = {"T": 5, "D": 3, "H": 4}


def lstm_arguments(rng: np.random.Generator) -> list[np.ndarray]:
    t, d, h = LSTM_SIZES["T"], LSTM_SIZES["D"], LSTM_SIZES["H"]
    shapes = [(t, d), (h,), (h,), (d, 4 * h), (h, 4 * h), (4 * h,), (h,), (t,)]
    return [0.5 * rng.standard_normal(s) for s in shapes]


def lstm_gradient() -> Program:
    module = rv.compile(LSTM.read_text(encoding="utf-8"), backend="interp")
    return loop_program(module.adjoint("lstm_loss", "f64"))


def scans(program: Program) -> list[ForLoop]:
    return [s for s in program.walk() if isinstance(s, ForLoop)]


def elementwise_loops(body: list[Stmt]) -> Counter:
    """How many loops without nested loops the body holds at its top level, per extent."""
    return Counter(str(s.hi - s.lo) for s in body
                   if isinstance(s, Loop) and not any(isinstance(t, Loop) for t in walk(s.body)))


def test_the_lstm_gradient_reads_every_temporary_it_keeps() -> None:
    program = lstm_gradient()
    read = {id(s.view.buffer) for s in program.walk() if isinstance(s, Load)}
    read |= {id(v.buffer) for s in program.walk() if isinstance(s, Matmul) for v in (s.a, s.b)}
    read |= {id(s.pack) for s in program.walk() if isinstance(s, Matmul)}
    read |= {id(b) for scan in scans(program) for st in scan.states for b in (st.first, st.second)}
    assert all(id(t) in read for t in program.temps)
    assert max(len(t.shape) for t in program.temps) == 2  # no [T, T, H] history of `hs`


def test_the_lstm_sweeps_have_one_loop_over_h_and_no_outer_product_calls() -> None:
    forward, reverse = scans(lstm_gradient())
    assert elementwise_loops(forward.body)["H"] == 1
    assert elementwise_loops(reverse.body)["H"] == 3  # eight before fusion; ALIAS_BUDGET
    products = [s for s in walk(reverse.body) if isinstance(s, Matmul)]
    assert products and all(s.a.shape[-1] != Dim.const(1) for s in products)


def test_the_lstm_gradient_agrees_at_every_level() -> None:
    module = rv.compile(LSTM.read_text(encoding="utf-8"), backend="interp")
    fn = module.adjoint("lstm_loss", "f64")
    args = lstm_arguments(np.random.default_rng(3))  # a scalar loss: its gradient
    bound = bind_arguments(fn, args)
    program = loop_program(fn)  # verified after every pass (tests/conftest.py)
    loops = run_program(program, bound.arrays, bound.dims)
    for got, want in zip(loops, interpret(fn, bound.arrays, bound.dims), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(native_kernel(fn)(bound), loops, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_native_lstm_gradient_matches_finite_differences() -> None:
    module = rv.compile(LSTM.read_text(encoding="utf-8"))
    args = lstm_arguments(np.random.default_rng(5))
    wrt = ("xs", "h0", "c0", "wx", "wh", "b", "wo")
    grads = module.lstm_loss.grad(wrt=wrt)(*args)
    rng, step = np.random.default_rng(6), 1e-6
    for position, grad in enumerate(grads):
        direction = rng.standard_normal(args[position].shape)
        shifted = [[a + sign * step * direction if k == position else a
                    for k, a in enumerate(args)] for sign in (1, -1)]
        numeric = (module.lstm_loss(*shifted[0]) - module.lstm_loss(*shifted[1])) / (2 * step)
        np.testing.assert_allclose(np.sum(grad * direction), numeric, rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------- hand-built scans

N = Dim.sym("N")
STEPS = Dim.const(3)
X = Buffer("x", "f64", (N,), "input", 0)
OUT = Buffer("out0", "f64", (N,), "output", 0)


def scan(body: list[Stmt], temps: list[Buffer]) -> Program:
    """`s = x; for 3 steps { body }; out0 = s`, the body reading `s.cur`, writing `s.next`."""
    first, second = Buffer("t0", "f64", (N,), "temp"), Buffer("t1", "f64", (N,), "temp")
    state = LoopState(CUR, NEXT, first, second)
    copy_in = Loop("%i90", Dim.const(0), N, [Load(Var("%90", "f64"), View.of(X), (I90,)),
                                             Store(View.of(first), (I90,), Var("%90", "f64"))])
    copy_out = Loop("%i91", Dim.const(0), N, [Load(Var("%91", "f64"), View.of(CUR), (I91,)),
                                              Store(View.of(OUT), (I91,), Var("%91", "f64"))])
    loop = ForLoop("%i99", Dim.const(0), STEPS, [state], body)
    return Program("f", ["N"], [X], [OUT], [first, second, *temps], [copy_in, loop, copy_out],
                   [])


CUR, NEXT = Buffer("s0.cur", "f64", (N,), "state"), Buffer("s0.next", "f64", (N,), "state")
TEMP = Buffer("t2", "f64", (N,), "temp")
I0, I1, I90, I91 = (Dim.sym(n) for n in ("%i0", "%i1", "%i90", "%i91"))


def v(k: int) -> Var:
    return Var(f"%{k}", "f64")


def doubled() -> Loop:
    """for %i0 { t2[%i0] = 2 * s.cur[%i0] }"""
    return Loop("%i0", Dim.const(0), N, [Load(v(0), View.of(CUR), (I0,)),
                                         Let(v(1), "mul", (Const(2.0, "f64"), v(0))),
                                         Store(View.of(TEMP), (I0,), v(1))])


def next_state(*body: Stmt) -> Loop:
    """for %i1 { body; s.next[%i1] = %5 }"""
    return Loop("%i1", Dim.const(0), N, [*body, Store(View.of(NEXT), (I1,), v(5))])


CASES = {
    # s.next[i] = t2[i] + 1: merged, the load of t2 is the value stored, and t2 goes
    "same element": (lambda: [doubled(), next_state(
        Load(v(2), View.of(TEMP), (I1,)), Let(v(5), "add", (v(2), Const(1.0, "f64"))))], 1),
    # s.next[i] = t2[N - 1 - i] + t2[i]: iteration i reads what a later one writes
    "another element": (lambda: [doubled(), next_state(
        Load(v(2), View.of(TEMP), (N - 1 - I1,)), Load(v(3), View.of(TEMP), (I1,)),
        Let(v(5), "add", (v(2), v(3))))], 2),
    # s.next[i] = s.cur[i] / sum(t2): the sum merges with t2's loop, not with its reader
    "reduction": (lambda: [doubled(), Accumulator(Var("%acc", "f64"), Const(0.0, "f64")),
                           Loop("%i2", Dim.const(0), N, [
                               Load(v(6), View.of(TEMP), (Dim.sym("%i2"),)),
                               Accumulate(Var("%acc", "f64"), "sum", v(6))]),
                           next_state(Load(v(2), View.of(CUR), (I1,)),
                                      Let(v(5), "div", (v(2), Var("%acc", "f64"))))], 2),
}


@pytest.mark.parametrize("case", CASES)
def test_fusion_merges_only_loops_that_meet_at_one_element(case: str) -> None:
    build, loops_left = CASES[case]
    before = scan(build(), [TEMP])
    after = scan(build(), [TEMP])
    remove_dead_code(fuse_sequential_loops(after))
    verify_program(after)
    assert len(elementwise_loops(after.body[1].body)) == 1
    assert sum(elementwise_loops(after.body[1].body).values()) == loops_left
    x = np.random.default_rng(7).standard_normal(6) + 3.0
    (want,), (got,) = (run_program(p, [x], {"N": 6}) for p in (before, after))
    np.testing.assert_array_equal(got, want)
    assert (TEMP in after.temps) == (case == "another element")  # else its loads forwarded


def test_nothing_that_touches_memory_moves_above_a_check_or_across_an_exit() -> None:
    groups: dict[int, int] = {}
    check = effects(Check(Dim.sym("%7"), N, 0), groups)
    exit_ = effects(ExitUnless(Var("%8", "bool")), groups)
    loop = effects(doubled(), groups)
    assert not can_move_above(loop, check) and can_move_above(check, loop)
    assert not can_move_above(loop, exit_) and not can_move_above(exit_, loop)
