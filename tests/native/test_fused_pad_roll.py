"""Fused `pad` and `roll`: computed inside their consumer's loop nest (no temporary), and
equal to the interpreter for every size (0 and 1 too), shift, stride and view."""

from __future__ import annotations

import numpy as np
import pytest
from native_helpers import assert_same, check, compiled, run_both, sample

from reverie.compiler.ir.core import Block, Builder, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import TensorType
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.pipeline import compile_function

ROSENBROCK = """fn f(x: f64[N]) -> f64 {
    let head = x[:N - 1];
    let tail = x[1:];
    return sum(100.0 * (tail - head ** 2) ** 2 + (1.0 - head) ** 2);
}"""


def _derived(source: str, transform: str, *args: object) -> None:
    """Run `f.<transform>("x")` natively and through the interpreter on `args`, compare."""
    kernel = getattr(compiled(source).f, transform)("x")
    got, want = run_both(kernel.ir_for("f64"), *args)
    assert_same(got, want)


@pytest.mark.parametrize("n", [1, 2, 5, 33])
def test_rosenbrock_gradient_and_hvp(n: int) -> None:
    x, v = sample((n,), seed=1), sample((n,), seed=2)
    _derived(ROSENBROCK, "grad", x)
    _derived(ROSENBROCK, "hvp", x, v)


def test_rosenbrock_hvp_is_one_loop_without_temporaries() -> None:
    """One fused nest, run as its two one-iteration edges and its unguarded interior
    (compiler/loops/peeling.py)."""
    hvp = compiled(ROSENBROCK).f.hvp("x").ir_for("f64")
    text = format_program(compile_function(hvp, "to_loops"))
    assert "temp " not in text
    assert text.count("for %") == 3


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_pads_of_stepped_slices(n: int) -> None:
    x = sample((n,), seed=6)
    source = "fn f(x: f64[N]) -> f64 { return sum(sin(x[::2])) + sum(cos(x[::3]) * x[::3]); }"
    _derived(source, "grad", x)


@pytest.mark.parametrize("shape", [(1, 1), (4, 5), (6, 7)])
def test_pads_of_strided_and_transposed_slices(shape: tuple[int, int]) -> None:
    x = sample(shape, seed=3)
    source = """fn f(x: f64[N, D]) -> f64 {
        return sum(sin(x[1:, ::2]) * x[:N - 1, ::2]) + sum(tanh(x.T[1:, 1:]) * x.T[:D - 1, :N - 1])
               + sum(exp(x[:, 1::3])); }"""
    _derived(source, "grad", x)
    _derived(source, "hessian", x)


@pytest.mark.parametrize("shift", ["1", "-1", "7", "-12", "N + 2", "0", "-3 * N - 1"])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_fused_roll(shift: str, n: int) -> None:
    x = sample((n, 3), seed=4)
    source = f"""fn f(x: f64[N, D]) -> (f64[N, D], f64[D, N], f64[N, D], f64) {{
        let r = roll(exp(x), {shift}, axis=0);
        return (roll(x, {shift}, axis=0) * 2.0 - x, roll(x.T, {shift}, axis=1) + 1.0,
                r * 3.0, sum(r * x) + sum(roll(x, {shift}, axis=1) ** 2)); }}"""
    check(source, x)


def test_roll_in_a_loop_reads_no_temporary() -> None:
    source = """fn f(u: f64[N], steps: i64) -> f64 {
        var v = u;
        for t in 0..steps { v = v + 0.1 * (roll(v, 1) - 2.0 * v + roll(v, -1)); }
        return sum(v ** 2); }"""
    u = sample((9,), seed=5)
    check(source, u, 4)
    _derived(source.replace("fn f(u:", "fn f(x:").replace("var v = u;", "var v = x;"),
             "grad", u, 4)
    fn = compiled(source).lowering.specialise("f", "f64")
    program = format_program(compile_function(fn, "to_loops"))
    assert program.count("temp ") == 2  # the loop state's two buffers only
    assert " lt " not in program and "select" not in program  # wraps split off the loop


def test_roll_of_a_single_element_is_the_element() -> None:
    x = np.array([[2.5, -1.0]])
    (got,) = check("fn f(x: f64[N, D]) -> f64[N, D] { return roll(x * 2.0, -5, axis=0); }", x)
    np.testing.assert_array_equal(got, x * 2.0)


def _padded_twice() -> Function:
    """x ↦ (2 p, p[1:] + 1) for p = pad(exp(x)) into N + 2 at 1, and 2 q for q = pad(x)
    into 2N + 1 at 1 with step 2: p has consumers in two nests, so it gets a buffer."""
    n = Dim.sym("N")
    body = Block()
    x = Value(TensorType("f64", (n,)), name="x")
    body.params.append(x)
    b = Builder(body)

    def scaled(value: Value, by: float) -> Value:
        factor = b.op("const", [], {"value": by, "dtype": "f64"})
        return b.op("mul", [value, b.op("broadcast", [factor], {"shape": value.type.shape})])

    p = b.op("pad", [b.op("exp", [x])], {"shape": (n + 2,), "starts": (Dim.const(1),),
                                          "steps": (1,)})
    tail = b.op("slice", [p], {"starts": (Dim.const(1),), "stops": (n + 2,), "steps": (1,)})
    q = b.op("pad", [x], {"shape": (2 * n + 1,), "starts": (Dim.const(1),), "steps": (2,)})
    body.results = [scaled(p, 2.0), b.op("add", [tail, tail]), scaled(q, 2.0)]
    return Function("f", body, ["x"], ["N"])


@pytest.mark.parametrize("n", [0, 1, 4])
def test_pad_with_consumers_in_two_nests(n: int) -> None:
    fn = _padded_twice()
    assert "temp " in format_program(compile_function(fn, "to_loops"))
    got, want = run_both(fn, sample((n,), seed=7))
    assert_same(got, want)
