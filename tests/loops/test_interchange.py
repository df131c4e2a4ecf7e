"""The loop pass `interchange` (compiler/loops/interchange.py): a reduction over a strided
leading axis runs with its reduction loop outermost, with unchanged results; reductions it
must not touch keep their shape."""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.loops.ir import Accumulator, Loop, Program, Store
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import compile_function

SIZES = {"N": 7, "K": 3, "D": 5}


def program(source: str, dtype: str = "f64") -> Program:
    fn = rv.compile(source, backend="interp").lowering.specialise("f", dtype)
    return compile_function(fn, "to_loops")


def outermost_nests(prog: Program) -> list[Loop]:
    return [s for s in prog.body if isinstance(s, Loop)]


def has_accumulator(stmts: list) -> bool:
    return any(isinstance(s, Accumulator) or (isinstance(s, Loop) and has_accumulator(s.body))
               for s in stmts)


LEADING_SUM = """
fn f(x: f64[N, K, D]) -> f64[K, D] {
    let m[k, i] = sum[n](x[n, k, i] * x[n, k, i]);
    return m;
}
"""


def test_a_sum_over_the_leading_axis_runs_with_the_reduction_loop_outermost() -> None:
    prog = program(LEADING_SUM)
    init, main = outermost_nests(prog)
    assert isinstance(init.body[0].body[0], Store)  # out[k, i] = 0
    assert str(main.hi) == "N" and not has_accumulator(prog.body)
    x = np.random.default_rng(0).standard_normal((7, 3, 5))
    (got,) = run_program(prog, [x], SIZES)
    np.testing.assert_allclose(got, (x * x).sum(axis=0), rtol=1e-13)
    np.testing.assert_allclose(rv.compile(LEADING_SUM).f(x), (x * x).sum(axis=0), rtol=1e-13)


@pytest.mark.parametrize("source", [
    # the summed index is the contiguous one already
    "fn f(x: f64[K, N]) -> f64[K] { let m[k] = sum[n](x[k, n]); return m; }",
    # a max: not rewritten
    "fn f(x: f64[N, K, D]) -> f64[K, D] { let m[k, i] = max[n](x[n, k, i]); return m; }",
])
def test_other_reductions_keep_their_accumulator(source: str) -> None:
    assert has_accumulator(program(source).body)


def test_an_f32_sum_keeps_its_f64_accumulator() -> None:
    source = LEADING_SUM.replace("f64", "float")
    assert has_accumulator(program(source, "f32").body)
