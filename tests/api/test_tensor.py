"""`rv.Tensor` / `rv.tensor`: construction, NumPy interop, recorded operators and calls."""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.tensors import operator_kernels as ops_kernels

torch = pytest.importorskip("torch")

SOURCE = """
fn affine(x: float[N, D], w: float[D, H], b: float[H]) -> float[N, H] { return x @ w + b; }
fn stats(x: float[N]) -> (float, float) { return (sum(x), max(x)); }
fn pick(x: float[N], i: i64) -> float { return x[i]; }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


# ---------------------------------------------------------------- construction


def test_dtypes_follow_numpy() -> None:
    assert rv.tensor([1.0, 2.0]).dtype == np.float64
    assert rv.tensor([1, 2]).dtype == np.int64
    assert rv.tensor([1.0], dtype=np.float32).dtype == np.float32
    assert rv.tensor([1.0], dtype="f32").dtype == np.float32


def test_tensor_copies_and_numpy_shares() -> None:
    data = np.array([1.0, 2.0])
    t = rv.tensor(data)
    data[0] = 5.0
    assert t.detach().numpy()[0] == 1.0
    assert np.asarray(t) is t.detach().numpy()
    assert t.shape == (2,) and t.ndim == 1 and t.size == 2 and len(t) == 2


def test_only_floats_can_require_grad() -> None:
    with pytest.raises(RuntimeError, match="float"):
        rv.tensor([1, 2], requires_grad=True)
    t = rv.tensor([1, 2])
    with pytest.raises(RuntimeError):
        t.requires_grad = True


def test_requires_grad_of_non_leaf_cannot_change() -> None:
    y = rv.tensor([1.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad = False


def test_leaf_and_graph_attributes() -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    assert x.is_leaf and x.grad_fn is None and x.grad is None
    assert not y.is_leaf and y.requires_grad and "mul" in repr(y.grad_fn)
    d = y.detach()
    assert d.is_leaf and not d.requires_grad and d.detach().numpy() is y.detach().numpy()
    assert "grad_fn" in repr(y) and "requires_grad=True" in repr(x)


def test_grad_setter_checks_shape() -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    x.grad = rv.tensor([0.5, 0.5])
    assert x.grad.detach().numpy().tolist() == [0.5, 0.5]
    with pytest.raises(RuntimeError, match="shape"):
        x.grad = rv.tensor([1.0])
    x.grad = None
    assert x.grad is None


# ---------------------------------------------------------------- operators


BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("pow", lambda a, b: a ** b),
]
SHAPES = [((3, 4), (4,)), ((3, 1), (4,)), ((2, 1, 3), (4, 1)), ((), (3,)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("name, op", BINARY)
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary_values_and_grads_match_torch(name: str, op: object, shapes: tuple) -> None:
    rng = np.random.default_rng(0)
    a_data = rng.uniform(0.5, 2.0, shapes[0])
    b_data = rng.uniform(0.5, 2.0, shapes[1])
    a, b = rv.tensor(a_data, requires_grad=True), rv.tensor(b_data, requires_grad=True)
    ta = torch.tensor(a_data, requires_grad=True)
    tb = torch.tensor(b_data, requires_grad=True)
    out, expected = op(a, b), op(ta, tb)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12)
    seed = rng.normal(size=expected.shape)
    grads = rv.grad(out, [a, b], rv.tensor(seed))
    expected_grads = torch.autograd.grad(expected, [ta, tb], torch.tensor(seed))
    for g, e in zip(grads, expected_grads, strict=True):
        assert g.shape == tuple(e.shape)
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-10)


def test_operators_with_scalars_arrays_and_reflected_forms() -> None:
    x = rv.tensor([1.0, 2.0, 4.0], requires_grad=True)
    values = x.detach().numpy()
    cases = [(2 - x, 2 - values), (3.0 / x, 3.0 / values), (2 ** x, 2.0 ** values),
             (np.ones(3) * x, values), (np.arange(3.0) + x, np.arange(3.0) + values),
             (-x, -values), (x ** 0.5, np.sqrt(values))]
    for result, expected in cases:
        assert isinstance(result, rv.Tensor) and result.requires_grad
        np.testing.assert_allclose(result.detach().numpy(), expected)


def test_dtype_promotion_follows_numpy() -> None:
    f32 = rv.tensor([1.0, 2.0], dtype=np.float32)
    assert (f32 * 2.0).dtype == np.float32
    assert (f32 + rv.tensor([1.0, 1.0])).dtype == np.float64
    assert (rv.tensor([1, 2]) / rv.tensor([2, 4])).dtype == np.float64
    assert (rv.tensor([1, 2]) * 3).dtype == np.int64
    assert rv.tensor([1, 2], dtype=np.int32).sum().dtype == np.int64
    assert rv.tensor([1, 2]).mean().dtype == np.float64
    with pytest.raises(TypeError, match="float"):
        rv.tensor([1, 2]) ** 2


def test_broadcast_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        rv.tensor([1.0, 2.0]) + rv.tensor([1.0, 2.0, 3.0])


def test_generated_kernels_are_cached_by_pattern() -> None:
    a, b = rv.tensor(np.ones((3, 4))), rv.tensor(np.ones(4))
    kernel = ops_kernels.binary_kernel("add", a, b)
    assert "a: f64[D0, D1], b: f64[D1]) -> f64[D0, D1]" in kernel.module.source
    other = ops_kernels.binary_kernel("add", rv.tensor(np.ones((7, 2))), np.ones(2))
    assert other is kernel
    ones = ops_kernels.binary_kernel("mul", rv.tensor(np.ones((3, 1))), b)
    assert "a: f64[D0, 1], b: f64[D1]" in ones.module.source


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), ((0, 1), True)])
def test_sum_and_mean_match_torch(axis: object, keepdims: bool) -> None:
    data = np.arange(6.0).reshape(2, 3)
    x, tx = rv.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    whole = axis is None
    for ours, theirs in [(x.sum(axis, keepdims), tx.sum() if whole else tx.sum(axis, keepdims)),
                         (x.mean(axis, keepdims),
                          tx.mean() if whole else tx.mean(axis, keepdims))]:
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy())
        seed = np.linspace(1.0, 2.0, ours.size).reshape(ours.shape)
        (g,) = rv.grad(ours, x, rv.tensor(seed))
        (tg,) = torch.autograd.grad(theirs, tx, torch.tensor(seed))
        np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy())


@pytest.mark.parametrize("shapes", [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)),
                                    ((3,), (3,))])
def test_matmul_matches_torch(shapes: tuple) -> None:
    rng = np.random.default_rng(1)
    a_data, b_data = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    a, b = rv.tensor(a_data, requires_grad=True), rv.tensor(b_data, requires_grad=True)
    ta, tb = torch.tensor(a_data, requires_grad=True), torch.tensor(b_data, requires_grad=True)
    out, expected = a @ b, ta @ tb
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12)
    grads = rv.grad(out.sum(), [a, b])
    for g, e in zip(grads, torch.autograd.grad(expected.sum(), [ta, tb]), strict=True):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-12)
    with pytest.raises(ValueError):
        rv.tensor(np.ones((2, 2, 2))) @ b


# ---------------------------------------------------------------- compiled calls


def test_calls_without_grad_return_arrays(m: rv.Module) -> None:
    out = m.affine(rv.tensor(np.ones((2, 3))), np.ones((3, 4)), np.ones(4))
    assert isinstance(out, np.ndarray) and out.shape == (2, 4)


def test_chained_calls_and_operators_compose(m: rv.Module) -> None:
    rng = np.random.default_rng(2)
    data = {k: rng.normal(size=s) for k, s in [("x", (5, 3)), ("w", (3, 2)), ("b", (2,))]}
    x = rv.tensor(data["x"])
    w, b = rv.tensor(data["w"], requires_grad=True), rv.tensor(data["b"], requires_grad=True)
    hidden = m.affine(x, w, b)
    assert isinstance(hidden, rv.Tensor) and hidden.grad_fn.kernel is m.affine
    total, top = m.stats((hidden * hidden).mean(axis=1))
    loss = total + top * 0.5
    grads = rv.grad(loss, [w, b])

    tw = torch.tensor(data["w"], requires_grad=True)
    tb = torch.tensor(data["b"], requires_grad=True)
    th = torch.tensor(data["x"]) @ tw + tb
    tm = (th * th).mean(1)
    tloss = tm.sum() + tm.max() * 0.5
    for g, e in zip(grads, torch.autograd.grad(tloss, [tw, tb]), strict=True):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-10)


def test_integer_arguments_and_results_carry_no_gradient(m: rv.Module) -> None:
    x = rv.tensor([1.0, 5.0, 2.0], requires_grad=True)
    picked = m.pick(x, 1)
    (g,) = rv.grad(picked, x)
    np.testing.assert_array_equal(g.detach().numpy(), [0.0, 1.0, 0.0])


def test_saved_arrays_are_released_after_a_pass(m: rv.Module) -> None:
    x = rv.tensor(np.ones((2, 3)), requires_grad=True)
    y = m.affine(x, np.ones((3, 4)), np.ones(4)).sum()
    node = y.grad_fn.edges[0].grad_fn
    y.backward(retain_graph=True)
    assert not node.freed and node.args[0] is x
    y.backward()
    assert node.freed and all(not isinstance(a, rv.Tensor) for a in node.args)
    np.testing.assert_allclose(x.grad.detach().numpy(), np.full((2, 3), 8.0))
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_backward_on_a_compiled_tuple_result(m: rv.Module) -> None:
    x = rv.tensor([1.0, 3.0, 2.0], requires_grad=True)
    total, top = m.stats(x)
    top.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.detach().numpy(), [0.0, 1.0, 0.0])
    total.backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [1.0, 2.0, 1.0])


def test_a_pass_releases_intermediate_arrays(m: rv.Module) -> None:
    import weakref

    x = rv.tensor(np.ones((2, 3)), requires_grad=True)
    hidden = m.affine(x, np.ones((3, 4)), np.ones(4))
    alive = weakref.ref(hidden.detach().numpy())
    loss = (hidden * hidden).sum()
    del hidden
    assert alive() is not None
    loss.backward()
    assert alive() is None
