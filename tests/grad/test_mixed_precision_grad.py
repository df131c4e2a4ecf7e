"""Gradients in bf16 and f16 at every stage (issue 37 item 2).

Each kernel of `CASES` is written once with `float` and called with bf16 or f16 arrays, so
its reverse gradient (`grad`), its JVP (`jvp`) and its second derivatives (`hvp`, forward
over reverse, and `hessian`, the Jacobian of the gradient) are built on the IR as written:
adjoints and tangents are stored in the primal's dtype, and every op computes in f32 and
rounds (reductions and products accumulate in f32 or wider), as torch eager does. Checked:

- the interpreter: the transformed tensor IR before and after `widen_storage` (the pass
  the back ends run) gives the same bits;
- the values: against central differences of the f64 specialisation (the exact function
  at the same, exactly representable, points; second order from the f64 gradient), and
  against torch autograd run eagerly in bf16/f16, in units of the dtype's unit roundoff
  (`UNIT`) times the reference's scale (`f64_reference`): the bounds are a few units, the
  error torch's own bf16/f16 derivatives have against the same references;
- native code and the MLIR export: the same results as the interpreter;
- results come back in the primal's dtype (a bf16 parameter's gradient is bf16);
- `rv.gradcheck`/`rv.gradgradcheck` take bf16/f16 Tensors, checking against f64.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.ir.widen_storage import widen_storage
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.mlir_to_llvm import mlir_tools
from reverie.runtime.tensors.gradcheck import GradcheckError

torch = pytest.importorskip("torch")

STORAGE = ("bf16", "f16")
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
UNIT = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}   # unit roundoff: half an ulp at 1
TRANSFORMS = ("grad", "jvp", "hvp", "hessian")
# the largest error allowed, in units of UNIT times the scale of the reference (its
# largest value, or for products with a direction the largest sum of |terms|). Measured:
# ours up to 4.1 units from the f64 references, torch's up to 5.2, ours and torch's up to
# 7.7 units apart (the H v of `reductions` in bf16, where torch is the farther from f64)
AGAINST_F64 = 6.0
AGAINST_TORCH = 10.0
FD_STEP = 1e-6

Arrays = list[np.ndarray]


@dataclass(frozen=True)
class Case:
    """A scalar loss: its source (`float` parameters), parameter shapes and torch twin."""

    source: str
    shapes: tuple[tuple[int, ...], ...]
    torch_fn: Callable[..., object]


def _loop(x: object, w: object) -> object:
    h = x
    for _ in range(3):
        h = torch.tanh(h @ w) + x
    return (h * h).sum()


CASES = {
    "chain": Case("""fn f(x: float[N], w: float[N]) -> float {
        return sum(tanh(x * w + 0.5) * exp(-x * x) / (1.0 + w * w) + sqrt(w * w + 1.0));
    }""", ((6,), (6,)), lambda x, w: (torch.tanh(x * w + 0.5) * torch.exp(-x * x)
                                      / (1.0 + w * w) + torch.sqrt(w * w + 1.0)).sum()),
    "reductions": Case("""fn f(x: float[N, M], v: float[M]) -> float {
        return sum(max(x, axis=1) * mean(x * v, axis=1)) + sum(prod(x, axis=0) * v);
    }""", ((4, 3), (3,)), lambda x, v: (x.amax(dim=1) * (x * v).mean(dim=1)).sum()
                         + (x.prod(dim=0) * v).sum()),
    "matmul": Case("""fn f(a: float[N, K], b: float[K, M]) -> float {
        return sum(tanh(a @ b) * (a @ b));
    }""", ((4, 5), (5, 3)), lambda a, b: (torch.tanh(a @ b) * (a @ b)).sum()),
    "softmax_cross_entropy": Case("""fn f(z: float[N, C], y: float[N, C]) -> float {
        return -mean(sum(y * log_softmax(z, axis=1), axis=1));
    }""", ((4, 5), (4, 5)), lambda z, y: -(y * torch.log_softmax(z, dim=1)).sum(dim=1).mean()),
    "mlp": Case("""fn f(x: float[N, D], w1: float[D, H], b1: float[H], w2: float[H],
                    t: float[N]) -> float {
        let h = tanh(x @ w1 + b1);
        return mean((h @ w2 - t) ** 2);
    }""", ((5, 3), (3, 4), (4,), (4,), (5,)),
        lambda x, w1, b1, w2, t: ((torch.tanh(x @ w1 + b1) @ w2 - t) ** 2).mean()),
    "for_loop": Case("""fn f(x: float[D], w: float[D, D]) -> float {
        var h = x;
        for t in 0..3 { h = tanh(h @ w) + x; }
        return sum(h * h);
    }""", ((4,), (4, 4)), _loop),
    "where_max": Case("""fn f(x: float[N], y: float[N]) -> float {
        return sum(where(x > y, x * y, y - x) + max(x, y) * x + min(x * x, 0.5) * y);
    }""", ((7,), (7,)), lambda x, y: (torch.where(x > y, x * y, y - x) + torch.maximum(x, y) * x
                                      + torch.clamp(x * x, max=0.5) * y).sum()),
}


@functools.cache
def module(source: str, backend: str) -> rv.Module:
    return rv.compile(source, backend=backend)


def points(case: Case, dtype: str, seed: int = 1) -> Arrays:
    """Arguments in [-1, 1], exactly representable in `dtype`."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(NUMPY_DTYPES[dtype]) for shape in case.shapes]


def transform_call(case: Case, backend: str, transform: str, dtype: str
                   ) -> tuple[rv.Kernel, Arrays, list[object]]:
    """(kernel, its IR's arguments, the kernel's arguments) for one transform of the loss:
    `grad` of every parameter, `jvp` along tangents of every parameter (one tuple), `hvp`
    and `hessian` of the first parameter."""
    f = module(case.source, backend).f
    args = points(case, dtype)
    directions = points(case, dtype, seed=2)
    if transform == "grad":
        return f.grad(), args, args
    if transform == "jvp":
        return f.jvp(), args + directions, [*args, tuple(directions)]
    if transform == "hvp":
        return f.hvp(0), args + directions[:1], args + directions[:1]
    return f.hessian(0), args, args


def run_transform(case: Case, backend: str, transform: str, dtype: str) -> Arrays:
    """The transform's results as a list of arrays (the tangent alone, for `jvp`)."""
    kernel, _, call_args = transform_call(case, backend, transform, dtype)
    out = kernel(*call_args)
    if transform == "jvp":
        return [np.asarray(out[1])]
    return [np.asarray(g) for g in out] if transform == "grad" else [np.asarray(out)]


# ---------------------------------------------------------------- references


def wide(arrays: Sequence[np.ndarray]) -> Arrays:
    return [np.asarray(a).astype(np.float64) for a in arrays]


def central(fn: Callable[[Arrays], np.ndarray], args: Arrays,
            direction: Arrays) -> np.ndarray:
    """d fn(args + t · direction) / dt at t = 0, by central differences in f64."""
    plus = [a + FD_STEP * d for a, d in zip(args, direction, strict=True)]
    minus = [a - FD_STEP * d for a, d in zip(args, direction, strict=True)]
    return (np.asarray(fn(plus), np.float64) - np.asarray(fn(minus), np.float64)) / (2 * FD_STEP)


def along(args: Arrays, index: int, element: int) -> Arrays:
    """The unit direction of one element of parameter `index`."""
    direction = [np.zeros_like(a) for a in args]
    direction[index].flat[element] = 1.0
    return direction


def f64_reference(case: Case, transform: str, dtype: str) -> tuple[Arrays, list[float]]:
    """The transform's results by central differences of the f64 specialisation (of the
    loss for first order, of its exact f64 gradient for second order), and the scale of
    each: the largest |value|, or for a product with the direction v, the largest sum of
    |terms| (sum |g_i v_i| for the JVP, sum over j of |H_ij v_j| for H v), which rounding
    errors are relative to where the terms cancel."""
    f = module(case.source, "interp").f
    args = wide(points(case, dtype))
    directions = wide(points(case, dtype, seed=2))

    def loss(xs: Arrays) -> np.ndarray:
        return np.asarray(f(*xs))

    def gradient(xs: Arrays) -> np.ndarray:
        return np.asarray(f.grad(0)(*xs))

    if transform in ("grad", "jvp"):
        grads = [np.reshape([central(loss, args, along(args, i, e)) for e in range(a.size)],
                            a.shape) for i, a in enumerate(args)]
        if transform == "grad":
            return grads, [float(np.max(np.abs(g))) for g in grads]
        terms = sum(float(np.sum(np.abs(g * v))) for g, v in zip(grads, directions, strict=True))
        return [central(loss, args, directions)], [terms]
    first, v = args[0], directions[0]
    columns = [central(gradient, args, along(args, 0, e)) for e in range(first.size)]
    hessian = np.reshape(columns, (first.size, first.size)).T   # [i, j] = d g_i / d x_j
    if transform == "hessian":
        return [hessian.reshape(first.shape + first.shape)], [float(np.max(np.abs(hessian)))]
    terms = float(np.max(np.abs(hessian) @ np.abs(v.ravel())))
    return [(hessian @ v.ravel()).reshape(first.shape)], [terms]


def torch_reference(case: Case, transform: str, dtype: str) -> Arrays:
    """The transform's results by torch autograd, eagerly in `dtype`."""
    def tensors(arrays: Arrays) -> list[object]:
        return [torch.from_numpy(a.astype(np.float32)).to(TORCH_DTYPES[dtype]) for a in arrays]

    args = tensors(points(case, dtype))
    directions = tensors(points(case, dtype, seed=2))

    def of_first(first: object) -> object:
        return case.torch_fn(first, *args[1:])

    if transform == "grad":
        leaves = [a.requires_grad_() for a in args]
        results = torch.autograd.grad(case.torch_fn(*leaves), leaves)
    elif transform == "jvp":
        results = [torch.func.jvp(case.torch_fn, tuple(args), tuple(directions))[1]]
    elif transform == "hvp":
        results = [torch.autograd.functional.hvp(of_first, args[0], directions[0])[1]]
    else:
        results = [torch.autograd.functional.hessian(of_first, args[0])]
    return [r.detach().float().numpy().astype(np.float64) for r in results]


def units_apart(got: Arrays, want: Arrays, scales: Sequence[float], dtype: str) -> float:
    """The largest difference of each result from `want`'s, in units of UNIT times that
    result's scale."""
    worst = 0.0
    for g, w, scale in zip(got, want, scales, strict=True):
        assert np.shape(g) == np.shape(w)
        difference = np.max(np.abs(np.asarray(g, np.float64) - w), initial=0.0)
        worst = max(worst, float(difference) / (max(scale, 1e-30) * UNIT[dtype]))
    return worst


def bits(arrays: Arrays) -> list[bytes]:
    return [np.ascontiguousarray(a).tobytes() for a in arrays]


# ---------------------------------------------------------------- tests

every_case = pytest.mark.parametrize("name", list(CASES))
every_dtype = pytest.mark.parametrize("dtype", STORAGE)
every_transform = pytest.mark.parametrize("transform", TRANSFORMS)


@every_case
@every_dtype
@every_transform
def test_interpreter_agrees_bit_for_bit_before_and_after_widening(name: str, dtype: str,
                                                                  transform: str) -> None:
    kernel, args, _ = transform_call(CASES[name], "interp", transform, dtype)
    fn = kernel.ir_for(dtype)
    widened = widen_storage(fn)
    assert widened is not fn
    bound = bind_arguments(fn, args)
    as_written = interpret(fn, bound.arrays, bound.dims)
    bound = bind_arguments(widened, args)
    assert bits(as_written) == bits(interpret(widened, bound.arrays, bound.dims))


@every_case
@every_dtype
@every_transform
def test_against_f64_finite_differences(name: str, dtype: str, transform: str) -> None:
    got = run_transform(CASES[name], "interp", transform, dtype)
    want, scales = f64_reference(CASES[name], transform, dtype)
    assert units_apart(got, want, scales, dtype) <= AGAINST_F64


@every_case
@every_dtype
@every_transform
def test_against_torch_eager_in_the_same_dtype(name: str, dtype: str, transform: str) -> None:
    got = run_transform(CASES[name], "interp", transform, dtype)
    want = torch_reference(CASES[name], transform, dtype)
    _, scales = f64_reference(CASES[name], transform, dtype)
    assert units_apart(got, want, scales, dtype) <= AGAINST_TORCH


@every_case
@every_dtype
def test_results_are_stored_in_the_primals_dtype(name: str, dtype: str) -> None:
    for transform in TRANSFORMS:
        for result in run_transform(CASES[name], "interp", transform, dtype):
            assert result.dtype == NUMPY_DTYPES[dtype], transform


needs_mlir = pytest.mark.skipif(
    mlir_tools() is None,
    reason="mlir-opt-19/mlir-translate-19 not installed (apt-get install mlir-19-tools)")


@every_case
@every_dtype
@pytest.mark.parametrize("backend", ["native", pytest.param("mlir", marks=needs_mlir)])
def test_compiled_gradients_match_the_interpreter(name: str, dtype: str, backend: str) -> None:
    for transform in TRANSFORMS:
        got = run_transform(CASES[name], backend, transform, dtype)
        want = run_transform(CASES[name], "interp", transform, dtype)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        scales = [float(np.max(np.abs(w.astype(np.float64)), initial=0.0)) for w in want]
        assert units_apart(got, wide(want), scales, dtype) <= 1.0, transform


MIXED = """fn f(x: bf16[N, D], w: f32[D], s: f16) -> f32 {
    return sum(tanh(f32(x) @ w) * f32(s)) + f32(sum(x * x));
}"""


@pytest.mark.parametrize("backend", ["interp", "native",
                                     pytest.param("mlir", marks=needs_mlir)])
def test_each_gradient_takes_its_parameters_dtype(backend: str) -> None:
    """bf16, f32 and f16 parameters of one loss: each gradient in its parameter's dtype,
    against central differences of the same loss in f64 (NumPy)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (4, 3)).astype(NUMPY_DTYPES["bf16"])
    w = rng.uniform(-1, 1, 3).astype(np.float32)
    s = np.float16(0.75)

    def loss(xs: Arrays) -> np.ndarray:
        x64, w64, s64 = xs
        return np.sum(np.tanh(x64 @ w64) * s64) + np.sum(x64 * x64)

    args = wide([x, w, s])
    grads = module(MIXED, backend).f.grad()(x, w, s)
    assert [g.dtype for g in grads] == [x.dtype, w.dtype, np.dtype(np.float16)]
    units = (UNIT["bf16"], 2.0 ** -24, UNIT["f16"])   # each parameter's unit roundoff
    for i, (g, a, unit) in enumerate(zip(grads, args, units, strict=True)):
        want = np.reshape([central(loss, args, along(args, i, e)) for e in range(a.size)],
                          a.shape)
        assert np.max(np.abs(g.astype(np.float64) - want)) <= 6 * unit * np.max(np.abs(want))


# ---------------------------------------------------------------- rv.gradcheck

GRADCHECKED = """
fn loss(x: float[N, D], w: float[D]) -> float { return sum(tanh(x @ w) * sum(x, axis=1)); }
fn stored(x: bf16[N], w: bf16[N]) -> bf16 { return sum(x * w); }
"""


def storage_tensors(dtype: str, *shapes: tuple[int, ...]) -> list[rv.Tensor]:
    rng = np.random.default_rng(6)
    return [rv.tensor(rng.uniform(-1, 1, shape).astype(NUMPY_DTYPES[dtype]), requires_grad=True)
            for shape in shapes]


@every_dtype
def test_gradcheck_takes_storage_inputs_against_an_f64_reference(dtype: str) -> None:
    m = module(GRADCHECKED, "native")
    x, w = storage_tensors(dtype, (4, 3), (3,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no "unreliable below float64" warning for them
        assert rv.gradcheck(m.loss, (x, w))
        assert rv.gradcheck(lambda x, w: (m.loss(x, w) * w).sum(), (x, w))


@every_dtype
def test_gradgradcheck_takes_storage_inputs(dtype: str) -> None:
    """Second order: the compiled double backward in bf16/f16 against central differences
    of the f64 first derivative."""
    x, w = storage_tensors(dtype, (4, 3), (3,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rv.gradgradcheck(module(GRADCHECKED, "native").loss, (x, w))


@every_dtype
def test_gradcheck_finds_a_wrong_storage_gradient(dtype: str) -> None:
    (x,) = storage_tensors(dtype, (5,))
    with pytest.raises(GradcheckError, match="output 0 with respect to input 0"):
        rv.gradcheck(lambda x: (x.detach() * x).sum(), (x,))


def test_gradcheck_needs_an_f64_reference_function() -> None:
    m = module(GRADCHECKED, "native")
    x, w = storage_tensors("bf16", (5,), (5,))
    with pytest.raises(ValueError, match="output 0 is bf16 even with the bf16/f16 inputs "
                                         "widened to f64"):
        rv.gradcheck(m.stored, (x, w))
