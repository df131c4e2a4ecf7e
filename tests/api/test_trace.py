"""`rv.trace` (docs/api.md §8–9): NumPy-style Python functions recorded as Reverie modules.

Each traced function is checked against the same function run on NumPy arrays, its
gradient against central finite differences in f64, and a few against torch; the traced
module is called at other sizes than the example's (its dimensions are symbolic), its
source recompiles to the same module, and untraceable constructs name the Python line.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

RNG = np.random.default_rng(7)


def mlp_loss(x, w1, b1, w2):
    h = np.tanh(x @ w1 + b1)
    return np.mean((h @ w2) ** 2)


def stencil(u, h):
    lap = (u[2:] - 2.0 * u[1:-1] + u[:-2]) / (h * h)
    return np.sum(lap * lap) + u[0] * u[-1]


def reshapes(x):
    flat = x.reshape(-1)
    back = flat.reshape(x.shape[1], x.shape[0]).T
    return (back * x).sum() + np.transpose(x).sum(axis=0).max() + flat[::2].sum()


def normalise(x):
    centred = x - x.mean(axis=1, keepdims=True)
    scale = np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-5)
    return np.sum(np.exp(np.where(centred > 0, centred / scale, 0.5 * centred)))


def methods_and_ufuncs(x, y):
    """Reverie's built-ins as methods (`.tanh()`), NumPy ufuncs, iteration over rows."""
    z = np.maximum(x, 0.0) + x.tanh() * np.exp(-y) + abs(x) - np.square(y) + rv.sin(x)
    rows = sum(row.sum() for row in z)
    return rows + np.concatenate([x, y], axis=0).log1p().prod(axis=1).sum()


def methods_and_ufuncs_numpy(x, y):
    z = np.maximum(x, 0.0) + np.tanh(x) * np.exp(-y) + abs(x) - np.square(y) + np.sin(x)
    return z.sum() + np.log1p(np.concatenate([x, y], axis=0)).prod(axis=1).sum()


def cross_entropy(z, labels):
    shifted = z - z.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -np.mean(log_p[labels].sum(axis=1))


def two_outputs(x):
    return x.sum(), x * 2.0


CASES = [
    (mlp_loss, mlp_loss, lambda: (RNG.standard_normal((6, 3)), RNG.standard_normal((3, 4)),
                                  RNG.standard_normal(4), RNG.standard_normal(4))),
    (stencil, stencil, lambda: (RNG.standard_normal(9), 0.5)),
    (reshapes, reshapes, lambda: (RNG.standard_normal((3, 4)),)),
    (normalise, normalise, lambda: (RNG.standard_normal((5, 4)),)),
    (methods_and_ufuncs, methods_and_ufuncs_numpy,
     lambda: (RNG.uniform(0.1, 1, (3, 2)), RNG.uniform(0.1, 1, (3, 2)))),
]


def finite_difference(fn, args: list, index: int, eps: float = 1e-6) -> np.ndarray:
    """Central differences of scalar `fn` with respect to argument `index`."""
    base = np.asarray(args[index], dtype=np.float64)
    grad = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        up, down = base.copy(), base.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (fn(*args[:index], up, *args[index + 1:]) -
                   fn(*args[:index], down, *args[index + 1:])) / (2 * eps)
    return grad


@pytest.mark.parametrize(("fn", "numpy_fn", "make"), CASES, ids=[c[0].__name__ for c in CASES])
def test_traced_values_and_gradients(fn, numpy_fn, make) -> None:
    args = list(make())
    module = rv.trace(fn, *args)
    kernel = module[fn.__name__]
    np.testing.assert_allclose(kernel(*args), numpy_fn(*args), rtol=1e-12)
    float_args = [i for i, a in enumerate(args) if np.ndim(a) > 0]
    grads = kernel.grad(wrt=float_args)(*args)
    for index, grad in zip(float_args, grads, strict=True):
        np.testing.assert_allclose(grad, finite_difference(numpy_fn, args, index),
                                   rtol=1e-5, atol=1e-7)


def test_dimensions_are_symbolic() -> None:
    """Traced at one size, called at another: each example axis became a dimension."""
    make = CASES[0][2]
    module = rv.trace(mlp_loss, *make())
    x, w1, b1, w2 = RNG.standard_normal((11, 5)), RNG.standard_normal((5, 7)), \
        RNG.standard_normal(7), RNG.standard_normal(7)
    np.testing.assert_allclose(module.mlp_loss(x, w1, b1, w2), mlp_loss(x, w1, b1, w2))
    assert "x: f64[X0, X1]" in module.ir("ast")
    with pytest.raises(rv.ShapeMismatchError, match="X1"):
        module.mlp_loss(x, w1[:4], b1, w2)


def test_ast_stage_is_reverie_source_that_recompiles() -> None:
    args = CASES[1][2]()
    traced = rv.trace(stencil, *args)
    source = traced.ir("ast")
    assert source.startswith("# Traced from stencil") and "fn stencil(u: f64[U0], h: f64)" \
        in source
    assert "test_trace.py" in source  # each statement names the Python line that made it
    again = rv.compile(source)
    assert again.stencil(*args) == traced.stencil(*args)


def test_gather_and_gradient_against_torch() -> None:
    torch = pytest.importorskip("torch")
    z, labels = RNG.standard_normal((6, 4)), RNG.integers(0, 6, size=5)
    module = rv.trace(cross_entropy, z, labels)
    zt = torch.tensor(z, requires_grad=True)
    expected = -torch.log_softmax(zt, dim=1)[torch.tensor(labels)].sum(dim=1).mean()
    (grad_t,) = torch.autograd.grad(expected, zt)
    np.testing.assert_allclose(module.cross_entropy(z, labels), expected.item(), rtol=1e-12)
    np.testing.assert_allclose(module.cross_entropy.grad(wrt="z")(z, labels), grad_t.numpy(),
                               rtol=1e-10, atol=1e-12)
    with pytest.raises(IndexError):
        module.cross_entropy(z, np.array([0, 6]))


def test_tuple_return_and_every_transform() -> None:
    x = RNG.standard_normal(4)
    module = rv.trace(two_outputs, x)
    total, doubled = module.two_outputs(x)
    np.testing.assert_allclose(doubled, 2 * x)
    assert total == pytest.approx(x.sum())
    quartic = rv.trace(lambda v: (v ** 4).sum(), x)
    np.testing.assert_allclose(quartic.traced.hessian("v")(x), np.diag(12 * x ** 2))
    _, tangent = quartic.traced.jvp("v")(x, np.ones(4))
    np.testing.assert_allclose(tangent, (4 * x ** 3).sum())


def python_if(x):
    if x.sum() > 0:
        return x.sum()
    return -x.sum()


def captured_array(x):
    return (x.sum() * np.ones((20, 20))).sum()


@pytest.mark.parametrize(("fn", "message"), [
    (python_if, r"cannot trace a Python `if`.*test_trace.py:\d+: if x.sum\(\) > 0:.*where"),
    (captured_array, r"constant array of shape \(20, 20\) cannot be written.*pass it as an "
                     r"argument"),
    (lambda x: np.frexp(x)[0].sum(), r"np.frexp has no Reverie counterpart"),
    (lambda x: float(x.sum()), r"cannot trace float\(\)"),
    (lambda x: np.linalg.eig(x[:, None] * x), r"np.linalg.eig cannot be traced"),
])
def test_untraceable_constructs_name_the_python_line(fn, message) -> None:
    with pytest.raises(rv.TraceError, match=message):
        rv.trace(fn, np.ones(3))


GENERATOR = np.random.default_rng(5)


@pytest.mark.parametrize("draw", [
    lambda x: x * GENERATOR.standard_normal(x.shape),  # a global Generator, traced sizes
    lambda x: x * GENERATOR.normal(size=3),
    lambda x: x * np.random.RandomState(0).randn(x.shape[0]),  # autograd's test_linalg
    lambda x: x * np.random.default_rng(1).uniform(-1, 1, len(x)),
])
def test_a_generator_draw_is_refused_not_baked_in_or_crashing(draw) -> None:
    """numpy.random's compiled code makes a draw's array with `np.empty(size)`: a recorded
    value handed to it crashed the process; now the draw is refused as np.random.randn's
    (it would be made once, while tracing)."""
    with pytest.raises(rv.TraceError, match="Generator or RandomState.*would be made once"):
        rv.trace(draw, np.ones(3))
    assert np.random.default_rng(2).standard_normal(3).shape == (3,)  # restored after


def test_bad_example_arguments() -> None:
    with pytest.raises(rv.TraceError, match="complex128"):
        rv.trace(lambda x: x.sum(), np.ones(3, dtype=complex))
    with pytest.raises(rv.TraceError, match="returns a constant"):
        rv.trace(lambda x: 1.0, np.ones(3))
    with pytest.raises(rv.TraceError, match="do not broadcast"):
        rv.trace(lambda x, y: (x + y).sum(), np.ones(3), np.ones(4))


def test_tensor_functions_record_the_users_line() -> None:
    """rv.where and rv.exp on traced values name the line that called them, not the Tensor
    functions' own modules."""
    def f(x):
        y = rv.where(x > 0, x, 0.0)
        return np.sum(rv.exp(y))

    source = rv.trace(f, np.ones(3)).source
    assert "torch_functions.py" not in source and "tensor_ops.py" not in source
    assert "y = rv.where(x > 0, x, 0.0)" in source.split("where(t1")[1].splitlines()[0]
