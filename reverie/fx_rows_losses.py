"""Rows of the `rv.fx` target table (`fx_targets.py`): the losses family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

Every loss is torch's formula, to rounding, with torch's reductions (`mean` is over the
elements, save where torch divides by the weights' sum instead):

    nll_loss          −w[t] x[n, t], rows labelled `ignore_index` count for nothing; the
                      mean divides by the weight of the rows that count
    binary_cross_entropy   −w (t log x + (1 − t) log(1 − x)), each log clamped at −100
    binary_cross_entropy_with_logits   w ((1 − t) x + (1 + (p − 1) t) softplus(−x))
    kl_div            t (log t − x) (0 where t = 0), or eᵗ (t − x) for `log_target`;
                      "batchmean" divides the sum by the batch size
    l1_loss           |x − t| (weighted: the mean divides by the weights' sum)
    smooth_l1_loss    ½ d² / β where |d| < β, else |d| − ½ β (|d| for β = 0)
    huber_loss        ½ d² where |d| < δ, else δ (|d| − ½ δ) (weighted: the mean is over
                      the elements)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

from reverie.fx_functional import _label_cross_entropy, _reduced, _reduction, refuse
from reverie.tracing import RECORDER_FILES, Traced, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]


def _same_shape(target: str, input: Traced, other: Traced | None, name: str) -> None:
    """Refuse a `target` or `weight` shaped otherwise than the input (torch broadcasts
    with a warning, or raises; Reverie takes the shapes torch means)."""
    if other is not None and tuple(other.shape) != tuple(input.shape):
        raise refuse(target, name, other, f"Reverie takes the input's shape "
                     f"{list(input.shape)}")


def nll_loss(input: Traced, target: Traced, weight: Traced | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.nll_loss of log-probabilities [N, C, d…] against class indices [N, d…]."""
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    if input.ndim < 2:
        raise refuse("nll_loss", "input", input, "Reverie takes a batch axis: [N, C, ...]")
    return _label_cross_entropy(input, target, weight, ignore_index, reduction, 0.0)


def binary_cross_entropy(input: Traced, target: Traced, weight: Traced | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Traced:
    """F.binary_cross_entropy of probabilities: each log clamped at −100, as torch's."""
    reduction = _reduction("binary_cross_entropy", size_average, reduce, reduction)
    _same_shape("binary_cross_entropy", input, target, "target")
    log_p = input.log()._binary("max", -100.0)
    log_q = (1.0 - input).log()._binary("max", -100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    return _reduced(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input: Traced, target: Traced,
                                     weight: Traced | None = None,
                                     size_average: bool | None = None,
                                     reduce: bool | None = None, reduction: str = "mean",
                                     pos_weight: Traced | None = None) -> Traced:
    """F.binary_cross_entropy_with_logits: (1 − t) x + (1 + (p − 1) t) log(1 + e^(−x)),
    the positive class weighted by `pos_weight` p (broadcast along the last axis)."""
    reduction = _reduction("binary_cross_entropy_with_logits", size_average, reduce, reduction)
    _same_shape("binary_cross_entropy_with_logits", input, target, "target")
    log_weight = 1.0 if pos_weight is None else 1.0 + (pos_weight - 1.0) * target
    loss = (1.0 - target) * input + log_weight * (-input).softplus()
    return _reduced(loss if weight is None else loss * weight, reduction)


def kl_div(input: Traced, target: Traced, size_average: bool | None = None,
           reduce: bool | None = None, reduction: str = "mean",
           log_target: bool = False) -> Traced:
    """F.kl_div of log-probabilities against probabilities (or log-probabilities)."""
    batchmean = reduction == "batchmean" and size_average is None and reduce is None
    reduction = "sum" if batchmean else _reduction("kl_div", size_average, reduce, reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = where(target > 0, target * target.log(), 0.0) - target * input
    reduced = _reduced(loss, reduction)
    return reduced / input.shape[0] if batchmean and input.ndim else reduced


def l1_loss(input: Traced, target: Traced, size_average: bool | None = None,
            reduce: bool | None = None, reduction: str = "mean",
            weight: Traced | None = None) -> Traced:
    """F.l1_loss: |x − t|; weighted, the mean divides by the weights' sum."""
    reduction = _reduction("l1_loss", size_average, reduce, reduction)
    _same_shape("l1_loss", input, target, "target")
    _same_shape("l1_loss", input, weight, "weight")
    loss = (input - target).abs()
    if weight is None:
        return _reduced(loss, reduction)
    return _reduced(loss * weight, reduction, weight.sum())


def _huber(difference: Traced, delta: float) -> Traced:
    """½ d² where |d| < δ, else δ (|d| − ½ δ)."""
    size = difference.abs()
    return where(size < delta, 0.5 * difference * difference, delta * (size - 0.5 * delta))


def smooth_l1_loss(input: Traced, target: Traced, size_average: bool | None = None,
                   reduce: bool | None = None, reduction: str = "mean",
                   beta: float = 1.0) -> Traced:
    """F.smooth_l1_loss: the Huber loss with δ = β, divided by β (|d| for β = 0)."""
    reduction = _reduction("smooth_l1_loss", size_average, reduce, reduction)
    _same_shape("smooth_l1_loss", input, target, "target")
    if beta < 0:
        raise refuse("smooth_l1_loss", "beta", beta, "torch takes beta >= 0")
    difference = input - target
    loss = difference.abs() if beta == 0 else _huber(difference, beta) / beta
    return _reduced(loss, reduction)


def huber_loss(input: Traced, target: Traced, reduction: str = "mean", delta: float = 1.0,
               weight: Traced | None = None) -> Traced:
    """F.huber_loss; weighted, the mean is over the elements (torch's)."""
    reduction = _reduction("huber_loss", None, None, reduction)
    _same_shape("huber_loss", input, target, "target")
    _same_shape("huber_loss", input, weight, "weight")
    if delta <= 0:
        raise refuse("huber_loss", "delta", delta, "torch takes delta > 0")
    loss = _huber(input - target, delta)
    return _reduced(loss if weight is None else loss * weight, reduction)


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    F.nll_loss: (nll_loss, {}), F.binary_cross_entropy: (binary_cross_entropy, {}),
    F.binary_cross_entropy_with_logits: (binary_cross_entropy_with_logits, {}),
    F.kl_div: (kl_div, {}), F.l1_loss: (l1_loss, {}), F.smooth_l1_loss: (smooth_l1_loss, {}),
    F.huber_loss: (huber_loss, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}

MODULES: dict[type, Callable[..., Any]] = {}
