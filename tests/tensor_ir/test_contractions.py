"""The contraction pass (compiler/transforms/contractions.py): which generics become
(batched) matrix products, that the rewritten function computes what the original does
(tensor-IR interpreter, loop-IR interpreter, native code), and the batched `matmul` it
relies on (shape rule, loop lowering)."""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.ops import infer_types
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import ShapeError, TensorType
from reverie.compiler.loops.ir import Loop, Matmul
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.transforms.contractions import contract_function

SIZES = {"B": 3, "N": 5, "K": 4, "M": 6, "D": 2}


def einsum_source(spec: str) -> str:
    """A one-line index-notation kernel for an einsum `spec` such as 'ij,jk->ik'."""
    inputs, output = spec.split("->")
    left, right = inputs.split(",")
    summed = sorted(set(left + right) - set(output))
    names = {"i": "N", "j": "K", "k": "M", "b": "B", "n": "N", "d": "D"}

    def shape(subscripts: str) -> str:
        return ", ".join(names[c] for c in subscripts)

    def index(subscripts: str) -> str:
        return ", ".join(subscripts)

    result, target = (f"f64[{shape(output)}]", f"z[{index(output)}]") if output else ("f64", "z")
    return (f"fn f(x: f64[{shape(left)}], y: f64[{shape(right)}]) -> {result} {{\n"
            f"    let {target} = sum[{index(summed)}](x[{index(left)}] * "
            f"y[{index(right)}]);\n    return z;\n}}\n")


def random_args(fn: Function, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(d.evaluate(SIZES) for d in p.type.shape))
            for p in fn.params]


def ops_named(fn: Function, name: str) -> list:
    return [op for op in fn.body.ops if op.name == name]


def reducing_generics(fn: Function) -> list:
    return [op for op in ops_named(fn, "generic") if op.attrs.get("reduce")]


MATRIX_PRODUCTS = ["ij,jk->ik", "ji,jk->ik", "ij,kj->ki", "bij,bjk->bik", "ijb,jkb->bik",
                   "kji,nki->nkj", "nki,nkj->kji", "bji,kjb->kbi", "ibj,jk->kbi"]


@pytest.mark.parametrize("spec", MATRIX_PRODUCTS)
def test_a_contraction_in_any_index_order_becomes_a_matmul(spec: str) -> None:
    source = einsum_source(spec)
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    rewritten = contract_function(fn)
    assert len(ops_named(rewritten, "matmul")) == 1
    assert reducing_generics(rewritten) == []
    args = random_args(fn)
    expected = np.einsum(spec, *args)
    (interpreted,) = interpret(rewritten, args, SIZES)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-12, atol=1e-12)
    (loops,) = run_program(compile_function(rewritten, "to_loops"), args, SIZES)
    np.testing.assert_allclose(loops, expected, rtol=1e-12, atol=1e-12)
    native = rv.compile(source).f(*args)
    np.testing.assert_allclose(native, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", ["ij,ij->i", "ij,j->i", "i,i->", "ij,ij->"])
def test_dot_and_matrix_vector_products_stay_loop_nests(spec: str) -> None:
    fn = rv.compile(einsum_source(spec), backend="interp").lowering.specialise("f", "f64")
    assert contract_function(fn) is fn


def test_sums_of_squares_and_non_products_are_left_alone() -> None:
    source = """
fn f(x: f64[N, K], y: f64[K, M]) -> f64[N, M] {
    let s[n] = sum[k](x[n, k] * x[n, k]);
    let z[n, m] = sum[k](x[n, k] + y[k, m]);
    let out[n, m] = z[n, m] + s[n];
    return out;
}
"""
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    assert contract_function(fn) is fn


GMM = """
fn f(x: f64[N, D], mu: f64[K, D], L: f64[K, D, D], tril: f64[D, D], s: f64[K, D]) -> f64 {
    let xc[n, k, i] = x[n, i] - mu[k, i];
    let y[n, k, j] = exp(s[k, j]) * xc[n, k, j] + sum[i](L[k, j, i] * tril[j, i] * xc[n, k, i]);
    return sum(y ** 2);
}
"""


def test_the_gmm_contraction_and_both_its_adjoints_reach_the_matrix_kernel() -> None:
    module = rv.compile(GMM, backend="interp")
    adjoint = module.adjoint("f", "f64")
    assert len(reducing_generics(adjoint)) >= 3
    rewritten = contract_function(adjoint)
    # y, and the adjoints with respect to L (batch k, rows i, columns j, summed n) and xc
    matmuls = ops_named(rewritten, "matmul")
    assert len(matmuls) == 3 and all(op.result.type.rank == 3 for op in matmuls)
    args = random_args(adjoint, seed=3)
    for got, want in zip(interpret(rewritten, args, SIZES), interpret(adjoint, args, SIZES),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_gmm_gradient_compiles_to_the_same_values_as_the_interpreter() -> None:
    args = random_args(rv.compile(GMM, backend="interp").lowering.specialise("f", "f64"), 4)
    native = rv.compile(GMM).f.grad()(*args)
    reference = rv.compile(GMM, backend="interp").f.grad()(*args)
    for got, want in zip(native, reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_the_pass_prints_under_its_name(capfd: pytest.CaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "contract")
    monkeypatch.setenv("REVERIE_PIPELINE_CACHE", "0")
    x = np.ones((2, 3))
    rv.compile(einsum_source("ji,jk->ik")).f(x, np.ones((2, 4)))
    err = capfd.readouterr().err
    assert "// ---- after contract (tensor IR): @f" in err
    assert "matmul" in err


def test_batched_matmul_shapes() -> None:
    a, b = TensorType("f64", (3, 4, 5)), TensorType("f64", (3, 5, 2))
    assert infer_types("matmul", [a, b], {}, []) == [TensorType("f64", (3, 4, 2))]
    with pytest.raises(ShapeError, match="batch dimensions differ"):
        infer_types("matmul", [a, TensorType("f64", (2, 5, 2))], {}, [])
    with pytest.raises(ShapeError, match="inner dimensions differ"):
        infer_types("matmul", [a, TensorType("f64", (3, 4, 2))], {}, [])
    with pytest.raises(ShapeError, match="2-D operands"):
        infer_types("matmul", [a, TensorType("f64", (5, 2))], {}, [])


def test_a_batched_matmul_lowers_to_one_batched_matrix_kernel_call() -> None:
    fn = contract_function(rv.compile(einsum_source("bij,bjk->bik"), backend="interp")
                           .lowering.specialise("f", "f64"))
    program = compile_function(fn, "to_loops")
    (product,) = [s for s in program.walk() if isinstance(s, Matmul)]
    assert not any(isinstance(s, Loop) and product in s.body for s in program.walk())
    assert [len(view.shape) for view in (product.out, product.a, product.b)] == [3, 3, 3]
