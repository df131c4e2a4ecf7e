"""Rows of the `rv.fx` target table (`fx_targets.py`): elementwise spellings, scans, norms
and the other spellings of products and normalisations.

Each table has the form of `fx_targets`' own (see `fx_rows_losses.py`). Every value is
torch's formula, to rounding, and so is every gradient:

    acos asin atan acosh asinh atanh   torch's names of arccos, ... (the language's)
    reciprocal, atan2/arctan2          1 / x;  the angle of (x, y), 0 at (0, 0)
    addcmul, addcdiv                   input + value · t₁ t₂ (or t₁ / t₂)
    cumsum, cumprod                    running sum / product along `dim` (`dtype` first)
    clamp_min, clamp_max               max(x, lo), min(x, hi)
    detach                             x, with no gradient through it
    vector_norm, norm, dist, cdist     ‖x‖_p over `dim` (all axes by default): p = 2 ("fro"),
                                       1, ±inf or any p ≥ 1; its gradient 0 where the norm
                                       is 0 (torch's), so no NaN at a zero vector
    normalize                          x / max(‖x‖_p, eps) along `dim`
    cosine_similarity                  Σ (x₁ / max(‖x₁‖, eps)) (x₂ / max(‖x₂‖, eps)) along
                                       `dim`: ATen's order, the clamp outside the gradient
                                       (ATen clamps the norms in place without grad)
    rms_norm                           x / √(mean(x²) + eps) · w over the last axes
                                       (eps: the dtype's machine epsilon by default)
    layer_norm, group_norm             torch's spellings of the F rows (`cudnn_enable`
                                       changes nothing on the CPU)
    convolution, _convolution          F.conv*d or F.conv_transpose*d by `transposed`
    chain_matmul, linalg.multi_dot     the product left to right;  vecdot Σ x y along dim
    einsum, tensordot, outer, inner    one index-notation statement each (`reverie/
    trace, diagonal, diag, diag_embed  tracing_contract.py`, NumPy's forms of them)
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie import fx_functional as fn
from reverie import tracing_contract as contract
from reverie.fx_functional import float_dtype, refuse
from reverie.fx_rows_conv import conv, conv_transpose
from reverie.fx_rows_norm_pool import group_norm
from reverie.fx_rows_rule import rule_in
from reverie.fx_rows_shapes import axis
from reverie.tracing import RECORDER_FILES, Traced

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]
ALIASES = {"acos": "arccos", "asin": "arcsin", "atan": "arctan", "acosh": "arccosh",
           "asinh": "arcsinh", "atanh": "arctanh"}  # torch's name -> the language's


def reciprocal(input: Traced) -> Traced:
    return 1.0 / input


def atan2(input: Traced, other: Traced) -> Traced:
    """torch.atan2(y, x): the angle of the point (x, y)."""
    return np.arctan2(input, other)


def addcmul(input: Any, tensor1: Traced, tensor2: Traced, *, value: Any = 1) -> Traced:
    return input + value * (tensor1 * tensor2)


def addcdiv(input: Any, tensor1: Traced, tensor2: Traced, *, value: Any = 1) -> Traced:
    return input + value * (tensor1 / tensor2)


def _scan(kind: str) -> Emit:
    """torch.cumsum / torch.cumprod along `dim`, the input converted to `dtype` first."""
    def emit(input: Traced, dim: int, *, dtype: Any = None) -> Traced:
        x = fn.accumulated(kind, input, dtype)
        if x.ndim == 0:
            return x
        return x.recording.let(f"{kind}({x.name}, axis={dim % x.ndim})", x.axes, x.element)

    return emit


def clamp_min(input: Traced, min: Any) -> Traced:  # noqa: A002 (torch's name)
    return input._binary("max", min)


def clamp_max(input: Traced, max: Any) -> Traced:  # noqa: A002 (torch's name)
    return input._binary("min", max)


def detach(input: Traced) -> Traced:
    return input._call("stop_gradient")


# ---------------------------------------------------------------- norms

def vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Traced:
    """torch.linalg.vector_norm: ‖x‖_ord over `dim` (every axis where None)."""
    if dtype is not None:
        x = fn.cast(x, float_dtype("vector_norm", dtype))
    return _norm(x, ord, fn.reduced_axes(x, dim), keepdim, ("vector_norm", "ord"))


def _norm(x: Traced, p: Any, axes: tuple[int, ...], keepdim: bool,
          asked: tuple[str, str]) -> Traced:
    """‖x‖_p over `axes`; a p Reverie lacks is refused as the argument `asked` names."""
    size = x.abs()
    if p in (math.inf, -math.inf):
        return size._reduce("max" if p > 0 else "min", axes, keepdim)
    if isinstance(p, bool) or not isinstance(p, int | float) or p < 1:
        raise refuse(*asked, p, "Reverie takes 1, 2, a p > 1 or ±inf")
    if p == 1:
        return size._reduce("sum", axes, keepdim)
    powered = x * x if p == 2 else size ** float(p)
    return fn.safe_root(powered._reduce("sum", axes, keepdim), float(p))


def norm(input: Traced, p: Any = "fro", dim: Any = None, keepdim: bool = False,
         dtype: Any = None) -> Traced:
    """torch.norm / Tensor.norm of vectors: "fro" is p = 2 (over `dim`, or every axis)."""
    x = input if dtype is None else fn.cast(input, float_dtype("norm", dtype))
    return _norm(x, 2 if p == "fro" else p, fn.reduced_axes(x, dim), keepdim, ("norm", "p"))


def dist(input: Traced, other: Traced, p: Any = 2) -> Traced:
    """torch.dist: ‖input − other‖_p over every element."""
    difference = input - other
    return _norm(difference, p, fn.reduced_axes(difference, None), False, ("dist", "p"))


def cdist(x1: Traced, x2: Traced, p: float = 2.0, compute_mode: str | None = None) -> Traced:
    """torch.cdist: ‖x1[..., i, :] − x2[..., j, :]‖_p for every pair, from the differences
    (torch's direct path; its matrix-product path for p = 2 and over 25 rows agrees to
    rounding away from zero distances)."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise refuse("cdist", "x2", x2, "torch takes [..., P, M] and [..., R, M]")
    difference = x1.reshape((*x1.shape[:-1], 1, x1.shape[-1])) - \
        x2.reshape((*x2.shape[:-2], 1, *x2.shape[-2:]))
    return _norm(difference, p, (difference.ndim - 1,), False, ("cdist", "p"))


def normalize(input: Traced, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Any = None) -> Traced:
    """F.normalize: x / max(‖x‖_p, eps) along `dim`."""
    if out is not None:
        raise refuse("normalize", "out", out, "a write in place")
    size = _norm(input, p, fn.reduced_axes(input, dim), True, ("normalize", "p"))
    return input / size._binary("max", eps)


def cosine_similarity(x1: Traced, x2: Traced, dim: int = 1, eps: float = 1e-8) -> Traced:
    """F.cosine_similarity, as ATen computes it: each input over its norm, the norm
    clamped at eps outside the gradient (`clamp_min_` under NoGradGuard), then summed."""
    def over_norm(x: Traced) -> Traced:
        size = vector_norm(x, 2, dim, keepdim=True)
        clamped = size + (size._binary("max", eps) - size)._call("stop_gradient")
        return x / clamped

    return (over_norm(x1) * over_norm(x2)).sum(axis=dim % max(x1.ndim, x2.ndim))


def rms_norm(input: Traced, normalized_shape: Any, weight: Traced | None = None,
             eps: float | None = None) -> Traced:
    """F.rms_norm: x / √(mean(x²) + eps) over the last len(normalized_shape) axes, · w."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, tuple | list) else \
        (normalized_shape,)
    if tuple(input.shape[input.ndim - len(shape):]) != tuple(shape):
        raise refuse("rms_norm", "normalized_shape", normalized_shape,
                     f"torch takes the input's last axes {list(input.shape)}")
    if eps is None:
        eps = float(np.finfo(np.float64 if input.element == "f64" else np.float32).eps)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    y = input * ((input * input)._reduce("mean", axes, True) + eps).rsqrt()
    return y if weight is None else y * weight


def layer_norm(input: Traced, normalized_shape: Any, weight: Traced | None = None,
               bias: Traced | None = None, eps: float = 1e-5, cudnn_enable: bool = True
               ) -> Traced:
    """torch.layer_norm: F.layer_norm (`cudnn_enable` is a CUDA switch)."""
    return fn.layer_norm(input, normalized_shape, weight, bias, eps)


def torch_group_norm(input: Traced, num_groups: int, weight: Traced | None = None,
                     bias: Traced | None = None, eps: float = 1e-5,
                     cudnn_enabled: bool = True) -> Traced:
    """torch.group_norm: F.group_norm (`cudnn_enabled` is a CUDA switch)."""
    return group_norm(input, num_groups, weight, bias, eps)


# ---------------------------------------------------------------- other spellings

def convolution(input: Traced, weight: Traced, bias: Traced | None, stride: Any,
                padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                groups: int, *switches: Any) -> Traced:
    """torch.convolution / torch._convolution (whose trailing arguments — benchmark,
    deterministic, cudnn_enabled, allow_tf32 — choose CUDA kernels): F.conv*d or, with
    `transposed`, F.conv_transpose*d."""
    if transposed:
        return conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                              dilation)
    if any(p for p in np.atleast_1d(output_padding)):
        raise refuse("convolution", "output_padding", output_padding,
                     "torch takes it with transposed=True")
    return conv(input, weight, bias, stride, padding, dilation, groups)


def chain_matmul(*matrices: Traced) -> Traced:
    return functools.reduce(operator.matmul, matrices)


def multi_dot(tensors: Any, *, out: Any = None) -> Traced:
    """torch.linalg.multi_dot (1-D ends as row and column vectors, dropped again)."""
    if out is not None:
        raise refuse("multi_dot", "out", out, "a write in place")
    return functools.reduce(operator.matmul, list(tensors))


def vecdot(x: Traced, y: Traced, *, dim: int = -1) -> Traced:
    """torch.linalg.vecdot of real vectors: Σ x y along `dim`."""
    product = x * y
    return product.sum(axis=dim % product.ndim)


def einsum(equation: str, *operands: Any) -> Traced:
    """torch.einsum: the operands one by one or as one list; spaces in the equation
    ignored."""
    if len(operands) == 1 and isinstance(operands[0], tuple | list):
        operands = tuple(operands[0])
    return contract.einsum(equation.replace(" ", ""), *operands)


def tensordot(a: Traced, b: Traced, dims: Any = 2, out: Any = None) -> Traced:
    """torch.tensordot: the last `dims` axes of a with the first of b, or the axes paired."""
    if out is not None:
        raise refuse("tensordot", "out", out, "a write in place")
    return contract.tensordot(a, b, dims)


def diagonal(input: Traced, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Traced:
    """torch.diagonal: input[..., i, i + offset] of axes dim1, dim2, moved last."""
    return contract.diagonal(input, offset, dim1, dim2)


def trace(input: Traced) -> Traced:
    """torch.trace of a matrix: Σ input[i, i]."""
    if input.ndim != 2:
        raise refuse("trace", "input", input, "torch takes a matrix")
    return contract.trace(input)


def diag(input: Traced, diagonal: int = 0) -> Traced:
    """torch.diag: a vector on the `diagonal`-th diagonal of a square matrix, or a
    matrix's diagonal."""
    if input.ndim not in (1, 2):
        raise refuse("diag", "input", input, "torch takes a vector or a matrix")
    return contract.diag(input, diagonal)


def diag_embed(input: Traced, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Traced:
    """torch.diag_embed: each vector of the last axis on the `offset`-th diagonal of a
    square matrix, whose axes are the result's `dim1` and `dim2`."""
    rank = input.ndim + 1
    rows, cols = (axis("diag_embed", d, rank, name) for d, name in ((dim1, "dim1"),
                                                                    (dim2, "dim2")))
    if rows == cols:
        raise refuse("diag_embed", "dim2", dim2, f"an axis other than dim1 ({dim1})")
    return np.moveaxis(contract.diagonal_matrices(input, offset), (-2, -1), (rows, cols))


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    **{getattr(torch, name): (fn.unary(builtin), {}) for name, builtin in ALIASES.items()},
    torch.reciprocal: (reciprocal, {}), torch.atan2: (atan2, {}), torch.arctan2: (atan2, {}),
    torch.addcmul: (addcmul, {}), torch.addcdiv: (addcdiv, {}),
    torch.cumsum: (_scan("cumsum"), {}), torch.cumprod: (_scan("cumprod"), {}),
    torch.clamp_min: (clamp_min, {}), torch.clamp_max: (clamp_max, {}),
    torch.detach: (detach, {}),
    torch.linalg.vector_norm: (vector_norm, {}), torch.norm: (norm, {}),
    torch.dist: (dist, {}), torch.cdist: (cdist, {}), F.normalize: (normalize, {}),
    F.cosine_similarity: (cosine_similarity, {}), F.rms_norm: (rms_norm, {}),
    torch.rms_norm: (rms_norm, {}), torch.layer_norm: (layer_norm, {}),
    torch.group_norm: (torch_group_norm, {}),
    torch.convolution: (convolution, {}), torch._convolution: (convolution, {}),
    torch.chain_matmul: (chain_matmul, {}), torch.linalg.multi_dot: (multi_dot, {}),
    torch.linalg.vecdot: (vecdot, {}),
    torch.einsum: (einsum, {}), torch.tensordot: (tensordot, {}),
    torch.outer: (lambda input, vec2: contract.outer(input, vec2), {}),
    torch.ger: (lambda input, vec2: contract.outer(input, vec2), {}),
    torch.inner: (lambda input, other: contract.inner(input, other), {}),
    torch.diagonal: (diagonal, {}), torch.trace: (trace, {}), torch.diag: (diag, {}),
    torch.diag_embed: (diag_embed, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {
    **{name: (fn.unary(builtin), {}) for name, builtin in ALIASES.items()},
    "reciprocal": (reciprocal, {}), "atan2": (atan2, {}), "arctan2": (atan2, {}),
    "addcmul": (addcmul, {}), "addcdiv": (addcdiv, {}),
    "cumsum": (_scan("cumsum"), {}), "cumprod": (_scan("cumprod"), {}),
    "clamp_min": (clamp_min, {}), "clamp_max": (clamp_max, {}), "detach": (detach, {}),
    "norm": (norm, {}), "dist": (dist, {}),
    "outer": (lambda input, vec2: contract.outer(input, vec2), {}),
    "inner": (lambda input, other: contract.inner(input, other), {}),
    "diagonal": (diagonal, {}), "trace": (trace, {}), "diag": (diag, {}),
    "diag_embed": (diag_embed, {}),
}
MODULES: dict[type, Callable[..., Any]] = {
    nn.RMSNorm: lambda m, w, x: rule_in(FUNCTIONS, F.rms_norm)(x, m.normalized_shape,
                                                               w.get("weight"), m.eps),
    nn.CosineSimilarity: lambda m, w, x1, x2: rule_in(FUNCTIONS, F.cosine_similarity)(
        x1, x2, m.dim, m.eps),
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES"]
