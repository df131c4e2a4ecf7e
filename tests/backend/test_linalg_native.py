"""The linear-algebra built-ins against numpy.linalg at the interpreter and in native code.

Values of every function on batched stacks in f32 and f64, with operands that are strided
views or computed (fused) values; NaN for non-positive-definite input to cholesky and for
singular input to solve (the documented convention), a zero determinant; the own loops
that replace LAPACK where none is found (`REVERIE_LAPACK=0`, in a subprocess: Cholesky,
substitution, LU, Jacobi's eigh and svd, Householder's qr); Jacobians
(the batching rules) against torch; the MLIR export's loops (cholesky, triangular_solve,
solve, det) against NumPy; the errors: shapes named at the caret, the MLIR export naming
the op it cannot lower.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch

import reverie as rv
from reverie.compiler.ir.types import NUMPY_DTYPES

SOURCE = """
fn chol(a: float[B, C, N, N]) -> float[B, C, N, N] { return cholesky(a); }
fn chol_upper(a: float[N, N]) -> float[N, N] { return cholesky(a.T, upper=true); }
fn tri(a: float[B, N, N], b: float[B, N, K]) -> float[B, N, K] {
    return triangular_solve(a, b, lower=false, transpose=true);
}
fn tri_right(a: float[N, N], b: float[K, N]) -> float[K, N] {
    return triangular_solve(2.0 * a, b, left=false, unit_diagonal=true);
}
fn tri_vector(a: float[N, N], b: float[N]) -> float[N] { return triangular_solve(a, b); }
fn lin(a: float[B, N, N], b: float[N, K]) -> float[B, N, K] { return solve(a, b); }
fn lin_vector(a: float[N, N], b: float[N]) -> float[N] { return solve(a.T, b); }
fn inverse(a: float[B, N, N]) -> float[B, N, N] { return inv(a); }
fn determinant(a: float[B, N, N]) -> float[B] { return det(a); }
fn logdet(a: float[B, N, N]) -> float[B] { let (s, l) = slogdet(a); return s * l; }
fn spectrum(a: float[B, N, N]) -> float[B, N] { let (w, v) = eigh(a); return w; }
fn vectors(a: float[B, N, N]) -> float[B, N, N] { let (w, v) = eigh(a); return abs(v); }
fn singular(a: float[B, 6, 4]) -> float[B, 4] { return svd(a, compute_uv=false); }
fn named(a: float[B, 6, 4]) -> float[B, 4] {
    return svdvals(a) + eigvalsh(transpose(a, (0, 2, 1)) @ a);
}
fn rebuilt(a: float[B, 4, 6]) -> float[B, 4, 6] {
    let (u, s, vh) = svd(a, full_matrices=false);
    return (u * reshape(s, (B, 1, 4))) @ vh;
}
fn orthogonal(a: float[6, 4]) -> float[4, 4] { let (q, r) = qr(a); return abs(r) + q.T @ q; }
fn pseudo(a: float[B, 4, 6]) -> float[B, 6, 4] { return pinv(a); }
fn sizes(a: float[B, 5, 3]) -> float[B] {
    return norm(a, ord=nuc, axis=(1, 2)) + norm(a, ord=-2, axis=(1, 2))
         + norm(a, ord=-inf, axis=(1, 2)) + norm(a, ord=fro, axis=(1, 2));
}
fn vector_sizes(x: float[B, N]) -> float[B] {
    return norm(x, axis=1) + norm(x, ord=0, axis=1) + norm(x, ord=-inf, axis=1)
         + norm(x, ord=0.5, axis=1);
}
fn whole(x: float[B, N]) -> float { return norm(x) + norm(x, ord=inf, axis=(0, 1)); }
"""

la = np.linalg


def _spd(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _batched_svd_rebuilt(a: np.ndarray) -> np.ndarray:
    u, s, vh = la.svd(a, full_matrices=False)
    return (u * s[..., None, :]) @ vh


CASES = {
    "chol": (lambda r: [_spd((2, 3, 4, 4), r)], la.cholesky),
    "chol_upper": (lambda r: [_spd((4, 4), r)], lambda a: la.cholesky(a).T),
    "tri": (lambda r: [r.standard_normal((2, 4, 4)) + 4 * np.eye(4), r.standard_normal((2, 4, 3))],
            lambda a, b: np.stack([scipy.linalg.solve_triangular(a[i], b[i], trans=1)
                                   for i in range(2)])),
    "tri_right": (lambda r: [r.standard_normal((4, 4)), r.standard_normal((3, 4))],
                  lambda a, b: scipy.linalg.solve_triangular(
                      2 * a, b.T, lower=True, trans=1, unit_diagonal=True).T),
    "tri_vector": (lambda r: [r.standard_normal((4, 4)) + 4 * np.eye(4), r.standard_normal(4)],
                   lambda a, b: scipy.linalg.solve_triangular(a, b, lower=True)),
    "lin": (lambda r: [r.standard_normal((2, 4, 4)), r.standard_normal((4, 3))], la.solve),
    "lin_vector": (lambda r: [r.standard_normal((4, 4)), r.standard_normal(4)],
                   lambda a, b: la.solve(a.T, b)),
    "inverse": (lambda r: [r.standard_normal((2, 4, 4))], la.inv),
    "determinant": (lambda r: [r.standard_normal((3, 4, 4))], la.det),
    "logdet": (lambda r: [r.standard_normal((3, 4, 4))], lambda a: np.prod(la.slogdet(a), 0)),
    "spectrum": (lambda r: [_spd((2, 4, 4), r)], la.eigvalsh),
    "vectors": (lambda r: [_spd((2, 4, 4), r)], lambda a: np.abs(la.eigh(a)[1])),
    "singular": (lambda r: [r.standard_normal((2, 6, 4))], lambda a: la.svd(a, compute_uv=False)),
    "named": (lambda r: [r.standard_normal((2, 6, 4))],
              lambda a: la.svd(a, compute_uv=False) + la.eigvalsh(np.swapaxes(a, 1, 2) @ a)),
    "rebuilt": (lambda r: [r.standard_normal((2, 4, 6))], _batched_svd_rebuilt),
    "orthogonal": (lambda r: [r.standard_normal((6, 4))],
                   lambda a: np.abs(la.qr(a)[1]) + np.eye(4)),
    "pseudo": (lambda r: [r.standard_normal((2, 4, 6))], la.pinv),
    "sizes": (lambda r: [r.standard_normal((2, 5, 3))],
              lambda a: la.norm(a, "nuc", axis=(1, 2)) + la.norm(a, -2, axis=(1, 2))
              + la.norm(a, -np.inf, axis=(1, 2)) + la.norm(a, "fro", axis=(1, 2))),
    "vector_sizes": (lambda r: [r.standard_normal((3, 5))],
                     lambda x: la.norm(x, axis=1) + la.norm(x, 0, axis=1)
                     + la.norm(x, -np.inf, axis=1) + la.norm(x, 0.5, axis=1)),
    "whole": (lambda r: [r.standard_normal((3, 5))],
              lambda x: la.norm(x) + la.norm(x, np.inf, axis=(0, 1))),
}


@pytest.fixture(scope="module", params=["interp", "native"])
def module(request: pytest.FixtureRequest) -> rv.Module:
    return rv.compile(SOURCE, backend=request.param)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_numpy(module: rv.Module, name: str, dtype: str) -> None:
    make, reference = CASES[name]
    args = [a.astype(NUMPY_DTYPES[dtype]) for a in make(np.random.default_rng(0))]
    got = module[name](*args)
    assert np.asarray(got).dtype == NUMPY_DTYPES[dtype]
    want = reference(*(a.astype(np.float64) for a in args))
    tolerance = 2e-4 if dtype == "f32" else 1e-10
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_no_convergence_gives_nan(module: rv.Module) -> None:
    """eigh and svd of a NaN matrix: NaN for it (NumPy raises), the others computed."""
    stack = np.stack([np.full((4, 4), np.nan), _spd((4, 4), np.random.default_rng(1))])
    values = module.spectrum(stack)
    assert np.isnan(values[0]).all()
    np.testing.assert_allclose(values[1], la.eigvalsh(stack[1]), rtol=1e-10)
    singular = module.singular(np.stack([np.full((6, 4), np.nan), np.ones((6, 4))]))
    assert np.isnan(singular[0]).all() and np.isfinite(singular[1]).all()


def test_refused_input_gives_nan(module: rv.Module) -> None:
    bad = np.stack([np.eye(3), -np.eye(3)])[None]   # the second matrix is not PD
    factors = module.chol(bad)
    np.testing.assert_array_equal(factors[0, 0], np.eye(3))
    assert np.isnan(factors[0, 1]).all()
    assert np.isnan(module.lin_vector(np.ones((3, 3)), np.ones(3))).all()
    np.testing.assert_array_equal(module.determinant(np.ones((1, 3, 3))), [0.0])


LOOPS_CHECK = """
import numpy as np, reverie as rv, scipy.linalg as sl
m = rv.compile('''
fn c(a: f64[B, N, N]) -> f64[B, N, N] { return cholesky(a); }
fn t(a: f64[N, N], b: f64[N, K]) -> f64[N, K] { return triangular_solve(a, b, transpose=true); }
fn v(a: f64[B, N, N], b: f64[B, N, K]) -> f64[B, N, K] { return solve(a, b); }
fn d(a: f64[B, N, N]) -> f64[B] { return det(a); }
fn e(a: f64[N, N]) -> (f64[N], f64[N, N]) { let (w, v) = eigh(a); return (w, v); }
fn q(a: f64[B, 30, 5]) -> (f64[B, 30, 5], f64[B, 5, 5]) { let (q, r) = qr(a); return (q, r); }
fn w(a: f64[B, 5, 30]) -> (f64[B, 5, 5], f64[B, 5, 30]) { let (q, r) = qr(a); return (q, r); }
fn s(a: f64[N, N]) -> f64[N] { return svdvals(a); }
fn g(a: f64[N, N]) -> f64 { return det(a); }
fn u(a: f64[B, 30, 5]) -> (f64[B, 30, 5], f64[B, 5], f64[B, 5, 5]) {
    let (u, s, vh) = svd(a, full_matrices=false);
    return (u, s, vh);
}
''')
r = np.random.default_rng(0)
x = r.standard_normal((2, 30, 30)); spd = x @ x.transpose(0, 2, 1) + 30 * np.eye(30)
a, b = r.standard_normal((2, 30, 30)), r.standard_normal((2, 30, 5))
assert np.allclose(m.c(spd), np.linalg.cholesky(spd), atol=1e-12)
assert np.allclose(m.t(a[0] + 9 * np.eye(30), b[0]),
                   sl.solve_triangular(a[0] + 9 * np.eye(30), b[0], lower=True, trans=1))
assert np.allclose(m.v(a, b), np.linalg.solve(a, b), atol=1e-10)
assert np.allclose(m.d(a), np.linalg.det(a), rtol=1e-10)
assert np.allclose(m.d(np.ones((1, 3, 3))), 0.0)
assert np.isnan(m.c(-spd)).all()
assert np.allclose(m.s(a[0]), np.linalg.svd(a[0], compute_uv=False), atol=1e-12)
u, s, vh = m.u(b)
want = np.linalg.svd(b, full_matrices=False)
assert np.allclose(s, want[1], atol=1e-12) and np.allclose(abs(vh), abs(want[2]), atol=1e-10)
assert np.allclose((u[0] * s[0]) @ vh[0], b[0], atol=1e-12)
singular = a[0, :4, :4].copy()
singular[:, 0] = 0.0                               # det's adjugate through the own svd
cofactors = [[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(singular, i, 0), j, 1))
              for j in range(4)] for i in range(4)]
assert np.allclose(m.g.grad(wrt=0)(singular), cofactors, atol=1e-12)
tall, wide = b.copy(), np.swapaxes(b, 1, 2).copy()
tall[1, :, 0] = 0.0                                # a zero column: H = I, as LAPACK's
wide[0, 2:, 1] = 0.0
for function, x in ((m.q, tall), (m.w, wide)):     # Householder with LAPACK's signs
    for got, want in zip(function(x), np.linalg.qr(x)):
        assert np.allclose(got, want, atol=1e-12)
sym = a[0] + a[0].T
sym[0, -1] = 7.0                                   # the upper triangle is not read
w, v = m.e(sym)
want = np.linalg.eigh(sym)
assert np.allclose(w, want[0], atol=1e-12) and np.allclose(abs(v), abs(want[1]), atol=1e-10)
assert np.allclose(v.T @ v, np.eye(30), atol=1e-12)
print("ok")
"""


def test_own_loops_without_lapack(tmp_path: Path) -> None:
    environment = {**os.environ, "REVERIE_LAPACK": "0", "REVERIE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", LOOPS_CHECK], capture_output=True, text=True,
                          timeout=600, check=False, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok"]


JACOBIAN_SOURCE = """
fn factor(a: f64[N, N]) -> f64[N, N] { return cholesky(a @ a.T); }
fn solved(a: f64[N, N], b: f64[N, 2]) -> f64[N, 2] { return solve(a, b); }
fn values(a: f64[N, N]) -> f64[N] { let (w, v) = eigh(a + a.T); return w; }
"""
JACOBIAN_TORCH = {
    "factor": lambda a, *_: torch.linalg.cholesky(a @ a.T),
    "solved": lambda a, b: torch.linalg.solve(a, b),
    "values": lambda a, *_: torch.linalg.eigvalsh(a + a.T),
}


@pytest.mark.parametrize("backend", ["interp", "native"])
@pytest.mark.parametrize("name", sorted(JACOBIAN_TORCH))
def test_jacobians_match_torch(backend: str, name: str) -> None:
    module = rv.compile(JACOBIAN_SOURCE, backend=backend)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 4)) + 3 * np.eye(4)
    extra = [rng.standard_normal((4, 2))] if name == "solved" else []
    got = module[name].jacobian(wrt=0)(a, *extra)
    rest = [torch.tensor(e) for e in extra]
    want = torch.autograd.functional.jacobian(lambda x: JACOBIAN_TORCH[name](x, *rest),
                                              torch.tensor(a))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("source", "message"), [
    ("fn f(a: f64[N, M]) -> f64[N, M] { return cholesky(a); }",
     "needs square matrices, got f64[N, M]: its last two dimensions N and M differ"),
    ("fn f(a: f64[N, N], b: f64[M]) -> f64[N] { return solve(a, b); }",
     "the right-hand side f64[M] has M rows, the matrix N"),
    ("fn f(a: f64[2, N, N], b: f64[3, N, 1]) -> f64[2, N, 1] { return solve(a, b); }",
     "do not broadcast"),
    ("fn f(a: f64[N]) -> f64 { let (s, l) = slogdet(a); return l; }",
     "needs a matrix (at least 2 axes), got f64[N]"),
    ("fn f(a: i64[N, N]) -> f64 { return det(a); }", "needs float matrices"),
    ("fn f(a: f64[4, 3]) -> f64[4, 3] { let (u, s, vh) = svd(a); return u; }",
     "write svd(a, full_matrices=false)"),
    ("fn f(a: f64[N, N]) -> f64 { return norm(a, ord=fro, axis=0); }", "is a matrix norm"),
    ("fn f(a: f64[N, N]) -> f64 { return norm(a, ord=3, axis=(0, 1)); }", "not a matrix norm"),
    ("fn f(a: f64[N, N]) -> f64 { return norm(a, ord=two); }", "ord must be a number"),
])
def test_bad_shapes_are_compile_errors(source: str, message: str) -> None:
    with pytest.raises(rv.CompileError) as caught:
        rv.compile(source)
    assert message in str(caught.value)
    assert "^" in str(caught.value)


def test_qr_derivative_needs_comparable_sides() -> None:
    module = rv.compile("fn f(a: f64[M, N]) -> f64 { let (q, r) = qr(a); return sum(q); }",
                        backend="interp")
    with pytest.raises(rv.CompileError, match="needs M and N that compare at compile time"):
        module.f.grad()(np.ones((3, 5)))


MLIR_CASES = ["chol", "chol_upper", "tri", "tri_right", "tri_vector", "lin", "lin_vector",
              "inverse", "determinant", "logdet"]


@pytest.mark.mlir
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_mlir_export_loops_match_numpy(dtype: str) -> None:
    module = rv.compile(SOURCE, backend="mlir")
    for name in MLIR_CASES:
        make, reference = CASES[name]
        args = [a.astype(NUMPY_DTYPES[dtype]) for a in make(np.random.default_rng(0))]
        want = reference(*(a.astype(np.float64) for a in args))
        tolerance = 2e-4 if dtype == "f32" else 1e-10
        np.testing.assert_allclose(module[name](*args), want, rtol=tolerance, atol=tolerance,
                                   err_msg=name)
    assert np.isnan(module.chol(-np.eye(3)[None, None])).all()
    assert np.isnan(module.lin_vector(np.ones((3, 3)), np.ones(3))).all()
    np.testing.assert_array_equal(module.determinant(np.ones((1, 3, 3))), [0.0])


@pytest.mark.mlir
def test_mlir_gradient_matches_native() -> None:
    source = """
    fn loss(a: f64[N, N], y: f64[N]) -> f64 {
        let l = cholesky(a @ a.T + 4.0 * inv(inv(a)) @ inv(a));
        let (s, q) = slogdet(l);
        return sum(triangular_solve(l, y) ** 2) + q;
    }
    """
    rng = np.random.default_rng(6)
    a, y = rng.standard_normal((5, 5)) + 3 * np.eye(5), rng.standard_normal(5)
    got = rv.compile(source, backend="mlir").loss.grad(wrt=0)(a, y)
    np.testing.assert_allclose(got, rv.compile(source).loss.grad(wrt=0)(a, y), rtol=1e-10)


def test_mlir_export_names_the_op_it_cannot_lower() -> None:
    module = rv.compile("fn f(a: f64[N, N]) -> f64 { let (w, v) = eigh(a); return sum(w); }")
    with pytest.raises(rv.CompileError, match="cannot lower 'eigh'"):
        module.ir("mlir")


def test_loop_ir_shows_one_helper_call() -> None:
    module = rv.compile("fn f(a: f64[B, N, N]) -> f64[B, N, N] "
                        "{ return cholesky(transpose(a, (0, 2, 1))); }")
    text = module.ir("loops")
    assert text.count("linalg cholesky") == 1


EMPTY_SOURCE = """
fn c(a: f64[B, N, N]) -> f64[B, N, N] { return cholesky(a); }
fn s(a: f64[B, N, N], b: f64[B, N, 1]) -> f64[B, N, 1] { return solve(a, b); }
fn d(a: f64[B, N, N]) -> f64[B] { return det(a); }
fn e(a: f64[B, N, N]) -> f64[B, N] { let (w, v) = eigh(a); return w; }
fn g(a: f64[B, N, N]) -> f64 { return sum(det(a)) + sum(cholesky(a)); }
"""


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0)])
def test_empty_matrices_and_batches(shape: tuple[int, ...], capfd: pytest.CaptureFixture) -> None:
    """Empty stacks and 0 x 0 matrices (det 1), with no LAPACK complaint on stderr."""
    module = rv.compile(EMPTY_SOURCE)
    a = np.zeros(shape)
    assert module.c(a).shape == shape
    assert module.s(a, np.ones((*shape[:2], 1))).shape == (*shape[:2], 1)
    np.testing.assert_array_equal(module.d(a), np.linalg.det(a))
    assert module.e(a).shape == shape[:2]
    assert module.g.grad(wrt=0)(a).shape == shape
    assert "illegal value" not in capfd.readouterr().err
