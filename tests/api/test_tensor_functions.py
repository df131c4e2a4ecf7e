"""torch's Tensor functions on `rv.Tensor` (issue 36 item 5): `rv.where`, `rv.pow`,
`rv.maximum`, `rv.minimum`, `rv.max`, `rv.min`, and the methods of the same names.

Each is compared with torch 2.13 directly: values, result dtypes and shapes, the indices of
`max(t, dim)`, and gradients (`rv.grad` against `torch.autograd.grad`, for a random
cotangent), at ties and NaN, where torch's conventions decide: `maximum` halves the
gradient on a tie and sends it to both operands at a NaN; the full `max` splits it evenly
among the tied entries (the NaN entries where it is NaN); `max(t, dim)` sends it to the
index it returns. Second order through `create_graph=True`, and float64 finite differences
through `rv.gradcheck`. Bad arguments raise torch's error classes with a message.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import reverie as rv

NAN = np.nan
RNG = np.random.default_rng(36)
WITH_TIES = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5], [2.0, -1.0, 4.0, 4.0]])
WITH_NAN = np.array([[1.0, NAN, 3.0, 3.0], [NAN, 2.0, NAN, 0.0], [2.0, -1.0, 4.0, 4.0]])
OTHER = np.array([[3.0, 0.0, 3.0, NAN], [0.5, 1.0, 0.0, 0.5], [2.0, -1.0, 5.0, 4.0]])


def pair(*arrays: object) -> tuple[list[object], list[object]]:
    """The arrays as rv and torch leaves requiring grad (numbers passed through)."""
    ours = [rv.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a
            for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a
              for a in arrays]
    return ours, theirs


def assert_same(ours: rv.Tensor, theirs: torch.Tensor) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-15)
    assert ours.dtype == theirs.detach().numpy().dtype


def check_against_torch(ours_fn: Callable[..., object], torch_fn: Callable[..., object],
                        *arrays: object) -> None:
    """Values and the gradients of every Tensor input for one random cotangent."""
    ours_in, torch_in = pair(*arrays)
    ours, theirs = ours_fn(*ours_in), torch_fn(*torch_in)
    assert_same(ours, theirs)
    cotangent = RNG.standard_normal(theirs.shape)
    leaves = [i for i, a in enumerate(arrays) if isinstance(a, np.ndarray)]
    got = rv.grad(ours, [ours_in[i] for i in leaves], grad_outputs=rv.tensor(cotangent),
                  allow_unused=True, materialize_grads=True)
    expected = torch.autograd.grad(theirs, [torch_in[i] for i in leaves],
                                   grad_outputs=torch.tensor(cotangent), allow_unused=True,
                                   materialize_grads=True)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------- where


@pytest.mark.parametrize("a, b", [(WITH_TIES, OTHER), (WITH_TIES, 0.0), (2.5, OTHER),
                                  (WITH_TIES[0], OTHER), (WITH_TIES, OTHER[:, :1])])
def test_where_as_torch(a: object, b: object) -> None:
    condition = np.array([[True, False, True, False]] * 3)
    check_against_torch(lambda x, y: rv.where(rv.tensor(condition), x, y),
                        lambda x, y: torch.where(torch.tensor(condition), x, y), a, b)


def test_where_keeps_the_dtype_of_a_tensor_beside_a_number() -> None:
    x = rv.tensor(WITH_TIES.astype(np.float32))
    assert rv.where(x > 1, x, 0.0).dtype == np.float32
    assert torch.where(torch.tensor(WITH_TIES.astype(np.float32)) > 1, torch.tensor(
        WITH_TIES.astype(np.float32)), 0.0).dtype == torch.float32


def test_where_of_two_numbers() -> None:
    condition = WITH_TIES > 1
    got = rv.where(rv.tensor(condition), 1.0, -1.0)
    np.testing.assert_array_equal(got.numpy(), torch.where(torch.tensor(condition), 1.0,
                                                           -1.0).numpy())


def test_where_of_a_condition_alone_gives_indices_as_torch() -> None:
    condition = WITH_TIES > 1
    got = rv.where(rv.tensor(condition))
    expected = torch.where(torch.tensor(condition))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e)


def test_where_refuses_a_float_condition() -> None:
    with pytest.raises(TypeError, match="bool condition, not float64.*x > 0"):
        rv.where(rv.tensor(WITH_TIES), 1.0, 0.0)
    with pytest.raises(TypeError, match="condition alone, or a condition, input and other"):
        rv.where(rv.tensor(WITH_TIES > 0), 1.0)


def test_where_method_as_torch() -> None:
    condition = WITH_TIES > 1
    check_against_torch(lambda x, y: x.where(rv.tensor(condition), y),
                        lambda x, y: x.where(torch.tensor(condition), y), WITH_TIES, OTHER)


# ---------------------------------------------------------------- pow

BASES = np.array([0.0, 0.0, 0.0, 2.0, 0.5, 3.0, 0.0, 1.5])
EXPONENTS = np.array([0.0, 2.0, 0.5, -1.0, 3.0, 0.0, 1.0, 2.5])


@pytest.mark.parametrize("a, b", [(BASES, EXPONENTS), (BASES, 2.0), (BASES, 0.0), (2.0, EXPONENTS),
                                  (0.0, EXPONENTS), (BASES[:, None], EXPONENTS)])
def test_pow_as_torch(a: object, b: object) -> None:
    check_against_torch(rv.pow, torch.pow, a, b)


def test_pow_method_and_second_order_as_torch() -> None:
    x, tx = rv.tensor(BASES + 0.5, requires_grad=True), torch.tensor(BASES + 0.5,
                                                                     requires_grad=True)
    (g,) = rv.grad(x.pow(3.0).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(tx.pow(3.0).sum(), tx, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-13)
    (h,) = rv.grad(g.sum(), x)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-13)


def test_pow_gradcheck() -> None:
    base = rv.tensor(RNG.uniform(0.5, 2.0, 5), requires_grad=True)
    exponent = rv.tensor(RNG.uniform(-1.0, 2.0, 5), requires_grad=True)
    assert rv.gradcheck(rv.pow, (base, exponent))


def test_pow_of_two_numbers_is_refused_as_torch() -> None:
    with pytest.raises(TypeError, match="pow\\(\\) takes a Tensor.*Python's \\*\\*"):
        rv.pow(2.0, 3.0)
    with pytest.raises(TypeError):
        torch.pow(2.0, 3.0)


# ---------------------------------------------------------------- maximum, minimum


@pytest.mark.parametrize("function", ["maximum", "minimum"])
@pytest.mark.parametrize("a, b", [(WITH_TIES, OTHER), (WITH_NAN, OTHER), (WITH_NAN, WITH_NAN),
                                  (WITH_TIES, OTHER[0]), (WITH_NAN, OTHER[:, :1])])
def test_maximum_minimum_as_torch(function: str, a: np.ndarray, b: np.ndarray) -> None:
    check_against_torch(getattr(rv, function), getattr(torch, function), a, b)
    check_against_torch(lambda x, y: getattr(x, function)(y),
                        lambda x, y: getattr(x, function)(y), a, b)


def test_maximum_in_float32_as_torch() -> None:
    a, b = WITH_NAN.astype(np.float32), OTHER.astype(np.float32)
    check_against_torch(rv.maximum, torch.maximum, a, b)


def test_maximum_second_order() -> None:
    x = rv.tensor(RNG.standard_normal(6), requires_grad=True)
    y = rv.tensor(RNG.standard_normal(6), requires_grad=True)
    assert rv.gradgradcheck(lambda a, b: rv.maximum(a * a, b * 3.0), (x, y))


def test_clamp_keeps_its_own_nan_convention() -> None:
    # torch.clamp sends no gradient from a NaN input; torch.maximum sends it to both
    (x,), (tx,) = pair(WITH_NAN[0])
    (g,) = rv.grad(x.clamp(2.0).sum(), x)
    (tg,) = torch.autograd.grad(tx.clamp(2.0).sum(), tx)
    np.testing.assert_array_equal(g.numpy(), tg.numpy())
    (g,) = rv.grad(rv.maximum(x, 2.0).sum(), x)
    (tg,) = torch.autograd.grad(torch.maximum(tx, torch.tensor(2.0, dtype=torch.float64)).sum(),
                                tx)
    np.testing.assert_array_equal(g.numpy(), tg.numpy())


@pytest.mark.parametrize("low, high", [(0.5, 3.0), (0.5, 0.5), (None, 3.0), (3.0, None),
                                       (NAN, 3.0), (4.0, 1.0), (OTHER[0], None),
                                       (OTHER[:, :1], WITH_TIES[2])])
def test_clamp_as_torch_ties_included(low: object, high: object) -> None:
    """torch.clamp gives the whole gradient to the input at a tie with a bound."""
    bounds = [b for b in (low, high) if isinstance(b, np.ndarray)]
    data = np.array([[0.5, 3.0, 2.0, NAN], [4.0, 0.5, -1.0, 3.0], [2.0, -1.0, 4.0, 4.0]])

    def ours(x: rv.Tensor, *given: rv.Tensor) -> rv.Tensor:
        it = iter(given)
        return x.clamp(*(next(it) if isinstance(b, np.ndarray) else b for b in (low, high)))

    def theirs(x: torch.Tensor, *given: torch.Tensor) -> torch.Tensor:
        it = iter(given)
        return x.clamp(*(next(it) if isinstance(b, np.ndarray) else b for b in (low, high)))

    check_against_torch(ours, theirs, data, *bounds)


def test_clamp_in_place_as_torch() -> None:
    (x,), (tx,) = pair(WITH_TIES)
    y, ty = x * 1.0, tx * 1.0
    y.clamp_(0.5, 3.0)
    ty.clamp_(0.5, 3.0)
    (g,) = rv.grad(y.sum(), x)
    (tg,) = torch.autograd.grad(ty.sum(), tx)
    np.testing.assert_array_equal(g.numpy(), tg.numpy())


# ---------------------------------------------------------------- max, min reductions


@pytest.mark.parametrize("function", ["max", "min"])
@pytest.mark.parametrize("data", [WITH_TIES, WITH_NAN, WITH_TIES[1], np.array(2.5)])
def test_full_reduction_splits_ties_evenly_as_torch(function: str, data: np.ndarray) -> None:
    check_against_torch(getattr(rv, function), getattr(torch, function), data)
    check_against_torch(lambda t: getattr(t, function)(), lambda t: getattr(t, function)(),
                        data)
    ours = getattr(rv, function)(rv.tensor(data))
    assert ours.shape == ()


@pytest.mark.parametrize("function", ["max", "min"])
@pytest.mark.parametrize("data", [WITH_TIES, WITH_NAN, RNG.standard_normal((2, 3, 4)).round(0)])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction_along_a_dim_as_torch(function: str, data: np.ndarray, dim: int,
                                        keepdim: bool) -> None:
    ours_in, torch_in = pair(data)
    ours = getattr(rv, function)(ours_in[0], dim, keepdim=keepdim)
    theirs = getattr(torch, function)(torch_in[0], dim, keepdim=keepdim)
    assert type(ours).__name__ == function and ours._fields == ("values", "indices")
    assert_same(ours.values, theirs.values)
    assert_same(ours.indices, theirs.indices)
    assert not ours.indices.requires_grad
    check_against_torch(lambda t: getattr(rv, function)(t, dim, keepdim).values,
                        lambda t: getattr(torch, function)(t, dim, keepdim).values, data)
    check_against_torch(lambda t: getattr(t, function)(dim=dim, keepdim=keepdim)[0],
                        lambda t: getattr(t, function)(dim=dim, keepdim=keepdim)[0], data)


@pytest.mark.parametrize("function", ["max", "min"])
def test_reduction_of_a_vector_along_its_dim(function: str) -> None:
    check_against_torch(lambda t: getattr(rv, function)(t, 0).values,
                        lambda t: getattr(torch, function)(t, 0).values, WITH_NAN[1])
    check_against_torch(lambda t: getattr(rv, function)(t, 0).values,
                        lambda t: getattr(torch, function)(t, 0).values, WITH_TIES[1])
    result = getattr(rv, function)(rv.tensor(np.array(1.5)), -1)
    expected = getattr(torch, function)(torch.tensor(np.array(1.5)), -1)
    assert_same(result.values, expected.values)
    assert_same(result.indices, expected.indices)


@pytest.mark.parametrize("function", ["max", "min"])
def test_two_tensors_are_elementwise_as_torch(function: str) -> None:
    check_against_torch(getattr(rv, function), getattr(torch, function), WITH_NAN, OTHER)
    check_against_torch(lambda a, b: getattr(a, function)(b),
                        lambda a, b: getattr(a, function)(b), WITH_TIES, OTHER)


def test_reduction_along_a_dim_second_order() -> None:
    x = rv.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    assert rv.gradgradcheck(lambda t: rv.max(t * t, 1).values, (x,))


def test_numpy_style_methods_are_unchanged() -> None:
    x = rv.tensor(WITH_TIES)
    np.testing.assert_array_equal(x.max(0).numpy(), WITH_TIES.max(0))
    np.testing.assert_array_equal(x.min(axis=1, keepdims=True).numpy(),
                                  WITH_TIES.min(axis=1, keepdims=True))


def test_bad_reduction_arguments() -> None:
    x = rv.tensor(WITH_TIES)
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        rv.max(x, 2)
    with pytest.raises(TypeError, match="dim must be an int"):
        rv.max(x, 1.5)
    with pytest.raises(TypeError, match="keepdim only with dim"):
        rv.min(x, keepdim=True)
    with pytest.raises(RuntimeError, match="empty tensor"):
        rv.max(rv.tensor(np.zeros((0, 3))))
    with pytest.raises(IndexError, match="size 0"):
        rv.max(rv.tensor(np.zeros((0, 3))), 0)


def test_names_are_served_by_rv() -> None:
    for name in ("where", "pow", "maximum", "minimum", "max", "min"):
        assert name in dir(rv)
        assert getattr(rv, name).__doc__


# ---------------------------------------------------------------- rv.trace


def traced_loss(x: object, y: object) -> object:
    chosen = rv.where(x > 0, x, 0.5 * y) + rv.maximum(x, y) + rv.minimum(x, 2.0)
    return (chosen + rv.pow(x * x + 1.0, 1.5)).sum() + rv.max(x) + rv.min(x, y).sum()


def test_the_functions_trace_to_the_language() -> None:
    x, y = np.array([1.0, -2.0, 3.0, 0.5]), np.array([0.5, 1.0, 4.0, 0.5])
    module = rv.trace(traced_loss, x, y)
    for written in ("where(", "max(x, y)", "min(x, 2.0)", "** 1.5", "max(x)", "min(x, y)"):
        assert written in module.source
    tx, ty = pair(x, y)[1]
    expected = traced_loss_torch(tx, ty)
    kernel = module["traced_loss"]
    np.testing.assert_allclose(kernel(x, y), expected.detach().numpy(), rtol=1e-13)
    grads = kernel.grad()(x, y)
    expected_grads = torch.autograd.grad(expected, (tx, ty))
    for g, e in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-13)
    ours = traced_loss(rv.tensor(x), rv.tensor(y))
    np.testing.assert_allclose(ours.numpy(), expected.detach().numpy(), rtol=1e-13)


def traced_loss_torch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    chosen = torch.where(x > 0, x, 0.5 * y) + torch.maximum(x, y) + torch.clamp(x, max=2.0)
    return (chosen + torch.pow(x * x + 1.0, 1.5)).sum() + torch.max(x) + torch.min(x, y).sum()


def test_values_and_indices_are_not_traced() -> None:
    with pytest.raises(TypeError, match=r"rv.max\(t, dim\).*t.max\(axis=\)"):
        rv.trace(lambda x: rv.max(x, 0).values, np.ones(3))
