"""The gradient of the max/min reductions at NaN, ties and ±inf (issue 32): it goes to the
entries equal to the result, a NaN result counting its NaN entries as equal, split evenly
among them — torch's full reduction `x.max()`/`x.min()` (`evenly_distribute_backward`).
A NaN used to give every entry 0, because NaN == NaN is false.

The reference for an axis reduction is torch's `max()`/`min()` of every slice: torch's own
axis reductions differ at NaN (`amax` gives NaN to the whole slice, `max(dim).values` all
of ȳ to one index), and for ties `max(dim)` picks one index where `amax` splits as here.
Forward mode is checked against torch's gradient (its own forward mode gives NaN there).

Checked: `rv.Tensor` reductions by `rv.grad` (first and second order); compiled kernels
(built-in reductions and index notation) on every backend in reverse mode, forward mode
and forward-over-reverse; the loop-IR interpreter on the gradient program; the port of
PyTorch's `test_min_max_median_backprops_to_all_values`. The elementwise `max(a, b)` keeps
0 for both operands where one is NaN, torch.clamp's value (torch.maximum gives ȳ to both).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.transforms.reverse import grad_function
from reverie.runtime.native.call import bind_arguments

NAN, INF = float("nan"), float("inf")
DATA = {
    "nan": [[1.0, NAN, 3.0], [NAN, NAN, 2.0]],
    "all_nan": [[NAN, NAN, NAN], [NAN, 5.0, NAN]],
    "ties": [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]],
    "signed_zero_ties": [[0.0, -0.0, -1.0], [-0.0, 0.0, 0.0]],
    "inf": [[INF, INF, 1.0], [-INF, -INF, -INF]],
    "nan_and_inf": [[-INF, NAN, INF], [INF, INF, NAN]],
    "distinct": [[0.3, -1.2, 2.5], [1.7, 0.4, -0.8]],
}
OPS = ("max", "min")
AXES = (None, 0, 1, (0, 1))
BACKENDS = ("interp", "native", "mlir")


def torch_extremum(x: torch.Tensor, op: str, axis: int | tuple[int, ...] | None) -> torch.Tensor:
    """torch's full reduction `max()`/`min()` of every slice of `x` along `axis` (all axes
    for None): the rule under test, slice by slice."""
    if axis is None:
        return getattr(x, op)()
    over = (axis,) if isinstance(axis, int) else axis
    kept = [d for d in range(x.dim()) if d not in over]
    slices = x.permute(*kept, *over).reshape(-1, int(np.prod([x.shape[d] for d in over])))
    values = torch.stack([getattr(row, op)() for row in slices])
    return values.reshape([x.shape[d] for d in kept])


def torch_grads(f: Callable[..., torch.Tensor], args: list[np.ndarray], wrt: list[int],
                order: int = 1) -> list[np.ndarray]:
    """The gradient of scalar `f` for the `wrt` arguments (order 1), or the gradient of the
    sum of that gradient (order 2), by torch.autograd."""
    tensors = [torch.tensor(a, requires_grad=i in wrt) for i, a in enumerate(args)]
    chosen = [tensors[i] for i in wrt]
    grads = torch.autograd.grad(f(*tensors), chosen, create_graph=order == 2)
    if order == 2:
        grads = torch.autograd.grad(sum(g.sum() for g in grads), chosen)
    return [g.detach().numpy() for g in grads]


# ---------------------------------------------------------------- rv.Tensor reductions


@pytest.mark.parametrize("data", sorted(DATA))
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tensor_reduction_gradient_matches_torch_max(data: str, axis: object, op: str,
                                                     dtype: type) -> None:
    x = np.array(DATA[data], dtype=dtype)
    weights = np.arange(1.0, 4.0, dtype=dtype)[:np.asarray(x.max(axis=axis)).size]
    (want,) = torch_grads(lambda t: (torch_extremum(t, op, axis).reshape(-1)
                                     * torch.tensor(weights)).sum(), [x], [0])
    t = rv.tensor(x, requires_grad=True)
    y = getattr(t, op)(axis=axis)
    (got,) = rv.grad((y.reshape(-1) * rv.tensor(weights)).sum(), t)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(y.detach().numpy(),
                                  torch_extremum(torch.tensor(x), op, axis).numpy())


@pytest.mark.parametrize("data", sorted(DATA))
@pytest.mark.parametrize("axis", [None, 1])
@pytest.mark.parametrize("op", OPS)
def test_tensor_reduction_second_order_matches_torch(data: str, axis: object, op: str) -> None:
    """Reverse over reverse: the rule's own gradient (through ȳ = 2y; the mask and the
    count carry none)."""
    x = np.array(DATA[data])
    (want,) = torch_grads(lambda t: (torch_extremum(t, op, axis) ** 2).sum(), [x], [0], 2)
    t = rv.tensor(x, requires_grad=True)
    (first,) = rv.grad((getattr(t, op)(axis=axis) ** 2).sum(), t, create_graph=True)
    (got,) = rv.grad(first.sum(), t)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


# ---------------------------------------------------------------- compiled kernels

SIGNATURE = "fn f(x: f64[N, M], w: f64[N], v: f64[M]) -> f64"
KERNELS: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "reductions": (
        "return sum(max(x, axis=1){p} * w) + sum(min(x, axis=0){p} * v) + max(x){p}"
        " - 2.0 * min(x){p};",
        lambda x, w, v, p: ((torch_extremum(x, "max", 1) ** p * w).sum()
                            + (torch_extremum(x, "min", 0) ** p * v).sum()
                            + x.max() ** p - 2.0 * x.min() ** p)),
    "index_notation": (
        "let m[i] = max[j](x[i, j]); let n[j] = min[i](x[i, j]);"
        " return sum(m{p} * w) + sum(n{p} * v);",
        lambda x, w, v, p: ((torch_extremum(x, "max", 1) ** p * w).sum()
                            + (torch_extremum(x, "min", 0) ** p * v).sum())),
}


def kernel_source(name: str, squared: bool) -> str:
    return f"{SIGNATURE} {{ {KERNELS[name][0].format(p=' ** 2.0' if squared else '')} }}"


def kernel_args(data: str) -> list[np.ndarray]:
    return [np.array(DATA[data]), np.array([1.0, -2.0]), np.array([0.5, 3.0, -1.5])]


def reference(name: str, squared: bool) -> Callable[..., torch.Tensor]:
    return lambda *args: KERNELS[name][1](*args, 2 if squared else 1)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("data", sorted(DATA))
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_gradient_and_tangent_match_torch(backend: str, name: str, data: str) -> None:
    """Reverse mode against torch's gradient; forward mode against its dot product with the
    tangent (the tangent is the same rule's transpose)."""
    args, wrt = kernel_args(data), [0]
    want = torch_grads(reference(name, False), args, wrt)
    kernel = rv.compile(kernel_source(name, False), backend=backend).f
    got = kernel.grad(wrt=wrt)(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
    tangent = np.linspace(1.0, 2.0, args[0].size).reshape(args[0].shape)
    _, dot = kernel.jvp(wrt=wrt)(*args, (tangent,))
    np.testing.assert_allclose(dot, (want[0] * tangent).sum(), rtol=1e-12)


@pytest.mark.parametrize("data", sorted(DATA))
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_second_order_matches_torch(backend: str, name: str, data: str) -> None:
    """Forward over reverse (hvp with a ones vector) against torch's double backward."""
    args, wrt = kernel_args(data), [0]
    want = torch_grads(reference(name, True), args, wrt, order=2)
    kernel = rv.compile(kernel_source(name, True), backend=backend).f
    got = kernel.hvp(wrt=wrt)(*args, (np.ones_like(args[0]),))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


@pytest.mark.parametrize("data", ["nan", "all_nan", "ties", "nan_and_inf"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_loop_ir_gradient_equals_the_tensor_interpreter(name: str, data: str) -> None:
    """The gradient program lowered to loops (what native code compiles) gives the tensor
    interpreter's bits."""
    args = kernel_args(data)
    fn = rv.compile(kernel_source(name, False), backend="interp").f.ir_for("f64")
    adjoint = grad_function(fn, [0])
    bound = bind_arguments(adjoint, args)
    tensors = interpret(adjoint, bound.arrays, bound.dims)
    loops = run_program(compile_function(adjoint, "to_loops"), bound.arrays, bound.dims)
    for a, b in zip(tensors, loops, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-10.0, 0.5), (NAN, 1.0), (0.0, NAN)], ids=str)
def test_clamp_from_elementwise_max_min_matches_torch_clamp(backend: str,
                                                            bounds: tuple[float, float]) -> None:
    """`max(min(x, hi), lo)` in the language: away from the bounds the gradient is
    torch.clamp's, 0 at a NaN entry and everywhere when a bound is NaN (not ȳ, as the
    reductions give a NaN entry). (`rv.Tensor.clamp` is a kernel of its own, which gives a
    tie with a bound all of ȳ, as torch.clamp does: tests/api/test_tensor_functions.py.)"""
    source = ("fn f(x: f64[N], lo: f64, hi: f64, w: f64[N]) -> f64 "
              "{ return sum(max(min(x, hi), lo) * w); }")
    x = np.array([NAN, 0.25, -3.0, 2.0, INF, -INF, 0.75])
    w = np.linspace(1.0, 2.0, x.size)
    lo, hi = bounds
    want = torch.tensor(x, requires_grad=True)
    (torch.clamp(want, lo, hi) * torch.tensor(w)).sum().backward()
    got = rv.compile(source, backend=backend).f.grad(wrt=0)(x, lo, hi, w)
    np.testing.assert_array_equal(got, want.grad.numpy())


# ---------------------------------------------------------------- PyTorch's own test


@pytest.mark.parametrize("lib", ["torch", "reverie"])
@pytest.mark.parametrize("op", OPS)
def test_min_max_backprops_to_all_values(lib: str, op: str) -> None:
    """test_autograd.py TestAutogradDeviceType.test_min_max_median_backprops_to_all_values,
    for min and max (Reverie has no median/nanmedian); `f(x)` is the method `x.max()`."""
    make = torch.tensor if lib == "torch" else rv.tensor
    x1 = make([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], requires_grad=True)
    x2 = make([NAN, NAN, NAN], requires_grad=True)
    for x in (x1, x2):
        getattr(x, op)().backward()
        assert float(x.grad.sum()) == pytest.approx(1.0)
        assert int((x.grad == 1 / 3).sum()) == 3
