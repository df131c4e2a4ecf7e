"""Ports of PyTorch's `test/autograd/test_functional.py` (issue 32 item 8), run on torch and
on `rv.autograd.functional` through the `lib` fixture.

Adapted where the libraries' spellings differ: `a[:3]` for `a.narrow(0, 0, 3)`, `x ** 3` for
`x.pow(3)`, `x * 1.0` for `x.clone()`, a broadcast product for `unsqueeze(0).repeat(4)` and
`torch.stack`, `detach().requires_grad_() * 1.0` for the non-leaf that is not connected to
the input (`long().float().requires_grad_().clone()`), `x.sum(1)` for `x.sum(dim=1)`.
Error messages are matched on the words both libraries use. `test_vjp_create_graph`'s
first gradcheck differentiates its argument `inp` (torch's test reads the outer `inputs`,
which only torch's in-place perturbation makes the same).

Left out: the `logging_tensor` variants (a torch Tensor subclass),
`test_construct_standard_basis_for` (a private torch helper), and the accelerator tests of
`TestAutogradFunctionalDeviceType` (devices). Reverie-only behaviour (the compiled path,
values against torch for every argument combination) is in `test_functional_paths.py`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.autograd.parity import as_array, assert_close

RNG = np.random.default_rng(32)


def rand(lib, *shape, requires_grad=False):
    return lib.tensor(RNG.random(shape), dtype=lib.float64, requires_grad=requires_grad)


def randn(lib, *shape):
    return lib.tensor(RNG.standard_normal(shape), dtype=lib.float64)


def ones(lib, *shape, requires_grad=False):
    return lib.tensor(np.ones(shape), dtype=lib.float64, requires_grad=requires_grad)


def functional(lib):
    return lib.autograd.functional


def gradcheck(lib, fn, inputs):
    assert lib.autograd.gradcheck(fn, inputs)


def gradgradcheck(lib, fn, inputs):
    assert lib.autograd.gradgradcheck(fn, inputs)


def not_connected(a):
    """A non-leaf that requires grad but is not connected to `a`."""
    return a.detach().requires_grad_() * 1.0


def assert_same_struct(lib, res, base):
    if isinstance(base, tuple):
        assert isinstance(res, tuple) and len(res) == len(base)
        for el_res, el_base in zip(res, base, strict=True):
            assert isinstance(el_res, lib.Tensor)
            assert tuple(el_res.shape) == tuple(el_base.shape)
    else:
        assert isinstance(res, lib.Tensor)
        assert tuple(res.shape) == tuple(base.shape)


def assert_interleaved_struct(lib, res, base1, base2):
    """res[i][j] has shape base1[i].shape + base2[j].shape (tuple levels as torch nests)."""
    if not isinstance(base1, tuple):
        if not isinstance(base2, tuple):
            assert isinstance(res, lib.Tensor)
            assert tuple(res.shape) == tuple(base1.shape) + tuple(base2.shape)
            return
        assert isinstance(res, tuple) and len(res) == len(base2)
        for el_res, el_base2 in zip(res, base2, strict=True):
            assert_interleaved_struct(lib, el_res, base1, el_base2)
        return
    assert isinstance(res, tuple) and len(res) == len(base1)
    for el_res, el_base1 in zip(res, base1, strict=True):
        assert_interleaved_struct(lib, el_res, el_base1, base2)


def assert_nonzero(res):
    assert np.abs(as_array(res)).sum() > 0


def assert_all_close(res, expected):
    """Equal values in the same nesting (a list equals a tuple, as in torch's assertEqual:
    torch's forward mode nests lists)."""
    if isinstance(expected, tuple | list):
        assert isinstance(res, tuple | list) and len(res) == len(expected)
        for r, e in zip(res, expected, strict=True):
            assert_all_close(r, e)
    else:
        assert_close(res, expected, rtol=1e-10)


# ---------------------------------------------------------------- vjp


def test_vjp_err_check(lib):
    F = functional(lib)

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp, v = rand(lib, 4), ones(lib, 3)
    with pytest.raises(TypeError, match="The inputs given to vjp must be either a Tensor"):
        F.vjp(foo, (inp, 2), v)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given "
                                        "to vjp must"):
        F.vjp(bar, inp, v)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the "
                                           "user-provided function returns"):
        F.vjp(foo, inp)
    with pytest.raises(RuntimeError, match="The given v should contain a single Tensor."):
        F.vjp(foo, inp, (ones(lib, 4), ones(lib, 4)))
    with pytest.raises(RuntimeError, match="v has invalid size: should be"):
        F.vjp(foo, inp, v[:2])
    assert_same_struct(lib, F.vjp(foo, inp, v)[1], inp)


def test_vjp_err_check_strict(lib):
    F = functional(lib)

    def foo(a):
        return a.detach()

    inp, v = rand(lib, 4), rand(lib, 4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        F.vjp(foo, inp, v, strict=True)
    res = F.vjp(foo, inp, v, strict=False)
    assert_same_struct(lib, res[1], inp)
    assert_close(res[1].abs().sum(), 0.0)

    with pytest.raises(RuntimeError, match="The output of the user-provided function is "
                                           "independent of input 0"):
        F.vjp(not_connected, inp, v, strict=True)
    res = F.vjp(not_connected, inp, v, strict=False)
    assert_same_struct(lib, res[1], inp)
    assert_close(res[1].abs().sum(), 0.0)

    def identity(a):  # the Jacobian does not depend on the input
        return a * 1.0

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is "
                                           "independent of input 0"):
        F.vjp(identity, inp, v, create_graph=True, strict=True)
    res = F.vjp(identity, inp, v, create_graph=True, strict=False)
    assert_same_struct(lib, res[1], inp)
    assert_close(res[1], v)


def test_vjp_no_grad(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 4, 4), ones(lib, 4)
    with lib.no_grad():
        res = F.vjp(reducer, inputs, v)
    assert res[0].grad_fn is None and res[1].grad_fn is None
    assert_nonzero(res[1])

    inputs.requires_grad_()
    v.requires_grad_()
    with lib.no_grad():
        res = F.vjp(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    assert_nonzero(res[1])


def test_vjp_output(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 4, 4), ones(lib, 4)
    res = F.vjp(reducer, inputs, v)
    assert_same_struct(lib, res[1], inputs)
    assert res[0].grad_fn is None and res[1].grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y

    inputs, v = (rand(lib, 2), rand(lib, 2)), ones(lib, 2)
    out, vjp_val = F.vjp(adder, inputs, v)
    assert_same_struct(lib, vjp_val, inputs)
    assert out.grad_fn is None and vjp_val[0].grad_fn is None and vjp_val[1].grad_fn is None

    def adder2(x, y):
        return 2 * x + 3 * y, x + y

    inputs = (rand(lib, 2), rand(lib, 2))
    v = (lib.tensor([1.0, 0.0]), lib.tensor([1.0, 0.0]))
    out, vjp_val = F.vjp(adder2, inputs, v)
    assert_same_struct(lib, vjp_val, inputs)
    assert out[0].grad_fn is None and out[1].grad_fn is None
    assert vjp_val[0].grad_fn is None and vjp_val[1].grad_fn is None


def test_vjp_scalar(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum()

    inputs, v = rand(lib, 4, 4), ones(lib)
    res = F.vjp(reducer, inputs, v)
    assert_same_struct(lib, res[0], v)
    assert_same_struct(lib, res[1], inputs)
    res = F.vjp(reducer, inputs)
    assert_same_struct(lib, res[0], v)
    assert_same_struct(lib, res[1], inputs)

    def expander(x):
        return x * ones(lib, 4)

    inputs, v = rand(lib), ones(lib, 4)
    res = F.vjp(expander, inputs, v)
    assert_same_struct(lib, res[0], v)
    assert_same_struct(lib, res[1], inputs)


def test_vjp_create_graph(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 2, 2, requires_grad=True), ones(lib, 2, requires_grad=True)
    res = F.vjp(reducer, inputs, v, create_graph=True)
    assert_same_struct(lib, res[1], inputs)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    gradcheck(lib, lambda inp, v: F.vjp(reducer, inp, v, create_graph=True), (inputs, v))
    gradgradcheck(lib, lambda inp, v: F.vjp(reducer, inp, v, create_graph=True), (inputs, v))

    def adder(x, y):
        return 2 * x + 3 * y, x * y

    inputs = (rand(lib, 2, requires_grad=True), rand(lib, 2, requires_grad=True))
    v = (lib.tensor([1.0, 0.0], dtype=lib.float64, requires_grad=True),
         lib.tensor([1.0, 0.0], dtype=lib.float64, requires_grad=True))
    gradcheck(lib, lambda *args: F.vjp(adder, args[:2], args[2:], create_graph=True)[1],
              inputs + v)
    gradgradcheck(lib, lambda *args: F.vjp(adder, args[:2], args[2:], create_graph=True)[1],
                  inputs + v)

    def foo(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = F.vjp(adder, (x, y), v, create_graph=True)
        return (val[0].exp() + val[1].exp() + grad[0].exp() + grad[1].exp() + x.exp()
                + y.exp())

    gradcheck(lib, foo, inputs + v)
    gradgradcheck(lib, foo, inputs + v)


# ---------------------------------------------------------------- jvp


def test_jvp_err_check(lib):
    F = functional(lib)

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp, v = rand(lib, 4), rand(lib, 4)
    with pytest.raises(TypeError, match="The inputs given to jvp must be either a Tensor"):
        F.jvp(foo, (inp, 2), v)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given "
                                        "to jvp must"):
        F.jvp(bar, inp, v)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the input to "
                                           "the user-provided function"):
        F.jvp(foo, inp)
    with pytest.raises(RuntimeError, match="The given v should contain a single Tensor."):
        F.jvp(foo, inp, (v, v))
    with pytest.raises(RuntimeError, match="v has invalid size: should be"):
        F.jvp(foo, inp, v[:2])
    assert_same_struct(lib, F.jvp(foo, inp, v)[1], foo(inp))


def test_jvp_err_check_strict(lib):
    F = functional(lib)

    def foo(a):
        return a.detach()

    inp, v = rand(lib, 4), rand(lib, 4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        F.jvp(foo, inp, v, strict=True)
    res = F.jvp(foo, inp, v, strict=False)
    assert_same_struct(lib, res[1], res[0])
    assert_close(res[1].abs().sum(), 0.0)

    with pytest.raises(RuntimeError, match="The output of the user-provided function is "
                                           "independent of input 0"):
        F.jvp(not_connected, inp, v, strict=True)
    res = F.jvp(not_connected, inp, v, strict=False)
    assert_same_struct(lib, res[1], res[0])
    assert_close(res[1].abs().sum(), 0.0)

    def identity(a):
        return a * 1.0

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is "
                                           "independent of input 0"):
        F.jvp(identity, inp, v, create_graph=True, strict=True)
    res = F.jvp(identity, inp, v, create_graph=True, strict=False)
    assert_same_struct(lib, res[1], inp)
    assert_close(res[1], v)


def test_jvp_no_grad(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    with lib.no_grad():
        res = F.jvp(reducer, inputs, v)
    assert res[0].grad_fn is None and res[1].grad_fn is None
    assert_nonzero(res[1])

    inputs.requires_grad_()
    v.requires_grad_()
    with lib.no_grad():
        res = F.jvp(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    assert_nonzero(res[1])


def test_jvp_output(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    res = F.jvp(reducer, inputs, v)
    assert_same_struct(lib, res[1], res[0])
    assert res[0].grad_fn is None and res[1].grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y

    inputs, v = (rand(lib, 2), rand(lib, 2)), (ones(lib, 2), ones(lib, 2))
    out, jvp_val = F.jvp(adder, inputs, v)
    assert_same_struct(lib, jvp_val, out)
    assert out.grad_fn is None and jvp_val.grad_fn is None

    def adder2(x, y):
        return 2 * x + 3 * y, x + y

    inputs = (rand(lib, 2), rand(lib, 2))
    v = (lib.tensor([1.0, 0.0]), lib.tensor([1.0, 0.0]))
    out, jvp_val = F.jvp(adder2, inputs, v)
    assert_same_struct(lib, jvp_val, out)
    assert out[0].grad_fn is None and out[1].grad_fn is None
    assert jvp_val[0].grad_fn is None and jvp_val[1].grad_fn is None


def test_jvp_scalar(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum()

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    res = F.jvp(reducer, inputs, v)
    assert_same_struct(lib, res[0], ones(lib))
    assert_same_struct(lib, res[1], res[0])

    def expander(x):
        return x * ones(lib, 4)

    inputs, v = rand(lib), ones(lib)
    res = F.jvp(expander, inputs, v)
    assert_same_struct(lib, res[0], ones(lib, 4))
    assert_same_struct(lib, res[1], res[0])
    res = F.jvp(expander, inputs)
    assert_same_struct(lib, res[0], ones(lib, 4))
    assert_same_struct(lib, res[1], res[0])


def test_jvp_create_graph(lib):
    F = functional(lib)

    def reducer(x):
        return x.sum(1)

    inputs, v = rand(lib, 2, 2, requires_grad=True), ones(lib, 2, 2, requires_grad=True)
    res = F.jvp(reducer, inputs, v, create_graph=True)
    assert_same_struct(lib, res[1], res[0])
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    gradcheck(lib, lambda inp, v: F.jvp(reducer, inp, v, create_graph=True), (inputs, v))
    gradgradcheck(lib, lambda inp, v: F.jvp(reducer, inp, v, create_graph=True), (inputs, v))

    def adder(x, y):
        return 2 * x + 3 * y, x * y

    inputs = (rand(lib, 2, requires_grad=True), rand(lib, 2, requires_grad=True))
    v = (lib.tensor([1.0, 0.0], dtype=lib.float64, requires_grad=True),
         lib.tensor([1.0, 0.0], dtype=lib.float64, requires_grad=True))
    gradcheck(lib, lambda *args: F.jvp(adder, args[:2], args[2:], create_graph=True)[1],
              inputs + v)
    gradgradcheck(lib, lambda *args: F.jvp(adder, args[:2], args[2:], create_graph=True)[1],
                  inputs + v)

    def foo(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = F.jvp(adder, (x, y), v, create_graph=True)
        return (val[0].exp() + val[1].exp() + grad[0].exp() + grad[1].exp() + x.exp()
                + y.exp())

    gradcheck(lib, foo, inputs + v)
    gradgradcheck(lib, foo, inputs + v)


# ---------------------------------------------------------------- jacobian


@pytest.mark.parametrize("api", ["jacobian", "hessian"])
def test_vectorize_raises_no_warnings(lib, api):
    def foo(a):
        return (a ** 2).sum()

    x = randn(lib, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(functional(lib), api)(foo, x, vectorize=True)
    assert caught == []


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_err_check(lib, vectorize):
    F = functional(lib)

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp = rand(lib, 4)
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either a "
                                        "Tensor"):
        F.jacobian(foo, (inp, 2), vectorize=vectorize)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given "
                                        "to jacobian must"):
        F.jacobian(bar, inp, vectorize=vectorize)
    res = F.jacobian(foo, inp, vectorize=vectorize)
    assert_interleaved_struct(lib, res, foo(inp), inp)

    def foo2(a, b):
        return b, 3 * a[:3]

    inp = (rand(lib, 4), rand(lib, 5))
    res = F.jacobian(foo2, inp, vectorize=vectorize)
    assert_interleaved_struct(lib, res, foo2(*inp), inp)


def test_jacobian_err_check_strict(lib):
    F = functional(lib)

    def foo(a):
        return a.detach()

    inp = rand(lib, 4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        F.jacobian(foo, inp, strict=True)
    res = F.jacobian(foo, inp, strict=False)
    assert_interleaved_struct(lib, res, foo(inp), inp)
    assert_close(res.abs().sum(), 0.0)

    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                                           "independent of input 0"):
        F.jacobian(not_connected, inp, strict=True)
    res = F.jacobian(not_connected, inp, strict=False)
    assert_interleaved_struct(lib, res, foo(inp), inp)
    assert_close(res.abs().sum(), 0.0)

    def identity(a):
        return a * 1.0

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is "
                                           "independent of input 0"):
        F.jacobian(identity, inp, create_graph=True, strict=True)
    res = F.jacobian(identity, inp, create_graph=True, strict=False)
    assert_interleaved_struct(lib, res, inp, inp)
    assert_close(res, np.eye(4))


@pytest.mark.parametrize("api", ["jacobian", "hessian"])
def test_err_check_strict_vectorize(lib, api):
    def foo(x):
        return (x ** 3).sum()

    with pytest.raises(RuntimeError, match="not supported together"):
        getattr(functional(lib), api)(foo, rand(lib, 4), strict=True, vectorize=True)


def test_jacobian_no_grad(lib):
    F = functional(lib)

    def exp_reducer(x):
        return x.exp().sum(1)

    inputs = rand(lib, 4, 4)
    with lib.no_grad():
        res = F.jacobian(exp_reducer, inputs)
    assert res.grad_fn is None
    assert_nonzero(res)
    with lib.no_grad():
        res = F.jacobian(exp_reducer, inputs, create_graph=True)
    assert res.grad_fn is not None
    assert_nonzero(res)


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_output(lib, vectorize):
    F = functional(lib)

    def exp_reducer(x):
        return x.exp().sum(1)

    inputs = rand(lib, 4, 4)
    res = F.jacobian(exp_reducer, inputs, vectorize=vectorize)
    assert_interleaved_struct(lib, res, exp_reducer(inputs), inputs)
    assert res.grad_fn is None

    def identity(x):
        return x * 1.0

    inputs = rand(lib, 4)
    res = F.jacobian(identity, inputs, vectorize=vectorize)
    assert_interleaved_struct(lib, res, identity(inputs), inputs)
    assert res.grad_fn is None
    assert_close(res, np.eye(4))

    def add_exp_reducer(x, y):
        return (x + y.exp()).sum(1)

    inputs = (rand(lib, 4, 4), rand(lib, 4, 4))
    res = F.jacobian(add_exp_reducer, inputs, vectorize=vectorize)
    assert_interleaved_struct(lib, res, add_exp_reducer(*inputs), inputs)
    assert res[0].grad_fn is None and res[1].grad_fn is None


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_scalar(lib, vectorize):
    F = functional(lib)

    def reducer(x):
        return x.sum()

    inputs = rand(lib, 4, 4)
    assert_same_struct(lib, F.jacobian(reducer, inputs, vectorize=vectorize), inputs)

    def expander(x):
        return x * ones(lib, 4)

    inputs = rand(lib)
    assert_same_struct(lib, F.jacobian(expander, inputs, vectorize=vectorize), ones(lib, 4))


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_create_graph(lib, vectorize):
    F = functional(lib)

    def exp_reducer(x):
        return x.exp().sum(1)

    inputs = rand(lib, 4, 4, requires_grad=True)
    res = F.jacobian(exp_reducer, inputs, create_graph=True, vectorize=vectorize)
    assert_interleaved_struct(lib, res, exp_reducer(inputs), inputs)
    assert res.grad_fn is not None

    def jac(*inp):
        return F.jacobian(exp_reducer, inp[0], create_graph=True, vectorize=vectorize)

    gradcheck(lib, jac, (inputs,))
    gradgradcheck(lib, jac, (inputs,))

    def add_exp_reducer(x, y):
        return (x + y).exp().sum(1)

    inputs = (rand(lib, 4, 4, requires_grad=True), rand(lib, 4, 4, requires_grad=True))
    res = F.jacobian(add_exp_reducer, inputs, create_graph=True, vectorize=vectorize)
    assert_interleaved_struct(lib, res, add_exp_reducer(*inputs), inputs)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None

    def jac2(*inp):
        return F.jacobian(add_exp_reducer, inp, create_graph=True, vectorize=vectorize)

    gradcheck(lib, jac2, inputs)
    gradgradcheck(lib, jac2, inputs)

    def foo(x, y):
        x = x.cos()
        val, jac = F.jacobian(add_exp_reducer, (x, y), create_graph=True,
                              vectorize=vectorize)
        res = val[0].exp().sum() + val[1].exp().sum() + jac[0].exp().sum()
        return res + jac[1].exp().sum() + x.exp().sum() + y.exp().sum()

    gradcheck(lib, foo, inputs)
    gradgradcheck(lib, foo, inputs)


def check_jacobian_vectorize_correctness(lib, f, inputs, test_forward_ad=True):
    F = functional(lib)
    expected = F.jacobian(f, inputs, vectorize=False)
    assert_all_close(F.jacobian(f, inputs, vectorize=True), expected)
    if test_forward_ad:
        assert_all_close(F.jacobian(f, inputs, strategy="forward-mode", vectorize=True),
                         expected)


def test_jacobian_vectorize_correctness_simple(lib):
    check_jacobian_vectorize_correctness(lib, lambda x: 3 * x ** 2, randn(lib, 2, 3, 5))


def test_jacobian_vectorize_correctness_multi_input(lib):
    def f(x, y):
        return (x.cos() * x) @ y.sin()

    check_jacobian_vectorize_correctness(lib, f, (randn(lib, 2, 3), randn(lib, 3, 5)))


def test_jacobian_vectorize_correctness_multi_input_multi_output(lib):
    def f(x, y):
        return (x * x) @ y, x @ (x.sum(1) * y), y.sum()

    check_jacobian_vectorize_correctness(lib, f, (randn(lib, 5, 3), randn(lib, 3, 5)))


def test_jacobian_vectorize_correctness_unrelated_outputs(lib):
    def f(x, y):
        return x, y, x, y

    check_jacobian_vectorize_correctness(lib, f, (randn(lib, 2), randn(lib, 3)))


def test_jacobian_vectorize_correctness_zero_dim(lib):
    def f(x, y):  # zero-dim output
        return x.sum(), y.sum(), x * y

    check_jacobian_vectorize_correctness(lib, f, (randn(lib, 3), randn(lib, 3)))

    def g(x):  # zero-dim input
        return x * ones(lib, 3)

    check_jacobian_vectorize_correctness(lib, g, randn(lib))

    def h(x, y):  # mixed zero-dim input / zero-dim output
        return y.sum(), x * y

    check_jacobian_vectorize_correctness(lib, h, (randn(lib), randn(lib, 1)))


def test_jacobian_vectorize_correctness_different_dtype(lib):
    def cast(t, dtype):
        return t.astype(dtype) if hasattr(t, "astype") else t.to(dtype)

    def f(x, y):
        return cast(x * y, lib.float32), cast(x * y, lib.float64)

    # forward AD gives the output's dtype, reverse AD the input's: reverse only, as torch
    check_jacobian_vectorize_correctness(lib, f, (randn(lib, 3), randn(lib, 3)),
                                         test_forward_ad=False)


# ---------------------------------------------------------------- hessian


def check_hessian_vectorize_correctness(lib, f, inputs):
    F = functional(lib)
    expected = F.hessian(f, inputs, vectorize=False)
    assert_all_close(F.hessian(f, inputs, vectorize=True), expected)
    assert_all_close(F.hessian(f, inputs, outer_jacobian_strategy="forward-mode",
                               vectorize=True), expected)


def test_hessian_vectorize_correctness_simple(lib):
    check_hessian_vectorize_correctness(lib, lambda x: (3 * x ** 2).sum(),
                                        randn(lib, 2, 3, 5))


def test_hessian_vectorize_correctness_multi_input(lib):
    def f(x, y, z):
        return ((x.relu() * x) @ y.sin() @ z).sum()

    check_hessian_vectorize_correctness(lib, f, (randn(lib, 2, 3), randn(lib, 3, 5),
                                                 randn(lib, 5, 5)))


def test_hessian_vectorize_correctness_unrelated_outputs(lib):
    def f(x, y):  # output unrelated to one input
        return (x ** 2).sum()

    check_hessian_vectorize_correctness(lib, f, (randn(lib, 2), randn(lib, 3)))

    def g(x, y):  # output unrelated to all inputs
        return ones(lib)

    check_hessian_vectorize_correctness(lib, g, (randn(lib, 2), randn(lib, 3)))


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_err_check(lib, vectorize):
    F = functional(lib)

    def foo(a):
        return 3 * a[:3].exp().sum()

    def bar(a):
        return 3 * a[:3], "bar"

    def bar2(a):
        return 3 * a[:3]

    def bar3(a):
        return 3 * a[:3], 3 * a[:3]

    inp = rand(lib, 4)
    with pytest.raises(TypeError, match="The inputs given to hessian must be either a "
                                        "Tensor"):
        F.hessian(foo, (inp, 2), vectorize=vectorize)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given "
                                        "to hessian must"):
        F.hessian(bar, inp, vectorize=vectorize)
    with pytest.raises(RuntimeError, match="The Tensor returned by the function given to "
                                           "hessian should contain a single element"):
        F.hessian(bar2, inp, vectorize=vectorize)
    with pytest.raises(RuntimeError, match="The function given to hessian should return a "
                                           "single Tensor"):
        F.hessian(bar3, inp, vectorize=vectorize)
    assert_interleaved_struct(lib, F.hessian(foo, inp, vectorize=vectorize), inp, inp)

    def foo2(a, b):
        return (3 * b[:3] * a[:3]).sum()

    inp = (rand(lib, 4), rand(lib, 5))
    assert_interleaved_struct(lib, F.hessian(foo2, inp, vectorize=vectorize), inp, inp)


def test_hessian_err_check_strict(lib):
    F = functional(lib)

    def foo(a):
        return a.detach().sum()

    def bar(a):
        return not_connected(a).sum()

    def bar2(a):  # linear: the Jacobian is independent of the input
        return (3 * a).sum()

    inp = rand(lib, 4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        F.hessian(foo, inp, strict=True)
    res = F.hessian(foo, inp, strict=False)
    assert_interleaved_struct(lib, res, inp, inp)
    assert_close(res.abs().sum(), 0.0)

    for fn in (bar, bar2):
        with pytest.raises(RuntimeError, match="jacobian of the user-provided function with "
                                               "respect to input 0 is"):
            F.hessian(fn, inp, strict=True)
        res = F.hessian(fn, inp, strict=False)
        assert_interleaved_struct(lib, res, inp, inp)
        assert_close(res.abs().sum(), 0.0)


def test_hessian_no_grad(lib):
    F = functional(lib)

    def pow_reducer(x):
        return (x ** 3).sum()

    inputs = rand(lib, 2, 2)
    with lib.no_grad():
        res = F.hessian(pow_reducer, inputs)
    assert all(res[i][j].grad_fn is None for i in range(2) for j in range(2))
    assert_nonzero(res)
    with lib.no_grad():
        res = F.hessian(pow_reducer, inputs, create_graph=True)
    assert all(res[i][j].grad_fn is not None for i in range(2) for j in range(2))
    assert_nonzero(res)


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_output(lib, vectorize):
    F = functional(lib)

    def pow_reducer(x):
        return (x ** 3).sum()

    inputs = rand(lib, 2, 2)
    res = F.hessian(pow_reducer, inputs, vectorize=vectorize)
    assert_interleaved_struct(lib, res, inputs, inputs)
    assert res.grad_fn is None

    def add_pow_reducer(x, y):
        return ((x + y) ** 3).sum()

    inputs = (rand(lib, 2, 2), rand(lib, 2, 2))
    res = F.hessian(add_pow_reducer, inputs, vectorize=vectorize)
    assert_interleaved_struct(lib, res, inputs, inputs)
    assert all(res[i][j].grad_fn is None for i in range(2) for j in range(2))


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_scalar(lib, vectorize):
    F = functional(lib)

    def reducer(x):
        return x.sum()

    inputs = rand(lib, 4, 4)
    assert_interleaved_struct(lib, F.hessian(reducer, inputs, vectorize=vectorize),
                              inputs, inputs)
    inputs = rand(lib)
    assert_same_struct(lib, F.hessian(reducer, inputs, vectorize=vectorize), inputs)

    def bad_reducer(x):
        return x.sum().reshape(1, 1, 1)

    inputs = rand(lib, 4, 4)
    assert_interleaved_struct(lib, F.hessian(bad_reducer, inputs, vectorize=vectorize),
                              inputs, inputs)


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_create_graph(lib, vectorize):
    F = functional(lib)

    def pow_reducer(x):
        return (x ** 3).sum()

    inputs = rand(lib, 2, 2, requires_grad=True)
    res = F.hessian(pow_reducer, inputs, create_graph=True, vectorize=vectorize)
    assert_interleaved_struct(lib, res, inputs, inputs)
    assert res.grad_fn is not None

    def hess(*inp):
        return F.hessian(pow_reducer, inp[0], create_graph=True, vectorize=vectorize)

    gradcheck(lib, hess, (inputs,))
    gradgradcheck(lib, hess, (inputs,))

    def add_pow_reducer(x, y):
        return ((x + y) ** 3).sum()

    inputs = (rand(lib, 2, 2, requires_grad=True), rand(lib, 2, 2, requires_grad=True))
    res = F.hessian(add_pow_reducer, inputs, create_graph=True, vectorize=vectorize)
    assert_interleaved_struct(lib, res, inputs, inputs)
    assert all(res[i][j].grad_fn is not None for i in range(2) for j in range(2))

    def flat_hess(*inp):
        blocks = F.hessian(add_pow_reducer, inp, create_graph=True, vectorize=vectorize)
        return tuple(block for row in blocks for block in row)

    gradcheck(lib, flat_hess, inputs)
    gradgradcheck(lib, flat_hess, inputs)

    def foo(x, y):
        x = x.cos()
        val, hess = F.hessian(add_pow_reducer, (x, y), create_graph=True,
                              vectorize=vectorize)
        res = val[0].cos().sum() + val[1].cos().sum() + hess[0].cos().sum()
        return res + hess[1].cos().sum() + x.cos().sum() + y.cos().sum()

    gradcheck(lib, foo, inputs)
    gradgradcheck(lib, foo, inputs)


# ---------------------------------------------------------------- vhp and hvp


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_err_check(lib, api):
    product = getattr(functional(lib), api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    def bar(a):
        return 3 * a[:3], "bar"

    def bar2(a):
        return 3 * a[:3]

    inp, v = rand(lib, 4), rand(lib, 4)
    with pytest.raises(TypeError, match=f"The inputs given to {api} must be either a Tensor"):
        product(foo, (inp, 2), v)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given "
                                        f"to {api} must"):
        product(bar, inp, v)
    with pytest.raises(RuntimeError, match=f"The Tensor returned by the function given to "
                                           f"{api} should contain a single element"):
        product(bar2, inp, v)
    with pytest.raises(RuntimeError, match="v has invalid size:"):
        product(foo, inp, rand(lib, 5))
    with pytest.raises(TypeError, match=f"The v given to {api} must be either a Tensor or a "
                                        "tuple of Tensors"):
        product(foo, inp, (v, 2))
    assert_same_struct(lib, product(foo, inp, v)[1], inp)

    def foo2(a, b):
        return (3 * b[:3] * a[:3]).sum()

    inp, v = (rand(lib, 4), rand(lib, 5)), (rand(lib, 4), rand(lib, 5))
    assert_same_struct(lib, product(foo2, inp, v)[1], inp)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_err_check_strict(lib, api):
    product = getattr(functional(lib), api)

    def foo(a):
        return a.detach().sum()

    def bar(a):
        return not_connected(a).sum()

    def bar2(a):  # linear: the Jacobian is independent of the input
        return (3 * a).sum()

    inp, v = rand(lib, 4), rand(lib, 4)
    expected = {foo: "Output 0 of the user-provided function does not require gradients",
                bar: "The output of the user-provided function is independent of input 0",
                bar2: "jacobian of the user-provided function with respect to input 0 is"}
    for fn, message in expected.items():
        with pytest.raises(RuntimeError, match=message):
            product(fn, inp, v, strict=True)
        res = product(fn, inp, v, strict=False)
        assert_same_struct(lib, res[1], inp)
        assert_close(res[1].abs().sum(), 0.0)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_no_grad(lib, api):
    product = getattr(functional(lib), api)

    def reducer(x):
        return x.exp().sum()

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    with lib.no_grad():
        res = product(reducer, inputs, v)
    assert res[0].grad_fn is None and res[1].grad_fn is None
    assert_nonzero(res[1])
    with lib.no_grad():
        res = product(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    assert_nonzero(res[1])


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_output(lib, api):
    product = getattr(functional(lib), api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    res = product(foo, inputs, v)
    assert_same_struct(lib, res[1], inputs)
    assert res[0].grad_fn is None and res[1].grad_fn is None


# rv.trace records `a + 3 * b[:3]` (a: 3 elements, b: 4) with a's axis fixed at 3 (the
# sizes agree only in the example): it type-checks (issue 36 item 4).
@pytest.mark.parametrize("lib", ["torch", "reverie"], indirect=True)
@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_output_of_two(lib, api):
    product = getattr(functional(lib), api)

    def bar(a, b):
        return (a + 3 * b[:3]).exp().sum()

    inputs, v = (rand(lib, 3), rand(lib, 4)), (ones(lib, 3), ones(lib, 4))
    out, val = product(bar, inputs, v)
    assert_same_struct(lib, val, inputs)
    assert out.grad_fn is None and val[0].grad_fn is None and val[1].grad_fn is None


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_scalar(lib, api):
    product = getattr(functional(lib), api)

    def reducer(x):
        return x.exp().sum()

    inputs, v = rand(lib, 4, 4), ones(lib, 4, 4)
    assert_same_struct(lib, product(reducer, inputs, v)[1], inputs)
    inputs, v = rand(lib), rand(lib)
    assert_same_struct(lib, product(reducer, inputs, v)[1], inputs)
    assert_same_struct(lib, product(reducer, inputs)[1], inputs)

    def bad_reducer(x):
        return x.exp().sum().reshape(1, 1, 1)

    inputs, v = rand(lib, 4, 4), rand(lib, 4, 4)
    assert_same_struct(lib, product(bad_reducer, inputs, v)[1], inputs)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_hessian_product_create_graph(lib, api):
    product = getattr(functional(lib), api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs, v = rand(lib, 4, 4, requires_grad=True), ones(lib, 4, 4, requires_grad=True)
    res = product(foo, inputs, v, create_graph=True)
    assert_same_struct(lib, res[1], inputs)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    gradcheck(lib, lambda inp, v: product(foo, inp, v, create_graph=True), (inputs, v))
    gradgradcheck(lib, lambda inp, v: product(foo, inp, v, create_graph=True), (inputs, v))

    def bar(a, b):
        return (a + 3 * b[:3]).exp().sum()

    inputs = (rand(lib, 3, requires_grad=True), rand(lib, 4, requires_grad=True))
    v = (ones(lib, 3, requires_grad=True), ones(lib, 4, requires_grad=True))
    out, val = product(bar, inputs, v, create_graph=True)
    assert_same_struct(lib, val, inputs)
    assert out.grad_fn is not None and val[0].grad_fn is not None
    assert val[1].grad_fn is not None
    gradcheck(lib, lambda *args: product(bar, args[:2], args[2:], create_graph=True)[1],
              inputs + v)
    gradgradcheck(lib, lambda *args: product(bar, args[:2], args[2:], create_graph=True)[1],
                  inputs + v)

    def foo2(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = product(bar, (x, y), v, create_graph=True)
        return val.cos() + grad[0].cos().sum() + grad[1].cos() + x.cos().sum() + y.cos()

    gradcheck(lib, foo2, inputs + v)
    gradgradcheck(lib, foo2, inputs + v)


# ---------------------------------------------------------------- consistency


def test_jacobian_match_vjp_jvp(lib):
    F = functional(lib)

    def foo(x):
        return x ** 3 + x.sum()

    inputs, v = rand(lib, 4), rand(lib, 4)
    jac = F.jacobian(foo, inputs)
    assert_close(F.jvp(foo, inputs, v)[1], jac @ v, rtol=1e-10)
    assert_close(F.vjp(foo, inputs, v)[1], v @ jac, rtol=1e-10)


def test_hessian_match_vhp_hvp(lib):
    F = functional(lib)

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs, v = rand(lib, 4), rand(lib, 4)
    hes = F.hessian(foo, inputs)
    assert_close(F.hvp(foo, inputs, v)[1], hes @ v, rtol=1e-10)
    assert_close(F.vhp(foo, inputs, v)[1], v @ hes, rtol=1e-10)
