"""`rv.Tensor` operations beyond the operators (docs/api.md §4), each checked against torch.

Every differentiable operation is checked three ways on F(x) = op(x) * op(x) (so that a
linear op such as indexing still has a second derivative): the values, the gradient for a
random cotangent, and the gradient of that gradient (`create_graph=True`, then a second
`rv.grad` with another random cotangent), against torch's eager autograd.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors import shape_kernels as ops_shape
from reverie.runtime.tensors.indexing import index_plan

torch = pytest.importorskip("torch")
import torch.nn.functional as torch_f  # noqa: E402

Op = Callable[[object], object]


def check_against_torch(ours: Op, theirs: Op, data: np.ndarray, rtol: float = 1e-10) -> None:
    """Values, gradient and double-backward gradient of op(x) * op(x) match torch's
    (the derivatives to `rtol`)."""
    rng = np.random.default_rng(7)
    x = rv.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    assert isinstance(y, rv.Tensor) and y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    f, tf = y * y, ty * ty
    seed = rng.normal(size=tf.shape)
    (g,) = rv.grad(f, x, rv.tensor(seed), create_graph=True)
    (tg,) = torch.autograd.grad(tf, tx, torch.tensor(seed), create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=rtol, atol=1e-12)
    seed2 = rng.normal(size=data.shape)
    (h,) = rv.grad(g, x, rv.tensor(seed2))
    (th,) = torch.autograd.grad(tg, tx, torch.tensor(seed2))
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=rtol, atol=1e-12)


# ---------------------------------------------------------------- elementwise built-ins

def torch_gamma(x: torch.Tensor) -> torch.Tensor:
    """Γ(x) with its sign (torch has lgamma only): negative on (−1, 0), (−3, −2), ..."""
    odd = torch.remainder(torch.floor(x), 2) == 1
    return torch.exp(torch.lgamma(x)) * torch.where((x < 0) & odd, -1.0, 1.0)


TORCH_NAMES = {"softplus": torch_f.softplus, "relu": torch.relu, "sigmoid": torch.sigmoid,
               "gamma": torch_gamma, "erfcinv": lambda q: -torch.erfinv(q - 1),
               "i0": torch.special.i0, "i1": torch.special.i1}
POSITIVE_ONLY = {"log", "log1p", "sqrt", "rsqrt"}
# torch.special.bessel_j0/j1/y0/y1 have no derivatives: test_special_numpy.py checks these
# against mpmath
WITHOUT_TORCH_DERIVATIVE = {"j0", "j1", "y0", "y1"}
DIFFERENTIABLE_BUILTINS = [op for op in ops_kernels.UNARY_BUILTINS
                           if ELEMENTWISE[op].derivative is not None
                           and op not in WITHOUT_TORCH_DERIVATIVE]
CONSTANT_BUILTINS = [op for op in ops_kernels.UNARY_BUILTINS
                     if ELEMENTWISE[op].derivative is None]


def torch_builtin(op: str) -> Op:
    return TORCH_NAMES.get(op) or getattr(torch, op)


def builtin_data(op: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    data = rng.uniform(0.3, 1.4, (3, 4))
    return data if op in POSITIVE_ONLY else data * np.where(rng.random((3, 4)) < 0.5, -1, 1)


def test_the_builtins_are_the_op_table_rows_flagged_builtin() -> None:
    flagged = {name for name, row in ELEMENTWISE.items() if row.builtin and row.arity == 1}
    assert set(ops_kernels.UNARY_BUILTINS) == flagged
    assert {"exp", "tanh", "erf", "relu", "floor"} <= flagged
    for op in flagged:
        assert callable(getattr(rv, op)) and callable(getattr(rv.Tensor, op))


# torch's polygamma functions are accurate to about 1e-10 (Reverie's to 1e-15 against
# mpmath: tests/grad/test_grad_special.py), so their derivatives agree to 1e-8
TORCH_TOLERANCE = {"lgamma": 1e-8, "digamma": 1e-8, "gamma": 1e-8}


@pytest.mark.parametrize("op", DIFFERENTIABLE_BUILTINS)
def test_builtin_as_method_function_and_ufunc(op: str) -> None:
    rtol = TORCH_TOLERANCE.get(op, 1e-10)
    check_against_torch(lambda t: getattr(t, op)(), torch_builtin(op), builtin_data(op), rtol)
    check_against_torch(getattr(rv, op), torch_builtin(op), builtin_data(op), rtol)
    ufunc = ELEMENTWISE[op].numpy
    if isinstance(ufunc, np.ufunc):
        check_against_torch(ufunc, torch_builtin(op), builtin_data(op), rtol)


@pytest.mark.parametrize("op", CONSTANT_BUILTINS)
def test_piecewise_constant_builtins_have_no_gradient(op: str) -> None:
    data = builtin_data(op) * 3
    x = rv.tensor(data, requires_grad=True)
    y = getattr(x, op)()
    np.testing.assert_array_equal(y.detach().numpy(),
                                  torch_builtin(op)(torch.tensor(data)).detach().numpy())
    (g,) = rv.grad(y.sum(), x, materialize_grads=True)
    np.testing.assert_array_equal(g.detach().numpy(), np.zeros_like(data))


def test_builtins_of_integers_follow_numpy() -> None:
    ints = rv.tensor([1, 2, 3])
    assert rv.exp(ints).dtype == np.float64 and rv.abs(-ints).dtype == np.int64
    np.testing.assert_allclose(np.exp(ints).detach().numpy(), np.exp([1, 2, 3]))
    assert abs(rv.tensor([-2.0])).item() == 2.0
    with pytest.raises(TypeError, match="bool"):
        rv.exp(rv.tensor([True]))
    f32 = rv.tensor([1.0, 2.0], dtype=np.float32, requires_grad=True)
    assert f32.tanh().dtype == np.float32


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), (-1, False),
                                            ((0, 1), True)])
def test_max_and_min_reductions(op: str, axis: object, keepdims: bool) -> None:
    data = np.random.default_rng(5).permutation(12).reshape(3, 4) + 0.5  # no ties

    def theirs(t: torch.Tensor) -> torch.Tensor:
        reduce = torch.amax if op == "max" else torch.amin
        return reduce(t, dim=() if axis is None else axis, keepdim=keepdims)

    check_against_torch(lambda t: getattr(t, op)(axis, keepdims), theirs, data)
    check_against_torch(lambda t: getattr(t, op)(axis=axis, keepdims=keepdims), theirs, data)


def test_reductions_of_integers_and_errors() -> None:
    ints = rv.tensor([[3, 1], [2, 5]])
    assert ints.max().item() == 5 and ints.min(axis=0).detach().numpy().tolist() == [2, 1]
    assert ints.max().dtype == np.int64
    with pytest.raises(TypeError, match="bool"):
        rv.tensor([True, False]).max()
    with pytest.raises(ValueError, match="out of bounds"):
        ints.max(axis=2)


# ---------------------------------------------------------------- indexing

INDICES = [
    ("int", lambda t: t[1]),
    ("negative int", lambda t: t[-1]),
    ("scalar", lambda t: t[2, 3]),
    ("slice", lambda t: t[1:4]),
    ("strided slice", lambda t: t[1::2, ::3]),
    ("column", lambda t: t[:, 2]),
    ("ellipsis", lambda t: t[..., 1]),
    ("new axis", lambda t: t[None, 1:, None]),
    ("integer array", lambda t: t[[0, 4, 0]]),
    ("negative integer array", lambda t: t[[-1, 0]]),
    ("two arrays", lambda t: t[[0, 1, 3], [2, 3, 2]]),
    ("broadcast arrays", lambda t: t[[[0], [2]], [1, 3]]),
    ("slice and array", lambda t: t[1:, [0, 2, 2]]),
    ("bool mask", lambda t: t[t > 0.0]),
    ("bool rows", lambda t: t[np.array([True, False, True, False, True])]),
]


@pytest.mark.parametrize("name, index", INDICES, ids=[n for n, _ in INDICES])
def test_indexing_matches_torch(name: str, index: Op) -> None:
    data = np.random.default_rng(11).normal(size=(5, 4))
    check_against_torch(index, index, data)


def test_advanced_indices_apart_go_first_as_in_numpy() -> None:
    data = np.random.default_rng(12).normal(size=(3, 4, 5))
    cases = [(lambda t: t[[0, 2], :, [1, 3]], None), (lambda t: t[:, [1, 0], [4, 2]], None),
             (lambda t: t[[0, 1], 2:], None),
             # an int beside arrays is an advanced index in NumPy (not in torch): axes first
             (lambda t: t[1, :, [0, 1]], lambda t: t[1][:, [0, 1]].T)]
    for index, torch_index in cases:
        check_against_torch(index, torch_index or index, data)
        np.testing.assert_array_equal(index(rv.tensor(data)).detach().numpy(), index(data))


def test_negative_steps_match_numpy() -> None:
    data = np.random.default_rng(13).normal(size=(5, 4))
    check_against_torch(lambda t: t[::-2, 3:0:-1],
                        lambda t: t.flip(0)[::2].flip(1)[:, :3], data)
    np.testing.assert_array_equal(rv.tensor(data)[::-1].detach().numpy(), data[::-1])


def test_one_kernel_serves_every_position() -> None:
    x = rv.tensor(np.arange(12.0).reshape(3, 4))
    kernels = {ops_shape.index_kernel(x.dtype, 2, index_plan(x.shape, (t, slice(1, 3))))
               for t in range(3)}
    assert len(kernels) == 1
    for t in range(3):
        np.testing.assert_array_equal(x[t, 1:3].detach().numpy(), x.detach().numpy()[t, 1:3])


def test_indexing_errors_are_index_errors() -> None:
    x = rv.tensor(np.zeros((3, 4)), requires_grad=True)
    with pytest.raises(IndexError, match="out of bounds"):
        x[3]
    with pytest.raises(IndexError, match="out of bounds"):
        x[[0, -5]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="valid indices"):
        x["a"]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="broadcast"):
        x[[0, 1], [0, 1, 2]]
    assert x[1:1].shape == (0, 4)


# ---------------------------------------------------------------- shapes

SHAPES = [
    ("T", lambda t: t.T),
    ("reshape", lambda t: t.reshape(4, 6)),
    ("reshape tuple", lambda t: t.reshape((2, -1))),
    ("flatten", lambda t: t.reshape(-1)),
    ("transpose permutation", lambda t: t.permute(2, 0, 1) if isinstance(t, torch.Tensor)
     else t.transpose(2, 0, 1)),
    ("transpose swap", lambda t: t.transpose(0, 2)),
]


@pytest.mark.parametrize("name, op", SHAPES, ids=[n for n, _ in SHAPES])
def test_shape_operations_match_torch(name: str, op: Op) -> None:
    data = np.random.default_rng(14).normal(size=(2, 3, 4))
    ours = (lambda t: t.transpose(2, 1, 0)) if name == "T" else op
    check_against_torch(ours, (lambda t: t.permute(2, 1, 0)) if name == "T" else op, data)
    if name != "T":
        return
    matrix = np.arange(6.0).reshape(2, 3)
    check_against_torch(lambda t: t.T, lambda t: t.T, matrix)
    vector = rv.tensor([1.0, 2.0])
    assert vector.T is vector and vector.transpose() is vector


def test_shape_errors() -> None:
    x = rv.tensor(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="reshape"):
        x.reshape(4)
    with pytest.raises(ValueError, match="permutation"):
        rv.tensor(np.zeros((2, 3, 4))).transpose(0, 0, 1)
    with pytest.raises(ValueError, match="out of bounds"):
        x.transpose(0, 5)


# ---------------------------------------------------------------- comparisons

@pytest.mark.parametrize("symbol, op", [("<", lambda a, b: a < b), ("<=", lambda a, b: a <= b),
                                        (">", lambda a, b: a > b), (">=", lambda a, b: a >= b),
                                        ("==", lambda a, b: a == b), ("!=", lambda a, b: a != b)])
def test_comparisons_give_bool_tensors_without_grad(symbol: str, op: Callable) -> None:
    a_data, b_data = np.array([[1.0, 2.0, 3.0]]), np.array([[3.0], [2.0]])
    a = rv.tensor(a_data, requires_grad=True)
    for result, expected in [(op(a, rv.tensor(b_data)), op(a_data, b_data)),
                             (op(a, 2.0), op(a_data, 2.0)), (op(b_data, a), op(b_data, a_data))]:
        assert isinstance(result, rv.Tensor) and result.dtype == np.bool_
        assert not result.requires_grad and result.grad_fn is None
        np.testing.assert_array_equal(result.detach().numpy(), expected)


def test_tensors_stay_hashable_and_bool_of_one_element_works() -> None:
    x, y = rv.tensor([1.0]), rv.tensor([1.0])
    assert len({x, y}) == 2 and {x: 1}[x] == 1
    assert bool(x == y) and not bool(x > y)
    assert (x == None) is False  # noqa: E711 -- foreign operands compare by identity
    with pytest.raises(TypeError):
        rv.tensor([True]) < rv.tensor([False])  # noqa: B015


def test_maximum_and_minimum_ufuncs() -> None:
    rng = np.random.default_rng(15)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    check_against_torch(lambda t: np.maximum(t, b), lambda t: torch.maximum(t, torch.tensor(b)), a)
    check_against_torch(lambda t: np.minimum(b, t), lambda t: torch.minimum(torch.tensor(b), t), a)


# ---------------------------------------------------------------- NumPy ufuncs

def test_ufuncs_are_recorded_where_reverie_has_the_op() -> None:
    x = rv.tensor([0.5, 1.0], requires_grad=True)
    for result in [np.exp(x), np.add(np.ones(2), x), np.ones(2) * x, np.negative(x),
                   np.matmul(np.ones((3, 2)), x), np.power(x, 2.0)]:
        assert isinstance(result, rv.Tensor) and result.grad_fn is not None
    (g,) = rv.grad(np.sin(x).sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), np.cos([0.5, 1.0]))


def test_other_ufuncs_run_in_numpy_without_grad_and_refuse_with_it() -> None:
    plain = rv.tensor([1.0, 4.0])
    result = np.arctan2(plain, plain)
    assert isinstance(result, rv.Tensor)
    np.testing.assert_allclose(result.detach().numpy(), np.arctan2([1.0, 4.0], [1.0, 4.0]))
    assert np.add.reduce(plain).item() == 5.0
    out = rv.tensor([0.0, 0.0])
    assert np.exp(plain, out=out) is out and out.detach().numpy()[0] == np.e
    x = rv.tensor([1.0, 4.0], requires_grad=True)
    with pytest.raises(TypeError, match="detach"):
        np.arctan2(x, x)
    with pytest.raises(TypeError, match="detach"):
        np.add.reduce(x)
    with rv.no_grad():
        assert not np.arctan2(x, x).requires_grad


# ---------------------------------------------------------------- grad mode and small API

SOURCE = "fn f(x: float[N]) -> float { return sum(x * x); }"


def test_no_grad_and_enable_grad_as_context_managers() -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    kernel = rv.compile(SOURCE).f
    with rv.no_grad():
        y = x * 2.0
        assert not y.requires_grad and y.grad_fn is None
        assert isinstance(kernel(x), np.ndarray | np.floating)
        with rv.enable_grad():
            assert (x * 2.0).requires_grad and isinstance(kernel(x), rv.Tensor)
        assert not x.exp().requires_grad
    assert (x * 2.0).requires_grad


def test_no_grad_as_decorator_and_across_threads() -> None:
    import threading

    x = rv.tensor([1.0], requires_grad=True)

    @rv.no_grad()
    def doubled(t: rv.Tensor) -> rv.Tensor:
        return t * 2.0

    @rv.no_grad
    def tripled(t: rv.Tensor) -> rv.Tensor:
        return t * 3.0

    assert not doubled(x).requires_grad and not tripled(x).requires_grad
    assert doubled.__name__ == "doubled"
    seen = []
    with rv.no_grad():
        thread = threading.Thread(target=lambda: seen.append((x * 2.0).requires_grad))
        thread.start()
        thread.join()
    assert seen == [True]  # each thread has its own mode, as in torch


def test_requires_grad_in_place_and_item() -> None:
    x = rv.tensor([3.0])
    assert x.requires_grad_() is x and x.requires_grad
    assert x.requires_grad_(False) is x and not x.requires_grad
    assert x.item() == 3.0 and isinstance(x.item(), float) and int(x) == 3
    with pytest.raises(RuntimeError, match="float"):
        rv.tensor([1]).requires_grad_()
    with pytest.raises(ValueError):
        rv.tensor([1.0, 2.0]).item()


def test_chained_operations_through_a_compiled_call_match_torch() -> None:
    kernel = rv.compile(SOURCE).f
    data = np.random.default_rng(16).normal(size=(4, 3))

    def ours(t: rv.Tensor) -> rv.Tensor:
        return rv.tensor(1.0) * kernel(t.T[1:].reshape(-1).tanh()) + t[[0, 2]].max()

    def theirs(t: torch.Tensor) -> torch.Tensor:
        return (t.T[1:].reshape(-1).tanh() ** 2).sum() + t[[0, 2]].max()

    check_against_torch(ours, theirs, data)
