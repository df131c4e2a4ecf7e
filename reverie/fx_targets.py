"""The one table of torch targets that `rv.fx` maps onto Reverie (SPEC §3.7).

A torch FX graph names what each node does by its target: a function (`torch.tanh`,
`operator.add`, `torch.nn.functional.linear`), a method name (`"softmax"`, `"view"`), or,
for `call_module` nodes, an `nn.Module` class (`nn.Linear`). Each row below records one
target on `reverie.tracing.Traced` stand-ins, so a mapped node becomes Reverie statements
whose gradients, to any order, come from Reverie's own rules.

    FUNCTIONS[torch.nn.functional.linear]  # (x, w, b) -> x @ w.T + b
    METHODS["softmax"]                      # (x, dim) -> softmax(x, axis=dim)
    MODULES[nn.LayerNorm]                   # (module, x) -> the same maths, its weights inputs

The elementwise built-ins come from the op table (every built-in that torch also has:
`torch.exp`, `Tensor.exp`, ...), so the table grows with the language. `docs/api.md` lists
`supported_targets()`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.tracing import UNARY_BUILTINS, Axis, Traced, concatenate, where

Emit = Callable[..., Any]


def _dims(dim: Any) -> Any:
    """torch's `dim=` (an int, a tuple, or None) as a NumPy-style `axis=`."""
    return tuple(dim) if isinstance(dim, list) else dim


def _reduce(kind: str) -> Emit:
    def emit(x: Traced, dim: Any = None, keepdim: bool = False, **_: Any) -> Traced:
        return x._reduce(kind, _dims(dim), keepdim)

    return emit


def _linear(x: Traced, weight: Traced, bias: Traced | None = None) -> Traced:
    """F.linear: y = x Wᵀ + b (x of rank 1 or 2)."""
    y = x @ weight.T
    return y if bias is None else y + bias


def _gelu(x: Traced, approximate: str = "none") -> Traced:
    """F.gelu: x Φ(x) = x (1 + erf(x / √2)) / 2, or torch's tanh approximation."""
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    return 0.5 * x * (1.0 + (x * (1 / math.sqrt(2))).erf())


def _silu(x: Traced, inplace: bool = False) -> Traced:
    """F.silu: x σ(x)."""
    return x * x.sigmoid()


def _softplus(x: Traced, beta: float = 1.0, threshold: float = 20.0) -> Traced:
    """F.softplus: log(1 + e^(βx)) / β (torch's threshold only guards overflow, which
    Reverie's softplus does not have)."""
    return x.softplus() if beta == 1 else (x * beta).softplus() / beta


def _layer_norm(x: Traced, shape: Any, weight: Traced | None = None,
                bias: Traced | None = None, eps: float = 1e-5) -> Traced:
    """F.layer_norm over the last len(shape) axes: (x - mean) / √(var + eps) · w + b."""
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    centred = x - x.mean(axis=axes, keepdims=True)
    y = centred * ((centred * centred).mean(axis=axes, keepdims=True) + eps).rsqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def _reduced(loss: Traced, reduction: str) -> Traced:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _mse_loss(x: Traced, target: Traced, reduction: str = "mean", **_: Any) -> Traced:
    """F.mse_loss: (x - t)², reduced."""
    difference = x - target
    return _reduced(difference * difference, reduction)


def _cross_entropy(logits: Traced, target: Traced, weight: Any = None, reduction: str = "mean",
                   **kwargs: Any) -> Traced:
    """F.cross_entropy with class indices: −log_softmax(z)[n, t[n]], reduced."""
    if weight is not None or kwargs.get("label_smoothing", 0.0):
        raise NotImplementedError("cross_entropy with weight or label_smoothing")
    log_p = logits.along("log_softmax", 1)
    rec = logits.recording
    picked = rec.let(f"{log_p.name}[n, {target.name}[n]]", target.axes, logits.dtype,
                     index="[n]")
    return _reduced(-picked, reduction)


def _dropout(x: Traced, p: float = 0.5, training: bool = False, inplace: bool = False
             ) -> Traced:
    """F.dropout in evaluation: the identity (training-mode dropout draws random masks)."""
    if training and p > 0:
        raise NotImplementedError("dropout in training mode (call model.eval())")
    return x


def _convolution(x: Traced, weight: Traced, bias: Traced | None, stride: Any, padding: Any,
                 dilation: Any, groups: int) -> Traced:
    """F.conv1d/conv2d in index notation, zero padding by Reverie's out-of-range reads:
    y[b, o, i…] = Σ_{c, k…} x[b, c, s·i + k − pad] · w[o, c, k…] + bias[o]."""
    spatial = x.ndim - 2
    strides, pads, dilations = (tuple(v) if isinstance(v, tuple | list) else (v,) * spatial
                                for v in (stride, padding, dilation))
    if groups != 1 or any(d != 1 for d in dilations) or isinstance(padding, str):
        raise NotImplementedError("convolution with groups, dilation or string padding")
    names = "ijh"[:spatial]
    ranges, reads, axes = [], [], []
    for axis, (i, s, pad) in enumerate(zip(names, strides, pads, strict=True)):
        size, kernel = x.axes[2 + axis], weight.axes[2 + axis]
        out = (size.size + 2 * pad - kernel.size) // s + 1
        extent = f"{size.dim} + {2 * pad} - {kernel.dim}" if pad else f"{size.dim} - {kernel.dim}"
        dim = str(out) if f"{size.dim}{kernel.dim}".isdigit() else \
            f"({extent}) // {s} + 1" if s != 1 else f"{extent} + 1"
        ranges.append(f"{i} in 0..{dim}")
        reads.append((f"{s} * {i}" if s != 1 else i) + f" + k{axis}" + (f" - {pad}" if pad else ""))
        axes.append(Axis(out, dim))
    taps = ", ".join(f"k{a}" for a in range(spatial))
    expr = (f"sum[c, {taps}]({x.name}[b, c, {', '.join(reads)}] * "
            f"{weight.name}[o, c, {taps}])")
    rec = x.recording
    y = rec.let(expr, (x.axes[0], weight.axes[0], *axes), x.dtype,
                index=f"[b, o, {', '.join(ranges)}]")
    if bias is None:
        return y
    return y + rec.let(f"reshape({bias.name}, ({bias.axes[0].dim}, {', '.join('1' * spatial)}))",
                       (bias.axes[0], *(Axis(1, "1"),) * spatial), bias.dtype)


def _conv(x: Traced, weight: Traced, bias: Traced | None = None, stride: Any = 1,
          padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Traced:
    return _convolution(x, weight, bias, stride, padding, dilation, groups)


def _view(x: Traced, *shape: Any) -> Traced:
    return x.reshape(*shape)


def _flatten(x: Traced, start_dim: int = 0, end_dim: int = -1) -> Traced:
    start, end = start_dim % x.ndim, end_dim % x.ndim
    sizes = x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]
    return x.reshape(sizes)


def _transpose(x: Traced, a: int, b: int) -> Traced:
    order = list(range(x.ndim))
    order[a % x.ndim], order[b % x.ndim] = order[b % x.ndim], order[a % x.ndim]
    return x.transpose(order)


def _clamp(x: Traced, min: Any = None, max: Any = None) -> Traced:  # noqa: A002 (torch's)
    """torch.clamp: max(min(x, hi), lo); the gradient is torch's (1 strictly inside)."""
    y = x if max is None else x._binary("min", max)
    return y if min is None else y._binary("max", min)


def _cat(values: Any, dim: int = 0) -> Traced:
    return concatenate(list(values), axis=dim)


def _size(x: Traced, dim: int | None = None) -> Any:
    return x.shape if dim is None else x.shape[dim]


def _unary(builtin: str) -> Emit:
    def emit(x: Traced, inplace: bool = False) -> Traced:  # F.relu(x, inplace=...)
        return x._call(builtin)

    return emit


def _getattr(x: Traced, name: str) -> Any:
    """`x.T`, `x.shape`, `x.ndim` as Dynamo records them (`getattr(x, "T")`)."""
    if name not in ("T", "shape", "ndim"):
        raise NotImplementedError(f"attribute {name!r} of a tensor")
    return getattr(x, name)


def _along(builtin: str) -> Emit:
    def emit(x: Traced, dim: int = -1, dtype: Any = None, **_: Any) -> Traced:
        return x.along(builtin, dim)

    return emit


# Functions (call_function targets), beside the elementwise built-ins added below.
FUNCTIONS: dict[Any, Emit] = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.truediv: operator.truediv, operator.pow: operator.pow,
    operator.neg: operator.neg, operator.matmul: operator.matmul,
    operator.getitem: operator.getitem, getattr: _getattr,
    operator.gt: operator.gt, operator.ge: operator.ge, operator.lt: operator.lt,
    operator.le: operator.le, operator.eq: operator.eq, operator.ne: operator.ne,
    torch.add: operator.add, torch.sub: operator.sub, torch.mul: operator.mul,
    torch.div: operator.truediv, torch.pow: operator.pow, torch.neg: operator.neg,
    torch.matmul: operator.matmul, torch.mm: operator.matmul, torch.mv: operator.matmul,
    torch.square: lambda x: x * x,
    torch.maximum: lambda a, b: a._binary("max", b),
    torch.minimum: lambda a, b: a._binary("min", b),
    torch.clamp: _clamp, torch.where: where, torch.cat: _cat, torch.concat: _cat,
    torch.sum: _reduce("sum"), torch.mean: _reduce("mean"), torch.prod: _reduce("prod"),
    torch.amax: _reduce("max"), torch.amin: _reduce("min"),
    torch.logsumexp: _reduce("logsumexp"),
    torch.softmax: _along("softmax"), torch.log_softmax: _along("log_softmax"),
    torch.transpose: _transpose, torch.permute: lambda x, dims: x.transpose(dims),
    torch.reshape: lambda x, shape: x.reshape(shape), torch.flatten: _flatten,
    torch.t: lambda x: x.T,
    F.linear: _linear, F.relu: _unary("relu"), F.gelu: _gelu, F.silu: _silu,
    F.softplus: _softplus, F.layer_norm: _layer_norm, F.softmax: _along("softmax"),
    F.log_softmax: _along("log_softmax"), F.dropout: _dropout, F.mse_loss: _mse_loss,
    F.cross_entropy: _cross_entropy, F.conv1d: _conv, F.conv2d: _conv,
    torch.sigmoid: _unary("sigmoid"), torch.tanh: _unary("tanh"), torch.relu: _unary("relu"),
}

# Tensor methods (call_method targets, by name).
METHODS: dict[str, Emit] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "pow": operator.pow, "neg": operator.neg, "matmul": operator.matmul,
    "sum": _reduce("sum"), "mean": _reduce("mean"), "prod": _reduce("prod"),
    "amax": _reduce("max"), "amin": _reduce("min"), "logsumexp": _reduce("logsumexp"),
    "softmax": _along("softmax"), "log_softmax": _along("log_softmax"),
    "view": _view, "reshape": _view, "flatten": _flatten, "transpose": _transpose,
    "permute": lambda x, *dims: x.transpose(*dims), "t": lambda x: x.T,
    "size": _size, "dim": lambda x: x.ndim, "contiguous": lambda x: x,
    "clamp": _clamp, "square": lambda x: x * x,
}

for _name in UNARY_BUILTINS:  # every elementwise built-in torch also has, both spellings
    if callable(getattr(torch, _name, None)):
        FUNCTIONS[getattr(torch, _name)] = _unary(_name)
    if callable(getattr(torch.Tensor, _name, None)):
        METHODS[_name] = _unary(_name)


def _weights(module: nn.Module) -> tuple[Any, Any]:
    return module.weight, module.bias


# nn.Module classes (call_module targets): (module, recorded weights, *inputs) -> value.
# `Weights` are the module's parameters, recorded as kernel inputs by the caller.
MODULES: dict[type, Callable[..., Any]] = {
    nn.Linear: lambda m, w, x: _linear(x, w["weight"], w.get("bias")),
    nn.Conv1d: lambda m, w, x: _conv(x, w["weight"], w.get("bias"), m.stride, m.padding,
                                     m.dilation, m.groups),
    nn.Conv2d: lambda m, w, x: _conv(x, w["weight"], w.get("bias"), m.stride, m.padding,
                                     m.dilation, m.groups),
    nn.ReLU: lambda m, w, x: x.relu(), nn.Tanh: lambda m, w, x: x.tanh(),
    nn.Sigmoid: lambda m, w, x: x.sigmoid(), nn.SiLU: lambda m, w, x: x * x.sigmoid(),
    nn.GELU: lambda m, w, x: _gelu(x, m.approximate),
    nn.Softplus: lambda m, w, x: _softplus(x, m.beta, m.threshold),
    nn.LayerNorm: lambda m, w, x: _layer_norm(x, m.normalized_shape, w.get("weight"),
                                              w.get("bias"), m.eps),
    nn.Softmax: lambda m, w, x: x.along("softmax", -1 if m.dim is None else m.dim),
    nn.LogSoftmax: lambda m, w, x: x.along("log_softmax", -1 if m.dim is None else m.dim),
    nn.Dropout: lambda m, w, x: _dropout(x, m.p, m.training),
    nn.Identity: lambda m, w, x: x,
    nn.Flatten: lambda m, w, x: _flatten(x, m.start_dim, m.end_dim),
    nn.MSELoss: lambda m, w, x, t: _mse_loss(x, t, m.reduction),
    nn.CrossEntropyLoss: lambda m, w, x, t: _cross_entropy(x, t, m.weight, m.reduction,
                                                           label_smoothing=m.label_smoothing),
}


def target_name(target: Any) -> str:
    """A function target as it is written: `torch.tanh`, `_operator.add`."""
    module = getattr(target, "__module__", None) or "torch"
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def supported_targets() -> dict[str, list[str]]:
    """The mapped targets by kind, as `docs/api.md` lists them."""
    return {"functions": sorted({target_name(t) for t in FUNCTIONS}),
            "methods": sorted(f"Tensor.{m}" for m in METHODS),
            "modules": sorted(f"nn.{m.__name__}" for m in MODULES)}


__all__ = ["FUNCTIONS", "METHODS", "MODULES", "supported_targets", "target_name"]
