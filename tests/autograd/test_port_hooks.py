"""Ports of PyTorch's hook tests (`test/test_autograd.py`; issue 32 item 3).

Each test runs on torch (proving the port) and on Reverie. `Tensor.register_hook`,
`register_post_accumulate_grad_hook`, `retain_grad`, `grad_fn.register_hook` /
`register_prehook` (also on the `AccumulateGrad` node found through `next_functions`) and
their handles, in torch's order ("Backward Hooks execution" in torch's docs): a tensor's
hooks in registration order, then `retain_grad`'s store, then the node's pre-hooks, the
node, its hooks; for a leaf, its tensor hooks, the AccumulateGrad pre-hooks, the
accumulation, the post-accumulate hooks, the AccumulateGrad hooks.

Adapted where torch's test needs what Reverie lacks: `torch.var_mean` (a node with two
outputs) is a compiled kernel with two results, `chunk`/`unbind` are slices, BatchNorm a
recorded kernel call. Tests named `test_hook_*` beyond torch's pin behaviour torch 2.13
shows (run here on both libraries) that no torch test covers: errors of hooks that return
the wrong thing, create_graph, removal while running, rv.grad with non-leaf inputs.
Left out: `test_post_accumulate_grad_hook_e2e` (torch.nn and torch.optim),
`test_node_post_hook_registered_during_unpack_hook` (saved-tensor hooks, which Reverie
lacks), `test_retain_grad_inplace_over_view` and `test_tensor_hooks_inplace_over_view`
(Reverie refuses an in-place write to a view recorded in the graph),
`test_grad_nonleaf_register_hook` (unbind is one node with five outputs in torch, five
index nodes in Reverie: the hook on output 0 sees None there and nothing here),
`test_retain_grad_cycle` (torch's `_WeakTensorRef`; Reverie's node keeps its argument
tensors until freed), `test_will_engine_execute_node` (an engine internal).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tests.autograd.parity import as_array, assert_close

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402

RNG = np.random.default_rng(3)

VAR_MEAN = """
fn var_mean(x: f64[N, D]) -> (f64[D], f64[D]) {
    let mu = mean(x, axis=0);
    return (sum((x - mu) ** 2, axis=0) / (N - 1), mu);
}
"""
_MODULE: list[object] = []


def var_mean(lib: object, x: object) -> tuple[object, object]:
    """torch.var_mean(x, dim=0): one node with two outputs (a compiled kernel in Reverie)."""
    if lib is torch:
        return torch.var_mean(x, dim=0)
    if not _MODULE:
        _MODULE.append(rv.compile(VAR_MEAN))
    return _MODULE[0]["var_mean"](x)


def tensor(lib: object, values: object, requires_grad: bool = False) -> object:
    return lib.tensor(np.asarray(values, np.float64), dtype=lib.float64,
                      requires_grad=requires_grad)


def rand(lib: object, shape: tuple[int, ...], requires_grad: bool = False) -> object:
    return tensor(lib, RNG.random(shape), requires_grad)


def ones(lib: object, shape: tuple[int, ...], requires_grad: bool = False) -> object:
    return tensor(lib, np.ones(shape), requires_grad)


def function(lib: object, name: str, forward: object, backward: object) -> object:
    """A `lib.autograd.Function` subclass with these static forward and backward."""
    return type(name, (lib.autograd.Function,), {"forward": staticmethod(forward),
                                                 "backward": staticmethod(backward)})


def mul2(lib: object, use_custom_function: bool) -> object:
    """torch's `_get_mul2`: x * 2, as a custom Function or a recorded op."""
    if use_custom_function:
        return function(lib, "Mul2", lambda ctx, x: x * 2, lambda ctx, g: g * 2).apply
    return lambda x: x * 2


def double_mul(lib: object) -> object:
    """The custom Function of torch's in-place hook tests: (x * 2, x * 3)."""
    return function(lib, "DoubleMul", lambda ctx, x: (x * 2, x * 3),
                    lambda ctx, g1, g2: g1 * 2 + g2 * 3).apply


def no_grad_sub(tensor_: object, other: object) -> None:
    with torch.no_grad() if isinstance(tensor_, torch.Tensor) else rv.no_grad():
        tensor_.sub_(other)


def test_hooks(lib):
    x = ones(lib, (5, 5), requires_grad=True)
    y = ones(lib, (5, 5)) * 4
    y.requires_grad_(True)
    counter = [0]

    def bw_hook(inc, grad):
        assert isinstance(grad, lib.Tensor)
        counter[0] += inc

    z = x ** 2 + x * 2 + x * y + y
    x.register_hook(lambda *args: bw_hook(0, *args))
    test = z.register_hook(lambda *args: bw_hook(1, *args))
    z.backward(ones(lib, (5, 5)), retain_graph=True)
    assert counter[0] == 1

    test2 = z.register_hook(lambda *args: bw_hook(2, *args))
    z.backward(ones(lib, (5, 5)), retain_graph=True)
    assert counter[0] == 4

    test2.remove()
    z.backward(ones(lib, (5, 5)), retain_graph=True)
    assert counter[0] == 5

    def bw_hook_modify(grad):
        return grad * 2

    test.remove()
    z.register_hook(bw_hook_modify)
    with lib.no_grad():
        y.grad.zero_()
    z.backward(ones(lib, (5, 5)), retain_graph=True)
    assert_close(y.grad, (as_array(x) + 1) * 2)

    y.register_hook(bw_hook_modify)
    with lib.no_grad():
        y.grad.zero_()
    z.backward(ones(lib, (5, 5)))
    assert_close(y.grad, (as_array(x) + 1) * 4)


@pytest.mark.parametrize("use_custom_function", [True, False])
def test_grad_fn_prehooks(lib, use_custom_function):
    double = mul2(lib, use_custom_function)
    a = tensor(lib, [1.0], requires_grad=True)
    b = double(a)
    post_counter = [0]
    pre_counter = [0]

    def posthook(grad_input, grad_output):
        assert pre_counter[0] == 3
        assert_close(grad_output[0], np.ones(1) * 8)
        assert_close(grad_input[0], np.ones(1) * 16)
        post_counter[0] += 1
        return grad_input

    def prehook(grad_output):
        pre_counter[0] += 1
        return (grad_output[0] * 2,)

    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: None)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: x)
    b.grad_fn.register_prehook(lambda x: None)
    b.sum().backward()
    assert post_counter[0] == 2
    assert pre_counter[0] == 3

    a = rand(lib, (3, 3), requires_grad=True)
    b = double(a)

    def prehook_none(grad_output):
        pre_counter[0] += 1

    b.grad_fn.register_prehook(prehook_none)
    b.sum().backward()
    assert pre_counter[0] == 4
    assert_close(a.grad, np.ones((3, 3)) * 2)


def test_grad_fn_prehooks_multiple_outputs(lib):
    b = rand(lib, (3, 3), requires_grad=True)
    var, mean = var_mean(lib, b)
    (var + mean).sum().backward()

    a = b.detach().requires_grad_()
    counter = [0]

    def prehook(grad_output):
        gvar, gmean = grad_output
        counter[0] += 1
        return (gvar * 2, gmean * 2)

    var, mean = var_mean(lib, a)
    mean.grad_fn.register_prehook(prehook)
    (var + mean).sum().backward()
    assert counter[0] == 1
    assert_close(a.grad, as_array(b.grad) * 2)


def test_grad_fn_prehooks_multiple_outputs_custom_function(lib):
    # the second half of torch's test_grad_fn_prehooks_multiple_outputs
    DoubleMul2 = function(  # noqa: N806 -- torch's name
        lib, "DoubleMul2", lambda ctx, x, a, y: (ctx.__setattr__("a", a) or a * x * 2, a,
                                                 a * y * 2),
        lambda ctx, g1, _a, g2: (ctx.a * g1 * 2, None, ctx.a * g2 * 2))
    counter = [0]

    def prehook3(grad_output):
        g1, ga, g2 = grad_output
        assert ga is None
        counter[0] += 1
        return (g1 * 2, None, g2 * 2)

    a = rand(lib, (3, 3), requires_grad=True)
    b = rand(lib, (3, 3), requires_grad=True)
    k = 3
    c, _, d = DoubleMul2.apply(a, k, b)
    c.grad_fn.register_prehook(prehook3)
    (c + d).sum().backward()
    assert counter[0] == 1
    assert_close(a.grad, np.full((3, 3), 4.0 * k))
    assert_close(b.grad, np.full((3, 3), 4.0 * k))


@pytest.mark.parametrize("use_custom_function", [True, False])
def test_grad_fn_prehooks_remove_hooks(lib, use_custom_function):
    double = mul2(lib, use_custom_function)
    a = rand(lib, (3, 3), requires_grad=True)
    b = double(a)
    counter = [0]

    def prehook(grad_output):
        counter[0] += 1

    handle = b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    handle.remove()
    b.sum().backward()
    assert_close(a.grad, np.ones((3, 3)) * 2)
    assert counter[0] == 1

    a = rand(lib, (3, 3), requires_grad=True)
    b = double(a)
    counter = [0]

    def prehook1(grad_output):
        handle2.remove()
        handle3.remove()  # removing a removed hook is fine

    def prehook2(grad_output):
        counter[0] += 1

    b.grad_fn.register_prehook(prehook1)
    handle2 = b.grad_fn.register_prehook(prehook2)
    handle3 = b.grad_fn.register_prehook(prehook2)
    handle3.remove()
    b.sum().backward()
    assert_close(a.grad, np.ones((3, 3)) * 2)
    assert counter[0] == 1  # removed while running: it still runs in this pass


def test_hooks_cpp(lib):
    # torch's test hooks a BatchNorm1d (a C++ node); here any recorded op in eval form
    counter = [0]

    def bw_hook(grad):
        counter[0] += 1
        return grad * 2

    x = ones(lib, (5, 5), requires_grad=True)
    z = (x - 0.5) / 2.0
    z.register_hook(bw_hook)
    z.sum().backward()
    assert counter[0] == 1
    assert_close(x.grad, np.ones((5, 5)))


def test_hook_none(lib):
    def forward(ctx, x, y):
        assert ctx.needs_input_grad[0]
        assert not ctx.needs_input_grad[1]
        return x, y

    NoneGradientFunction = function(  # noqa: N806 -- torch's name
        lib, "NoneGradientFunction", forward, lambda ctx, grad_x, grad_y: (grad_x, None))
    was_called = [False]

    def hook(grad):
        assert grad is not None
        was_called[0] = True

    x = rand(lib, (5, 5), requires_grad=True)
    y = rand(lib, (5, 5))
    rx, ry = NoneGradientFunction.apply(x, y)
    rx.register_hook(hook)
    ry.register_hook(hook)
    sum(rx, ry).sum().backward()
    assert was_called[0]


def test_hook_with_no_name(lib):
    class MyHookClass:
        def __call__(self, grad):
            return grad.clone()

    x = rand(lib, (5,), requires_grad=True).clone()
    x.register_hook(MyHookClass())
    x.sum().backward()


def test_retain_grad(lib):
    input_ = rand(lib, (1, 3), requires_grad=True)
    h1 = input_ * 3
    out = (h1 * h1).sum()
    h1.retain_grad()
    h1.retain_grad()  # more than once is fine
    out.backward(retain_graph=True)
    assert_close(h1.grad, as_array(h1) * 2)
    out.backward(retain_graph=True)  # accumulated
    assert_close(h1.grad, as_array(h1) * 4)

    with lib.no_grad():
        input_.grad.zero_()
    input_.retain_grad()  # a no-op on leaves
    input_.retain_grad()
    out.backward()
    assert_close(input_.grad, as_array(input_) * 18)


def test_retain_grad_inplace(lib):
    a = tensor(lib, [1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.sum().backward()
    assert_close(a.grad, [1.0])

    a = tensor(lib, [1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.mul_(2)  # several in-place writes are fine
    a.sum().backward()
    assert_close(a.grad, [1.0])
    assert a.retains_grad


def test_retains_grad_inplace_multiple_outputs(lib):
    for fn in (double_mul(lib), lambda x: var_mean(lib, x)):
        b = rand(lib, (3, 3), requires_grad=True)
        var, mean = fn(b)
        var.retain_grad()
        mean.retain_grad()
        var.mul_(2)
        (var + mean).sum().backward()
        gvar, gmean = var.grad, mean.grad

        a = b.detach().requires_grad_(True)
        var, mean = fn(a)
        var.mul_(2)
        out = (var + mean).sum()
        gvar_expected, gmean_expected = lib.autograd.grad(out, inputs=(var, mean))
        assert_close(gvar, gvar_expected)
        assert_close(gmean, gmean_expected)


def test_tensor_hooks_inplace(lib):
    count1, count2 = [0], [0]

    def fn1(grad):
        count1[0] += 1
        assert_close(grad, [4.0])  # x2 from mul, x2 from fn2
        return grad * 2

    def fn2(grad):
        count2[0] += 1
        assert_close(grad, [1.0])
        return grad * 2

    a = tensor(lib, [1.0], requires_grad=True)
    b = a.clone()
    b.register_hook(fn1)
    b.mul_(2)
    b.register_hook(fn2)
    b.sum().backward()
    assert count1[0] == 1
    assert count2[0] == 1
    assert_close(a.grad, [8.0])

    count3 = [0]

    def fn3(grad):
        count3[0] += 1
        assert_close(grad, [4.0])
        return grad * 2

    a = tensor(lib, [1.0], requires_grad=True)
    b = a.clone()
    b.register_hook(fn3)
    b.mul_(2)
    b.mul_(2)
    b.sum().backward()
    assert count3[0] == 1
    assert_close(a.grad, [8.0])


@pytest.mark.parametrize("multi_output", ["custom_function", "var_mean"])
def test_tensor_hooks_inplace_multiple_outputs(lib, multi_output):
    fn = double_mul(lib) if multi_output == "custom_function" else (
        lambda x: var_mean(lib, x))
    counts = [0, 0, 0]
    b = rand(lib, (3, 3), requires_grad=True)
    out1, out2 = fn(b)

    def fn0(grad):
        counts[0] += 1
        assert_close(grad, np.ones(out1.shape) * 2)

    def fn1(grad):
        counts[1] += 1
        assert_close(grad, np.ones(out1.shape) * 3)

    def fn2(grad):
        counts[2] += 1
        assert_close(grad, np.ones(out1.shape))

    h1 = out1.register_hook(fn0)
    h2 = out2.register_hook(fn1)
    out1.mul_(2)
    h3 = out1.register_hook(fn2)  # on out1's new version
    (out1 + out2 * 3).sum().backward()
    assert counts == [1, 1, 1]
    h1.remove()
    h2.remove()
    h3.remove()


def test_grad_nonleaf_many_outputs(lib):
    x = rand(lib, (4, 2), requires_grad=True)
    a, b = x[:2], x[2:]  # torch's x.chunk(2)
    hook_called = [False]

    def hook(*grads):
        hook_called[0] = True

    x.register_hook(hook)
    go = rand(lib, (2, 2))
    grad_a, grad_b = lib.autograd.grad((a + 2 * b), [a, b], grad_outputs=go,
                                       create_graph=True)
    assert_close(grad_a, go)
    assert_close(grad_b, as_array(go) * 2)
    assert not hook_called[0]
    assert x.grad is None


def test_post_accumulate_grad_hook_on_non_leaf(lib):
    leaf = rand(lib, (3,), requires_grad=True)
    non_leaf = 2.0 * leaf
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered "
                                           "on non-leaf tensors"):
        non_leaf.register_post_accumulate_grad_hook(lambda tensor: tensor.sub_(1.0))


def test_post_accumulate_grad_hook_multiple_hooks(lib):
    def hook1(tensor_):
        tensor_.sub_(tensor_.grad)

    def hook2(tensor_):
        tensor_.mul_(4.0)

    tensor_ = rand(lib, (3,), requires_grad=True)
    tensor_ref = as_array(tensor_).copy()
    tensor_.register_post_accumulate_grad_hook(hook1)
    tensor_.register_post_accumulate_grad_hook(hook2)
    tensor_.sum().backward()
    assert_close(tensor_, 4.0 * (tensor_ref - 1.0))  # both, in order


def test_post_accumulate_grad_hook_multiple_tensors(lib):
    def hook(tensor_):
        tensor_.sub_(tensor_.grad)

    tensor1 = rand(lib, (3,), requires_grad=True)
    tensor1_ref = as_array(tensor1).copy()
    tensor2 = rand(lib, (5,), requires_grad=True)
    tensor2_ref = as_array(tensor2).copy()
    tensor1.register_post_accumulate_grad_hook(hook)
    tensor2.register_post_accumulate_grad_hook(hook)
    tensor1.sum().backward()
    tensor2.sum().backward()
    assert_close(tensor1, tensor1_ref - 1.0)
    assert_close(tensor2, tensor2_ref - 1.0)


def test_post_accumulate_grad_hook_returns_not_None(lib):  # noqa: N802 -- torch's name
    tensor_ = rand(lib, (2, 3), requires_grad=True)
    tensor_.register_post_accumulate_grad_hook(lambda t: t.grad)
    with pytest.raises(RuntimeError, match="hooks should return None."):
        tensor_.sum().backward()


def test_post_accumulate_grad_hook_gets_cleaned_up(lib):
    def fun_stuff_with_hook():
        thing_to_put_in_hook = rand(lib, (3,))

        def hook(tensor_):
            tensor_.sub_(tensor_.grad)
            tensor_.add_(thing_to_put_in_hook)

        tensor_ = rand(lib, (3,), requires_grad=True)
        tensor_.register_post_accumulate_grad_hook(hook)
        tensor_.sum().backward()
        ref = weakref.ref(thing_to_put_in_hook)
        gc.collect()
        return tensor_, ref

    gc.disable()
    try:
        tensor_, ref = fun_stuff_with_hook()
        assert ref() is not None  # kept alive by the tensor
        del tensor_
        gc.collect()
        assert ref() is None
    finally:
        gc.enable()


def test_post_accumulate_grad_hook_ordering(lib):
    tensor_ = rand(lib, (3,), requires_grad=True)

    def pre_hook(grad):
        return grad - 2.0

    def acc_grad_node_pre_hook(grad_out):
        return (grad_out[0] / 5.0,)

    def post_acc_grad_hook(tensor_):
        tensor_.grad.add_(0.5)

    def acc_grad_node_post_hook(grad_in, grad_out):
        tensor_.grad = grad_out[0] * 10

    acc_grad = (tensor_ * 1).grad_fn.next_functions[0][0]  # torch's tensor.view_as(tensor)
    tensor_.register_hook(pre_hook)
    acc_grad.register_prehook(acc_grad_node_pre_hook)
    tensor_.register_post_accumulate_grad_hook(post_acc_grad_hook)
    acc_grad.register_hook(acc_grad_node_post_hook)
    tensor_.sum().backward()
    # tensor hook, AccumulateGrad pre-hook, post-accumulate hook, AccumulateGrad hook:
    # ((1 - 2) / 5 + 0.5) * 10
    assert_close(tensor_.grad, [3.0, 3.0, 3.0])


def test_prehook_ordering(lib):
    log = []

    def hook1(g):
        log.append(1)
        return g * 3

    def hook2(gs):
        log.append(2)
        return tuple(g * 2 for g in gs)

    a = tensor(lib, 1.0, requires_grad=True)
    b = a.clone()
    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)
    acc = b.grad_fn.next_functions[0][0]
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)

    b.sum().backward(retain_graph=True)
    assert log == [1, 2, 2, 1, 1, 2]

    log.clear()  # grad runs a leaf's tensor hooks, not its AccumulateGrad's
    lib.autograd.grad(b.sum(), inputs=(a,), retain_graph=True)
    assert log == [1, 2, 2, 1, 1]

    log.clear()
    b.sum().backward(inputs=(b,))
    assert log == [1, 2, 2]
    assert b.grad.item() == 3  # retain_grad sees the tensor hooks, not the pre-hooks


def test_retains_grad_can_always_observe_tensor_prehook(lib):
    def tensor_prehook(g):
        return g * 2

    a = tensor(lib, 1.0, requires_grad=True)
    b = a.clone()
    b.register_hook(tensor_prehook)
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert b.grad.item() == 4

    a = tensor(lib, 1.0, requires_grad=True)
    b = a.clone()
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert b.grad.item() == 2


def test_accumulate_grad_posthooks_can_observe_tensor_prehook(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    seen = []

    def tensor_prehook(g):
        return g * 2

    def posthook(g_in, g_out):
        assert_close(g_out[0], as_array(a) * 2)
        assert len(g_in) == 0
        seen.append("post")

    def prehook(g_out):
        assert_close(g_out[0], as_array(a) * 2)
        assert len(g_out) == 1
        seen.append("pre")

    b = a.clone()
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    a.register_hook(tensor_prehook)
    b.backward()
    assert seen == ["pre", "post"]


def test_accumulate_grad_posthooks_should_not_execute(lib):
    def tensor_prehook(g):
        raise RuntimeError

    def posthook(g_out, g_in):
        raise RuntimeError

    a = tensor(lib, 1.0, requires_grad=True)
    a.register_hook(tensor_prehook)
    b = tensor(lib, 1.0, requires_grad=True)
    c = a.clone()
    acc = c.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    out = a + b + c
    out.sum().backward(inputs=[b])


def test_hook_edge_case_when_called_with_grad(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    b = a * 2
    c = b * 2
    counts = {"tensor": 0, "pre": 0, "post": 0}

    def count(kind):
        def hook(*args):
            counts[kind] += 1
        return hook

    a.register_hook(count("tensor"))
    b.register_hook(count("tensor"))
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(count("post"))
    acc.register_prehook(count("pre"))
    b.grad_fn.register_hook(count("post"))
    b.grad_fn.register_prehook(count("pre"))

    def run(call):
        counts.update(tensor=0, pre=0, post=0)
        call()
        return counts["tensor"], counts["post"], counts["pre"]

    assert run(lambda: lib.autograd.grad(c, inputs=(b), retain_graph=True)) == (1, 0, 0)
    assert run(lambda: lib.autograd.grad(c, inputs=(a, b), retain_graph=True)) == (2, 1, 1)
    assert run(lambda: c.backward(retain_graph=True)) == (2, 2, 2)
    assert run(lambda: c.backward(inputs=(a, b), retain_graph=True)) == (2, 2, 2)


# ---------------------------------------------------------------- beyond torch's tests


def test_hook_order_tensor_retain_pre_node_post(lib):
    a = tensor(lib, [1.0, 2.0], requires_grad=True)
    b = a * 3
    log = []
    b.grad_fn.register_hook(lambda gi, go: log.append(("post", as_array(gi[0]).tolist())))
    b.grad_fn.register_prehook(lambda go: log.append(("pre", as_array(go[0]).tolist())))
    b.register_hook(lambda g: log.append(("h1", as_array(g).tolist())) or g + 1)
    b.retain_grad()
    b.register_hook(lambda g: log.append(("h2", as_array(g).tolist())) or g * 10)
    (b * b).sum().backward()
    grad_b = as_array(b) * 2
    assert log == [("h1", grad_b.tolist()), ("h2", (grad_b + 1).tolist()),
                   ("pre", ((grad_b + 1) * 10).tolist()),
                   ("post", ((grad_b + 1) * 30).tolist())]
    assert_close(b.grad, (grad_b + 1) * 10)
    assert_close(a.grad, (grad_b + 1) * 30)


def test_hook_sees_summed_gradient_of_tensor_used_twice(lib):
    x = tensor(lib, [1.0, 2.0], requires_grad=True)
    y = x * 2
    seen = []
    y.register_hook(lambda g: seen.append(as_array(g).copy()) or g * 2)
    y.register_hook(lambda g: seen.append(as_array(g).copy()))
    x.register_hook(lambda g: seen.append(as_array(g).copy()))
    (y * y + y).sum().backward()
    grad_y = 2 * as_array(y) + 1
    assert len(seen) == 3
    assert_close(seen[0], grad_y)
    assert_close(seen[1], grad_y * 2)
    assert_close(seen[2], grad_y * 4)
    assert_close(x.grad, grad_y * 4)


def test_hook_on_unused_output_of_multi_output_node_sees_none(lib):
    x = ones(lib, (3, 2), requires_grad=True)
    var, mean = var_mean(lib, x)
    seen = []
    var.register_hook(lambda g: seen.append(g))
    var.retain_grad()
    mean.sum().backward()
    assert seen == [None]
    assert var.grad is None
    p, q = double_mul(lib)(x)
    q.register_hook(lambda g: ones(lib, (3, 2)))
    with pytest.raises(RuntimeError, match="can't replace a None gradient"):
        p.sum().backward()


def test_hook_removed_while_running_still_runs_this_pass(lib):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2
    log = []

    def first(g):
        log.append(1)
        second_handle.remove()

    y.register_hook(first)
    second_handle = y.register_hook(lambda g: log.append(2))
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert log == [1, 2, 1]


def test_hook_registered_twice_runs_twice(lib):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2

    def double(g):
        return g * 2

    y.register_hook(double)
    y.register_hook(double)
    y.sum().backward()
    assert_close(x.grad, [8.0, 8.0])


@pytest.mark.parametrize("where", ["tensor", "leaf"])
@pytest.mark.parametrize(("bad", "error", "message"), [
    (lambda g: g[:1], RuntimeError, "size"),
    (lambda g: 3, TypeError, "hook returned 'int'"),
    (lambda g: (g,), TypeError, "hook returned 'tuple'"),
])
def test_hook_returning_wrong_value_raises(lib, where, bad, error, message):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2
    (y if where == "tensor" else x).register_hook(bad)
    with pytest.raises(error, match=message):
        y.sum().backward()


def test_hook_returning_other_dtype_raises(lib):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: lib.tensor(np.ones(2, np.float32), dtype=lib.float32))
    with pytest.raises(RuntimeError, match="type"):
        y.sum().backward()


@pytest.mark.parametrize(("bad", "error", "message"), [
    (lambda gs: (gs[0][:1],), RuntimeError, "size"),
    (lambda gs: 3, TypeError, "expected tuple, but hook returned 'int'"),
    (lambda gs: [gs[0] * 2], TypeError, "expected tuple, but hook returned 'list'"),
    (lambda gs: (1,), TypeError, "hook returned 'int'"),
    (lambda gs: (gs[0], gs[0]), RuntimeError, "incorrect number of values"),
])
def test_hook_node_prehook_returning_wrong_value_raises(lib, bad, error, message):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2
    y.grad_fn.register_prehook(bad)
    with pytest.raises(error, match=message):
        y.sum().backward()


@pytest.mark.parametrize(("bad", "error", "message"), [
    (lambda gi, go: 3, TypeError, "expected tuple, but hook returned 'int'"),
    (lambda gi, go: gi[:1] + (gi[0],) * 5, RuntimeError, "incorrect number of values"),
    (lambda gi, go: tuple(go[0] * 0 for _ in gi), RuntimeError,
     "can't replace a None gradient"),
])
def test_hook_node_hook_returning_wrong_value_raises(lib, bad, error, message):
    x = ones(lib, (2,), requires_grad=True)
    y = x * 2.0  # grad inputs (gx, None): the scalar does not require grad
    assert len(y.grad_fn.next_functions) == 2
    y.grad_fn.register_hook(bad)
    with pytest.raises(error, match=message):
        y.sum().backward()


@pytest.mark.parametrize("non_leaf", [False, True])
def test_hook_with_create_graph_is_differentiable(lib, non_leaf):
    x = tensor(lib, 2.0, requires_grad=True)
    y = x * x
    seen = []

    def hook(g):
        seen.append((g.requires_grad, lib.is_grad_enabled()))
        return g * x

    handle = (y if non_leaf else x).register_hook(hook)
    (gx,) = lib.autograd.grad(y * y, x, create_graph=True)
    handle.remove()
    assert seen == [(True, True)]
    assert gx.requires_grad
    # z = y^2 = x^4: the hook multiplies dz/dy = 2y (or dz/dx = 4x^3) by x, so gx = 4x^4
    assert_close(gx, 4 * 2.0 ** 4)
    (ggx,) = lib.autograd.grad(gx, x)
    assert_close(ggx, 16 * 2.0 ** 3)


def test_hook_runs_without_grad_mode_unless_create_graph(lib):
    x = tensor(lib, [1.0, 2.0], requires_grad=True)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(lib.is_grad_enabled()))
    x.register_hook(lambda g: seen.append(lib.is_grad_enabled()))
    (x * x).sum().backward()
    assert seen == [False, False]
    x.grad = None
    (x * x).sum().backward(create_graph=True)
    assert seen == [False, False, True, True]
    assert x.grad.requires_grad


def test_hook_retain_grad_in_grad_and_backward(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    b = a * 2
    b.retain_grad()
    c = b * 3
    lib.autograd.grad(c, a, retain_graph=True)
    assert_close(b.grad, 3.0)
    lib.autograd.grad(c, b, retain_graph=True)
    assert_close(b.grad, 6.0)
    c.backward(retain_graph=True)
    assert_close(b.grad, 9.0)

    x = tensor(lib, 2.0, requires_grad=True)
    y = x * x
    y.retain_grad()
    (y * y).backward(create_graph=True)
    assert_close(y.grad, 8.0)
    assert y.grad.requires_grad
    (gg,) = lib.autograd.grad(y.grad, x)
    assert_close(gg, 8.0)  # y.grad = 2y = 2x^2


def test_hook_grad_with_non_leaf_input_sees_hooked_gradient(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    b = a * 2
    c = b * 3
    b.register_hook(lambda g: g * 10)
    (gb,) = lib.autograd.grad(c, b, retain_graph=True)
    assert_close(gb, 30.0)
    w = tensor(lib, 1.0, requires_grad=True)
    y = a * 2  # a node no input needs: its hooks do not run
    y.register_hook(lambda g: pytest.fail("hook of a node not needed ran"))
    y.retain_grad()
    lib.autograd.grad(y * w, w)
    (y * w).backward(inputs=[w])
    assert y.grad is None


def test_hook_backward_inputs_non_leaf_retains_grad(lib):
    a = tensor(lib, 1.0, requires_grad=True)
    b = a * 2
    c = (b * 3).sum()
    c.backward(inputs=[b], retain_graph=True)
    assert b.retains_grad
    assert_close(b.grad, 3.0)
    assert a.grad is None
    b.retain_grad()
    c.backward(inputs=[b], retain_graph=True)
    assert_close(b.grad, 6.0)
    c.backward()
    assert_close(b.grad, 9.0)
    assert_close(a.grad, 6.0)


def test_hook_inplace_order_old_version_keeps_its_hooks(lib):
    a = tensor(lib, [1.0], requires_grad=True)
    b = a.clone()
    log = []
    b.register_hook(lambda g: log.append(("old", g.item())) or g * 2)
    b.retain_grad()
    b.mul_(3)
    b.register_hook(lambda g: log.append(("new", g.item())) or g * 5)
    assert b.retains_grad
    (b * 1).sum().backward()
    assert log == [("new", 1.0), ("old", 15.0)]
    assert_close(a.grad, [30.0])
    assert_close(b.grad, [5.0])


def test_hook_requires_grad_and_handle_context(lib):
    with pytest.raises(RuntimeError):
        ones(lib, (2,)).register_hook(lambda g: g)
    with pytest.raises(RuntimeError):
        ones(lib, (2,)).retain_grad()
    x = ones(lib, (2,), requires_grad=True)
    assert not x.retains_grad
    assert not (x * 2).retains_grad
    y = x * 2
    calls = []
    with y.register_hook(lambda g: calls.append(1)):
        y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert calls == [1]


def test_accumulate_grad_tensor_reference(lib):
    # torch's test with dense gradients (Reverie has no sparse tensors)
    for create_graph in (False, True):
        params = tensor(lib, [1.5, 1.5]).requires_grad_()
        params.grad = tensor(lib, [1.5, 1.5])
        grad_saved = params.grad
        params.backward(tensor(lib, [1.5, 1.5]), create_graph=create_graph)
        assert (id(grad_saved) == id(params.grad)) == (not create_graph)
        assert_close(params.grad, [3.0, 3.0])
