"""Rows of the `rv.fx` target table (`fx_targets.py`): the activations family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

Each activation is torch's formula, with torch's branch at the kinks, so that gradients
there are torch's too (and where torch's f64 gradient rounds a constant to f32, so does
Reverie's: hardsigmoid's 1/6, celu's 1/α):

    leaky_relu   x where x > 0, else slope · x              (at 0: slope)
    elu/selu/celu  scale · x where x > 0, else α · scale · (e^(x·s) − 1)   (at 0: α · s)
    hardtanh     x strictly inside (lo, hi), else lo or hi   (at lo, hi: 0); relu6 = (0, 6)
    hardsigmoid  (x + 3) / 6 strictly inside (−3, 3), else 0 or 1
    hardswish    x (x + 3) / 6 on (−3, 3), 0 below, x above  (at −3: 0; at 3: 1)
    mish         x tanh(softplus(x));  logsigmoid −softplus(−x);  softsign x / (|x| + 1)
    prelu        x where x > 0, else a · x, a learned per channel (axis 1) or one for all
    rrelu (eval) leaky_relu at the mean slope (lower + upper) / 2; in training refused
    softshrink   x ∓ λ outside [−λ, λ], else 0;  hardshrink x outside [−λ, λ], else 0
    threshold    x where x > t, else the value;  tanhshrink x − tanh(x)
    glu          a σ(b), a and b the halves of `dim`;  softmin softmax(−x)

Dropout in training mode multiplies by torch's own noise, made at every call by the calls
eager's kernel makes (`_dropout_impl` in aten: `empty_like(x).bernoulli_(1 - p).div_(1 -
p)`, or for feature dropout one draw per channel, `new_empty((N, C, 1, …))`), so under one
`torch.manual_seed` the compiled model drops what eager drops and leaves the random stream
where eager leaves it. Alpha dropout in training mode is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.fx_functional import functional_along, refuse
from reverie.fx_rows_rule import rule_in
from reverie.fx_rows_shapes import made
from reverie.tracing import RECORDER_FILES, Traced, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]

INPLACE = {"inplace": False}  # an in-place write would change values other nodes read

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


# ---------------------------------------------------------------- activations

def _f32(value: float) -> float:
    """`value` rounded to f32, as torch rounds some constants of its gradients."""
    return float(np.float32(value))


def _gradient_as(value: Traced, surrogate: Traced) -> Traced:
    """`value` (to rounding), with the derivatives of `surrogate`: where torch computes a
    gradient with f32 constants even in f64 (hardsigmoid's 1/6, celu's 1/α), Reverie's
    gradients follow torch's rather than the exact ones."""
    return surrogate + (value - surrogate)._call("stop_gradient")


def leaky_relu(input: Traced, negative_slope: float = 0.01, inplace: bool = False) -> Traced:
    return where(input > 0, input, input * negative_slope)


def _elu(x: Traced, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> Traced:
    """aten's elu: x · scale where x > 0, else (e^(x · input_scale) − 1) · α · scale."""
    inner = x if input_scale == 1 else x * input_scale
    negative = inner.expm1() * (alpha * scale)
    return where(x <= 0, negative, x if scale == 1 else x * scale)


def elu(input: Traced, alpha: float = 1.0, inplace: bool = False) -> Traced:
    return _elu(input, alpha)


def selu(input: Traced, inplace: bool = False) -> Traced:
    return _elu(input, SELU_ALPHA, SELU_SCALE)


def celu(input: Traced, alpha: float = 1.0, inplace: bool = False) -> Traced:
    """elu with input scale 1/α; torch's gradient takes 1/α of α rounded to f32."""
    if alpha == 0:
        raise refuse("celu", "alpha", alpha, "torch divides by it")
    value = _elu(input, alpha, 1.0, 1.0 / alpha)
    if input.element != "f64" or _f32(alpha) == alpha:
        return value
    return _gradient_as(value, _elu(input, alpha, 1.0, 1.0 / _f32(alpha)))


def mish(input: Traced, inplace: bool = False) -> Traced:
    return input * input.softplus().tanh()


def hardtanh(input: Traced, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Traced:
    """torch.clamp's value (NaN stays NaN); the gradient is 0 at the bounds, as torch's."""
    if min_val > max_val:
        raise refuse("hardtanh", "min_val", min_val, f"above max_val={max_val}")
    return where(input <= min_val, min_val, where(input >= max_val, max_val, input))


def relu6(input: Traced, inplace: bool = False) -> Traced:
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Traced, inplace: bool = False) -> Traced:
    """(x + 3) / 6 inside (−3, 3); torch's gradient there is 1/6 rounded to f32."""
    shifted = input + 3.0
    middle = shifted / 6.0
    if input.element == "f64":
        middle = _gradient_as(middle, shifted * _f32(1 / 6))
    return where(input <= -3, 0.0, where(input >= 3, 1.0, middle))


def hardswish(input: Traced, inplace: bool = False) -> Traced:
    return where(input <= -3, 0.0, where(input < 3, input * (input + 3.0) / 6.0, input))


def logsigmoid(input: Traced) -> Traced:
    return -(-input).softplus()


def softsign(input: Traced) -> Traced:
    return input / (abs(input) + 1)


def rrelu(input: Traced, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
          training: bool = False, inplace: bool = False) -> Traced:
    """F.rrelu in eval: leaky_relu at the mean slope (training draws a slope per element,
    which is refused)."""
    if training:
        raise refuse("rrelu", "training", training, "Reverie runs rrelu in eval only")
    return leaky_relu(input, (lower + upper) / 2)


def softshrink(input: Traced, lambd: float = 0.5) -> Traced:
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, 0.0))


def hardshrink(input: Traced, lambd: float = 0.5) -> Traced:
    return where((input > lambd) | (input < -lambd), input, 0.0)


def threshold(input: Traced, threshold: float, value: float, inplace: bool = False) -> Traced:
    return where(input > threshold, input, value)


def tanhshrink(input: Traced) -> Traced:
    return input - input.tanh()


def glu(input: Traced, dim: int = -1) -> Traced:
    """F.glu: the first half of `dim` times the sigmoid of the second."""
    axis = dim % input.ndim
    if input.shape[axis] % 2:
        raise refuse("glu", "input", input, f"torch halves axis {axis}, of odd size")
    half = input.shape[axis] // 2
    lead = (slice(None),) * axis
    return input[(*lead, slice(0, half))] * input[(*lead, slice(half, 2 * half))].sigmoid()


def softmin(input: Traced, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Traced:
    """F.softmin: softmax of −x along `dim` (torch's implicit dim where None)."""
    return functional_along("softmax")(-input, dim, _stacklevel, dtype)


def prelu(input: Traced, weight: Traced) -> Traced:
    """F.prelu: x where x > 0, else a · x (at 0: a), with one slope a or one per channel
    of axis 1."""
    count = int(np.prod(weight.shape))
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.ndim > 1 or count not in (1, channels):
        raise refuse("prelu", "weight", weight, f"torch takes 1 or {channels} slopes "
                     f"(the input's channels) in one axis")
    slope = weight.reshape(()) if count == 1 else \
        weight.reshape((channels,) + (1,) * (input.ndim - 2))
    return where(input > 0, input, slope * input)


# ---------------------------------------------------------------- dropout

def _probability(target: str, p: float, name: str = "p") -> None:
    if not 0 <= p <= 1:
        raise refuse(target, name, p, "dropout probability has to be between 0 and 1")


def _dropped(input: Traced, p: float, noise: Callable[[torch.Tensor], torch.Tensor]
             ) -> Traced:
    """input · noise / (1 − p), the noise's zeros and ones drawn as `noise(template)` does
    (aten's `_dropout_impl`); at p = 1, input · 0, which draws nothing."""
    if p == 1:
        return input * 0.0
    return input * made(lambda t: noise(t).bernoulli_(1 - p).div_(1 - p), input)


def dropout_in_training(target: str, name: str, input: Traced, p: float) -> Traced:
    """aten's `at::dropout(input, p, train=true)`, which torch's own ops also call (between
    an RNN's layers, on attention's weights): on the CPU, `_dropout_impl`'s noise, drawn
    laid out as eager's `input`; `p` is `target`'s argument `name`."""
    _probability(target, p, name)
    return input if p == 0 else _dropped(input, p, torch.empty_like)


def dropout(input: Traced, p: float = 0.5, training: bool = True, inplace: bool = False
            ) -> Traced:
    """F.dropout: each element kept with probability 1 − p and scaled by 1 / (1 − p)."""
    _probability("dropout", p)
    return dropout_in_training("dropout", "p", input, p) if training else input


def torch_dropout(input: Traced, p: float, train: bool) -> Traced:
    return dropout(input, p, train)


def _feature_dropout(target: str, input: Traced, p: float, training: bool,
                     batched: bool) -> Traced:
    """Channel-wise dropout: one draw per (sample, channel) of a batched input, per
    channel of an unbatched one (torch adds the batch axis, of size 1, and removes it)."""
    _probability(target, p)
    channels = 2 if batched else 1
    if input.ndim + 1 - channels < 1:
        raise refuse(target, "input", input, f"torch takes at least {channels + 1} dimensions")
    if not training or p == 0:
        return input
    singles = (1,) * (input.ndim - channels)  # its (sample, channel) sizes: the call's
    return _dropped(input, p, lambda t: t.new_empty((*t.shape[:channels], *singles)))


def feature_dropout(input: Traced, p: float, train: bool) -> Traced:
    return _feature_dropout("feature_dropout", input, p, train, batched=True)


def dropout1d(input: Traced, p: float = 0.5, training: bool = True, inplace: bool = False
              ) -> Traced:
    if input.ndim not in (2, 3):
        raise refuse("dropout1d", "input", input, "torch takes 2 or 3 dimensions")
    return _feature_dropout("dropout1d", input, p, training, batched=input.ndim == 3)


def dropout2d(input: Traced, p: float = 0.5, training: bool = True, inplace: bool = False
              ) -> Traced:
    """F.dropout2d: per (sample, channel), whatever the rank (torch warns where it is not
    3 or 4)."""
    return _feature_dropout("dropout2d", input, p, training, batched=True)


def dropout3d(input: Traced, p: float = 0.5, training: bool = True, inplace: bool = False
              ) -> Traced:
    """F.dropout3d: per (sample, channel) of a 5-d input, per channel otherwise."""
    return _feature_dropout("dropout3d", input, p, training, batched=input.ndim == 5)


def alpha_dropout(name: str) -> Emit:
    """F.alpha_dropout / feature_alpha_dropout: the identity out of training mode."""
    def emit(input: Traced, p: float = 0.5, training: bool = False, inplace: bool = False
             ) -> Traced:
        _probability(name, p)
        if training and p > 0:
            raise refuse(name, "training", training, "alpha dropout in training mode is not "
                         "compiled; call model.eval(), or use fallback=True")
        return input

    return emit


def torch_alpha_dropout(name: str) -> Emit:
    """torch.alpha_dropout / feature_alpha_dropout (input, p, train)."""
    inner = alpha_dropout(name)

    def emit(input: Traced, p: float, train: bool) -> Traced:
        return inner(input, p, train)

    return emit


# ---------------------------------------------------------------- the tables

FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    F.leaky_relu: (leaky_relu, INPLACE), F.elu: (elu, INPLACE), F.selu: (selu, INPLACE),
    torch.selu: (selu, INPLACE), F.celu: (celu, INPLACE), torch.celu: (celu, INPLACE),
    F.mish: (mish, INPLACE), F.hardtanh: (hardtanh, INPLACE), F.relu6: (relu6, INPLACE),
    F.hardsigmoid: (hardsigmoid, INPLACE), F.hardswish: (hardswish, INPLACE),
    F.logsigmoid: (logsigmoid, {}), F.softsign: (softsign, {}), F.prelu: (prelu, {}),
    F.rrelu: (rrelu, INPLACE), F.softshrink: (softshrink, {}), F.hardshrink: (hardshrink, {}),
    F.threshold: (threshold, INPLACE), torch.threshold: (threshold, {}),
    F.tanhshrink: (tanhshrink, {}), F.glu: (glu, {}), F.softmin: (softmin, {}),
    F.sigmoid: (lambda input: input.sigmoid(), {}), F.tanh: (lambda input: input.tanh(), {}),
    F.dropout: (dropout, INPLACE), torch.dropout: (torch_dropout, {}),
    F.dropout1d: (dropout1d, INPLACE), F.dropout2d: (dropout2d, INPLACE),
    F.dropout3d: (dropout3d, INPLACE), torch.feature_dropout: (feature_dropout, {}),
    **{getattr(F, name): (alpha_dropout(name), INPLACE)
       for name in ("alpha_dropout", "feature_alpha_dropout")},
    **{getattr(torch, name): (torch_alpha_dropout(name), {})
       for name in ("alpha_dropout", "feature_alpha_dropout")},
}

METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}


def _functional(target: Any, *attributes: str) -> Callable[..., Any]:
    """The module row of an activation: its functional row with the module's attributes."""
    def row(module: nn.Module, weights: dict[str, Traced], input: Traced) -> Traced:
        return rule_in(FUNCTIONS, target)(input, *(getattr(module, a) for a in attributes))

    return row


MODULES: dict[type, Callable[..., Any]] = {
    nn.LeakyReLU: _functional(F.leaky_relu, "negative_slope", "inplace"),
    nn.ELU: _functional(F.elu, "alpha", "inplace"), nn.SELU: _functional(F.selu, "inplace"),
    nn.CELU: _functional(F.celu, "alpha", "inplace"), nn.Mish: _functional(F.mish, "inplace"),
    nn.Hardtanh: _functional(F.hardtanh, "min_val", "max_val", "inplace"),
    nn.ReLU6: _functional(F.hardtanh, "min_val", "max_val", "inplace"),
    nn.Hardsigmoid: _functional(F.hardsigmoid, "inplace"),
    nn.Hardswish: _functional(F.hardswish, "inplace"),
    nn.LogSigmoid: _functional(F.logsigmoid), nn.Softsign: _functional(F.softsign),
    nn.PReLU: lambda m, w, x: rule_in(FUNCTIONS, F.prelu)(x, w["weight"]),
    nn.RReLU: lambda m, w, x: rule_in(FUNCTIONS, F.rrelu)(x, m.lower, m.upper, m.training,
                                                          m.inplace),
    nn.Softshrink: _functional(F.softshrink, "lambd"),
    nn.Hardshrink: _functional(F.hardshrink, "lambd"),
    nn.Threshold: _functional(F.threshold, "threshold", "value", "inplace"),
    nn.Tanhshrink: _functional(F.tanhshrink), nn.GLU: _functional(F.glu, "dim"),
    nn.Softmin: _functional(F.softmin, "dim"),
    nn.Dropout1d: _functional(F.dropout1d, "p", "training", "inplace"),
    nn.Dropout2d: _functional(F.dropout2d, "p", "training", "inplace"),
    nn.Dropout3d: _functional(F.dropout3d, "p", "training", "inplace"),
    nn.AlphaDropout: _functional(F.alpha_dropout, "p", "training"),
    nn.FeatureAlphaDropout: _functional(F.feature_alpha_dropout, "p", "training"),
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES", "dropout_in_training"]
