"""`if`/`else` and `while` (docs/language.md §11.1) through the parser, the checker and every
backend.

Each program runs on the reference interpreter (checked against a NumPy version of the
same control flow), the loop-IR interpreter, the native JIT and, where `mlir-opt-19` is
installed, the MLIR backend, which must all agree. The iteration limit is checked on each
backend, with the keyword and the environment variable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.export.mlir import export_mlir
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.compiler.pipeline import compile_function
from reverie.dsl import ast
from reverie.dsl.parser import parse
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.mlir_to_llvm import mlir_tools

RNG = np.random.default_rng(12)


def halvings(x: np.ndarray) -> np.ndarray:
    u, n = float(np.sum(x)), 0.0
    if u > 1.0:
        u = u * 2.0
    elif u < -1.0:
        u = -u
    else:
        u = u * u
    while u > 1.0:
        u, n = u / 2.0, n + 1.0
    return np.float64(u + n)


def scaled(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v, r = x.copy(), float(np.max(np.abs(x)))
    if r > 1.0:
        v, r = x / r, 1.0
    while r > 0.01:
        v = v * 0.5 + w
        r = r * 0.5
        if np.sum(v) > 5.0:
            v = v - 1.0
    return v, np.float64(r)


def nested_loops(x: np.ndarray, steps: int) -> np.ndarray:
    u, k = x.copy(), 0
    while np.max(u) > 0.5 and k < 20:
        for _ in range(steps):
            u = u * 0.9
        if k % 2 == 0:
            u = u - 0.01
        k += 1
    return u


PROGRAMS: dict[str, tuple[str, Callable[..., object], Callable[[], list[object]]]] = {
    "halvings": ("""
fn f(x: f64[N]) -> f64 {
    var u = sum(x);
    var n = 0.0;
    if u > 1.0 { u = u * 2.0; } else if u < -1.0 { u = -u; } else { u = u * u; }
    while u > 1.0 { u = u / 2.0; n = n + 1.0; }
    return u + n;
}""", halvings, lambda: [RNG.standard_normal(4) * 3.0]),
    "scaled": ("""
fn f(x: f64[N], w: f64[N]) -> (f64[N], f64) {
    var v = x;
    var r = max(abs(x));
    if r > 1.0 { v = x / r; r = 1.0; }
    while r > 0.01 {
        v = v * 0.5 + w;
        r = r * 0.5;
        if sum(v) > 5.0 { v = v - 1.0; }
    }
    return (v, r);
}""", scaled, lambda: [RNG.standard_normal(5) * 2.0, RNG.random(5)]),
    "nested": ("""
fn f(x: f64[N], steps: i64) -> f64[N] {
    var u = x;
    var k = 0;
    while max(u) > 0.5 and k < 20 {
        for t in 0..steps { u = u * 0.9; }
        if k % 2 == 0 { u = u - 0.01; }
        k = k + 1;
    }
    return u;
}""", nested_loops, lambda: [RNG.random(6) * 3.0, 2]),
}
CASES = [(name, seed) for name in PROGRAMS for seed in range(4)]


def _results(value: object) -> list[np.ndarray]:
    return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


def _close(got: object, want: object) -> None:
    for a, b in zip(_results(got), _results(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- parser and checker


def test_if_else_if_and_while_parse_into_nodes() -> None:
    (fn,) = parse(PROGRAMS["halvings"][0]).functions
    branch, loop = fn.body[2], fn.body[3]
    assert isinstance(branch, ast.If) and isinstance(loop, ast.While)
    assert isinstance(branch.orelse[0], ast.If) and len(branch.orelse) == 1
    assert isinstance(branch.orelse[0].orelse[0], ast.Assign)
    assert isinstance(loop.cond, ast.BinOp) and loop.cond.op == ">"
    (no_else,) = parse("fn f(x: f64) -> f64 { var u = x; if u > 0.0 { u = 1.0; } "
                       "return u; }").functions
    assert no_else.body[1].orelse == []


def test_a_var_declared_in_a_branch_is_not_carried_out() -> None:
    module = rv.compile("fn f(x: f64) -> f64 { var u = x; if x > 0.0 { var w = x; w = w * 2.0; "
                        "u = w; } return u; }", backend="interp")
    text = format_function(module.lowering.specialise("f", "f64"))
    assert "%u = if" in text and "%w" not in text.split("if")[0]
    assert module.f(2.0) == 4.0 and module.f(-2.0) == -2.0


# ---------------------------------------------------------------- every backend


@pytest.mark.parametrize(("name", "seed"), CASES)
def test_interpreter_matches_numpy(name: str, seed: int) -> None:
    source, reference, make = PROGRAMS[name]
    args = make()
    _close(rv.compile(source, backend="interp").f(*args), reference(*args))


@pytest.mark.parametrize(("name", "seed"), CASES)
def test_loop_ir_and_native_match_the_interpreter(name: str, seed: int) -> None:
    source, _, make = PROGRAMS[name]
    args = make()
    module = rv.compile(source)
    fn = module.lowering.specialise("f", "f64")
    bound = bind_arguments(fn, args)
    program = compile_function(fn, "to_loops")
    verify_program(program)
    want = interpret(fn, bound.arrays, bound.dims)
    _close(tuple(run_program(program, bound.arrays, bound.dims)), tuple(want))
    _close(module.f(*args), tuple(want) if len(want) > 1 else want[0])


@pytest.mark.skipif(mlir_tools() is None, reason="mlir-opt-19 not installed "
                    "(apt-get install mlir-19-tools)")
@pytest.mark.parametrize("name", PROGRAMS)
def test_mlir_backend_matches_the_interpreter(name: str) -> None:
    source, reference, make = PROGRAMS[name]
    args = make()
    _close(rv.compile(source, backend="mlir").f(*args), reference(*args))


def test_mlir_export_uses_scf_if_and_scf_while() -> None:
    fn = rv.compile(PROGRAMS["scaled"][0], backend="interp").lowering.specialise("f", "f64")
    text = export_mlir(fn)
    assert "scf.if" in text and "scf.while" in text and "scf.condition" in text


def test_nan_condition_is_false() -> None:
    source = """fn f(x: f64) -> f64 { var u = 1.0; if x > 0.0 { u = 2.0; } else { u = 3.0; }
        var n = 0.0; while x < 1.0 { n = n + 1.0; } return u + n; }"""
    for backend in ("interp", "native"):
        assert rv.compile(source, backend=backend).f(np.nan) == 3.0


def test_a_while_may_run_zero_times_and_the_state_is_its_initial_value() -> None:
    source = "fn f(x: f64[N]) -> f64[N] { var u = x; while sum(u) > 100.0 { u = u * 0.5; } " \
             "return u; }"
    x = RNG.random(3)
    for backend in ("interp", "native"):
        np.testing.assert_array_equal(rv.compile(source, backend=backend).f(x), x)


# ---------------------------------------------------------------- the iteration limit

COUNTDOWN = "fn f(x: f64) -> f64 { var u = x; while u > 0.0 { u = u - 1.0; } return u; }"
BACKENDS = ["interp", "native"] + (["mlir"] if mlir_tools() is not None else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_while_past_max_iterations_raises_runtime_error(backend: str) -> None:
    module = rv.compile(COUNTDOWN, backend=backend, max_iterations=3)
    assert module.f(2.5) == -0.5       # three iterations: at the limit, allowed
    with pytest.raises(RuntimeError, match="ran past 3 iterations"):
        module.f(3.5)


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_MAX_ITERATIONS", "4")
    module = rv.compile(COUNTDOWN)
    assert module.f(3.5) == -0.5
    with pytest.raises(RuntimeError, match="REVERIE_MAX_ITERATIONS"):
        module.f(4.5)
    assert rv.compile(COUNTDOWN, max_iterations=10).f(9.5) == -0.5


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_max_iterations_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_iterations must be a positive integer"):
        rv.compile(COUNTDOWN, max_iterations=bad)


def test_a_bad_environment_limit_is_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_MAX_ITERATIONS", "lots")
    with pytest.raises(ValueError, match="REVERIE_MAX_ITERATIONS"):
        rv.compile(COUNTDOWN)


def test_the_limit_stops_a_gradient_too() -> None:
    module = rv.compile(COUNTDOWN, max_iterations=2)
    with pytest.raises(RuntimeError, match="ran past 2 iterations"):
        module.f.grad()(5.0)
