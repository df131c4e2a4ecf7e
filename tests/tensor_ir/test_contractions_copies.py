"""The contraction pass forwards identity generics (a copy of one operand, which reverse
mode makes for a cotangent passed through unchanged) to their operand, so a matrix product
reads the cotangent itself instead of a materialised copy: the GMM gradient's loop IR
(golden file) holds no copy loop, and every result is unchanged (interpreters, native)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_contractions import GMM, SIZES, ops_named, random_args

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.ir import Load, Loop, Store
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.transforms.contractions import contract_function

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "contract" / "gmm_adjoint.txt"

COPY = """
fn f(x: f64[N, K], y: f64[K, M]) -> f64[N, M] {
    let c[n, k] = x[n, k];
    let z[n, m] = sum[k](c[n, k] * y[k, m]);
    return z;
}
"""

# not copies: a transposed read, a partial range, a computed value
NOT_COPIES = """
fn f(x: f64[N, N], y: f64[N]) -> f64[N, N] {
    let t[i, j] = x[j, i];
    let h[i] = y[i] * 2.0;
    let z[i, j] = sum[k](t[i, k] * x[k, j]) + h[i];
    return z;
}
"""


def _is_copy_loop(stmt: object) -> bool:
    """A loop nest whose innermost body only loads and stores the loaded value."""
    while isinstance(stmt, Loop) and len(stmt.body) == 1 and isinstance(stmt.body[0], Loop):
        stmt = stmt.body[0]
    if not isinstance(stmt, Loop) or len(stmt.body) != 2:
        return False
    load, store = stmt.body
    return isinstance(load, Load) and isinstance(store, Store) and store.value == load.var


def test_a_copy_feeding_a_contraction_is_its_operand() -> None:
    fn = rv.compile(COPY, backend="interp").lowering.specialise("f", "f64")
    rewritten = contract_function(fn)
    assert ops_named(rewritten, "generic") == []
    (matmul,) = ops_named(rewritten, "matmul")
    assert matmul.operands[0] is rewritten.params[0]
    args = random_args(fn)
    (got,) = interpret(rewritten, args, SIZES)
    np.testing.assert_allclose(got, args[0] @ args[1], rtol=1e-12)
    np.testing.assert_allclose(rv.compile(COPY).f(*args), args[0] @ args[1], rtol=1e-12)


def test_transposes_partial_reads_and_computed_values_are_not_copies() -> None:
    fn = rv.compile(NOT_COPIES, backend="interp").lowering.specialise("f", "f64")
    rewritten = contract_function(fn)
    assert len(ops_named(rewritten, "matmul")) == 1
    x, y = random_args(fn, seed=5)
    (got,) = interpret(rewritten, [x, y], SIZES)
    np.testing.assert_allclose(got, x.T @ x + 2.0 * y[:, None], rtol=1e-12)


def test_the_gmm_gradient_reads_the_cotangent_without_a_copy(golden) -> None:  # noqa: ANN001
    module = rv.compile(GMM, backend="interp")
    adjoint = module.adjoint("f", "f64")
    program = compile_function(contract_function(adjoint), "to_loops")
    golden(format_program(program) + "\n", GOLDEN)
    assert not any(_is_copy_loop(stmt) for stmt in program.body)
    args = random_args(adjoint, seed=6)
    want = interpret(adjoint, args, SIZES)
    for got, expected in zip(run_program(program, args, SIZES), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    native = rv.compile(GMM).f.grad()(*args)
    for got, expected in zip(native, want[1:], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-12)
