"""`@` on N-D operands (docs/language.md §8): NumPy/torch `matmul`, the axes before the last two
broadcast as batch axes, a 1-D operand a row (left) or column (right) whose axis is dropped.

Each shape pattern runs at every stage: the tensor-IR interpreter, the loop-IR interpreter,
native code and the MLIR backend, in f32 and f64, against `np.matmul`; its gradients (which
sum over the broadcast batch axes) against torch and central differences; forward mode,
second order (forward-over-reverse and reverse-over-reverse) and batching (`vmap`) of the
batched product; one compiled kernel at two sets of sizes; the run-time `rv.Tensor` `@` and
the tracer (`rv.trace`) on N-D arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from forward_helpers import batch_dim
from grad_helpers import fd_jacobian, specialise

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.forward import jvp_function
from reverie.compiler.transforms.reverse import grad_function
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel

# name: (a's shape, b's shape, (a @ b)'s shape), in the language's dimension names
CASES = {
    "left_batched": ("B, M, K", "K, N", "B, M, N"),
    "right_batched": ("M, K", "B, K, N", "B, M, N"),
    "both_broadcast": ("B, 1, M, K", "H, K, N", "B, H, M, N"),
    "same_batch": ("B, H, M, K", "B, H, K, N", "B, H, M, N"),
    "unit_batch": ("B, M, K", "1, K, N", "B, M, N"),
    "vector_left": ("K", "B, K, N", "B, N"),
    "vector_right": ("B, M, K", "K", "B, M"),
    "vectors": ("K", "K", ""),
    "matrices": ("M, K", "K, N", "M, N"),
}
SIZES = {"B": 2, "H": 3, "M": 4, "K": 5, "N": 3}
OTHER_SIZES = {"B": 3, "H": 2, "M": 2, "K": 3, "N": 4}


def _type(shape: str) -> str:
    return f"float[{shape}]" if shape else "float"


SOURCE = "".join(
    f"fn {name}(a: {_type(a)}, b: {_type(b)}) -> {_type(c)} {{ return a @ b; }}\n"
    f"fn loss_{name}(a: {_type(a)}, b: {_type(b)}) -> float {{ return sum(tanh(a @ b)); }}\n"
    for name, (a, b, c) in CASES.items())
INTEGER_SOURCE = "fn f(a: i64[M, K], b: i64[B, K, N]) -> i64[B, M, N] { return a @ b; }"


def shape_of(text: str, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(d) if d.isdigit() else sizes[d] for d in text.split(", ") if d)


def operands(case: str, sizes: dict[str, int] = SIZES, seed: int = 0,
             dtype: type = np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b, _ = CASES[case]
    return [rng.standard_normal(shape_of(s, sizes)).astype(dtype) for s in (a, b)]


def every_level(fn: Function, args: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """All results of `fn` from the tensor-IR interpreter, the loop-IR interpreter (its
    program verified) and native code."""
    bound = bind_arguments(fn, list(args))
    program = compile_function(fn, "to_loops")
    verify_program(program)
    runs = [interpret(fn, bound.arrays, bound.dims), run_program(program, bound.arrays, bound.dims),
            native_kernel(fn)(bound)]
    return [[np.asarray(r) for r in results] for results in runs]


@pytest.fixture(scope="module")
def mlir_module() -> rv.Module:
    return rv.compile(SOURCE, backend="mlir")


def tolerance(dtype: str) -> dict[str, float]:
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == "f64" else {"rtol": 2e-5, "atol": 2e-5}


# ---------------------------------------------------------------- values

@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_at_every_level(case: str, dtype: str, mlir_module: rv.Module) -> None:
    args = operands(case, dtype=np.float64 if dtype == "f64" else np.float32)
    want = np.matmul(*args)
    for (got,) in every_level(specialise(SOURCE, case, dtype), args):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, **tolerance(dtype))
    np.testing.assert_allclose(getattr(mlir_module, case)(*args), want, **tolerance(dtype))


@pytest.mark.parametrize("case", ["both_broadcast", "right_batched", "vector_left"])
def test_one_native_kernel_serves_every_size(case: str) -> None:
    """The sizes are symbolic: the kernel compiled once runs at new sizes."""
    fn = specialise(SOURCE, case)
    kernel = native_kernel(fn)
    for sizes in (SIZES, OTHER_SIZES):
        args = operands(case, sizes)
        (got,) = kernel(bind_arguments(fn, args))
        np.testing.assert_allclose(got, np.matmul(*args), rtol=1e-12, atol=1e-12)


def test_integer_batched_product_at_every_level() -> None:
    fn = specialise(INTEGER_SOURCE, "f")
    rng = np.random.default_rng(1)
    args = [rng.integers(-5, 5, (4, 3)), rng.integers(-5, 5, (2, 3, 6))]
    for (got,) in every_level(fn, args):
        np.testing.assert_array_equal(got, np.matmul(*args))
    np.testing.assert_array_equal(rv.compile(INTEGER_SOURCE, backend="mlir").f(*args),
                                  np.matmul(*args))


# ---------------------------------------------------------------- derivatives

def torch_derivatives(args: Sequence[np.ndarray], tangents: Sequence[np.ndarray]
                      ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """torch's gradient of sum(tanh(a @ b)) and its Hessian times `tangents`."""
    def loss(a, b):
        return torch.tanh(torch.matmul(a, b)).sum()

    leaves = [torch.tensor(x) for x in args]
    grads = torch.func.grad(loss, argnums=(0, 1))(*leaves)
    _, hvp = torch.func.jvp(torch.func.grad(loss, argnums=(0, 1)), tuple(leaves),
                            tuple(torch.tensor(t) for t in tangents))
    return [g.numpy() for g in grads], [h.numpy() for h in hvp]


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_match_torch_and_finite_differences(case: str, mlir_module: rv.Module
                                                      ) -> None:
    args = operands(case)
    want, _ = torch_derivatives(args, args)
    fn = specialise(SOURCE, f"loss_{case}")
    for results in every_level(grad_function(fn, [0, 1]), args):
        for got, expected in zip(results[1:], want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    for got, expected in zip(getattr(mlir_module, f"loss_{case}").grad((0, 1))(*args), want,
                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    dims = bind_arguments(fn, args).dims
    for index in (0, 1):
        numeric = fd_jacobian(fn, args, dims, index).reshape(args[index].shape)
        np.testing.assert_allclose(want[index], numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_mode_and_second_order(case: str) -> None:
    args, tangents = operands(case), operands(case, seed=1)
    _, want_hvp = torch_derivatives(args, tangents)
    primal = specialise(SOURCE, case)
    jvp = jvp_function(primal, [0, 1])
    want_jvp = np.matmul(tangents[0], args[1]) + np.matmul(args[0], tangents[1])
    for results in every_level(jvp, [*args, *tangents]):
        np.testing.assert_allclose(results[1], want_jvp, rtol=1e-12, atol=1e-12)
    hvp = getattr(rv.compile(SOURCE), f"loss_{case}").hvp((0, 1))
    for got, expected in zip(hvp(*args, tuple(tangents)), want_hvp, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["left_batched", "both_broadcast", "unit_batch",
                                  "vector_left", "vector_right"])
def test_reverse_over_reverse_through_tensors(case: str) -> None:
    """The gradient of a gradient's squared norm, recorded on `rv.Tensor`s, as torch's."""
    args = operands(case)
    leaves = [rv.tensor(x, requires_grad=True) for x in args]
    grads = rv.autograd.grad(rv.tanh(leaves[0] @ leaves[1]).sum(), leaves, create_graph=True)
    got = rv.autograd.grad(sum((g * g).sum() for g in grads), leaves)
    twins = [torch.tensor(x, requires_grad=True) for x in args]
    twin_grads = torch.autograd.grad(torch.tanh(twins[0] @ twins[1]).sum(), twins,
                                     create_graph=True)
    want = torch.autograd.grad(sum((g * g).sum() for g in twin_grads), twins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batched", [[0], [1], [0, 1]])
@pytest.mark.parametrize("case", ["left_batched", "right_batched", "both_broadcast",
                                  "vector_left"])
def test_batching_rule(case: str, batched: list[int]) -> None:
    """vmap of a batched product: one run over a new leading axis equals the loop of runs."""
    fn = specialise(SOURCE, case)
    sets = [operands(case, seed=s) for s in range(3)]
    vmapped = batch_function(fn, batched)
    args = [np.stack([s[i] for s in sets]) if i in batched else sets[0][i] for i in range(2)]
    want = np.stack([np.matmul(*[s[i] if i in batched else sets[0][i] for i in range(2)])
                     for s in sets])
    bound = bind_arguments(vmapped, args)
    assert bound.dims[batch_dim(vmapped, batched)] == 3
    for (got,) in every_level(vmapped, args):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- tensors and the tracer

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tensor_matmul_matches_torch(case: str, dtype: type) -> None:
    args = operands(case, dtype=dtype)
    leaves = [rv.tensor(x, requires_grad=True) for x in args]
    product = leaves[0] @ leaves[1]
    (product * product).sum().backward()
    twins = [torch.tensor(x, requires_grad=True) for x in args]
    twin = twins[0] @ twins[1]
    (twin * twin).sum().backward()
    close = {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else \
        {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(product.detach().numpy(), twin.detach().numpy(), **close)
    for leaf, t in zip(leaves, twins, strict=True):
        np.testing.assert_allclose(leaf.grad.numpy(), t.grad.numpy(), **close)


def test_tensor_matmul_refuses_batch_axes_that_do_not_broadcast() -> None:
    with pytest.raises(ValueError, match=r"batch axes do not broadcast"):
        rv.tensor(np.ones((2, 3, 4))) @ rv.tensor(np.ones((3, 4, 5)))
    with pytest.raises(ValueError, match=r"inner sizes differ"):
        rv.tensor(np.ones((2, 3, 4))) @ rv.tensor(np.ones((3, 5)))


def attention_scores(q, k):
    return np.sum(np.tanh(q @ np.transpose(k, (0, 1, 3, 2))) ** 2)


def test_tracer_records_batched_products() -> None:
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5))
    module = rv.trace(attention_scores, q, k)
    np.testing.assert_allclose(module.attention_scores(q, k), attention_scores(q, k),
                               rtol=1e-12)
    tq, tk = (torch.tensor(x, requires_grad=True) for x in (q, k))
    (torch.tanh(tq @ tk.transpose(-1, -2)) ** 2).sum().backward()
    for got, want in zip(module.attention_scores.grad((0, 1))(q, k), (tq.grad, tk.grad),
                         strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)
    q2, k2 = rng.standard_normal((3, 2, 4, 5)), rng.standard_normal((3, 2, 7, 5))
    np.testing.assert_allclose(module.attention_scores(q2, k2), attention_scores(q2, k2),
                               rtol=1e-12)


def test_tracer_broadcasts_batch_axes_and_drops_vector_axes() -> None:
    rng = np.random.default_rng(3)
    a, b, v = (rng.standard_normal(s) for s in ((2, 1, 3, 4), (5, 4, 6), (4,)))
    module = rv.trace(lambda a, b, v: (a @ b, v @ b, a @ v), a, b, v)
    for got, want in zip(module.kernel(a, b, v), (a @ b, v @ b, a @ v), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(rv.TraceError, match="inner sizes differ"):
        rv.trace(lambda a, b: a @ b, a, np.ones((2, 3, 6)))


def test_tracer_np_dot_where_it_is_not_matmul() -> None:
    """np.dot pairs every matrix of `a` with every one of a 3-D `b`: not `@`, an einsum."""
    a, b = np.ones((2, 3)), np.arange(60.0).reshape(4, 3, 5)
    module = rv.trace(lambda a, b: np.dot(a, b), a, b)
    np.testing.assert_allclose(module.kernel(a, b), np.dot(a, b))
    module = rv.trace(lambda a, b: np.dot(a, b), b.transpose(0, 2, 1), a.T)
    np.testing.assert_allclose(module.kernel(b.transpose(0, 2, 1), a.T),
                               np.dot(b.transpose(0, 2, 1), a.T))
