"""Jacobians whose seeded identity meets a matrix product (issue 11, W6).

`f.jacobian` seeds a batched JVP (or VJP) with an identity; simplify's identity-product
rule (compiler/transforms/identity_products.py) turns the tangent `A @ I` into `A` and the
cotangent `diag(1 - tanh²) @ A` into a scaled `A`, so the Jacobian of `tanh(A @ x)` is
`(1 - tanh²)[:, None] · A` with no matrix product but the forward one. Checked here: the
IR (golden file), the MLIR export, values against torch.func.jacrev and central
differences (tests/tensor_ir/test_identity_products.py runs them at every level), bitwise
equality with the product the rule removes, and `rv.grad(..., is_grads_batched=True)`
(where the identity is a run-time input and nothing is rewritten).

Regenerate the golden file with
`REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/grad/test_jacobian_identity.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.export.mlir import export_mlir
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.transforms import simplify as simplify_module
from reverie.compiler.transforms.jacobian import MODES, jacobian_function

GOLDEN = Path(__file__).parents[1] / "golden" / "jacobian" / "tanh_layer.ir"
SOURCE = """
fn layer(A: f64[M, N], x: f64[N]) -> f64[M] { return tanh(A @ x); }
fn two_layers(A: f64[H, N], B: f64[M, H], x: f64[N]) -> f64[M] {
    return tanh(B @ tanh(A @ x));
}
"""
SHAPES = [(5, 5), (3, 7), (7, 3)]  # square; fewer outputs (reverse is cheaper); fewer inputs


def specialise(name: str) -> Function:
    return rv.compile(SOURCE, backend="interp").lowering.specialise(name, "f64")


def matmuls(fn: Function) -> int:
    return [op.name for op in fn.body.walk()].count("matmul")


def torch_jacobian(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    return torch.func.jacrev(lambda v: torch.tanh(torch.from_numpy(A) @ v))(
        torch.from_numpy(x)).numpy()


def central_differences(A: np.ndarray, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    columns = [(np.tanh(A @ (x + h * e)) - np.tanh(A @ (x - h * e))) / (2 * h)
               for e in np.eye(len(x))]
    return np.stack(columns, axis=1)


def operands(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10 + n)
    return rng.standard_normal((m, n)) / np.sqrt(n), rng.standard_normal(n)


@pytest.mark.parametrize("mode", MODES)
def test_the_seeded_identity_leaves_no_product_but_the_forward_one(mode: str) -> None:
    fn = jacobian_function(specialise("layer"), [1], mode)
    verify_function(fn)
    assert matmuls(fn) == 1
    assert "generic" not in [op.name for op in fn.body.walk()]  # the identity is gone


@pytest.mark.parametrize("mode", MODES)
def test_a_real_product_of_two_layers_stays(mode: str) -> None:
    """B @ (diag(s) A) is a true product: two forward products and the Jacobian's one."""
    assert matmuls(jacobian_function(specialise("two_layers"), [2], mode)) == 3


def test_jacobian_ir_matches_golden_file(golden) -> None:  # noqa: ANN001
    fn = specialise("layer")
    printed = "\n\n".join(format_function(jacobian_function(fn, [1], mode)) for mode in MODES)
    golden(printed + "\n", GOLDEN)


@pytest.mark.parametrize("mode", MODES)
def test_mlir_export_has_only_the_forward_product(mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The export runs each matrix product as an `scf.for` reduction: one is left."""
    layer = specialise("layer")
    assert export_mlir(jacobian_function(layer, [1], mode)).count("scf.for") == 1
    monkeypatch.setattr(simplify_module, "identity_product", lambda op: None)
    assert export_mlir(jacobian_function(layer, [1], mode)).count("scf.for") == 2


@pytest.mark.parametrize(("m", "n"), SHAPES)
def test_jacobian_matches_torch_and_differences(m: int, n: int) -> None:
    A, x = operands(m, n)
    want = torch_jacobian(A, x)
    np.testing.assert_allclose(central_differences(A, x), want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(rv.compile(SOURCE).layer.jacobian("x")(A, x), want,
                               rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize(("m", "n"), SHAPES)
def test_jacobian_is_bitwise_the_product_it_replaces(m: int, n: int, dtype: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    uncached: None) -> None:
    """Forward (m >= n) or reverse mode, by shape: the same bits as through `A @ I`."""
    source = SOURCE.replace("f64", dtype)
    A, x = (a.astype(dtype.replace("f", "float")) for a in operands(m, n))
    rewritten = rv.compile(source).layer.jacobian("x")
    got = rewritten(A, x)
    monkeypatch.setattr(simplify_module, "identity_product", lambda op: None)
    multiplied = rv.compile(source).layer.jacobian("x")
    want = multiplied(A, x)
    for kernel, products in ((rewritten, 1), (multiplied, 2)):
        ir = kernel.ir_for(dtype) if m >= n else kernel.reverse_ir_for(dtype)
        assert matmuls(ir) == products
    assert got.dtype == want.dtype == A.dtype
    np.testing.assert_array_equal(got, want)


def test_two_layer_jacobian_matches_torch() -> None:
    rng = np.random.default_rng(5)
    A, B, x = rng.standard_normal((4, 6)), rng.standard_normal((3, 4)), rng.standard_normal(6)
    got = rv.compile(SOURCE).two_layers.jacobian("x")(A, B, x)
    want = torch.func.jacrev(lambda v: torch.tanh(torch.from_numpy(B) @ torch.tanh(
        torch.from_numpy(A) @ v)))(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_batched_vjp_over_a_runtime_identity_agrees() -> None:
    """W6's other variant: the identity is an argument, so it stays a product; same values."""
    A, x = operands(6, 4)
    kernel = rv.compile(SOURCE).layer
    xt = rv.tensor(x, requires_grad=True)
    (rows,) = rv.grad(kernel(A, xt), xt, grad_outputs=np.eye(6), is_grads_batched=True)
    np.testing.assert_allclose(np.asarray(rows), kernel.jacobian("x")(A, x), rtol=1e-13)


@pytest.mark.mlir
def test_mlir_backend_jacobian_matches_torch() -> None:
    A, x = operands(5, 4)
    got = rv.compile(SOURCE, backend="mlir").layer.jacobian("x")(A, x)
    np.testing.assert_allclose(got, torch_jacobian(A, x), rtol=1e-13)
