"""simplify's identity-product rule (compiler/transforms/identity_products.py): a `matmul`
with an identity or diagonal operand becomes the other operand, scaled by the diagonal;
`identity_product(op)` returns None for any other product. The inputs are built op by op:
lowering would already have simplified them."""

from __future__ import annotations

from collections.abc import Callable

from passes.filecheck import filecheck
from passes.inputs import printed
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import TensorType, scalar
from reverie.compiler.transforms.identity_products import identity_product
from reverie.compiler.transforms.simplify import simplify

M, N = Dim.sym("M"), Dim.sym("N")
F64 = scalar("f64")


def eye(s: Scope) -> Value:
    """An [N, N] identity: a generic over i, j yielding select(i == j, 1, 0)."""
    i, j = Value(scalar("i64"), name="i"), Value(scalar("i64"), name="j")
    body = Scope(Block(params=[i, j]))
    one, zero = body.const(1.0, F64), body.const(0.0, F64)
    body.block.results = [body.select(body.eq(i, j), one, zero)]
    attrs = {"indices": (("i", Dim.const(0), N), ("j", Dim.const(0), N))}
    return s.op("generic", [], attrs, [body.block])


def product(right: Callable[[Scope, Value], Value]) -> Function:
    """`f(X: f64[M, N], s: f64[N]) = X @ right(s)`."""
    x = Value(TensorType("f64", (M, N)), name="X")
    v = Value(TensorType("f64", (N,)), name="s")
    scope = Scope(Block(params=[x, v]))
    scope.block.results = [scope.op("matmul", [x, right(scope, v)])]
    return Function("f", scope.block, ["X", "s"], ["M", "N"])


def test_a_product_with_the_identity_is_the_other_operand() -> None:
    filecheck(printed(simplify(product(lambda s, v: eye(s)))), """
        CHECK: func @f(%X: f64[M, N], %s: f64[N]) -> f64[M, N]
        CHECK-NOT: matmul
        CHECK-NOT: generic
        CHECK: return %X
    """)


def test_a_product_with_a_diagonal_scales_the_columns() -> None:
    def diagonal(s: Scope, v: Value) -> Value:
        return s.mul(eye(s), s.op("broadcast", [v], {"shape": (N, N)}))
    filecheck(printed(simplify(product(diagonal))), """
        CHECK-NOT: matmul
        CHECK: broadcast %s
        CHECK: mul %X
        CHECK: return
    """)


def test_a_product_with_another_matrix_is_left_alone() -> None:
    def outer(s: Scope, v: Value) -> Value:
        column = s.op("reshape", [v], {"shape": (N, Dim.const(1))})
        return s.op("broadcast", [column], {"shape": (N, N)})
    fn = product(outer)
    assert identity_product(fn.body.ops[-1]) is None
    filecheck(printed(simplify(fn)), "CHECK: matmul %X")
