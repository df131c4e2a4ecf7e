"""Rows of the `rv.fx` target table (`fx_targets.py`): the margin and embedding losses.

Each table has the form of `fx_targets`' own (see `fx_rows_losses.py`). Every loss is
torch's formula, to rounding, with torch's reductions over the elements ("mean", "sum",
"none"); x is the input, y the target:

    margin_ranking_loss     max(0, −y (x₁ − x₂) + margin)
    hinge_embedding_loss    x where y ≠ −1, plus max(0, margin − x) where y ≠ 1 (torch
                            adds both terms, so a label other than ±1 counts twice)
    soft_margin_loss        log(1 + e^(−y x))
    cosine_embedding_loss   1 − cos where y = 1, max(0, cos − margin) where y = −1, with
                            cos = x₁·x₂ / √((|x₁|² + ε)(|x₂|² + ε)), ε = 10⁻¹², along axis 1
    poisson_nll_loss        eˣ − y x (`log_input`), else x − y log(x + eps); `full` adds
                            Stirling's y log y − y + ½ log(2π y) where y > 1
    triplet_margin_loss     max(0, margin + d(a, p) − d(a, n)), d(u, v) = ‖u − v + eps‖_p
                            along the last axis (`pairwise_distance`); `swap` takes
                            min(d(a, n), d(p, n)) for d(a, n)
    multi_margin_loss       Σ_{i≠y} w_y max(0, margin − x_y + x_i)^p / C, p ∈ {1, 2}
    multilabel_margin_loss  Σ_{j∈Y} Σ_{i∉Y} max(0, 1 − x_j + x_i) / C, Y the labels of a
                            row before its first −1 (a repeated label counts again)

Each max(0, z) is `where(z > 0, z, 0)`: torch's gradient, 0 at z = 0. The masks made of
literals alone are converted to the input's dtype by name (`f32(where(…, 1.0, 0.0))`), as
a literal alone takes the kernel's default float.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.fx_functional import _reduced, _reduction, refuse
from reverie.fx_rows_rule import rule_in
from reverie.tracing import RECORDER_FILES, Axis, Traced, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]
COSINE_EPSILON = 1e-12  # ATen's EPSILON in cosine_embedding_loss


def _hinge(z: Traced) -> Traced:
    """max(0, z), with torch's gradient (0 at z = 0)."""
    return where(z > 0, z, 0.0)


def margin_ranking_loss(input1: Traced, input2: Traced, target: Traced, margin: float = 0.0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Traced:
    """F.margin_ranking_loss: max(0, −y (x₁ − x₂) + margin)."""
    reduction = _reduction("margin_ranking_loss", size_average, reduce, reduction)
    return _reduced(_hinge(-target * (input1 - input2) + margin), reduction)


def hinge_embedding_loss(input: Traced, target: Traced, margin: float = 1.0,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Traced:
    """F.hinge_embedding_loss: x where y ≠ −1 plus max(0, margin − x) where y ≠ 1."""
    reduction = _reduction("hinge_embedding_loss", size_average, reduce, reduction)
    loss = where(target != 1, _hinge(margin - input), 0.0) + where(target != -1, input, 0.0)
    return _reduced(loss, reduction)


def soft_margin_loss(input: Traced, target: Traced, size_average: bool | None = None,
                     reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.soft_margin_loss: log(1 + e^(−y x)), as torch writes it (log1p of exp)."""
    reduction = _reduction("soft_margin_loss", size_average, reduce, reduction)
    return _reduced((-input * target).exp().log1p(), reduction)


def cosine_embedding_loss(input1: Traced, input2: Traced, target: Traced, margin: float = 0.0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Traced:
    """F.cosine_embedding_loss of rows [N, D] (or one row [D]) labelled ±1."""
    reduction = _reduction("cosine_embedding_loss", size_average, reduce, reduction)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape):
        raise refuse("cosine_embedding_loss", "input2", input2,
                     "torch takes two inputs of one shape [N, D] or [D]")
    axis = input1.ndim - 1
    product = (input1 * input2).sum(axis=axis)
    squares = ((input1 * input1).sum(axis=axis) + COSINE_EPSILON) * \
        ((input2 * input2).sum(axis=axis) + COSINE_EPSILON)
    cos = product / squares.sqrt()
    loss = where(target == 1, 1.0 - cos, 0.0) + where(target == -1, _hinge(cos - margin), 0.0)
    return _reduced(loss, reduction)


def poisson_nll_loss(input: Traced, target: Traced, log_input: bool = True, full: bool = False,
                     size_average: bool | None = None, eps: float = 1e-8,
                     reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.poisson_nll_loss: the Poisson negative log-likelihood of counts y."""
    reduction = _reduction("poisson_nll_loss", size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + where(target > 1, stirling, 0.0)
    return _reduced(loss, reduction)


def pairwise_distance(x1: Traced, x2: Traced, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Traced:
    """F.pairwise_distance: ‖x₁ − x₂ + eps‖_p along the last axis."""
    if p <= 0:
        raise refuse("pairwise_distance", "p", p, "Reverie takes p > 0")
    difference = x1 - x2 + eps
    axis = max(difference.ndim - 1, 0)
    if p == 2:
        norm = (difference * difference).sum(axis=axis).sqrt()
    elif p == 1:
        norm = difference.abs().sum(axis=axis)
    else:
        norm = (difference.abs() ** p).sum(axis=axis) ** (1.0 / p)
    return norm.reshape((*norm.shape, 1)) if keepdim else norm


def triplet_margin_loss(anchor: Traced, positive: Traced, negative: Traced,
                        margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.triplet_margin_loss: max(0, margin + d(a, p) − d(a, n))."""
    reduction = _reduction("triplet_margin_loss", size_average, reduce, reduction)
    positive_distance = pairwise_distance(anchor, positive, p, eps)
    negative_distance = pairwise_distance(anchor, negative, p, eps)
    if swap:
        negative_distance = negative_distance._binary(
            "min", pairwise_distance(positive, negative, p, eps))
    return _reduced(_hinge(margin + positive_distance - negative_distance), reduction)


def _label_axes(target_name: str, input: Traced, target: Traced) -> None:
    """Refuse a class-score input other than [N, C] with labels [N] (torch also takes one
    row, [C])."""
    if input.ndim != 2 or tuple(target.shape) != tuple(input.shape[:1]):
        raise refuse(target_name, "input", input,
                     "Reverie takes scores [N, C] with labels [N]")


def multi_margin_loss(input: Traced, target: Traced, p: int = 1, margin: float = 1.0,
                      weight: Traced | None = None, size_average: bool | None = None,
                      reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.multi_margin_loss: Σ_{i≠y} w_y max(0, margin − x_y + x_i)^p / C per row."""
    reduction = _reduction("multi_margin_loss", size_average, reduce, reduction)
    if p not in (1, 2):
        raise refuse("multi_margin_loss", "p", p, "torch takes 1 or 2")
    _label_axes("multi_margin_loss", input, target)
    rec, (rows, classes) = input.recording, input.axes
    picked = rec.index_let([("n", None)], lambda n: f"{input.name}[{n}, {target.name}[{n}]]",
                           (rows,), input.element)
    others = rec.index_let([("n", None), ("c", str(classes.size))],
                           lambda n, c: f"{input.element}(where({c} == {target.name}[{n}], 0.0, "
                                        f"1.0))",
                           input.axes, input.element)
    z = margin - picked.reshape((rows.size, 1)) + input
    term = _hinge(z) if p == 1 else _hinge(z) * z
    loss = (term * others).sum(axis=1) / classes.size
    if weight is not None:
        loss = loss * rec.index_let([("n", None)], lambda n: f"{weight.name}[{target.name}[{n}]]",
                                    (rows,), input.element)
    return _reduced(loss, reduction)


def multilabel_margin_loss(input: Traced, target: Traced, size_average: bool | None = None,
                           reduce: bool | None = None, reduction: str = "mean") -> Traced:
    """F.multilabel_margin_loss: labels [N, C] of class indices, each row's ended by its
    first −1; Σ over the labels j and the classes i not among them of max(0, 1 − x_j + x_i),
    over C."""
    reduction = _reduction("multilabel_margin_loss", size_average, reduce, reduction)
    if input.ndim != 2 or tuple(target.shape) != tuple(input.shape):
        raise refuse("multilabel_margin_loss", "input", input,
                     "Reverie takes scores [N, C] with labels [N, C]")
    rec, (rows, classes), dtype = input.recording, input.axes, input.element
    size = classes.size
    # the number of labels of each row: the place of its first negative entry
    count = rec.index_let([("n", None)], lambda n: f"min[k in 0..{size}](where("
                          f"{target.name}[{n}, k] < 0, k, {size}))", (rows,), "i64")
    used = rec.index_let([("n", None), ("k", str(size))],
                         lambda n, k: f"{dtype}(where({k} < {count.name}[{n}], 1.0, 0.0))",
                         (rows, Axis(size, str(size))), dtype)
    label = where(used > 0, target, 0)  # a class that is safe to read
    is_label = rec.index_let(
        [("n", None), ("c", str(size))],
        lambda n, c: f"{dtype}(max[k in 0..{size}](where({label.name}[{n}, k] == {c} and "
                     f"{used.name}[{n}, k] > 0.0, 1.0, 0.0)))", input.axes, dtype)
    picked = rec.index_let([("n", None), ("k", str(size))],
                           lambda n, k: f"{input.name}[{n}, {label.name}[{n}, {k}]]",
                           (rows, Axis(size, str(size))), dtype)
    z = 1.0 - picked.reshape((rows.size, size, 1)) + input.reshape((rows.size, 1, size))
    counted = used.reshape((rows.size, size, 1)) * (1.0 - is_label).reshape((rows.size, 1, size))
    loss = (_hinge(z) * counted).sum(axis=(1, 2)) / size
    return _reduced(loss, reduction)


def _module(target: Callable[..., Any], *attributes: str) -> Callable[..., Any]:
    """An nn loss module's row: its functional form's rule, called with the module's
    `attributes`, its class weights (a buffer, where it has one) and its reduction."""
    def row(module: Any, weights: dict[str, Traced], *inputs: Traced) -> Any:
        options = {name: getattr(module, name) for name in attributes}
        if "weight" in weights:
            options["weight"] = weights["weight"]
        return rule_in(FUNCTIONS, target)(*inputs, **options, reduction=module.reduction)

    return row


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    F.margin_ranking_loss: (margin_ranking_loss, {}),
    F.hinge_embedding_loss: (hinge_embedding_loss, {}),
    F.soft_margin_loss: (soft_margin_loss, {}),
    F.cosine_embedding_loss: (cosine_embedding_loss, {}),
    F.poisson_nll_loss: (poisson_nll_loss, {}),
    F.pairwise_distance: (pairwise_distance, {}),
    F.triplet_margin_loss: (triplet_margin_loss, {}),
    F.multi_margin_loss: (multi_margin_loss, {}),
    F.multilabel_margin_loss: (multilabel_margin_loss, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}
MODULES: dict[type, Callable[..., Any]] = {
    nn.MarginRankingLoss: _module(F.margin_ranking_loss, "margin"),
    nn.HingeEmbeddingLoss: _module(F.hinge_embedding_loss, "margin"),
    nn.SoftMarginLoss: _module(F.soft_margin_loss),
    nn.CosineEmbeddingLoss: _module(F.cosine_embedding_loss, "margin"),
    nn.PoissonNLLLoss: _module(F.poisson_nll_loss, "log_input", "full", "eps"),
    nn.PairwiseDistance: lambda m, w, x1, x2: rule_in(FUNCTIONS, F.pairwise_distance)(
        x1, x2, m.norm, m.eps, m.keepdim),
    nn.TripletMarginLoss: _module(F.triplet_margin_loss, "margin", "p", "eps", "swap"),
    nn.MultiMarginLoss: _module(F.multi_margin_loss, "p", "margin"),
    nn.MultiLabelMarginLoss: _module(F.multilabel_margin_loss),
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES"]
