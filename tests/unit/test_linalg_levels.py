"""The linear-algebra ops at every level: the tensor interpreter, the loop interpreter
(`LinalgCall` run by NumPy on the loop program's buffers) and native code (LAPACK), on
one function each, forward and gradient."""

from __future__ import annotations

import numpy as np
import pytest
from level_helpers import every_level, loop_program

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel

SOURCE = """
fn chol(a: f64[B, N, N]) -> f64[B, N, N] { return cholesky(a + transpose(a, (0, 2, 1))); }
fn tri(a: f64[N, N], b: f64[N, K]) -> f64[N, K] {
    return triangular_solve(a, b, lower=false, transpose=true, unit_diagonal=true);
}
fn lin(a: f64[B, N, N], b: f64[B, N, K]) -> f64[B, N, K] { return solve(exp(a), b); }
fn dets(a: f64[B, N, N]) -> f64[B] { let (s, l) = slogdet(a); return det(a) + s * l; }
fn spectrum(a: f64[N, N]) -> f64[N] { let (w, v) = eigh(a); return w + sum(v * v, axis=0); }
fn singular(a: f64[6, 4]) -> f64[4] { let (u, s, vh) = svd(a, full_matrices=false); return s; }
fn rebuilt(a: f64[6, 4]) -> f64[6, 4] { let (q, r) = qr(a); return q @ r; }
fn likelihood(a: f64[N, N], y: f64[N]) -> f64 {
    let l = cholesky(a @ a.T + 4.0 * inv(inv(a)) @ inv(a));
    let z = triangular_solve(l, y);
    return 0.5 * sum(z * z) + norm(l, ord=nuc, axis=(0, 1));
}
"""


def _arguments(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {"chol": [(2, 4, 4)], "tri": [(4, 4), (4, 3)], "lin": [(2, 4, 4), (2, 4, 3)],
              "dets": [(3, 4, 4)], "spectrum": [(4, 4)], "singular": [(6, 4)],
              "rebuilt": [(6, 4)], "likelihood": [(4, 4), (4,)]}[name]
    args = [rng.standard_normal(s) for s in shapes]
    if name == "chol":
        args[0] = args[0] @ np.swapaxes(args[0], -1, -2) + 4 * np.eye(4)
    if name == "likelihood":
        args[0] += 3 * np.eye(4)
    return args


@pytest.mark.parametrize("name", ["chol", "tri", "lin", "dets", "spectrum", "singular",
                                  "rebuilt"])
def test_forward_agrees_at_every_level(name: str) -> None:
    fn = rv.compile(SOURCE).lowering.specialise(name, "f64")
    interpreted, looped, native = every_level(fn, _arguments(name))
    np.testing.assert_allclose(looped, interpreted, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(native, interpreted, rtol=1e-10, atol=1e-10)


def test_gradient_agrees_at_every_level() -> None:
    module = rv.compile(SOURCE)
    fn = module.adjoint("likelihood", "f64", wrt=0)
    bound = bind_arguments(fn, _arguments("likelihood"))
    interpreted = interpret(fn, bound.arrays, bound.dims)
    looped = run_program(loop_program(fn), bound.arrays, bound.dims)
    native = native_kernel(fn)(bound)
    for got in (looped, native):
        for part, want in zip(got, interpreted, strict=True):
            np.testing.assert_allclose(part, want, rtol=1e-9, atol=1e-10)


LOOP_SOURCE = """
fn f(a: f64[N, N], b: f64[N]) -> f64 {
    var x = b;
    for t in 0..3 {
        x = solve(a, x) + triangular_solve(cholesky(a @ a.T + 4.0 * inv(inv(a)) @ inv(a)), x);
    }
    let (s, l) = slogdet(a);
    return sum(x * x) + l;
}
"""


@pytest.mark.parametrize("backend", ["native", pytest.param("mlir", marks=pytest.mark.mlir)])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_inside_a_loop_and_its_gradient(backend: str, checkpoint: bool) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 4)) + 3 * np.eye(4), rng.standard_normal(4)
    want = rv.compile(LOOP_SOURCE, backend="interp").f
    got = rv.compile(LOOP_SOURCE, backend=backend).f
    np.testing.assert_allclose(got(a, b), want(a, b), rtol=1e-12)
    np.testing.assert_allclose(got.grad(wrt=0, checkpoint=checkpoint)(a, b),
                               want.grad(wrt=0)(a, b), rtol=1e-10, atol=1e-12)
