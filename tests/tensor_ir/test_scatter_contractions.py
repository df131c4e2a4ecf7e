"""The scatter-contraction pass (compiler/transforms/scatter_contractions.py): a convolution's
input adjoint, one scatter over the whole iteration space, becomes a matrix product and a
scatter of its result; the rewritten function computes what the original does (tensor-IR
interpreter, native code against torch), and scatters that are not matrix products stay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.pipeline import Request, compile_source
from reverie.compiler.transforms.contractions import contract_function
from reverie.compiler.transforms.scatter_contractions import split_scatter_contractions

CONV = """
fn loss(x: f64[B, C, H, W], w: f64[O, C, 3, 3]) -> f64 {
    let y[b, o, i in 0..(H - 1) // {s} + 1, j in 0..(W - 1) // {s} + 1] =
        sum[c, k, l](x[b, c, {s} * i + k - 1, {s} * j + l - 1] * w[o, c, k, l]);
    return sum(y * y);
}
"""

# the adjoint of an embedding's gather: a scatter over the positions only, no sum
EMBEDDING = """
fn loss(table: f64[V, D], ids: i64[N]) -> f64 {
    let e[n, d] = table[ids[n], d];
    return sum(e * e);
}
"""


def adjoint(source: str, wrt: tuple[str, ...]):
    return compile_source(source, "reverse",
                          Request(function="loss", transform="reverse", wrt=wrt))


def ops_named(fn, name: str) -> list:
    return [op for op in fn.body.ops if op.name == name]


def multiplies(scatter) -> bool:
    """Whether the scattered value is a product (else the scatter moves values only)."""
    return scatter.regions[0].results[-1].op.name == "mul"


@pytest.mark.parametrize("stride", [1, 2])
def test_convolution_input_adjoint_is_a_matrix_product(stride: int) -> None:
    grad = adjoint(CONV.replace("{s}", str(stride)), ("x",))
    assert any(multiplies(op) for op in ops_named(grad, "generic_scatter"))
    split = split_scatter_contractions(grad)
    assert not any(multiplies(op) for op in ops_named(split, "generic_scatter"))
    assert len(ops_named(contract_function(split), "matmul")) == \
        len(ops_named(contract_function(grad), "matmul")) + 1
    rng = np.random.default_rng(stride)
    args = [rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 3))]
    sizes = {"B": 2, "C": 3, "H": 7, "W": 6, "O": 4}
    want = interpret(grad, args, sizes)
    for got_value, want_value in zip(interpret(split, args, sizes), want, strict=True):
        np.testing.assert_allclose(got_value, want_value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_native_convolution_gradients_equal_torch(stride: int) -> None:
    module = rv.compile(CONV.replace("{s}", str(stride)))
    rng = np.random.default_rng(10 + stride)
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((5, 3, 3, 3))
    got = module.loss.grad((0, 1))(x, w)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1)
    want = torch.autograd.grad((y * y).sum(), (tx, tw))
    for got_value, want_value in zip(got, want, strict=True):
        np.testing.assert_allclose(got_value, want_value.numpy(), rtol=1e-11, atol=1e-11)


def test_a_scatter_without_a_sum_stays() -> None:
    grad = adjoint(EMBEDDING, ("table",))
    assert ops_named(grad, "generic_scatter")
    assert split_scatter_contractions(grad) is grad
