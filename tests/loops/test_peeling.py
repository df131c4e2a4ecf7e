"""The loop pass `split_guarded_loops` (compiler/loops/peeling.py): a loop whose `in_bounds`
tests fail only near its ends runs as its two edges and an unguarded interior.

The printed loop IR of a small gradient is checked against the text below; every program
here gives bit for bit what its unsplit program gives (loop-IR interpreter) and what the
tensor-IR interpreter gives (native kernel), for sizes from the smallest up, where the edges overlap
or the interior is empty.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_printer import format_program
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel
from tests.unit.level_helpers import loop_program

NEIGHBOURS = "fn f(x: f64[N]) -> f64 { return sum(x[1:] * x[:N - 1]); }"
EXPECTED = """\
kernel @f_grad(x: f64[N] input 0, out0: f64 output 0, out1: f64[N] output 1) {
  %acc0: f64 = 0.0
  for %i0 in 0..N - 1 {
    %0 = load x[%i0 + 1]
    %1 = load x[%i0]
    %2 = mul %0, %1 : f64
    %acc0 = sum %acc0, %2
  }
  store out0[] = %acc0
  %10 = minimum 1, N : i64
  %11 = maximum N - 1, %10 : i64
  for %i1 in 0..%10 {
    %3 = in_bounds %i1, N - 1 : bool
    %5 = if %3 {
      %4 = load x[%i1 + 1]
      yield %4
    } else 0
    %6 = in_bounds %i1 - 1, N - 1 : bool
    %8 = if %6 {
      %7 = load x[%i1 - 1]
      yield %7
    } else 0
    %9 = add %5, %8 : f64
    store out1[%i1] = %9
  }
  for %i1 in %10..%11 {
    %4 = load x[%i1 + 1]
    %7 = load x[%i1 - 1]
    %9 = add %4, %7 : f64
    store out1[%i1] = %9
  }
  for %i1 in %11..N {
    %3 = in_bounds %i1, N - 1 : bool
    %5 = if %3 {
      %4 = load x[%i1 + 1]
      yield %4
    } else 0
    %6 = in_bounds %i1 - 1, N - 1 : bool
    %8 = if %6 {
      %7 = load x[%i1 - 1]
      yield %7
    } else 0
    %9 = add %5, %8 : f64
    store out1[%i1] = %9
  }
}
"""
PROGRAMS = [
    NEIGHBOURS,
    # W5: the Rosenbrock function, its HVP below
    """fn f(x: f64[N]) -> f64 { let head = x[:N - 1]; let tail = x[1:];
       return sum(100.0 * (tail - head ** 2) ** 2 + (1.0 - head) ** 2); }""",
    # a wide window on one side, a test that holds only at i = 0 (stays a test), 2-D pads
    "fn f(x: f64[N]) -> f64 { return sum(x[3:] * x[:N - 3]) + sum(x[:1] * 2.0); }",
    "fn f(x: f64[N, M]) -> f64 { return sum(x[1:, 2:] * x[:N - 1, :M - 2]); }",
]


def _adjoint(source: str) -> Function:
    module = rv.compile(source, backend="interp")
    return module.adjoint("f", "f64")


def _hvp(source: str) -> Function:
    return rv.compile(source).f.hvp("x").ir_for("f64")


def _unsplit(fn: Function) -> Program:
    return loop_program(fn, without=("split_guarded_loops",))


def test_loop_ir_of_a_neighbour_gradient() -> None:
    assert format_program(loop_program(_adjoint(NEIGHBOURS))) + "\n" == EXPECTED


def test_a_short_test_and_a_short_constant_loop_stay_whole() -> None:
    text = format_program(loop_program(_adjoint(PROGRAMS[2])))
    assert "in_bounds %i2, 1" in text.split("for %i2 in %")[1]  # in the interior, still
    small = "fn f(x: f64[4]) -> f64 { return sum(x[1:] * x[:3]); }"
    assert format_program(loop_program(_adjoint(small))).count("for %") == 2


CASES = [(build, source) for source in PROGRAMS for build in (_adjoint, _hvp)
         if build is _adjoint or "M]" not in source]  # the HVP of a 1-D x only


@pytest.mark.parametrize(("build", "source"), CASES,
                         ids=[f"{b.__name__[1:]}-{k}" for k, (b, _) in enumerate(CASES)])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 40])
def test_split_program_equals_unsplit_and_interpreter(build, source: str, n: int) -> None:  # noqa: ANN001
    if "x[3:]" in source:
        n += 2  # the slices need N >= 3
    fn = build(source)
    rng = np.random.default_rng(n)
    shapes = [tuple(n if str(d) == "N" else 5 for d in p.type.shape) for p in fn.params]
    bound = bind_arguments(fn, [rng.standard_normal(s) for s in shapes])
    split = run_program(loop_program(fn), bound.arrays, bound.dims)
    for got, whole in zip(split, run_program(_unsplit(fn), bound.arrays, bound.dims),
                          strict=True):
        np.testing.assert_array_equal(got, whole)
    for got, expected in zip(native_kernel(fn)(bound), interpret(fn, bound.arrays, bound.dims),
                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
