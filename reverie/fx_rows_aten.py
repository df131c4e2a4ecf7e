"""Rows of the `rv.fx` target table (`fx_targets.py`): the ATen spellings of the losses
and of padding, each the row of its `torch.nn.functional` form.

A graph may name a loss by its ATen function rather than its functional form: Dynamo
records `torch._C._nn.mse_loss(x, t, 1)` where a program calls it so (autocast's tests
do), and `torch.binary_cross_entropy_with_logits` is the function `F.` calls. These take
the reduction as torch's enum (0 "none", 1 "mean", 2 "sum") and their own parameter
list, so each row binds torch's parameters, reads the enum, and calls the functional row:

    torch._C._nn.nll_loss(input, target, weight=None, reduction=0, ignore_index=-100)
        -> F.nll_loss(input, target, weight, ignore_index=-100, reduction="none")

A reduction left out is 0, "none": what these Python bindings do (measured on torch
2.13: `torch._C._nn.mse_loss(x, t)` is unreduced, though ATen's schema says Mean).

The padding functions are F.pad in one mode each (`reflection_pad2d(x, p)` is
`F.pad(x, p, "reflect")`), and so are the padding modules (`nn.ReflectionPad2d`,
`nn.ZeroPad2d`, ...), which `call_module` graphs hold.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie import fx_functional as fn
from reverie.fx_functional import refuse
from reverie.fx_rows_rule import Emit, rule_in
from reverie.tracing import Traced

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # torch's enum (at::Reduction)
_nn = torch._C._nn

# ATen target -> (functional form, ATen's parameters with their defaults)
LOSSES: dict[Any, tuple[Any, str]] = {
    _nn.mse_loss: (F.mse_loss, "input, target, reduction=0"),
    _nn.l1_loss: (F.l1_loss, "input, target, reduction=0"),
    _nn.smooth_l1_loss: (F.smooth_l1_loss, "input, target, reduction=0, beta=1.0"),
    _nn.huber_loss: (F.huber_loss, "input, target, reduction=0, delta=1.0"),
    _nn.nll_loss: (F.nll_loss, "input, target, weight=None, reduction=0, ignore_index=-100"),
    _nn.nll_loss2d: (F.nll_loss, "input, target, weight=None, reduction=0, ignore_index=-100"),
    _nn.binary_cross_entropy: (F.binary_cross_entropy,
                               "input, target, weight=None, reduction=0"),
    torch.binary_cross_entropy_with_logits: (
        F.binary_cross_entropy_with_logits,
        "input, target, weight=None, pos_weight=None, reduction=0"),
    torch.kl_div: (F.kl_div, "input, target, reduction=0, log_target=False"),
    _nn.soft_margin_loss: (F.soft_margin_loss, "input, target, reduction=0"),
    _nn.multi_margin_loss: (F.multi_margin_loss,
                            "input, target, p=1, margin=1, weight=None, reduction=0"),
    _nn.multilabel_margin_loss: (F.multilabel_margin_loss, "input, target, reduction=0"),
    torch.margin_ranking_loss: (F.margin_ranking_loss,
                                "input1, input2, target, margin=0.0, reduction=0"),
    torch.hinge_embedding_loss: (F.hinge_embedding_loss,
                                 "input, target, margin=1.0, reduction=0"),
    torch.cosine_embedding_loss: (F.cosine_embedding_loss,
                                  "input1, input2, target, margin=0.0, reduction=0"),
    torch.poisson_nll_loss: (F.poisson_nll_loss,
                             "input, target, log_input, full, eps, reduction"),
    torch.triplet_margin_loss: (
        F.triplet_margin_loss,
        "anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, reduction=0"),
}


def _signature(parameters: str) -> inspect.Signature:
    """"input, target, reduction=0" as a signature (defaults read as Python literals)."""
    made = []
    for parameter in parameters.split(", "):
        name, _, default = parameter.partition("=")
        made.append(inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=ast.literal_eval(default) if default else inspect.Parameter.empty))
    return inspect.Signature(made)


def _spelled(target: Any, functional: Any, parameters: str,
             table: Mapping[Any, tuple[Emit, Mapping[str, Any]]]) -> Emit:
    """The row of ATen's `target`: its arguments bound to `parameters`, the reduction's
    enum read as its name, then `functional`'s row in `table` by keyword."""
    signature = _signature(parameters)

    def emit(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if arguments["reduction"] not in REDUCTIONS:
            raise refuse(target.__name__, "reduction", arguments["reduction"],
                         "torch's enum takes 0 (none), 1 (mean) or 2 (sum)")
        arguments["reduction"] = REDUCTIONS[arguments["reduction"]]
        return rule_in(table, functional)(**arguments)

    emit.__signature__ = signature  # type: ignore[attr-defined]  # what `Rule` binds
    return emit


def _padding(mode: str) -> Callable[[Traced, Any], Traced]:
    """ATen's `reflection_pad*d` / `replication_pad*d`: F.pad in `mode`."""
    def emit(input: Traced, padding: Any) -> Traced:
        return fn.pad(input, padding, mode)

    return emit


def _constant_pad_nd(input: Traced, pad: Any, value: float = 0.0) -> Traced:
    """ATen's `constant_pad_nd`: F.pad with a constant."""
    return fn.pad(input, pad, "constant", value)


PADDING_MODULES = {"Reflection": "reflect", "Replication": "replicate", "Circular": "circular",
                   "Zero": "constant", "Constant": "constant"}  # nn.<kind>Pad<n>d -> mode


def padding_module(mode: str) -> Callable[..., Traced]:
    """nn.ReflectionPad2d and its kind: F.pad with the module's padding (and value)."""
    def row(module: Any, weights: dict[str, Traced], input: Traced) -> Traced:
        return fn.pad(input, module.padding, mode, getattr(module, "value", None))

    return row


MODULES = {getattr(nn, f"{kind}Pad{n}d"): padding_module(mode)
           for kind, mode in PADDING_MODULES.items() for n in (1, 2, 3)}


def rows(table: Mapping[Any, tuple[Emit, Mapping[str, Any]]]
         ) -> dict[Any, tuple[Emit, Mapping[str, Any]]]:
    """The ATen rows, calling the functional rows of `table` (the merged function table)."""
    made: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
        target: (_spelled(target, functional, parameters, table), {})
        for target, (functional, parameters) in LOSSES.items()}
    for spatial in (1, 2, 3):
        made[getattr(_nn, f"reflection_pad{spatial}d")] = (_padding("reflect"), {})
        made[getattr(_nn, f"replication_pad{spatial}d")] = (_padding("replicate"), {})
    made[torch.constant_pad_nd] = (_constant_pad_nd, {})
    return made


__all__ = ["LOSSES", "MODULES", "REDUCTIONS", "rows"]
