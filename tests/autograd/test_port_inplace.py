"""Ports of PyTorch's test/test_autograd.py tests of in-place operations, version counters
and views (issue 32 item 2; runtime/tensors/inplace.py), each run on torch and on Reverie (`lib`).

Adapted: `narrow`/`select` are written as basic slicing (the same views), `torch.ones(...)`
as `lib.tensor(np.ones(...))`, list indices of several axes as tuples (NumPy's reading).
Left out: the tests of `unbind`/`split`/`chunk` views (test_inplace_on_view_multiple_outputs,
..._of_multiple_output_view, ..._multi_output_unsafe/safe, test_inplace_multiple_output_
view_of_view: Reverie has no multi-view ops), test_saved_variable_version_counter
(`grad_fn._saved_result`: Reverie's nodes expose no saved values), test_set_data_tensorimpl_
type (sparse tensors), test_inplace_on_view_python (a custom Function marking a view dirty:
Reverie raises, see test_custom_function_dirty_view_raises) and test_detach (ported in
test_port_tensor_api.py). Beyond torch's tests: gradients of every in-place op, first and
second order, against torch, and a manual SGD loop against torch's trajectory.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import pytest

from tests.autograd.parity import as_array, assert_close

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402
from reverie.runtime.tensors import inplace  # noqa: E402


def is_torch(lib: object) -> bool:
    return lib is torch


def tensor(lib: object, array: object, requires_grad: bool = False) -> object:
    """`array` as a float64 (or its own dtype) tensor of `lib`."""
    return lib.tensor(np.asarray(array), requires_grad=requires_grad)


def randn(lib: object, *shape: int, requires_grad: bool = False, seed: int = 0) -> object:
    return tensor(lib, np.random.default_rng(seed).standard_normal(shape), requires_grad)


def ones(lib: object, *shape: int, requires_grad: bool = False) -> object:
    return tensor(lib, np.ones(shape), requires_grad)


def cast(lib: object, t: object, dtype: object) -> object:
    """`t` converted to `dtype` (torch's `.to`, Reverie's `astype`), recorded."""
    return t.to(dtype) if is_torch(lib) else t.astype(dtype)


def gradcheck(lib: object, fn: object, inputs: tuple, second_order: bool = True) -> None:
    assert lib.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)
    if second_order:
        assert lib.autograd.gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------- version counters


def test_inplace(lib):
    x = ones(lib, 5, 5, requires_grad=True)
    y = tensor(lib, np.ones((5, 5)) * 4, requires_grad=True)

    z = x * y
    q = z + y
    w = z * y
    z.add_(2)
    q.backward(ones(lib, 5, 5), retain_graph=True)  # add does not read its inputs
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward(ones(lib, 5, 5))  # mul read z

    z = x * y
    q = z * y
    r = z + y
    w = z.add_(y)
    w.backward(ones(lib, 5, 5), retain_graph=True)  # w is the last expression
    r.backward(ones(lib, 5, 5), retain_graph=True)  # r does not read z
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        q.backward(ones(lib, 5, 5))

    with lib.no_grad():
        x.grad.zero_()
    m = x / 2
    z = m + y / 8
    q = z * y
    r = z + y
    prev_version = z._version
    w = z.exp_()
    assert z._version != prev_version
    r.backward(ones(lib, 5, 5), retain_graph=True)
    assert_close(x.grad, np.ones((5, 5)) / 2)
    w.backward(ones(lib, 5, 5), retain_graph=True)
    assert_close(x.grad, np.full((5, 5), (1 + math.e) / 2))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        q.backward(ones(lib, 5, 5))

    leaf = ones(lib, 5, 5, requires_grad=True)
    x = leaf.clone()
    x.add_(10)
    assert_close(x, np.ones((5, 5)) * 11)
    y = x + 2  # x is still usable
    y.backward(ones(lib, 5, 5))
    assert_close(leaf.grad, np.ones((5, 5)))
    z = x * y
    x.add_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward(ones(lib, 5, 5))


def test_version_counter(lib):
    x = randn(lib, 1, 2)
    x_saved_version = x._version
    x.add_(1).add_(1)  # an in-place op bumps the version
    assert x._version > x_saved_version

    xz = x[:]  # a view shares the version counter
    assert x._version == xz._version
    xz.add_(1)
    assert x._version == xz._version

    x_saved_version = x._version  # `x.data = y` keeps x's version counter
    x.data = randn(lib, 2, 3)
    assert x._version == x_saved_version
    x.add_(1)
    assert x._version > x_saved_version
    assert x._version == xz._version  # still the counter it shares with xz

    xz.add_(1)  # ... so a write to xz bumps x's version too
    assert x._version == xz._version


def test_increment_version(lib):
    increment_version = (torch.autograd.graph.increment_version if is_torch(lib)
                         else inplace.increment_version)
    a = randn(lib, 5, requires_grad=True)
    v = a._version
    increment_version(a)
    assert a._version == v + 1

    a = tensor(lib, np.zeros(5, np.int32))
    v = a._version
    increment_version(a)
    assert a._version == v + 1


def test_no_grad_modifies_version(lib):
    x = randn(lib, 5, requires_grad=True, seed=1)
    y = randn(lib, 5, requires_grad=True, seed=2)
    z = (x * y).sum()
    with lib.no_grad():
        x *= 2
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_no_grad_assignment(lib):
    x = randn(lib, 5, 5, requires_grad=True)
    y = randn(lib, 5, seed=1)
    with lib.no_grad():
        x[0] = y
    assert x.requires_grad
    assert x.grad_fn is None
    assert_close(x[0].detach(), y)


def test_set_data_preserve_pyobj(lib):
    a = randn(lib, 1, 2)
    b = randn(lib, 1, 2, seed=1)
    b_id_saved = id(b)
    b.data = a
    assert b_id_saved == id(b)
    assert_close(b, a)


def test_set_data_self_requires_grad(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    a.data = tensor(lib, 2.0)
    assert_close(a.detach(), 2.0)
    with pytest.raises(RuntimeError):  # an integer tensor cannot require grad
        a.data = tensor(lib, np.int64(3))


def test_data_has_its_own_version_counter(lib):
    """Not a torch test: torch's `.data` shares memory, not the version counter."""
    p = ones(lib, 3, requires_grad=True)
    d = p.data
    d.add_(1)
    assert_close(p.detach(), [2.0, 2.0, 2.0])
    assert (p._version, d._version) == (0, 1)
    assert d._base is None and not d.requires_grad
    with pytest.raises(TypeError):
        p.data = None


# ---------------------------------------------------------------- setitem


def _test_setitem(lib, size, index):
    x = ones(lib, *size, requires_grad=True)
    y = x + 2
    y_version = y._version
    y[index] = 2
    assert y._version != y_version
    y.backward(ones(lib, *size))
    expected_grad = np.ones(size)
    expected_grad[as_index(index)] = 0
    assert_close(x.grad, expected_grad)


def _test_setitem_tensor(lib, size, index):
    x = ones(lib, *size, requires_grad=True)
    y = x + 2
    y_version = y._version
    value = tensor(lib, np.full(np.ones(size)[as_index(index)].shape, 7.0), requires_grad=True)
    y[index] = value
    assert y._version != y_version
    y.backward(ones(lib, *size))
    expected_grad_input = np.ones(size)
    expected_grad_input[as_index(index)] = 0
    assert_close(x.grad, expected_grad_input)
    assert_close(value.grad, np.ones(value.shape))

    x = randn(lib, 4, requires_grad=True)  # x broadcasts as y[1]
    y = tensor(lib, np.zeros((2, 3, 4)))
    y[1] = x
    y.backward(randn(lib, 2, 3, 4, seed=1))
    assert tuple(x.grad.shape) == tuple(x.shape)


def as_index(index: object) -> object:
    """A torch/Reverie index as a NumPy one (tensors as arrays)."""
    if isinstance(index, tuple):
        return tuple(as_index(i) for i in index)
    return as_array(index) if hasattr(index, "shape") else index


def test_setitem(lib):
    long = lib.int64
    _test_setitem(lib, (5, 5), 1)
    _test_setitem(lib, (5,), 1)
    _test_setitem(lib, (1,), 0)
    _test_setitem(lib, (10,), ([0, 4, 2],))
    _test_setitem(lib, (5, 5), ([0, 4], [2, 2]))
    _test_setitem(lib, (5, 5, 5), (slice(None), slice(None), [1, 3]))
    _test_setitem(lib, (5, 5, 5), (slice(None), [1, 3], slice(None)))
    _test_setitem(lib, (5, 5, 5), ([1, 3], slice(None), slice(None)))
    _test_setitem(lib, (5, 5, 5), (slice(None), [2, 4], [1, 3]))
    _test_setitem(lib, (5, 5, 5), ([1, 3], [2, 4], slice(None)))
    _test_setitem_tensor(lib, (5, 5), 3)
    _test_setitem_tensor(lib, (5, 5), ([0, 1], [1, 0]))
    _test_setitem_tensor(lib, (5,), 3)
    _test_setitem_tensor(lib, (5,), lib.tensor([3], dtype=long).sum())
    _test_setitem_tensor(lib, (5,), ([0, 1, 2, 3],))
    _test_setitem_tensor(lib, (5, 5, 5), (slice(None), slice(None), [1, 3]))
    _test_setitem_tensor(lib, (5, 5, 5), (slice(None), [1, 3], slice(None)))
    _test_setitem_tensor(lib, (5, 5, 5), ([1, 3], slice(None), slice(None)))
    _test_setitem_tensor(lib, (5, 5, 5), (slice(None), [2, 4], [1, 3]))
    _test_setitem_tensor(lib, (5, 5, 5), ([1, 3], [2, 4], slice(None)))
    _test_setitem_tensor(lib, (5, 5, 5), (lib.tensor([1, 3], dtype=long), [2, 4], slice(None)))


def test_setitem_mask(lib):
    mask = lib.tensor(np.random.default_rng(3).random((5, 5)) < 0.5)
    _test_setitem(lib, (5, 5), mask)
    _test_setitem(lib, (5,), mask[0])
    _test_setitem(lib, (1,), mask[0, 0:1])
    _test_setitem_tensor(lib, (5, 5), mask)
    _test_setitem_tensor(lib, (5,), mask[0])


def test_leaf_assignment(lib):
    x = randn(lib, 5, 5)
    y = randn(lib, 5, requires_grad=True, seed=1)
    z = randn(lib, 5, requires_grad=True, seed=2)
    x[0] = y
    x[1] = 2 * z
    assert x.requires_grad
    assert x.grad_fn is not None
    x.sum().backward()
    assert_close(y.grad, np.ones(5))
    assert_close(z.grad, np.ones(5) * 2)


def test_index_backward_does_not_save_tensor(lib):
    # torch's issue 24853: the read of tensor[a != 0] must not save `tensor`, which the
    # same line then writes
    a = lib.tensor([1.0, 0.0, 0.0])
    b = tensor(lib, np.zeros(3), requires_grad=True)
    t = b + 0
    t[a != 0] = t[a != 0]
    t.backward(tensor(lib, np.zeros(3)))


def test_fill(lib):
    root = randn(lib, 4, 5, requires_grad=True)

    def func(root):
        x = root.clone()
        x.fill_(2)
        return x

    gradcheck(lib, func, (root,))


def test_copy_(lib):
    x = randn(lib, 10, requires_grad=True)
    for dt in (lib.float32, lib.float64):
        y = lib.tensor(np.zeros(10), dtype=dt)
        y.copy_(x)
        assert y.requires_grad
        z = cast(lib, x, dt)
        assert z.requires_grad


# ---------------------------------------------------------------- errors


def test_inplace_on_leaf_errors(lib):
    x = ones(lib, 2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x.add_(x)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x.view(4).add_(1)
    with lib.no_grad():  # allowed without grad mode: p -= lr * p.grad
        x.add_(1)
        x[0].mul_(2)
    assert_close(x.detach(), [[4.0, 4.0], [2.0, 2.0]])
    assert x.is_leaf and x.requires_grad and x._version == 2


def test_inplace_shape_and_dtype_errors(lib):
    a = ones(lib, 3)
    with pytest.raises(RuntimeError):  # does not broadcast
        a.add_(ones(lib, 2))
    with pytest.raises(RuntimeError):  # broadcasts to a larger shape than a's
        a.add_(ones(lib, 2, 3))
    with pytest.raises(RuntimeError):
        a[0:2] = ones(lib, 3)
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension"):
        a.fill_(ones(lib, 2))
    i = lib.tensor(np.ones(3, np.int64))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        i.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        i.exp_()
    f = lib.tensor(np.ones(3, np.float32))
    f.add_(ones(lib, 3))  # float64 into float32: a same-kind cast, allowed
    assert f.dtype == lib.float32
    assert_close(f, [2.0, 2.0, 2.0])


def test_inplace_on_inference_tensor_outside_inference_mode(lib):
    with lib.inference_mode():
        t = ones(lib, 3)
        t.add_(1)  # allowed inside
    for write in (lambda: t.add_(1), lambda: t.__setitem__(0, 2.0), lambda: t.mul_(2),
                  lambda: t.zero_(), lambda: t.clamp_(0, 1), lambda: t.exp_()):
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
            write()
    normal = ones(lib, 2)
    with lib.inference_mode():
        normal.add_(1)  # a normal tensor may be written in inference mode
    assert normal._version == 1


def test_detach_base(lib):
    """detaching base does not detach view"""
    x = randn(lib, 10, 10, requires_grad=True)
    view = x[1:5]
    x.detach_()
    assert not x.requires_grad
    assert view.requires_grad
    assert view.grad_fn is not None
    assert view._base is x


def test_detach_view_raises(lib):
    for base in (randn(lib, 4, requires_grad=True), randn(lib, 4)):
        with pytest.raises(RuntimeError, match="Can't detach views in-place"):
            base[1:3].detach_()


def test_view_needs_compatible_layout(lib):
    m = randn(lib, 2, 3)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        m.T.view(6)
    assert m.T.reshape(6)._base is None  # reshape copies instead
    assert_close(m.T.reshape(6), as_array(m).T.reshape(6))


# ---------------------------------------------------------------- views


def test_views_share_memory_and_version(lib):
    m = tensor(lib, np.arange(6.0).reshape(2, 3))
    views = [m[1], m[:, 1:], m[1, 2], m[None], m[...], m.T, m.view(6), m.reshape(3, 2),
             m[1][1:], m.T.T, m.view_as(m.T)]
    for v in views:
        assert v._base is m
    assert m[[1]]._base is None  # advanced indexing copies
    assert m.detach()._base is None  # shares memory and version, not a view
    m[1, 2].fill_(50)
    m.T[0].mul_(10)
    assert_close(m, [[0.0, 1.0, 2.0], [30.0, 4.0, 50.0]])
    assert_close(views[0], [30.0, 4.0, 50.0])
    assert all(v._version == m._version == 2 for v in views)
    views[6][1] = -1.0
    assert_close(m[0, 1], -1.0)


def test_views_share_memory_with_grad(lib):
    x = randn(lib, 3, 4, requires_grad=True)
    b = x.clone()
    t, row, flat = b.T, b[1], b.view(12)
    assert all(v._base is b for v in (t, row, flat))
    assert t.grad_fn is not None and row.requires_grad
    t[0, 1] = 7.0  # b[1, 0]
    assert_close(row[0], 7.0)
    flat[5:7].mul_(0.0)  # b[1, 1:3]
    assert_close(row, np.array([7.0, 0.0, 0.0, as_array(b)[1, 3]]))
    (b * b).sum().backward()
    expected = 2 * as_array(x)
    expected[1, :3] = 0
    assert_close(x.grad, expected)


def test_inplace_on_view_backprop_base(lib):
    root = randn(lib, 2, 2, requires_grad=True)
    x = root.clone()
    v1 = x[0:1]
    v1.mul_(2)
    x.sum().backward()
    assert_close(root.grad, [[2, 2], [1, 1]])


def test_inplace_on_view_backprop_view_of_view(lib):
    root = randn(lib, 2, 2, requires_grad=True)
    x = root.clone()
    v1 = x[0:1]
    v2 = x[0:1]
    v1.mul_(2)
    v2.sum().backward()
    assert_close(root.grad, [[2, 2], [0, 0]])


def test_inplace_on_view_of_view(lib):
    root = randn(lib, 2, 2, requires_grad=True)
    x = root.clone()
    v1 = x[0:1]
    v2 = v1[:, 1:2]
    v2.mul_(2)
    x.sum().backward()
    assert_close(root.grad, [[1, 2], [1, 1]])


def test_inplace_on_view_then_no_grad(lib):
    a = ones(lib, 3, 1, requires_grad=True)
    b = a * 2
    c = b.view_as(b)
    c[0][0] = 3
    with lib.no_grad():  # reading the graph with grad mode off
        assert c.grad_fn is not None
    c.sum().backward()
    assert_close(a.grad, [[0.0], [2.0], [2.0]])


def test_inplace_on_view_gradcheck(lib):
    a = randn(lib, 4, 4, requires_grad=True)
    b = randn(lib, 2, 2, requires_grad=True, seed=1)

    def func(root, b):
        x = root.clone()
        x[1:3, 2:4].mul_(b)
        x[1:3, 0:2].mul_(b)
        return x

    gradcheck(lib, func, (a, b))


def test_inplace_on_view_makes_base_require_grad(lib):
    a = randn(lib, 4, 4)
    b = randn(lib, 4, 2, requires_grad=True, seed=1)

    def func(root, b):
        x = root.clone()
        x[:, 2:4].mul_(b)
        return x

    x = a.clone()  # (torch asserts inside func: rv.gradcheck runs it on plain copies too)
    assert not x.requires_grad
    x[:, 2:4].mul_(b)
    assert x.requires_grad
    gradcheck(lib, func, (a, b))


def test_inplace_on_view_backprop_view(lib):
    a = lib.tensor([2.0, 5.0])
    b = lib.tensor([3.0], requires_grad=True)
    res = a[1:2].mul_(b)
    res.sum().backward()
    assert_close(b.grad, [5.0])
    assert a.grad is None


def test_inplace_on_view_modify_base(lib):
    # an in-place op on a base that makes it require grad makes its views require grad
    r = ones(lib, 1, requires_grad=True)

    def fn(r, check=False):
        x = ones(lib, 5)
        v = x[1]
        assert not check or not v.requires_grad and v.grad_fn is None
        x.add_(r)  # v now depends on r
        assert not check or v.requires_grad
        return v

    fn(r, check=True)  # (torch checks inside gradcheck's calls: see above)
    gradcheck(lib, fn, (r,))


def test_inplace_on_view_non_contig(lib):
    root = ones(lib, 2, 3, 2)[:, :, 1].T.requires_grad_(True)  # select(2, 1).t()
    x = root.clone()
    v1 = x[0:1]
    v2 = v1[:, 1:2]
    v2.mul_(2)
    x.sum().backward()
    assert_close(root.grad, [[1, 2], [1, 1], [1, 1]])


def test_inplace_view_saved_output(lib):
    # an in-place op on a view that saves its output made a reference cycle once
    dealloc = [0]

    class IncrementOnDelete:
        def __del__(self):
            dealloc[0] += 1

    def run():
        root = randn(lib, 3, 3, requires_grad=True)
        copy = root.clone()
        copy.grad_fn.metadata["watch"] = IncrementOnDelete()
        view = copy.view(9)
        view.relu_()

    run()
    assert dealloc[0] == 1


def test_no_grad_view_cannot_follow(lib):
    """Not a torch test: torch's errors for views taken with grad mode off."""
    w = randn(lib, 2, requires_grad=True)
    a = tensor(lib, np.zeros(3))
    with lib.no_grad():
        v = a[:2]
    with pytest.raises(RuntimeError, match="no_grad mode and is being modified"):
        v.copy_(w)
    x = randn(lib, 3, requires_grad=True)
    b = x * 1
    with lib.no_grad():
        v = b[:2]
    assert v.requires_grad and v.grad_fn is None  # torch's: a leaf that requires grad
    b.mul_(2)
    with pytest.raises(RuntimeError, match="no_grad mode and its base"):
        (v * 1).sum()
    with lib.no_grad():
        v = b[:2]
        v.mul_(2)  # recorded nowhere: allowed, but v is unusable in the graph after it
    with pytest.raises(RuntimeError, match="no_grad mode and its base"):
        (v * 1).sum()


def test_view_follows_base_written_without_grad(lib):
    x = randn(lib, 3, requires_grad=True)
    b = x * 1
    v = b[:2]
    with lib.no_grad():
        b.mul_(2)  # values change, histories do not
    (v * 1).sum().backward()
    assert_close(x.grad, [1.0, 1.0, 0.0])
    assert_close(v, 2 * as_array(x)[:2])


def test_view_follows_recorded_write_to_base(lib):
    x = randn(lib, 3, requires_grad=True)
    b = x.clone()
    v = b[:2]
    b.mul_(3)
    v.sum().backward()
    assert_close(x.grad, [3.0, 3.0, 0.0])


def test_inplace_not_requires_grad(lib):
    # the sanity check of torch's test_inplace_not_requires_grad: a view of a tensor that
    # does not require grad, written with one that does
    a = randn(lib, 1, 2)
    b = randn(lib, 1, requires_grad=True, seed=1)
    a[:, 0].copy_(b)
    assert a.requires_grad
    a.sum().backward()
    assert_close(b.grad, [1.0])


def test_custom_function_view_written_in_place_raises(lib):
    # the first part of torch's test_inplace_not_requires_grad

    class MyFn(lib.autograd.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.view_as(inp)

        @staticmethod
        def backward(ctx, grad):
            return grad

    a = randn(lib, 1, 2)
    b = randn(lib, 1, requires_grad=True, seed=1)
    view_a = MyFn.apply(a)
    with pytest.raises(RuntimeError, match="custom .*Function"):
        view_a += b


def test_custom_function_dirty_view_raises(lib):
    """torch's test_inplace_on_view_python rebases the base of a view a custom Function
    marks dirty; Reverie refuses (its base's history would not follow)."""
    class PyAdd(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_dirty(x)
            x.add_(y)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    x = randn(lib, 4, 4, requires_grad=True).clone()
    b = randn(lib, 2, 2, requires_grad=True, seed=1)
    if is_torch(lib):
        PyAdd.apply(x[1:3, 2:4], b)
    else:
        with pytest.raises(RuntimeError, match="view"):
            PyAdd.apply(x[1:3, 2:4], b)


# ---------------------------------------------------------------- gradients vs torch


def _programs() -> dict[str, object]:
    """In-place programs of (lib, x: (4, 3), w: (3,)) -> a tensor, each differentiable."""
    def add_(lib, x, w):
        y = x.clone()
        y.add_(w)
        return y * y

    def sub_alpha(lib, x, w):
        y = x * 1
        y.sub_(w, alpha=2)
        return y * x

    def mul_div(lib, x, w):
        y = x.clone()
        y.mul_(w)
        y.div_(w * w + 1)
        y.mul_(x)
        return y

    def pow_(lib, x, w):
        y = x * 0.5 + 2
        y.pow_(w)
        z = x.clone()
        z.pow_(3)
        return y + z

    def clamp_(lib, x, w):
        y = x * w
        y.clamp_(-0.5, 0.7)
        return y * x

    def setitem_slice_int(lib, x, w):
        y = x.clone()
        y[1:3] = w * 2
        y[0] = w.exp()
        y[3, 1] = w[0] * w[2]
        return y * x

    def setitem_arrays(lib, x, w):
        y = x.clone()
        y[lib.tensor([0, 2])] = w
        y[(lib.tensor([1, 3]), lib.tensor([0, 2]))] = w[1:]
        return y * y

    def setitem_mask(lib, x, w):
        y = x * x
        mask = lib.tensor(np.array([[True, False, True], [False, False, True],
                                    [True, True, False], [False, True, False]]))
        y[mask] = w.sum()
        return y * x

    def zero_fill_copy(lib, x, w):
        y = x.clone()
        y[1].zero_()
        y[:, 0].fill_(w[1])
        u = x.clone()
        u[2:].copy_(w)  # broadcast
        u.zero_()[1:3].copy_(y[1:3] * w)
        return y * u

    def views(lib, x, w):
        y = x.clone()
        y.T[0].mul_(w[0])
        y.view(12)[3:6].add_(w)
        y[1:3][0].div_(w[2] + 2)
        y[2, ...].sub_(w * y[3].clone())
        return y * x

    def unary_(lib, x, w):
        y = x * w
        y.tanh_()  # (torch saves its output: the last write to y)
        u = x.clone()
        u[0].sin_()
        u.T[1].exp_()
        return y * u

    def augmented(lib, x, w):
        y = x * 1
        y += w
        y *= x
        y -= 1
        y /= w * w + 1
        y **= 2
        return y

    return {f.__name__: f for f in (add_, sub_alpha, mul_div, pow_, clamp_, setitem_slice_int,
                                    setitem_arrays, setitem_mask, zero_fill_copy, views,
                                    unary_, augmented)}


PROGRAMS = _programs()
X = np.random.default_rng(7).uniform(-1.0, 1.0, (4, 3))
W = np.random.default_rng(8).uniform(0.2, 1.2, 3)


def _derivatives(lib: object, program: object, order: int = 2) -> list[np.ndarray]:
    """The program's value, first derivatives and (order 2) second derivatives."""
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    out = program(lib, x, w)
    shape = tuple(out.shape)
    weights = lib.tensor(np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape))
    g_x, g_w = lib.autograd.grad((out * weights).sum(), (x, w), create_graph=order == 2)
    if order == 1:
        return [as_array(v) for v in (out, g_x, g_w)]
    gg_x, gg_w = lib.autograd.grad((g_x * g_x).sum() + (g_w * x[0]).sum(), (x, w))
    return [as_array(v) for v in (out, g_x, g_w, gg_x, gg_w)]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inplace_gradients_match_torch(name):
    expected = _derivatives(torch, PROGRAMS[name])
    actual = _derivatives(ReverieLibForGradients(), PROGRAMS[name])
    for got, want in zip(actual, expected, strict=True):
        assert_close(got, want, rtol=1e-10, atol=1e-12)


def copy_with_dtype_conversion(lib, x, w):
    z = lib.tensor(np.zeros((4, 3), np.float32))
    z.copy_(x * w)  # float64 into float32
    u = x.clone()
    u[2:].copy_(cast(lib, w, lib.float32))  # float32 into float64, broadcast
    return cast(lib, z, lib.float64) * u


@pytest.mark.parametrize("order", [1, 2])
def test_copy_with_dtype_conversion_matches_torch(order):
    expected = _derivatives(torch, copy_with_dtype_conversion, order)
    actual = _derivatives(ReverieLibForGradients(), copy_with_dtype_conversion, order)
    for got, want in zip(actual, expected, strict=True):
        assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inplace_gradcheck(lib, name):
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    gradcheck(lib, lambda x, w: PROGRAMS[name](lib, x, w), (x, w))


class ReverieLibForGradients:
    """The few torch names the gradient programs use, served by Reverie."""

    float32, float64 = np.float32, np.float64
    tensor = staticmethod(rv.tensor)
    autograd = rv.autograd


# ---------------------------------------------------------------- SGD under no_grad


def _sgd_losses(lib: object, steps: int = 6) -> tuple[list[float], object, int]:
    rng = np.random.default_rng(11)
    inputs = lib.tensor(rng.standard_normal((8, 3)))
    target = lib.tensor(rng.standard_normal((8, 2)))
    w = lib.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    original = w
    losses = []
    for _ in range(steps):
        loss = ((inputs @ w - target) ** 2).mean()
        loss.backward()
        losses.append(float(loss.detach()))
        with lib.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
        assert w is original and w.is_leaf and w.requires_grad
    return losses, w, w._version


def test_sgd_step_under_no_grad_trains(lib):
    losses, w, version = _sgd_losses(lib)
    assert version == len(losses)  # one in-place write per step
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False))
    expected, w_torch, _ = _sgd_losses(torch)
    np.testing.assert_allclose(losses, expected, rtol=1e-12, atol=1e-12)
    assert_close(w, w_torch, rtol=1e-12, atol=1e-12)


def test_inplace_view_weakref_free(lib):
    """Not a torch test: a view dies with its last reference (the version counter keeps
    views weakly)."""
    b = randn(lib, 4)
    v = b[1:3]
    ref = weakref.ref(v)
    del v
    assert ref() is None
