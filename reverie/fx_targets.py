"""The one table of torch targets that `rv.fx` maps onto Reverie (docs/api.md §9).

A torch FX graph names what each node does by its target: a function (`torch.tanh`,
`operator.add`, `torch.nn.functional.linear`), a method name (`"softmax"`, `"view"`), or,
for `call_module` nodes, an `nn.Module` class (`nn.Linear`). Each row is a `Rule` that
records one target on `reverie.tracing.Traced` stand-ins, so a mapped node becomes Reverie
statements whose gradients, to any order, come from Reverie's own rules.

    FUNCTIONS[torch.nn.functional.linear]  # (input, weight, bias) -> x @ w.T + b
    METHODS["softmax"]                      # (input, dim, dtype) -> softmax(x, axis=dim)
    MODULES[nn.LayerNorm]                   # (module, weights, x) -> F.layer_norm's row

Every argument of a target is honoured or refused by name: a rule's recording
function takes torch's parameters under torch's names and in torch's order, and those are
the arguments it honours, save the ones its `only` accepts at one value (`inplace=False`).
An argument it has no parameter for, a value `only` does not accept, or a tensor that eager
PyTorch computed (a graph break's result, which is no stand-in) raises
`UnsupportedArgument` naming the target and the argument; `rv.fx` reports it as an
unsupported node, or with `fallback=True` runs that node in eager PyTorch. Module rows call
the rows of their functional form with the module's attributes, so they are checked alike
(`Rule`, `reverie/fx_rows_rule.py`).

The elementwise built-ins come from the op table (every built-in that torch also has:
`torch.exp`, `Tensor.exp`, ...), so the table grows with the language. `docs/api.md` lists
`supported_targets()`; the `torch.nn.functional` recordings are in `reverie/fx_functional.py`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie import fx_functional as fn
from reverie import (
    fx_rows_activations,
    fx_rows_aten,
    fx_rows_attention,
    fx_rows_conv,
    fx_rows_losses,
    fx_rows_margin_losses,
    fx_rows_math,
    fx_rows_norm_pool,
    fx_rows_resample,
    fx_rows_shapes,
    fx_rows_tensor_ops,
)
from reverie.fx_functional import UnsupportedArgument, float_dtype, refuse
from reverie.fx_rows_rule import Emit, Rule, target_name
from reverie.tracing import UNARY_BUILTINS, Traced, concatenate, where

# ---------------------------------------------------------------- recordings

def _dims(dim: Any) -> Any:
    """torch's `dim=` (an int, a sequence, or None) as a NumPy-style `axis=`; an empty
    sequence (amax's default) is every axis."""
    if isinstance(dim, tuple | list):
        return tuple(dim) if dim else None
    return dim


def _reduce(kind: str) -> Emit:
    """A reduction over `dim`, of the input first converted to `dtype` where given (sums
    and products of integers and booleans in int64, as torch's)."""
    def emit(input: Traced, dim: Any = None, keepdim: bool = False, *,
             dtype: Any = None) -> Traced:
        x = fn.accumulated(kind, input, dtype) if kind in ("sum", "prod") else \
            input if dtype is None else fn.cast(input, float_dtype(kind, dtype))
        return x._reduce(kind, _dims(dim), keepdim)

    return emit


def _add(sign: int) -> Emit:
    """torch.add / torch.sub: input ± alpha · other."""
    def emit(input: Any, other: Any, *, alpha: Any = 1) -> Any:
        scaled = other if alpha == 1 else other * alpha
        return input + scaled if sign > 0 else input - scaled

    return emit


def _div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Any:
    if rounding_mode is not None:
        raise refuse("div", "rounding_mode", rounding_mode)
    return input / other


def _scaled_sum(input: Any, product: Traced, beta: Any, alpha: Any) -> Traced:
    """beta · input + alpha · product, as torch's `addmm` family: at beta=0 the input is
    not read (its NaNs do not propagate)."""
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return scaled + (input if beta == 1 else input * beta)


def _addmm(input: Any, mat1: Traced, mat2: Traced, *, beta: Any = 1, alpha: Any = 1) -> Traced:
    return _scaled_sum(input, mat1 @ mat2, beta, alpha)


def _baddbmm(input: Any, batch1: Traced, batch2: Traced, *, beta: Any = 1,
             alpha: Any = 1) -> Traced:
    return _scaled_sum(input, batch1 @ batch2, beta, alpha)


def _addbmm(input: Any, batch1: Traced, batch2: Traced, *, beta: Any = 1,
            alpha: Any = 1) -> Traced:
    """torch.addbmm: beta · input + alpha · Σ_b batch1[b] @ batch2[b]."""
    return _scaled_sum(input, (batch1 @ batch2).sum(axis=0), beta, alpha)


def _addr(input: Any, vec1: Traced, vec2: Traced, *, beta: Any = 1, alpha: Any = 1) -> Traced:
    """torch.addr: beta · input + alpha · the outer product vec1 vec2ᵀ."""
    outer = vec1.reshape((vec1.shape[0], 1)) * vec2.reshape((1, vec2.shape[0]))
    return _scaled_sum(input, outer, beta, alpha)


def _addmm_activation(input: Any, mat1: Traced, mat2: Traced, *, beta: Any = 1,
                      alpha: Any = 1, use_gelu: bool = False) -> Traced:
    """torch._addmm_activation: addmm then relu, or the exact gelu (CPU's kernel)."""
    y = _addmm(input, mat1, mat2, beta=beta, alpha=alpha)
    return fn.gelu(y) if use_gelu else y.relu()


def _view(input: Traced, *shape: Any) -> Traced:
    return input.reshape(*shape)


def _reshape(input: Traced, shape: Any) -> Traced:
    return input.reshape(shape)


def _permute(input: Traced, *dims: Any) -> Traced:
    return input.transpose(*dims)


def _flatten(input: Traced, start_dim: int = 0, end_dim: int = -1) -> Traced:
    start, end = start_dim % input.ndim, end_dim % input.ndim
    sizes = input.shape[:start] + (math.prod(input.shape[start:end + 1]),) + \
        input.shape[end + 1:]
    return input.reshape(sizes)


def _transpose(input: Traced, dim0: int, dim1: int) -> Traced:
    order = list(range(input.ndim))
    a, b = dim0 % input.ndim, dim1 % input.ndim
    order[a], order[b] = order[b], order[a]
    return input.transpose(order)


def _clamp(input: Traced, min: Any = None, max: Any = None) -> Traced:  # noqa: A002 (torch's)
    """torch.clamp: max(min(x, hi), lo); the gradient is torch's (1 strictly inside)."""
    y = input if max is None else input._binary("min", max)
    return y if min is None else y._binary("max", min)


def _cat(tensors: Any, dim: int = 0) -> Traced:
    return concatenate(list(tensors), axis=dim)


def _where(condition: Any, input: Any, other: Any) -> Traced:
    return where(condition, input, other)


def _size(input: Traced, dim: int | None = None) -> Any:
    return input.shape if dim is None else input.shape[dim]


def _relu(input: Traced, inplace: bool = False) -> Traced:
    return input.relu()


def _getattr(input: Traced, name: str) -> Any:
    """`x.T`, `x.mT`, `x.shape`, `x.ndim` as Dynamo records them (`getattr(x, "T")`)."""
    if name in ("mT", "mH"):  # the last two axes swapped (real values: mH is mT)
        return input.transpose((*range(input.ndim - 2), input.ndim - 1, input.ndim - 2))
    if name not in ("T", "shape", "ndim"):
        raise UnsupportedArgument(f"getattr: attribute {name!r} of a tensor")
    return getattr(input, name)


def _contiguous(input: Traced, memory_format: Any = None) -> Traced:
    """A layout request: Reverie's values are laid out one way, and equal either way."""
    return input


# ---------------------------------------------------------------- the tables

INPLACE = {"inplace": False}  # an in-place write would change values other nodes read

_OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
              operator.neg, operator.matmul, operator.getitem, operator.gt, operator.ge,
              operator.lt, operator.le, operator.eq, operator.ne]
_COMPARISONS = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
                "eq": operator.eq, "ne": operator.ne, "greater": operator.gt,
                "greater_equal": operator.ge, "less": operator.lt, "less_equal": operator.le,
                "not_equal": operator.ne}


def _reflected(op: Callable[[Any, Any], Any]) -> Emit:
    """`Tensor.__rsub__` and its kind: `op` with the operands swapped (other op self)."""
    def emit(input: Any, other: Any) -> Any:
        return op(other, input)

    return emit


# Tensor's operator methods, as Dynamo records `x.__add__(y)`: the operator's own row
_DUNDERS = {"__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
            "__truediv__": operator.truediv, "__div__": operator.truediv,
            "__matmul__": operator.matmul, "__pow__": operator.pow, "__neg__": operator.neg,
            **{f"__{name}__": _COMPARISONS[name] for name in ("gt", "ge", "lt", "le", "eq",
                                                               "ne")},
            "__radd__": _reflected(operator.add), "__rsub__": _reflected(operator.sub),
            "__rmul__": _reflected(operator.mul), "__rtruediv__": _reflected(operator.truediv),
            "__rdiv__": _reflected(operator.truediv), "__rpow__": _reflected(operator.pow),
            "__rmatmul__": _reflected(operator.matmul)}

# Functions (call_function targets): target -> (recording, arguments accepted at one value).
_FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    **{op: (op, {}) for op in _OPERATORS}, getattr: (_getattr, {}),
    torch.add: (_add(1), {}), torch.sub: (_add(-1), {}), torch.mul: (operator.mul, {}),
    torch.div: (_div, {}), torch.pow: (operator.pow, {}), torch.neg: (operator.neg, {}),
    torch.matmul: (operator.matmul, {}), torch.mm: (operator.matmul, {}),
    torch.mv: (operator.matmul, {}), torch.bmm: (operator.matmul, {}),
    torch.addmm: (_addmm, {}), torch.baddbmm: (_baddbmm, {}), torch.addbmm: (_addbmm, {}),
    torch.addmv: (_addmm, {}), torch.addr: (_addr, {}),
    torch._addmm_activation: (_addmm_activation, {}),
    torch.square: (lambda input: input * input, {}),
    torch.maximum: (lambda input, other: input._binary("max", other), {}),
    torch.minimum: (lambda input, other: input._binary("min", other), {}),
    torch.clamp: (_clamp, {}), torch.where: (_where, {}), torch.cat: (_cat, {}),
    torch.concat: (_cat, {}), torch.sum: (_reduce("sum"), {}),
    torch.mean: (_reduce("mean"), {}), torch.prod: (_reduce("prod"), {}),
    torch.amax: (_reduce("max"), {}), torch.amin: (_reduce("min"), {}),
    torch.logsumexp: (_reduce("logsumexp"), {}),
    torch.softmax: (fn.along("softmax"), {}), torch.log_softmax: (fn.along("log_softmax"), {}),
    torch.transpose: (_transpose, {}), torch.permute: (lambda input, dims: input.transpose(dims),
                                                      {}),
    torch.reshape: (_reshape, {}), torch.flatten: (_flatten, {}),
    torch.t: (lambda input: input.T, {}),
    F.linear: (fn.linear, {}), F.relu: (_relu, INPLACE), F.gelu: (fn.gelu, {}),
    F.silu: (fn.silu, INPLACE), F.softplus: (fn.softplus, {}), F.layer_norm: (fn.layer_norm, {}),
    F.softmax: (fn.functional_along("softmax"), {}),
    F.log_softmax: (fn.functional_along("log_softmax"), {}),
    F.dropout: (fn.dropout, {}), F.mse_loss: (fn.mse_loss, {}),
    F.cross_entropy: (fn.cross_entropy, {}),
    F.pad: (fn.pad, {}), torch._C._nn.pad: (fn.pad, {}),  # the latter in Dynamo's graphs
    torch.sigmoid: (fn.unary("sigmoid"), {}), torch.tanh: (fn.unary("tanh"), {}),
    torch.relu: (fn.unary("relu"), {}),
    **{getattr(torch, name): (op, {}) for name, op in _COMPARISONS.items()},
}

# Tensor methods (call_method targets, by name): the tensor is the first argument.
_METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {
    "add": (_add(1), {}), "sub": (_add(-1), {}), "mul": (operator.mul, {}), "div": (_div, {}),
    "pow": (operator.pow, {}), "neg": (operator.neg, {}), "matmul": (operator.matmul, {}),
    "mm": (operator.matmul, {}), "bmm": (operator.matmul, {}), "addmm": (_addmm, {}),
    "baddbmm": (_baddbmm, {}), "addbmm": (_addbmm, {}), "addmv": (_addmm, {}),
    "addr": (_addr, {}),
    "sum": (_reduce("sum"), {}), "mean": (_reduce("mean"), {}), "prod": (_reduce("prod"), {}),
    "amax": (_reduce("max"), {}), "amin": (_reduce("min"), {}),
    "logsumexp": (_reduce("logsumexp"), {}),
    "softmax": (fn.along("softmax"), {}), "log_softmax": (fn.along("log_softmax"), {}),
    "view": (_view, {}), "reshape": (_view, {}), "flatten": (_flatten, {}),
    "transpose": (_transpose, {}), "permute": (_permute, {}), "t": (lambda input: input.T, {}),
    "size": (_size, {}), "dim": (lambda input: input.ndim, {}), "contiguous": (_contiguous, {}),
    "clamp": (_clamp, {}), "square": (lambda input: input * input, {}),
    **{name: (op, {}) for name, op in _COMPARISONS.items()},
    **{name: (op, {}) for name, op in _DUNDERS.items()},
}

# the families kept in modules of their own (`fx_rows_*.py`), in tables of the same form
FAMILIES = (fx_rows_activations, fx_rows_attention, fx_rows_conv, fx_rows_losses,
            fx_rows_margin_losses, fx_rows_math, fx_rows_norm_pool, fx_rows_resample,
            fx_rows_shapes, fx_rows_tensor_ops)
for _family in FAMILIES:
    _FUNCTIONS.update(_family.FUNCTIONS)
    _METHODS.update(_family.METHODS)
_FUNCTIONS.update(fx_rows_aten.rows(_FUNCTIONS))  # ATen's spellings of the functional rows

for _name in UNARY_BUILTINS:  # every elementwise built-in torch also has, both spellings
    if callable(getattr(torch, _name, None)):
        _FUNCTIONS.setdefault(getattr(torch, _name), (fn.unary(_name), {}))
    if callable(getattr(torch.Tensor, _name, None)):
        _METHODS.setdefault(_name, (fn.unary(_name), {}))


FUNCTIONS: dict[Any, Rule] = {t: Rule(target_name(t), emit, only)
                              for t, (emit, only) in _FUNCTIONS.items()}
METHODS: dict[str, Rule] = {m: Rule(f"Tensor.{m}", emit, only)
                            for m, (emit, only) in _METHODS.items()}


# nn.Module classes (call_module targets): (module, recorded weights, *inputs) -> value.
# The weights are the module's parameters, recorded as kernel inputs by the caller; each
# row calls its functional form's rule with the module's attributes.
MODULES: dict[type, Callable[..., Any]] = {
    nn.Linear: lambda m, w, x: FUNCTIONS[F.linear](x, w["weight"], w.get("bias")),
    nn.ReLU: lambda m, w, x: FUNCTIONS[F.relu](x, m.inplace),
    nn.Tanh: lambda m, w, x: x.tanh(), nn.Sigmoid: lambda m, w, x: x.sigmoid(),
    nn.SiLU: lambda m, w, x: FUNCTIONS[F.silu](x, m.inplace),
    nn.GELU: lambda m, w, x: FUNCTIONS[F.gelu](x, m.approximate),
    nn.Softplus: lambda m, w, x: FUNCTIONS[F.softplus](x, m.beta, m.threshold),
    nn.LayerNorm: lambda m, w, x: FUNCTIONS[F.layer_norm](x, m.normalized_shape,
                                                          w.get("weight"), w.get("bias"), m.eps),
    nn.Softmax: lambda m, w, x: FUNCTIONS[F.softmax](x, m.dim),
    nn.LogSoftmax: lambda m, w, x: FUNCTIONS[F.log_softmax](x, m.dim),
    nn.Dropout: lambda m, w, x: FUNCTIONS[F.dropout](x, m.p, m.training, m.inplace),
    nn.Identity: lambda m, w, x: x,
    nn.Flatten: lambda m, w, x: FUNCTIONS[torch.flatten](x, m.start_dim, m.end_dim),
    nn.MSELoss: lambda m, w, x, t: FUNCTIONS[F.mse_loss](x, t, reduction=m.reduction),
    nn.CrossEntropyLoss: lambda m, w, x, t: FUNCTIONS[F.cross_entropy](
        x, t, m.weight, ignore_index=m.ignore_index, reduction=m.reduction,
        label_smoothing=m.label_smoothing),
}
for _family in FAMILIES:
    MODULES.update(_family.MODULES)
MODULES.update(fx_rows_aten.MODULES)


def supported_targets() -> dict[str, list[str]]:
    """The mapped targets by kind, as `docs/api.md` lists them."""
    return {"functions": sorted({target_name(t) for t in FUNCTIONS}),
            "methods": sorted(f"Tensor.{m}" for m in METHODS),
            "modules": sorted(f"nn.{m.__name__}" for m in MODULES)}


__all__ = ["FUNCTIONS", "METHODS", "MODULES", "Rule", "UnsupportedArgument",
           "supported_targets", "target_name"]
