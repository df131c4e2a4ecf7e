"""simplify's identity-product rule (compiler/transforms/identity_products.py).

A matrix product with an identity or diagonal operand leaves the IR: `X @ I` is `X`,
`X @ diag(s)` is `X · s`. The rewritten function must be bitwise equal to the product on
finite inputs, at every level (tensor-IR interpreter, loop-IR interpreter, native code),
and products whose operand is not provably diagonal must stay matrix products. Last, the
Jacobian of W6's `tanh(A @ x)` at every level (tests/grad/test_jacobian_identity.py
checks its IR, MLIR export and kernels).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.ir.types import TensorType, scalar
from reverie.compiler.transforms import simplify as simplify_module
from reverie.compiler.transforms.jacobian import MODES, jacobian_function
from reverie.compiler.transforms.simplify import simplify
from tests.unit.level_helpers import every_level

M, N, B = 3, 4, 2
EYE = "let I[i in 0..N, j in 0..N] = where(i == j, 1.0, 0.0);"
DIAG = "let D[i in 0..N, j in 0..N] = where(i == j, s[i], 0.0);"

# name -> (definitions, returned expression, result shape, NumPy reference of X, Y, s)
REWRITTEN = {
    "right identity": (EYE, "X @ I", "M, N", lambda X, Y, s: X),
    "left identity": (EYE, "I @ Y", "N, M", lambda X, Y, s: Y),
    "transposed identity": (EYE, "X @ I.T", "M, N", lambda X, Y, s: X),
    "identity of a transpose": (EYE, "I @ X.T", "N, M", lambda X, Y, s: X.T),
    "right diagonal": (DIAG, "X @ D", "M, N", lambda X, Y, s: X * s),
    "left diagonal": (DIAG, "D @ Y", "N, M", lambda X, Y, s: s[:, None] * Y),
    "identity times a row": (EYE, "X @ (I * s)", "M, N", lambda X, Y, s: X * s),
    "identity times a column": (EYE, "(I * reshape(s, (N, 1))) @ Y", "N, M",
                                lambda X, Y, s: s[:, None] * Y),
}

KEPT = {
    "shifted diagonal": "let I[i in 0..N, j in 0..N] = where(i == j + 1, 1.0, 0.0);",
    "complement": "let I[i in 0..N, j in 0..N] = where(i == j, 0.0, 1.0);",
    "constant diagonal": "let I[i in 0..N, j in 0..N] = where(i == j, 2.0, 0.0);",
    "full matrix": "let I[i in 0..N, j in 0..N] = where(i == j, s[i], s[j]);",
}


def source(definitions: str, returned: str, shape: str = "M, N") -> str:
    return (f"fn f(X: f64[M, N], Y: f64[N, M], s: f64[N]) -> f64[{shape}] "
            f"{{ {definitions} return {returned}; }}")


def specialise(text: str) -> Function:
    return rv.compile(text, backend="interp").lowering.specialise("f", "f64")


def operands() -> list[np.ndarray]:
    """Finite, nonzero random operands (no −0: see the module docstring of the rule)."""
    rng = np.random.default_rng(11)
    X, Y, s = rng.standard_normal((M, N)), rng.standard_normal((N, M)), rng.standard_normal(N)
    return [X, Y, s]


def names(fn: Function) -> list[str]:
    return [op.name for op in fn.body.walk()]


@pytest.mark.parametrize("case", sorted(REWRITTEN))
def test_product_disappears_and_is_bitwise_equal(case: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    definitions, returned, shape, reference = REWRITTEN[case]
    text = source(definitions, returned, shape)
    fn = specialise(text)
    assert "matmul" not in names(fn) and "generic" not in names(fn), names(fn)
    args = operands()
    want = reference(*args)
    for got in every_level(fn, args):
        np.testing.assert_array_equal(got, want)
    monkeypatch.setattr(simplify_module, "identity_product", lambda op: None)
    product = rv.compile(text + " ", backend="interp").lowering.specialise("f", "f64")
    assert "matmul" in names(product)
    (multiplied,) = interpret(product, args, {"M": M, "N": N})
    np.testing.assert_array_equal(np.asarray(multiplied), want)


@pytest.mark.parametrize("case", sorted(KEPT))
def test_a_product_with_a_matrix_that_is_not_diagonal_stays(case: str) -> None:
    fn = specialise(source(KEPT[case], "X @ I"))
    assert "matmul" in names(fn)
    X, Y, s = operands()
    i, j = np.indices((N, N))
    matrix = {"shifted diagonal": (i == j + 1) * 1.0, "complement": (i != j) * 1.0,
              "constant diagonal": (i == j) * 2.0,
              "full matrix": np.where(i == j, s[:, None], s[None, :])}[case]
    for got in every_level(fn, [X, Y, s]):
        np.testing.assert_allclose(got, X @ matrix, rtol=1e-13)


def test_an_infinite_entry_stays_itself() -> None:
    """Where `X @ I` would spread NaN over a row (inf · 0), the rewrite keeps the entry."""
    fn = specialise(source(EYE, "X @ I"))
    X, Y, s = operands()
    X[1, 2] = np.inf
    for got in every_level(fn, [X, Y, s]):
        np.testing.assert_array_equal(got, X)


# ---------------------------------------------------------------- batched, built by hand


def eye(s: Scope, ranges: list[tuple[str, Dim]], row: str, col: str) -> Value:
    """An operand-less generic over `ranges` yielding select(row == col, 1, 0)."""
    params = [Value(scalar("i64"), name=name) for name, _ in ranges]
    body = Scope(Block(params=params))
    index = {p.name: p for p in params}
    one, zero = body.const(1, scalar("f64")), body.const(0, scalar("f64"))
    body.block.results = [body.select(body.eq(index[row], index[col]), one, zero)]
    attrs = {"indices": tuple((name, Dim.const(0), size) for name, size in ranges)}
    return s.op("generic", [], attrs, [body.block])


def batched(make_right: str) -> Function:
    """X: f64[B, M, N] times a [B, N, N] identity made as `make_right` says."""
    x = Value(TensorType("f64", (Dim.const(B), Dim.const(M), Dim.const(N))), name="X")
    v = Value(TensorType("f64", (Dim.const(N),)), name="v")
    s = Scope(Block(params=[x, v]))
    n, b = Dim.const(N), Dim.const(B)
    if make_right == "batched eye":
        right = eye(s, [("b", b), ("i", n), ("j", n)], "i", "j")
    elif make_right == "broadcast eye":
        right = s.op("broadcast", [eye(s, [("i", n), ("j", n)], "i", "j")], {"shape": (b, n, n)})
    elif make_right == "scaled broadcast eye":
        plain = s.op("broadcast", [eye(s, [("i", n), ("j", n)], "i", "j")], {"shape": (b, n, n)})
        right = s.mul(plain, s.op("broadcast", [v], {"shape": (b, n, n)}))
    else:  # the diagonal over the batch axis and a row axis: not a batch of identities
        right = eye(s, [("b", b), ("i", n), ("j", n)], "b", "i")
    s.block.results = [s.op("matmul", [x, right])]
    fn = Function("batched", s.block, ["X", "v"])
    verify_function(fn)
    return fn


@pytest.mark.parametrize("case", ["batched eye", "broadcast eye", "scaled broadcast eye"])
def test_batched_products_with_identities_disappear(case: str) -> None:
    fn = simplify(batched(case))
    verify_function(fn)
    assert "matmul" not in names(fn)
    rng = np.random.default_rng(3)
    X, v = rng.standard_normal((B, M, N)), rng.standard_normal(N)
    want = X * v if case.startswith("scaled") else X
    for got in every_level(fn, [X, v]):
        np.testing.assert_array_equal(got, want)


def test_a_diagonal_off_the_matrix_axes_stays() -> None:
    fn = simplify(batched("diagonal across the batch"))
    assert "matmul" in names(fn)
    rng = np.random.default_rng(3)
    X, v = rng.standard_normal((B, M, N)), rng.standard_normal(N)
    b, i, _ = np.indices((B, N, N))
    (got,) = interpret(fn, [X, v], {})
    np.testing.assert_allclose(got, X @ (b == i).astype(float), rtol=1e-13)


# ---------------------------------------------------------------- the Jacobian of W6


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("m", "n"), [(5, 5), (3, 7), (7, 3)])
def test_jacobian_of_a_tanh_layer_at_every_level(mode: str, m: int, n: int) -> None:
    """d tanh(A x) / dx without a product: against torch.func.jacrev and differences."""
    text = "fn f(A: f64[M, N], x: f64[N]) -> f64[M] { return tanh(A @ x); }"
    jacobian = jacobian_function(specialise(text), [1], mode)
    assert names(jacobian).count("matmul") == 1
    rng = np.random.default_rng(m * 10 + n)
    A, x = rng.standard_normal((m, n)) / np.sqrt(n), rng.standard_normal(n)
    want = torch.func.jacrev(lambda v: torch.tanh(torch.from_numpy(A) @ v))(
        torch.from_numpy(x)).numpy()
    h = 1e-6
    differences = np.stack([(np.tanh(A @ (x + h * e)) - np.tanh(A @ (x - h * e))) / (2 * h)
                            for e in np.eye(n)], axis=1)
    np.testing.assert_allclose(differences, want, rtol=1e-6, atol=1e-9)
    for got in every_level(jacobian, [A, x]):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
