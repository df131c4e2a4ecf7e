"""The VJP split at its cotangents (compiler/transforms/residuals.py, transforms.vjp_forward /
vjp_backward): the forward half returns the results and the residuals, the backward half
the adjoints from them, together exactly what the VJP computes (tensor-IR interpreter,
native code); the backward half recomputes no primal op; and a torch operator's plain
`.backward()` runs the backward half, a graph-building one the differentiable VJP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.transforms.residuals import split_vjp
from reverie.compiler.transforms.reverse import vjp_function
from reverie.kernel import Kernel
from reverie.kernel_transforms import vjp_backward, vjp_forward

SOURCE = """
fn layer(x: float[B, D], w: float[D, H], b: float[H]) -> float[B, H] {
    return tanh(x @ w + b);
}

fn two(x: float[N], y: float[N]) -> (float, float[N]) {
    let e = exp(x * y);
    return (sum(e * e), sin(e) + y);
}

fn conv(x: f64[B, C, H, W], w: f64[O, C, 3, 3]) -> f64[B, O, H - 2, W - 2] {
    let y[b, o, i in 0..H - 2, j in 0..W - 2] =
        sum[c, k, l](x[b, c, i + k, j + l] * w[o, c, k, l]);
    return relu(y);
}

fn rebuilt(x: float[B, H], w: float[H, B], b: float[H]) -> float[B, H] {
    let ramp[i in 0..B, j in 0..H] = 1.0 * i - j;
    return tanh(x) * w.T * 3.0 + exp(x) * b + ramp * x;
}

fn norm(x: float[B, H]) -> float[B, H] {
    return x * rsqrt(mean(x * x, axis=1, keepdims=true) + 1e-5);
}

fn steps(x: f64[N], n: i64) -> f64[N] {
    var h = x;
    for t in 0..n {
        h = sin(h) * 0.9 + x;
    }
    return h;
}
"""

SHAPES = {"layer": ([(4, 3), (3, 5), (5,)], {"B": 4, "D": 3, "H": 5}),
          "two": ([(6,), (6,)], {"N": 6}),
          "conv": ([(2, 3, 6, 5), (4, 3, 3, 3)], {"B": 2, "C": 3, "H": 6, "W": 5, "O": 4}),
          "rebuilt": ([(3, 4), (4, 3), (4,)], {"B": 3, "H": 4}),
          "norm": ([(3, 4)], {"B": 3, "H": 4}),
          "steps": ([(5,)], {"N": 5})}


@pytest.fixture(scope="module")
def module() -> rv.Module:
    return rv.compile(SOURCE)


def arguments(name: str, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    args: list = [rng.standard_normal(shape) for shape in SHAPES[name][0]]
    return [*args, 3] if name == "steps" else args


def cotangents(kernel: Kernel, dims: dict[str, int], seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(d.evaluate(dims) for d in t.shape))
            for t in kernel.ir_for("f64").result_types]


@pytest.mark.parametrize("name", list(SHAPES))
def test_halves_compute_the_vjp_exactly(module: rv.Module, name: str) -> None:
    kernel = module[name]
    fn = kernel.ir_for("f64")
    wrt = [i for i, t in enumerate(fn.params) if t.type.is_float]
    vjp = vjp_function(fn, wrt)
    split = split_vjp(vjp, len(fn.params), len(fn.result_types))
    dims = SHAPES[name][1]
    args, cts = arguments(name), cotangents(kernel, dims)
    want = interpret(vjp, [*args, *cts], dims)
    forward = interpret(split.forward, args, dims)
    outputs = len(fn.result_types)
    backward = interpret(split.backward, [*args, *forward[outputs:], *cts], dims)
    for got, expected in zip([*forward[:outputs], *backward], want, strict=True):
        np.testing.assert_array_equal(got, expected)
    native_forward = vjp_forward(kernel, wrt)(*args)
    native = vjp_backward(kernel, wrt)(*args, *native_forward[outputs:], *cts)
    grouped = tuple(cts) if len(cts) > 1 else cts[0]
    want_native = kernel.vjp(wrt)(*args, grouped)
    for got, expected in zip(native, want_native, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)


def test_backward_half_recomputes_no_primal_op(module: rv.Module) -> None:
    """The convolution (the one reducing generic of the forward) is not in the backward."""
    fn = module["conv"].ir_for("f64")
    split = split_vjp(vjp_function(fn, [0, 1]), 2, 1)

    def sums(f) -> int:
        return sum(op.name == "generic" and op.attrs.get("reduce") == "sum"
                   and len(op.attrs["indices"]) == 4 and op.attrs["indices"][0][0] == "b"
                   for op in f.body.ops)

    assert sums(split.forward) == 1 and sums(split.backward) == 0
    assert split.residual_types


def test_constants_views_and_index_ramps_are_rebuilt_not_saved(module: rv.Module) -> None:
    """`rebuilt` saves tanh(x), exp(x) and 1 - tanh(x)²; the backward recomputes the
    broadcast 3.0, the transposed w, the broadcast b and the ramp (7 residuals before)."""
    split = split_vjp(vjp_function(module["rebuilt"].ir_for("f64"), [0, 1, 2]), 3, 1)
    assert len(split.residual_types) == 3
    rebuilt = {"generic", "transpose", "broadcast"}
    assert rebuilt <= {op.name for op in split.backward.body.ops}


def numeric_vjp(fn: Function, args: list, cts: list[np.ndarray], dims: dict[str, int],
                position: int, step: float = 1e-6) -> np.ndarray:
    """The sum over results of cotangent · d result / d args[position], by central
    differences of the tensor interpreter's values (float64)."""
    gradient = np.zeros_like(args[position])

    def weighted(index: tuple[int, ...], shift: float) -> float:
        shifted = list(args)
        shifted[position] = args[position].copy()
        shifted[position][index] += shift
        results = interpret(fn, shifted, dims)
        return sum(float(np.sum(ct * y)) for ct, y in zip(cts, results, strict=True))

    for index in np.ndindex(gradient.shape):
        gradient[index] = (weighted(index, step) - weighted(index, -step)) / (2 * step)
    return gradient


@pytest.mark.parametrize("name", ["layer", "two", "rebuilt", "norm"])
def test_backward_half_matches_finite_differences(module: rv.Module, name: str) -> None:
    kernel = module[name]
    fn = kernel.ir_for("f64")
    wrt = list(range(len(fn.params)))
    split = split_vjp(vjp_function(fn, wrt), len(wrt), len(fn.result_types))
    dims = SHAPES[name][1]
    args, cts = arguments(name), cotangents(kernel, dims)
    residuals = interpret(split.forward, args, dims)[len(fn.result_types):]
    gradients = interpret(split.backward, [*args, *residuals, *cts], dims)
    for position, gradient in zip(wrt, gradients, strict=True):
        np.testing.assert_allclose(gradient, numeric_vjp(fn, args, cts, dims, position),
                                   rtol=1e-6, atol=1e-8)


def torch_layer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w + b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_backward_runs_the_backward_half(module: rv.Module, kernel_calls: list[str],
                                               dtype: torch.dtype) -> None:
    layer = rv.torch.function(module.layer)
    tensors = [torch.tensor(a, dtype=dtype, requires_grad=i != 0)
               for i, a in enumerate(arguments("layer"))]
    layer(*tensors).pow(2).sum().backward(retain_graph=True)
    assert kernel_calls == ["layer_vjp_forward", "layer_vjp_backward"]
    ours = [t.grad.clone() for t in tensors[1:]]
    torch_layer(*tensors).pow(2).sum().backward()  # accumulates: torch's own on top
    for got, total in zip(ours, (t.grad for t in tensors[1:]), strict=True):
        torch.testing.assert_close(2 * got, total)


def test_graph_building_backward_uses_the_differentiable_vjp(module: rv.Module) -> None:
    layer = rv.torch.function(module.layer)
    x, w, b = (torch.tensor(a, requires_grad=True) for a in arguments("layer", seed=3))
    (gw,) = torch.autograd.grad(layer(x, w, b).sum(), w, create_graph=True)
    (hx,) = torch.autograd.grad(gw.pow(2).sum(), x)
    (gw_t,) = torch.autograd.grad(torch_layer(x, w, b).sum(), w, create_graph=True)
    (hx_t,) = torch.autograd.grad(gw_t.pow(2).sum(), x)
    torch.testing.assert_close(hx, hx_t)


def test_input_modified_after_the_forward_is_refused(module: rv.Module) -> None:
    layer = rv.torch.function(module.layer)
    x, w, b = (torch.tensor(a, requires_grad=i > 0) for i, a in enumerate(arguments("layer")))
    y = layer(x, w, b).sum()
    x.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_checkpointing_module_recomputes(kernel_calls: list[str]) -> None:
    layer = rv.torch.function(rv.compile(SOURCE, checkpoint=True).layer)
    x, w, b = (torch.tensor(a, requires_grad=True) for a in arguments("layer"))
    layer(x, w, b).sum().backward()
    assert kernel_calls == ["layer", "layer_vjp"]


def test_no_grad_after_training_reuses_the_forward_half(kernel_calls: list[str]) -> None:
    """A `no_grad` call after a training step compiles nothing: it runs the forward half
    (residuals dropped); a kernel that has run itself keeps running itself."""
    layer = rv.torch.function(rv.compile(SOURCE).layer)
    x, w, b = (torch.tensor(a, requires_grad=True) for a in arguments("layer"))
    trained = layer(x, w, b)
    with torch.no_grad():
        evaluated = layer(x, w, b)
    assert kernel_calls == ["layer_vjp_forward", "layer_vjp_forward"]
    torch.testing.assert_close(evaluated, trained.detach(), rtol=0, atol=0)
    fresh = rv.torch.function(rv.compile(SOURCE).layer)
    with torch.no_grad():
        fresh(x, w, b)
    fresh(x, w, b).sum().backward()
    with torch.no_grad():
        fresh(x, w, b)
    assert kernel_calls[2:] == ["layer", "layer_vjp_forward", "layer_vjp_backward", "layer"]


def test_a_kernel_without_a_vjp_still_runs_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where reverse mode has no rule for an op, the forward under grad runs the kernel
    itself (no residuals), and only a backward raises the compile error, as before."""
    from reverie.compiler.transforms import reverse_rules

    monkeypatch.delitem(reverse_rules.VJP_RULES, "tanh")
    layer = rv.torch.function(rv.compile(SOURCE.replace("tanh(", "tanh( ")).layer)
    x, w, b = (torch.tensor(a, requires_grad=True) for a in arguments("layer"))
    out = layer(x, w, b)
    torch.testing.assert_close(out, torch_layer(x, w, b))
    with pytest.raises(rv.CompileError, match="cannot differentiate 'tanh'"):
        out.sum().backward()
