"""Alias scopes (`loops/effects.py` `alias_regions`, `backend/llvm.py`): every load and
store of an input, output or temporary carries scoped-noalias metadata naming its region,
so LLVM vectorises loops without run-time overlap checks; a loop state's two buffers and
their swapped pointers are one region (each is the other's memory an iteration later).

The results stay those of NumPy where the facts the scopes state are at their limits: the
same array passed for two parameters, a state updated in place for many steps, a state
read at a shifted index while the next one is written, and a program with more buffers
than `MAX_ALIAS_SCOPES` (no metadata at all).
"""

from __future__ import annotations

import numpy as np

import reverie as rv
from reverie.compiler.loops.effects import MAX_ALIAS_SCOPES, alias_regions
from reverie.compiler.loops.ir import ForLoop, walk
from reverie.compiler.pipeline import compile_source

ELEMENTWISE = "fn f(x: f64[N], y: f64[N]) -> f64[N] { return exp(x) * y; }"
SHIFTING_STATE = """
fn f(h0: f64[N], w: f64[N], c: f64[T]) -> f64[N] {
    var h = h0;
    for t in 0..T {
        h = 0.5 * h + 0.25 * roll(h, 1) * w + c[t];
    }
    return h;
}
"""


def regions_of(source: str) -> tuple[object, dict[int, int] | None]:
    program = compile_source(source, "to_loops")
    return program, alias_regions(program)


def test_an_elementwise_loop_vectorises_without_an_overlap_check() -> None:
    module = rv.compile(ELEMENTWISE)
    raw, optimised = module.ir("llvm-raw", fn="f"), module.ir("llvm", fn="f")
    assert "!alias.scope" in raw and "!noalias" in raw
    assert "vector.body" in optimised
    assert "memcheck" not in optimised and "diff.check" not in optimised


def test_the_same_array_for_two_parameters_reads_the_same_values() -> None:
    module = rv.compile(ELEMENTWISE)
    x = np.linspace(-2.0, 2.0, 1003)
    np.testing.assert_allclose(module.f(x, x), np.exp(x) * x, rtol=1e-15)
    np.testing.assert_allclose(module.f(x[1:], x[:-1]), np.exp(x[1:]) * x[:-1], rtol=1e-15)


def test_a_state_is_one_region_with_its_buffers_and_no_other() -> None:
    program, regions = regions_of(SHIFTING_STATE)
    (loop,) = [stmt for stmt in walk(program.body) if isinstance(stmt, ForLoop)]
    (state,) = loop.states
    shared = {regions[id(b)] for b in (state.first, state.second, state.current, state.next)}
    assert len(shared) == 1
    others = [b for b in (*program.inputs, *program.outputs, *program.temps)
              if b not in (state.first, state.second)]
    assert others and len({regions[id(b)] for b in others} | shared) == len(others) + 1


def test_a_state_updated_for_many_steps_matches_numpy() -> None:
    kernel = rv.compile(SHIFTING_STATE).f
    rng = np.random.default_rng(0)
    for n, steps in [(7, 1), (64, 3), (1000, 50)]:
        h0, w, c = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(steps)
        want = h0.copy()
        for t in range(steps):
            want = 0.5 * want + 0.25 * np.roll(want, 1) * w + c[t]
        np.testing.assert_allclose(kernel(h0, w, c), want, rtol=1e-12, atol=1e-14)


def test_more_buffers_than_the_bound_get_no_metadata() -> None:
    count = MAX_ALIAS_SCOPES
    results = ", ".join(f"x * {k + 1}.0" for k in range(count))
    source = f"fn f(x: f64[N]) -> ({', '.join(['f64[N]'] * count)}) {{ return ({results}); }}"
    assert regions_of(source)[1] is None
    module = rv.compile(source)
    assert "!alias.scope" not in module.ir("llvm-raw", fn="f")
    x = np.arange(5.0)
    for k, result in enumerate(module.f(x)):
        np.testing.assert_array_equal(result, x * (k + 1))
