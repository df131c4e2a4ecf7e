"""Rows of the `rv.fx` target table (`fx_targets.py`): the norm pool family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

Every value is torch's, to rounding, and so is every gradient:

    embedding        weight[input] (a gather; its gradient the scatter-add); no gradient
                     reaches the row `padding_idx`
    batch_norm       (x − μ) / √(σ² + eps) · w + b per channel (axis 1): μ, σ² the
                     running statistics in eval, the batch's (σ² biased) in training, where
                     the running ones become (1 − m)·running + m·batch (σ² unbiased) —
                     written into the buffers once per call (`Recording.write`), as eager
    group_norm       layer norm over each group of channels, then w, b per channel
    instance_norm    group_norm with one channel per group (statistics of each sample's
                     channel); running statistics are refused
    max_pool1d/2d/3d the window's largest element (the first of equals) and its index in
                     the flattened input plane; the gradient goes to that element
    avg_pool1d/2d/3d the window's sum over torch's count (the padded window within
                     input + padding, or the input elements only, or `divisor_override`)
    adaptive_avg_pool1d/2d/3d  the mean over input[⌊iL/O⌋ : ⌈(i+1)L/O⌉] along each axis
    Tensor.add_      in place, as BatchNorm's `num_batches_tracked.add_(1)` in Dynamo's graph

The pools take input [N, C, *spatial] or [C, *spatial], and torch's sizes: an output size
is ⌊(L + 2p − d(k − 1) − 1) / s⌋ + 1, rounded up with `ceil_mode` (a window starting in the
right padding dropped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.fx_functional import cast, layer_norm, refuse
from reverie.fx_rows_rule import Rule, rule_in
from reverie.tracing import FLOAT_NAMES, RECORDER_FILES, Axis, Traced, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]


# ---------------------------------------------------------------- embedding

def embedding(input: Traced, weight: Traced, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Traced:
    """F.embedding: the rows of `weight` at `input`, of any shape. `norm_type` matters
    only with `max_norm`, which renormalises `weight` in place (refused by `only`)."""
    if input.element not in ("i32", "i64"):
        raise refuse("embedding", "input", input, "torch takes integer indices")
    rows = weight[input]
    if padding_idx is None:
        return rows
    count = weight.shape[0]
    if not -count <= padding_idx < count:
        raise refuse("embedding", "padding_idx", padding_idx, f"outside the {count} rows")
    frozen = weight._call("stop_gradient")[input]
    padding = (input == padding_idx % count).reshape(tuple(input.shape) + (1,))
    return where(padding, frozen, rows)


# ---------------------------------------------------------------- normalisation

def _per_channel(value: Traced, ndim: int) -> Traced:
    """A per-channel vector [C] shaped to broadcast along axis 1 of a rank-`ndim` input."""
    return value.reshape((1, value.shape[0]) + (1,) * (ndim - 2))


def _affine(y: Traced, weight: Traced | None, bias: Traced | None) -> Traced:
    y = y if weight is None else y * _per_channel(weight, y.ndim)
    return y if bias is None else y + _per_channel(bias, y.ndim)


def batch_norm(input: Traced, running_mean: Traced | None, running_var: Traced | None,
               weight: Traced | None = None, bias: Traced | None = None,
               training: bool = False, momentum: Any = 0.1, eps: float = 1e-5) -> Traced:
    """F.batch_norm over axis 1: batch statistics in training (the running ones updated
    in place, once), the running statistics otherwise."""
    if input.ndim < 2:
        raise refuse("batch_norm", "input", input, "torch takes [N, C, ...]")
    if (running_mean is None) != (running_var is None):
        raise refuse("batch_norm", "running_var", running_var,
                     "torch takes both running statistics or neither")
    if training:
        return _batch_norm_training(input, running_mean, running_var, momentum, eps,
                                    weight, bias)
    if running_mean is None:
        raise refuse("batch_norm", "running_mean", None, "torch needs it in evaluation mode")
    centred = input - _per_channel(running_mean, input.ndim)
    return _affine(centred * (_per_channel(running_var, input.ndim) + eps).rsqrt(),
                   weight, bias)


def _batch_norm_training(x: Traced, running_mean: Traced | None,
                         running_var: Traced | None, momentum: Any, eps: float,
                         weight: Traced | None, bias: Traced | None) -> Traced:
    axes = (0, *range(2, x.ndim))
    count = math.prod(x.shape[a] for a in axes)
    if count == 1:
        raise refuse("batch_norm", "input", x, "torch expects more than 1 value per "
                     "channel when training")
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=axes, keepdims=True)
    if running_mean is not None and running_var is not None:
        channels = (x.shape[1],)
        batch_mean = mean._call("stop_gradient").reshape(channels)
        unbiased = var._call("stop_gradient").reshape(channels) * (count / (count - 1))
        for running, batch in ((running_mean, batch_mean), (running_var, unbiased)):
            running.recording.write(running, (1 - momentum) * running + momentum * batch)
    return _affine(centred * (var + eps).rsqrt(), weight, bias)


def group_norm(input: Traced, num_groups: int, weight: Traced | None = None,
               bias: Traced | None = None, eps: float = 1e-5) -> Traced:
    """F.group_norm: the channels (axis 1) in `num_groups` groups, each normalised over
    its channels and the spatial axes, then scaled and shifted per channel."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise refuse("group_norm", "num_groups", num_groups,
                     f"torch divides the channels of {list(input.shape)} into equal groups")
    grouped = input.reshape((input.shape[0], num_groups, -1))
    normal = layer_norm(grouped, (grouped.shape[2],), eps=eps)
    return _affine(normal.reshape(input.shape), weight, bias)


def batch_norm_module(module: Any, weights: dict[str, Traced], input: Traced) -> Traced:
    """nn.BatchNorm1d/2d/3d as its `forward`: in training with running statistics,
    `num_batches_tracked` counts the call, and `momentum=None` averages cumulatively
    (1 / num_batches_tracked)."""
    ranks = BATCH_NORM_RANKS[type(module)]
    if input.ndim not in ranks:
        raise refuse(type(module).__name__, "input", input,
                     f"torch takes {' or '.join(f'{r}-D' for r in ranks)} input")
    momentum = 0.0 if module.momentum is None else module.momentum
    tracked = weights.get("num_batches_tracked")
    if module.training and module.track_running_stats and tracked is not None:
        counted = tracked + 1
        tracked.recording.write(tracked, counted)
        if module.momentum is None:
            momentum = 1.0 / cast(counted, input.element)
    use_running = not module.training or module.track_running_stats
    running = [weights.get(n) if use_running else None for n in ("running_mean", "running_var")]
    training = module.training or all(r is None for r in running)
    return _functional(F.batch_norm)(input, *running, weights.get("weight"),
                                     weights.get("bias"), training, momentum, module.eps)


BATCH_NORM_RANKS = {nn.BatchNorm1d: (2, 3), nn.BatchNorm2d: (4,),  # `_check_input_dim`
                    nn.BatchNorm3d: (5,)}


# ---------------------------------------------------------------- pooling windows

def _sizes(value: Any, spatial: int, name: str, target: str) -> tuple[int, ...]:
    """An int or a sequence of one or `spatial` ints, as one int per spatial axis."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    if len(values) not in (1, spatial) or not all(isinstance(v, int) for v in values):
        raise refuse(target, name, value, f"one int or {spatial}")
    return values * spatial if len(values) == 1 else values


@dataclass(frozen=True)
class Window:
    """A pooling window along one spatial axis of `size` elements: output i reads the
    input at stride·i + dilation·k − padding for the taps k < kernel."""

    size: int
    kernel: int
    stride: int
    padding: int
    dilation: int = 1
    ceil_mode: bool = False

    @property
    def out(self) -> int:
        """torch's `pooling_output_shape`."""
        span = self.size + 2 * self.padding - self.dilation * (self.kernel - 1) - 1
        out = (span + (self.stride - 1 if self.ceil_mode else 0)) // self.stride + 1
        if self.ceil_mode and (out - 1) * self.stride >= self.size + self.padding:
            out -= 1
        return out

    def at(self, i: str, k: str) -> str:
        """The input position read by output `i` at tap `k`, as an index expression."""
        return f"{self.stride} * {i} + {self.dilation} * {k} - {self.padding}"

    @property
    def leaves_input(self) -> bool:
        """Whether some window reads outside the input (padding, or `ceil_mode`'s last)."""
        last = self.stride * (self.out - 1) + self.dilation * (self.kernel - 1) - self.padding
        return self.padding > 0 or last >= self.size


def _windows(target: str, input: Traced, spatial: int, kernel_size: Any, stride: Any,
             padding: Any, dilation: Any = 1, ceil_mode: bool = False) -> list[Window]:
    """One `Window` per spatial axis, from torch's arguments, checked as torch checks."""
    if input.ndim not in (spatial + 1, spatial + 2):
        raise refuse(target, "input", input, f"torch takes [N, C, ...] or [C, ...] with "
                     f"{spatial} spatial axes")
    kernels = _sizes(kernel_size, spatial, "kernel_size", target)
    strides = kernels if stride is None or stride == [] else \
        _sizes(stride, spatial, "stride", target)
    pads = _sizes(padding, spatial, "padding", target)
    dilations = _sizes(dilation, spatial, "dilation", target)
    for name, value, given in (("kernel_size", kernels, kernel_size),
                               ("stride", strides, stride), ("dilation", dilations, dilation)):
        if min(value) <= 0:
            raise refuse(target, name, given, "torch takes positive sizes")
    if any(not 0 <= p <= k // 2 for p, k in zip(pads, kernels, strict=True)):
        raise refuse(target, "padding", padding, "torch takes at most half the kernel")
    sizes = input.shape[-spatial:]
    windows = [Window(*axis, bool(ceil_mode))
               for axis in zip(sizes, kernels, strides, pads, dilations, strict=True)]
    for w in windows:
        if w.out <= 0:
            raise refuse(target, "kernel_size", kernel_size, f"the input {list(sizes)} is "
                         f"too small")
    return windows


@dataclass(frozen=True)
class Names:
    """The index names of one pooling statement: leading axes, outputs, taps."""

    lead: list[str]
    outs: list[str]
    taps: list[str]

    @classmethod
    def of(cls, input: Traced, spatial: int) -> Names:
        lead = input.ndim - spatial
        return cls([f"a{j}" for j in range(lead)], [f"i{j}" for j in range(spatial)],
                   [f"k{j}" for j in range(spatial)])


def _ranged(names: list[str], sizes: Sequence[int]) -> list[str]:
    return [f"{n} in 0..{s}" for n, s in zip(names, sizes, strict=True)]


def _out_axes(windows: list[Window]) -> tuple[Axis, ...]:
    return tuple(Axis(w.out, str(w.out)) for w in windows)


def _read(input: Traced, names: Names, windows: list[Window]) -> str:
    """input[a…, position of output i at tap k…]."""
    at = [w.at(i, k) for w, i, k in zip(windows, names.outs, names.taps, strict=True)]
    return f"{input.name}[{', '.join(names.lead + at)}]"


def _inside(names: Names, windows: list[Window], low: Sequence[int],
            high: Sequence[int]) -> str:
    """The condition that every position read lies in [low, high) on its axis."""
    terms = [f"{w.at(i, k)} >= {lo} and {w.at(i, k)} < {hi}"
             for w, i, k, lo, hi in zip(windows, names.outs, names.taps, low, high,
                                        strict=True)]
    return " and ".join(terms)


# ---------------------------------------------------------------- max pooling

def _lowest(element: str) -> str:
    """The lowest finite value of a float dtype, what a padded position holds."""
    return repr(float(np.finfo(np.float32 if element == "f32" else np.float64).min))


def _max_pool(spatial: int, with_indices: bool = False) -> Emit:
    """F.max_pool1d/2d/3d (and their `_with_indices`, which give the indices
    whatever `return_indices` says): the value at the first largest position of each
    window, gathered by its index in the input plane."""
    target = f"max_pool{spatial}d" + ("_with_indices" if with_indices else "")

    def emit(input: Traced, kernel_size: Any, stride: Any = None, padding: Any = 0,
             dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False
             ) -> Traced | tuple[Traced, Traced]:
        windows = _windows(target, input, spatial, kernel_size, stride, padding, dilation,
                           ceil_mode)
        values, indices = _max_pool_record(input, windows)
        return (values, indices) if return_indices or with_indices else values

    return emit


def _max_pool_record(x: Traced, windows: list[Window]) -> tuple[Traced, Traced]:
    rec, names = x.recording, Names.of(x, len(windows))
    lead, outs = x.axes[:len(names.lead)], _out_axes(windows)
    read = _read(x, names, windows)
    leaving = [w for w in windows if w.leaves_input]
    if leaving:
        inside = _inside(names, windows, [0] * len(windows), [w.size for w in windows])
        read = f"where({inside}, {read}, {_lowest(x.element)})"
    taps = tuple(Axis(w.kernel, str(w.kernel)) for w in windows)
    index = names.lead + _ranged(names.outs, [w.out for w in windows]) + \
        _ranged(names.taps, [w.kernel for w in windows])
    window = rec.let(read, lead + outs + taps, x.element, index=f"[{', '.join(index)}]")
    tap_count = math.prod(w.kernel for w in windows)
    first = window.reshape(tuple(window.shape[:-len(windows)]) + (tap_count,)).argmax(axis=-1)
    at = rec.let(_plane_index(first, names, windows), lead + outs, "i64",
                 index=f"[{', '.join(names.lead + names.outs)}]")
    plane = x.reshape(tuple(x.shape[:len(names.lead)]) + (math.prod(w.size for w in windows),))
    here = ", ".join(names.lead + names.outs)
    values = rec.let(f"{plane.name}[{', '.join(names.lead)}, {at.name}[{here}]]",
                     lead + outs, x.element, index=f"[{here}]")
    return values, at


def _plane_index(first: Traced, names: Names, windows: list[Window]) -> str:
    """The flattened input-plane index (torch's `indices`) of tap `first` of each window:
    Σ_j position_j · Π_{l > j} size_l, position_j = stride·i + dilation·k_j − padding."""
    tap = f"{first.name}[{', '.join(names.lead + names.outs)}]"
    terms = []
    for j, (w, i) in enumerate(zip(windows, names.outs, strict=True)):
        inner = math.prod(v.kernel for v in windows[j + 1:])
        k = f"({tap} // {inner} % {w.kernel})"
        terms.append(f"({w.at(i, k)}) * {math.prod(v.size for v in windows[j + 1:])}")
    return " + ".join(terms)


# ---------------------------------------------------------------- average pooling

def avg_pool1d(input: Traced, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Traced:
    """F.avg_pool1d: each window's sum over torch's count of it."""
    windows = _windows("avg_pool1d", input, 1, kernel_size, stride, padding,
                       ceil_mode=ceil_mode)
    return _avg_pool(input, windows, count_include_pad)


def _avg_pool_divided(spatial: int) -> Emit:
    """F.avg_pool2d / F.avg_pool3d: each window's sum over torch's count of it, or
    `divisor_override`."""
    target = f"avg_pool{spatial}d"

    def emit(input: Traced, kernel_size: Any, stride: Any = None, padding: Any = 0,
             ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override: int | None = None) -> Traced:
        windows = _windows(target, input, spatial, kernel_size, stride, padding,
                           ceil_mode=ceil_mode)
        if divisor_override is not None and divisor_override <= 0:
            raise refuse(target, "divisor_override", divisor_override, "torch takes > 0")
        return _avg_pool(input, windows, count_include_pad, divisor_override)

    return emit


def _avg_pool(x: Traced, windows: list[Window], count_include_pad: bool,
              divisor_override: int | None = None) -> Traced:
    rec, names = x.recording, Names.of(x, len(windows))
    outs = _ranged(names.outs, [w.out for w in windows])
    taps = ", ".join(_ranged(names.taps, [w.kernel for w in windows]))
    total = rec.let(f"sum[{taps}]({_read(x, names, windows)})",  # reads outside are 0
                    x.axes[:len(names.lead)] + _out_axes(windows), x.element,
                    index=f"[{', '.join(names.lead + outs)}]")
    if divisor_override is not None:
        return total / divisor_override
    if not any(w.leaves_input for w in windows):
        return total / math.prod(w.kernel for w in windows)
    pads = [w.padding if count_include_pad else 0 for w in windows]
    inside = _inside(names, windows, [-p for p in pads],
                     [w.size + p for w, p in zip(windows, pads, strict=True)])
    count = rec.let(f"sum[{taps}]({x.element}({inside}))", _out_axes(windows), x.element,
                    index=f"[{', '.join(outs)}]")
    return total / count


# ---------------------------------------------------------------- adaptive average pooling

def _adaptive_avg_pool(spatial: int) -> Emit:
    """F.adaptive_avg_pool1d/2d/3d: output i of an axis of L inputs and O outputs is the
    mean of input[⌊iL/O⌋ : ⌈(i+1)L/O⌉]; a None output size keeps the input's."""
    target = f"adaptive_avg_pool{spatial}d"

    def emit(input: Traced, output_size: Any) -> Traced:
        if input.ndim not in (spatial + 1, spatial + 2):
            raise refuse(target, "input", input, f"torch takes [N, C, ...] or [C, ...] "
                         f"with {spatial} spatial axes")
        sizes = input.shape[-spatial:]
        wanted = tuple(output_size) if isinstance(output_size, tuple | list) else \
            (output_size,) * spatial
        if len(wanted) != spatial or any(o is not None and (not isinstance(o, int) or o <= 0)
                                         for o in wanted):
            raise refuse(target, "output_size", output_size, f"{spatial} positive sizes")
        outs = [s if o is None else o for s, o in zip(sizes, wanted, strict=True)]
        return _adaptive_record(input, list(zip(sizes, outs, strict=True)))

    return emit


def _adaptive_record(x: Traced, axes: list[tuple[int, int]]) -> Traced:
    names = Names.of(x, len(axes))
    starts = [f"({i} * {size}) // {out}" for i, (size, out) in zip(names.outs, axes,
                                                                    strict=True)]
    lengths = [f"(({i} + 1) * {size} + {out - 1}) // {out} - {start}"
               for i, (size, out), start in zip(names.outs, axes, starts, strict=True)]
    longest = [max(-(-(i + 1) * size // out) - i * size // out for i in range(out))
               for size, out in axes]
    at = [f"{s} + {k}" for s, k in zip(starts, names.taps, strict=True)]
    read = f"{x.name}[{', '.join(names.lead + at)}]"
    if any(size % out for size, out in axes):  # windows of several lengths: mask the tail
        short = " and ".join(f"{k} < {n}" for k, n in zip(names.taps, lengths, strict=True))
        read = f"where({short}, {read}, 0.0)"
    outs = _ranged(names.outs, [out for _, out in axes])
    here = ", ".join(names.lead + outs)
    taps = ", ".join(_ranged(names.taps, longest))
    count = " * ".join(f"({n})" for n in lengths)
    return x.recording.let(f"sum[{taps}]({read}) / {x.element}({count})",
                           x.axes[:len(names.lead)] +
                           tuple(Axis(out, str(out)) for _, out in axes),
                           x.element, index=f"[{here}]")


# ---------------------------------------------------------------- in place

def add_(input: Traced, other: Any, *, alpha: Any = 1) -> Traced:
    """Tensor.add_: input + alpha · other, written into `input` (a graph input or buffer)."""
    if input.element not in FLOAT_NAMES and (isinstance(other, float) or isinstance(
            other, Traced) and other.element in FLOAT_NAMES):
        raise refuse("Tensor.add_", "other", other, "torch cannot write a float sum into "
                     "an integer tensor")
    value = input + (other if alpha == 1 else other * alpha)
    input.recording.write(input, value)
    return value


def instance_norm(input: Traced, running_mean: Any = None, running_var: Any = None,
                  weight: Traced | None = None, bias: Traced | None = None,
                  use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Traced:
    """F.instance_norm with the input's own statistics: group_norm, a group per channel."""
    if not use_input_stats:
        raise refuse("instance_norm", "use_input_stats", use_input_stats)
    if running_mean is not None or running_var is not None:
        raise refuse("instance_norm", "running_mean", running_mean, "Reverie normalises by "
                     "the input's statistics and keeps no running_mean or running_var")
    return group_norm(input, input.shape[1], weight, bias, eps)


def instance_norm_module(module: Any, weights: dict[str, Traced], input: Traced) -> Traced:
    """nn.InstanceNorm1d/2d/3d: unbatched inputs get a batch axis for the call."""
    if module.track_running_stats:
        raise refuse(f"nn.{type(module).__name__}", "track_running_stats", True,
                     "Reverie normalises by the input's statistics")
    batched = input.ndim == module._get_no_batch_dim() + 1
    x = input if batched else input.reshape((1, *input.shape))
    y = _functional(F.instance_norm)(x, None, None, weights.get("weight"),
                                     weights.get("bias"), True, module.momentum, module.eps)
    return y if batched else y[0]


# ---------------------------------------------------------------- the tables

def _functional(target: Any) -> Rule:
    """The rule of `target` in this family's table, which module rows call so that they
    are checked as their functional forms."""
    return rule_in(FUNCTIONS, target)


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    F.embedding: (embedding, {"max_norm": None, "scale_grad_by_freq": False,
                              "sparse": False}),
    F.batch_norm: (batch_norm, {}), F.group_norm: (group_norm, {}),
    F.instance_norm: (instance_norm, {}),
    **{getattr(F, f"max_pool{n}d"): (_max_pool(n), {}) for n in (1, 2, 3)},
    **{getattr(F, f"max_pool{n}d_with_indices"): (_max_pool(n, with_indices=True), {})
       for n in (1, 2, 3)},
    F.avg_pool1d: (avg_pool1d, {}), F.avg_pool2d: (_avg_pool_divided(2), {}),
    F.avg_pool3d: (_avg_pool_divided(3), {}),
    **{getattr(F, f"adaptive_avg_pool{n}d"): (_adaptive_avg_pool(n), {}) for n in (1, 2, 3)},
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {"add_": (add_, {})}


def _max_pool_module(m: Any, w: dict[str, Traced], x: Traced) -> Any:
    target = {nn.MaxPool1d: F.max_pool1d, nn.MaxPool2d: F.max_pool2d,
              nn.MaxPool3d: F.max_pool3d}[type(m)]
    return _functional(target)(x, m.kernel_size, m.stride, m.padding, m.dilation,
                               ceil_mode=m.ceil_mode, return_indices=m.return_indices)


def _avg_pool_module(target: Any) -> Callable[..., Any]:
    """nn.AvgPool2d / nn.AvgPool3d: their functional row with the module's attributes."""
    def row(m: Any, w: dict[str, Traced], x: Traced) -> Any:
        return _functional(target)(x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                   m.count_include_pad, m.divisor_override)

    return row


MODULES: dict[type, Callable[..., Any]] = {
    nn.Embedding: lambda m, w, x: _functional(F.embedding)(
        x, w["weight"], m.padding_idx, m.max_norm, m.norm_type, m.scale_grad_by_freq,
        m.sparse),
    **{module: batch_norm_module for module in BATCH_NORM_RANKS},
    nn.GroupNorm: lambda m, w, x: _functional(F.group_norm)(
        x, m.num_groups, w.get("weight"), w.get("bias"), m.eps),
    **{module: instance_norm_module for module in (nn.InstanceNorm1d, nn.InstanceNorm2d,
                                                   nn.InstanceNorm3d)},
    nn.MaxPool1d: _max_pool_module, nn.MaxPool2d: _max_pool_module,
    nn.MaxPool3d: _max_pool_module,
    nn.AvgPool1d: lambda m, w, x: _functional(F.avg_pool1d)(
        x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad),
    nn.AvgPool2d: _avg_pool_module(F.avg_pool2d), nn.AvgPool3d: _avg_pool_module(F.avg_pool3d),
    nn.AdaptiveAvgPool1d: lambda m, w, x: _functional(F.adaptive_avg_pool1d)(x, m.output_size),
    nn.AdaptiveAvgPool2d: lambda m, w, x: _functional(F.adaptive_avg_pool2d)(x, m.output_size),
    nn.AdaptiveAvgPool3d: lambda m, w, x: _functional(F.adaptive_avg_pool3d)(x, m.output_size),
}
