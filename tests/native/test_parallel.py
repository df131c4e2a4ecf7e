"""The worker pool: which loops are split (`loops/parallel_plan.py`), that split loops, reductions
and matrix products give the one-thread results (reductions up to reassociation, and the
same bits on every call), from several Python threads at once, and that
`REVERIE_NUM_THREADS=1` runs without the pool."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from native_helpers import check, sample, specialised

import reverie as rv
from reverie.compiler.backend.parallel_loops import PARALLEL_MIN_WORK
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import (
    Buffer,
    ForLoop,
    Load,
    Loop,
    LoopState,
    Program,
    Store,
    Var,
    View,
)
from reverie.compiler.loops.parallel_plan import parallel_plans, work_per_iteration
from reverie.runtime.native import native_kernel as native
from reverie.runtime.native import pool

ROOT = Path(__file__).resolve().parents[2]
SOURCE = """
fn wave(x: float[N]) -> float[N] { return tanh(x) * sin(x) + exp(-x * x); }
fn loss(x: float[N]) -> float { return sum(tanh(x) * sin(x) + exp(-x * x)); }
fn biggest(x: float[N]) -> float { return max(x); }
fn smallest(x: float[N]) -> float { return min(x); }
fn rows(x: float[M, N]) -> float[M] { return sum(x, axis=1); }
fn running(x: float[N]) -> float[N] { return cumsum(x); }
fn pick(x: float[N], k: i64[M]) -> float[M] { let picked[m] = x[k[m]]; return picked; }
fn product(a: float[M, K], b: float[K, N]) -> float[M, N] { return a @ b; }
fn cube(x: float[M, K, N]) -> float[M, K, N] { return tanh(x) * sin(x); }
fn cube_total(x: float[M, K, N]) -> float { return sum(tanh(x) * sin(x)); }
fn heat(u0: float[N], steps: i64) -> float[N] {
    var u = u0;
    for t in 0..steps {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)) + 0.01 * float(t);
    }
    return u;
}
fn recurrence(h0: float[N], w: float[N, N], steps: i64) -> float[N] {
    var h = h0;
    for t in 0..steps { h = tanh(w @ h) + h; }
    return h;
}
fn heat_energy(u0: float[N], steps: i64) -> float {
    var u = u0;
    var energy = 0.0;
    for t in 0..steps {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1));
        energy = energy + sum(u * u);
    }
    return energy;
}
"""
LARGE = 1 << 18  # elements: enough work for the pool


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def plans(name: str) -> list:
    return list(parallel_plans(native.native_kernel(specialised(SOURCE, name, "f64")).program)
                .values())


def test_independent_loops_and_reductions_are_planned() -> None:
    (wave,) = plans("wave")
    assert wave.reductions == ()
    (loss,) = plans("loss")
    assert [r.kind for r in loss.reductions] == ["sum"]
    assert [r.kind for r in plans("biggest")[0].reductions] == ["max"]
    assert plans("rows")[0].reductions == ()  # one row per iteration, summed inside it


X = Buffer("x", "f64", (Dim.sym("N"),), "input")
OUT = Buffer("out", "f64", (Dim.sym("N"),), "output")


def test_a_nest_counts_the_trips_of_its_inner_loops() -> None:
    """16 rows of a 16 x 256 x 256 nest are a million elements: enough to split, and split
    into chunks of whole rows (a nest's chunks are not rounded to 64 of its rows)."""
    (cube,) = plans("cube")
    sizes = {"M": 16, "K": 256, "N": 256}
    assert 16 * cube.work.evaluate(sizes) >= PARALLEL_MIN_WORK
    assert cube.work.evaluate(sizes) > cube.work.evaluate({**sizes, "N": 128}) > 256
    assert not cube.innermost and plans("wave")[0].innermost
    # a triangle's inner loop moves with the row: its body counts once
    row, value = Dim.sym("%i0"), Var("%0", "f64")
    triangle = Loop("%i1", Dim.const(0), row, [Load(value, View.of(X), (Dim.sym("%i1"),)),
                                                Store(View.of(OUT), (row,), value)])
    assert work_per_iteration([triangle]) == Dim.const(3)


def test_split_nests_match_numpy_and_repeat(m: rv.Module) -> None:
    x = sample((16, 256, 256), seed=10)
    expected = np.tanh(x) * np.sin(x)
    np.testing.assert_allclose(m.cube(x), expected, rtol=1e-14, atol=1e-15)
    first = m.cube_total(x)
    assert all(m.cube_total(x) == first for _ in range(5))
    assert first == pytest.approx(np.sum(expected, dtype=np.float64), rel=1e-12)


def _one_loop(*body: object) -> Program:
    """`for %i0 in 1..N { body }` over input x and output out (both f64[N])."""
    loop = Loop("%i0", Dim.const(1), Dim.sym("N"), list(body))
    return Program("p", ["N"], [X], [OUT], [], [loop], [])


def test_the_loops_of_a_time_step_are_planned_with_what_they_capture() -> None:
    """Inside a `for` body, the step's loops are split: they read the step's values (the
    roll offsets, `t`) and the loop states' current buffers, and write the next ones."""
    (main, *_) = sorted(plans("heat"), key=lambda plan: -plan.work.evaluate({"N": 1}))
    assert {buffer.role for buffer in main.states} == {"state"}
    assert len(main.states) == 2  # reads current, writes next
    assert main.captures and all(var.dtype in ("i64", "f64") for var in main.captures)
    assert main.nested
    energy = [plan for plan in plans("heat_energy") if plan.reductions]
    assert energy and energy[0].reductions[0].kind == "sum" and energy[0].nested
    # a step around a matrix product: its O(N) loops are left inline
    assert not any(plan.nested for plan in plans("recurrence"))


def test_split_time_steps_match_the_interpreter_and_repeat(m: rv.Module) -> None:
    """4 x LARGE points: each step's main loop is worth splitting."""
    u0 = sample((4 * LARGE,), seed=11)
    check(SOURCE, u0, 7, name="heat")
    check(SOURCE, u0, 7, name="heat_energy")
    first = m.heat_energy(u0, 5)
    assert all(m.heat_energy(u0, 5) == first for _ in range(5))
    u = u0
    for t in range(5):
        u = u + 0.1 * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1)) + 0.01 * t
    np.testing.assert_allclose(m.heat(u0, 5), u, rtol=1e-13, atol=1e-13)


def test_a_step_reading_what_a_state_may_be_stays_serial() -> None:
    """A loop that writes a state's next buffer while reading that state's first buffer
    directly (which the next buffer is, every other step) is not split."""
    n, i = Dim.sym("N"), Dim.sym("%i1")
    first, second = Buffer("t0", "f64", (n,), "temp"), Buffer("t1", "f64", (n,), "temp")
    current, following = (Buffer(name, "f64", (n,), "state") for name in ("s.cur", "s.next"))
    value = Var("%0", "f64")

    def step(source: Buffer) -> Program:
        body = [Load(value, View.of(source), (i,)), Store(View.of(following), (i,), value)]
        scan = ForLoop("%t", Dim.const(0), n, [LoopState(current, following, first, second)],
                       [Loop("%i1", Dim.const(0), n, body)])
        return Program("p", ["N"], [X], [OUT], [first, second], [scan], [])

    assert len(parallel_plans(step(current))) == 1
    assert parallel_plans(step(first)) == {}
    assert parallel_plans(step(second)) == {}


def test_dependent_or_checked_loops_stay_serial() -> None:
    assert plans("pick") == []  # a bounds check: its error must come from the calling thread
    i, value, x, out = Dim.sym("%i0"), Var("%0", "f64"), X, OUT
    assert len(parallel_plans(_one_loop(Load(value, View.of(x), (i,)),
                                        Store(View.of(out), (i,), value)))) == 1
    # out[i] = out[i - 1]: each iteration reads the previous one's result
    reads_back = _one_loop(Load(value, View.of(out), (i - 1,)), Store(View.of(out), (i,), value))
    # out[0] = x[i]: every iteration writes the same element
    same_place = _one_loop(Load(value, View.of(x), (i,)),
                           Store(View.of(out), (Dim.const(0),), value))
    # a value from outside the loop
    outside = _one_loop(Store(View.of(out), (i,), Var("%outer", "f64")))
    for program in (reads_back, same_place, outside):
        assert parallel_plans(program) == {}


def test_the_pool_is_in_the_helper_table() -> None:
    table = native.helper_table()
    assert table[-2] == pool.pool_threads()
    assert table[-1] == pool.pool_entry()
    if pool.pool_threads() > 1:
        assert pool.pool_entry() != 0  # workers were started: the pool has an entry


def test_split_loops_match_the_interpreter() -> None:
    x = sample((LARGE,), seed=1)
    check(SOURCE, x, name="wave")
    check(SOURCE, x, name="loss", scale=10)
    check(SOURCE, sample((512, 1024), seed=2), name="rows")
    check(SOURCE, sample((4096,), seed=3), name="running", scale=100)  # triangular rows


@pytest.mark.parametrize("name, reduce", [("biggest", np.max), ("smallest", np.min)])
def test_extreme_reductions_are_exact(m: rv.Module, name: str, reduce: object) -> None:
    x = sample((LARGE,), seed=3, low=-5.0, high=-1.0)  # all negative: max's identity matters
    x[LARGE // 3] = -0.5
    x[2 * LARGE // 3] = -7.0
    assert getattr(m, name)(x) == reduce(x)


def test_split_sums_are_the_same_on_every_call(m: rv.Module) -> None:
    x = sample((4 * LARGE,), seed=4)
    first = m.loss(x)
    assert all(m.loss(x) == first for _ in range(10))
    exact = np.sum(np.tanh(x) * np.sin(x) + np.exp(-x * x), dtype=np.float64)
    assert abs(first - exact) <= 1e-11 * abs(exact)


def test_large_products_match_numpy(m: rv.Module) -> None:
    a, b = sample((300, 257), seed=5), sample((257, 301), seed=6)
    np.testing.assert_allclose(m.product(a, b), a @ b, rtol=1e-12, atol=1e-12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_allclose(m.product(a32, b32), a32 @ b32, rtol=1e-4, atol=1e-4)


def test_split_kernels_from_several_python_threads(m: rv.Module) -> None:
    x = sample((LARGE,), seed=7)
    a, b = sample((256, 256), seed=8), sample((256, 256), seed=9)
    expected = (m.wave(x), m.loss(x), m.product(a, b))
    results: list[tuple] = []

    def work() -> None:
        for _ in range(5):
            results.append((m.wave(x), m.loss(x), m.product(a, b)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20
    for wave, loss, product in results:
        np.testing.assert_array_equal(wave, expected[0])
        assert loss == expected[1]
        np.testing.assert_array_equal(product, expected[2])


def test_bounds_errors_still_raise(m: rv.Module) -> None:
    with pytest.raises(IndexError):
        m.pick(np.ones(LARGE), np.array([0, LARGE], np.int64))


SCRIPT = """
import numpy as np, reverie as rv
from reverie.runtime.native import native_kernel as native
m = rv.compile('''{source}''')
x = np.random.default_rng(0).standard_normal({size})
print(native.helper_table()[-2:].tolist(), repr(float(m.loss(x))), m.wave(x).tobytes().hex()[:64])
"""


def run_with_threads(threads: str) -> list[str]:
    env = {**os.environ, "REVERIE_NUM_THREADS": threads}
    script = SCRIPT.format(source=SOURCE, size=LARGE)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, check=True, cwd=ROOT)
    return out.stdout.split()  # "[threads," "pool]" loss wave-bytes


def test_one_thread_runs_without_the_pool_and_agrees() -> None:
    one = run_with_threads("1")
    two = run_with_threads("2")
    assert one[0] == "[1," and one[1] == "0]"  # no pool loaded
    assert two[0] == "[2,"
    assert one[3] == two[3]  # elementwise results: the same bits
    assert float(one[2]) == pytest.approx(float(two[2]), rel=1e-13)  # a sum, reassociated


FORK_SCRIPT = """
import os, numpy as np, reverie as rv
m = rv.compile('''{source}''')
x = np.random.default_rng(0).standard_normal({size})
parent = m.loss(x)
pid = os.fork()
if pid == 0:
    os._exit(0 if abs(m.loss(x) - parent) <= 1e-12 * abs(parent) else 3)
print(os.waitpid(pid, 0)[1])
"""


def test_a_forked_child_runs_split_kernels_on_one_thread() -> None:
    """The pool's threads are not copied by fork: the child must not wait for them."""
    script = FORK_SCRIPT.format(source=SOURCE, size=LARGE)
    env = {**os.environ, "REVERIE_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=True, cwd=ROOT)
    assert out.stdout.split() == ["0"]
