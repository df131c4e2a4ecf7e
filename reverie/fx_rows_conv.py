"""Rows of the `rv.fx` target table (`fx_targets.py`): the convolution family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

Every convolution is one index-notation statement per group of channels, so its gradient,
to any order, is Reverie's own. Along each spatial axis, with stride s, padding p,
dilation d, kernel size K and input length L:

    conv1d/2d/3d         y[b, o, i] = Σ_{c,k} x[b, c, s·i + d·k − p] · w[o, c, k]
                         (integer, "same" or "valid" padding; reads outside x are zeros)
    conv_transpose1d/2d/3d
                         y[b, o, j] = Σ_{c,i,k : j = s·i + d·k − p} x[b, c, i] · w[c, o, k],
                         Lout = (L − 1)·s − 2p + d·(K − 1) + output_padding + 1
    conv_tbc             conv1d of the time-major input [T, B, C] with w[k, c, o] (fairseq's)

The transposed convolution is gathered phase by phase, so no zeros are inserted between
the input's elements (the stride costs nothing): with the kernel first dilated
(w'[d·k] = w[k], zeros between the taps, which a dilation d > 1 does multiply), write
u = j + p = s·q + t (0 ≤ t < s) and split each tap as κ = s·m + t; then i = q − m and

    z[b, o, q, t] = Σ_{c,m} x[b, c, q − m] · w'[c, o, s·m + t],   y[b, o, j] = z[b, o, u]

(z's phase axis t merged into q by a reshape, then cropped to [p, p + Lout)). Groups split
the channels; the `nn` modules take torch's `padding_mode` (Conv) and the `output_size`
of `forward` (ConvTranspose).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.fx_functional import _offset, _scaled, pad, refuse
from reverie.fx_rows_rule import rule_in
from reverie.tracing import RECORDER_FILES, Axis, Recording, Traced, concatenate

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]
Convolve = Callable[[Traced, Traced], Traced]


# ---------------------------------------------------------------- arguments

def _per_axis(value: Any, spatial: int) -> tuple[int, ...]:
    """An int, or a sequence of one or `spatial` ints, as one int per spatial axis."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    return tuple(int(v) for v in (values * spatial if len(values) == 1 else values))


def _steps(target: str, stride: Any, dilation: Any, spatial: int
           ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The stride and the dilation per spatial axis, each at least 1 (as torch takes them)."""
    for name, value in (("stride", stride), ("dilation", dilation)):
        if any(v < 1 for v in _per_axis(value, spatial)):
            raise refuse(target, name, value, "torch takes sizes ≥ 1")
    return _per_axis(stride, spatial), _per_axis(dilation, spatial)


def _conv_padding(padding: Any, kernel: Sequence[int], dilation: Sequence[int],
                  stride: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) zero padding per spatial axis, from ints, "valid" or "same"."""
    if padding == "valid":
        return [(0, 0)] * len(kernel)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise refuse("conv", "padding", padding, "torch takes 'same' with stride 1 only")
        totals = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
        return [(t // 2, t - t // 2) for t in totals]
    if isinstance(padding, str):
        raise refuse("conv", "padding", padding, "torch takes 'valid', 'same' or sizes")
    return [(p, p) for p in _per_axis(padding, len(kernel))]


def _transposed_padding(padding: Any, output_padding: Any, stride: Sequence[int],
                        dilation: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The padding and output padding per spatial axis of a transposed convolution, as
    torch accepts them: sizes ≥ 0, each output padding below its stride or dilation."""
    spatial = len(stride)
    if isinstance(padding, str) or any(p < 0 for p in _per_axis(padding, spatial)):
        raise refuse("conv_transpose", "padding", padding, "torch takes sizes ≥ 0")
    extra = _per_axis(output_padding, spatial)
    if any(not 0 <= e < max(s, d) for e, s, d in zip(extra, stride, dilation, strict=True)):
        raise refuse("conv_transpose", "output_padding", output_padding,
                     "torch takes sizes ≥ 0 below the stride or the dilation")
    return _per_axis(padding, spatial), extra


# ---------------------------------------------------------------- the functional rows

def conv(input: Traced, weight: Traced, bias: Traced | None = None, stride: Any = 1,
         padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Traced:
    """F.conv1d/2d/3d: y[b, o, i] = Σ_{c,k} x[b, c, s·i + d·k − p] · w[o, c, k]."""
    spatial = weight.ndim - 2
    strides, dilations = _steps("conv", stride, dilation, spatial)
    pads = _conv_padding(padding, weight.shape[2:], dilations, strides)

    def convolve(x: Traced, w: Traced) -> Traced:
        return _convolve(x, w, strides, pads, dilations)

    return _biased(_batched("conv", input, weight, groups, convolve), bias, spatial)


def conv_transpose(input: Traced, weight: Traced, bias: Traced | None = None,
                   stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                   groups: int = 1, dilation: Any = 1) -> Traced:
    """F.conv_transpose1d/2d/3d (torch's argument order: `groups` before
    `dilation`): y[b, o, j] = Σ_{c,i,k : j = s·i + d·k − p} x[b, c, i] · w[c, o, k]."""
    spatial = weight.ndim - 2
    strides, dilations = _steps("conv_transpose", stride, dilation, spatial)
    pads, extra = _transposed_padding(padding, output_padding, strides, dilations)

    def convolve(x: Traced, w: Traced) -> Traced:
        return _convolve_transposed(x, _dilated(w, dilations), strides, pads, extra)

    return _biased(_batched("conv_transpose", input, weight, groups, convolve), bias, spatial)


def conv_tbc(input: Traced, weight: Traced, bias: Traced, pad: int = 0) -> Traced:
    """torch.conv_tbc: y[t, b, o] = bias[o] + Σ_{k,c} x[t + k − pad, b, c] · w[k, c, o], the
    conv1d of x as [B, C, T] with w as [O, C, K], laid out time-major again."""
    y = conv(input.transpose(1, 2, 0), weight.transpose(2, 1, 0), bias, padding=pad)
    return y.transpose(2, 0, 1)


def _biased(y: Traced, bias: Traced | None, spatial: int) -> Traced:
    """y plus the bias of each channel (the axis before the `spatial` ones)."""
    if bias is None:
        return y
    return y + bias.reshape(bias.shape + (1,) * spatial)


def _batched(target: str, input: Traced, weight: Traced, groups: int,
             convolve: Convolve) -> Traced:
    """`convolve` over a batch [N, C, *spatial]: an unbatched input [C, *spatial], as torch
    takes it, gets a batch axis of one for the call."""
    spatial = weight.ndim - 2
    if input.ndim not in (spatial + 1, spatial + 2):
        raise refuse(target, "input", input, f"torch takes {spatial + 1} or {spatial + 2} "
                     f"dimensions with a {weight.ndim}-dimensional weight")
    batch = input if input.ndim == spatial + 2 else input.reshape((1, *input.shape))
    channels, share = batch.shape[1], weight.shape[0]
    if groups < 1 or channels % groups or share % groups:
        raise refuse(target, "groups", groups, f"torch takes a divisor of the {channels} "
                     f"input channels and of the weight's first axis ({share})")
    y = _grouped(batch, weight, groups, convolve)
    return y if batch is input else y[0]


def _grouped(x: Traced, w: Traced, groups: int, convolve: Convolve) -> Traced:
    """`convolve` of each group of x's channels (axis 1) with its share of w's first axis,
    the results concatenated along the channels."""
    if groups == 1:
        return convolve(x, w)
    ins, share = x.shape[1] // groups, w.shape[0] // groups
    return concatenate([convolve(x[:, g * ins:(g + 1) * ins], w[g * share:(g + 1) * share])
                        for g in range(groups)], axis=1)


# ---------------------------------------------------------------- index notation

def _names(recording: Recording, *wanted: str) -> list[str]:
    """Index names of one statement, none of them a name of the recording already."""
    return [recording.claim(name) for name in wanted]


def _convolve(x: Traced, w: Traced, strides: Sequence[int], pads: Sequence[tuple[int, int]],
              dilations: Sequence[int]) -> Traced:
    """y[b, o, i…] = Σ_{c, k…} x[b, c, s·i + d·k − before] · w[o, c, k…]; reads outside x
    are Reverie's zeros, which is the zero padding."""
    b, o, c = _names(x.recording, "b", "o", "c")
    ranges, reads, taps, axes = [], [], [], []
    for axis, (s, (before, after), d) in enumerate(zip(strides, pads, dilations, strict=True)):
        size, kernel = x.axes[2 + axis].size, w.axes[2 + axis].size
        i, k = _names(x.recording, f"i{axis}", f"k{axis}")
        out = (size + before + after - d * (kernel - 1) - 1) // s + 1
        ranges.append(f"{i} in 0..{out}")
        reads.append(_offset(f"{_scaled(s, i)} + {_scaled(d, k)}", -before))
        taps.append(k)
        axes.append(Axis(out, str(out)))
    expr = (f"sum[{c}, {', '.join(taps)}]({x.name}[{b}, {c}, {', '.join(reads)}] * "
            f"{w.name}[{o}, {c}, {', '.join(taps)}])")
    return x.recording.let(expr, (x.axes[0], w.axes[0], *axes), x.element,
                           index=f"[{b}, {o}, {', '.join(ranges)}]")


def _dilated(w: Traced, dilations: Sequence[int]) -> Traced:
    """w'[c, o, d·k…] = w[c, o, k…], zeros between the taps: the kernel as its dilated
    taps see the input (w itself at dilation 1)."""
    if all(d == 1 for d in dilations):
        return w
    c, o = _names(w.recording, "c", "o")
    index, reads, first, sizes = [c, o], [c, o], [], []
    for axis, d in enumerate(dilations):
        k, e = _names(w.recording, f"k{axis}", f"e{axis}")
        index += [k, f"{e} in 0..{d}"]
        reads.append(k)
        first.append(f"{e} == 0")
        kernel = w.axes[2 + axis].size
        sizes += [kernel, d]
    spread = w.recording.let(
        f"where({' and '.join(first)}, {w.name}[{', '.join(reads)}], 0.0)",
        (*w.axes[:2], *(Axis(n, str(n)) for n in sizes)), w.element,
        index=f"[{', '.join(index)}]")
    merged = spread.reshape((*w.shape[:2], *(k * d for k, d in zip(sizes[::2], dilations,
                                                                   strict=True))))
    return merged[(slice(None), slice(None),
                   *(slice(0, d * (k - 1) + 1) for k, d in zip(sizes[::2], dilations,
                                                               strict=True)))]


def _convolve_transposed(x: Traced, w: Traced, strides: Sequence[int], pads: Sequence[int],
                         extra: Sequence[int]) -> Traced:
    """y[b, o, j…] of a transposed convolution of stride s, padding p and output padding
    `extra` with the (dilated) kernel w: z[b, o, q, t…] = Σ_{c, m…} x[b, c, q − m…] ·
    w[c, o, s·m + t…] gathers each output phase t, and y is z[b, o, s·q + t − p…]."""
    b, o, c = _names(x.recording, "b", "o", "c")
    index, reductions, reads, taps, axes, lengths = [b, o], [c], [], [], [], []
    for axis, (s, p, e) in enumerate(zip(strides, pads, extra, strict=True)):
        size, kernel = x.axes[2 + axis].size, w.axes[2 + axis].size
        q, t, m = _names(x.recording, f"q{axis}", f"t{axis}", f"m{axis}")
        length = (size - 1) * s - 2 * p + kernel + e
        if length <= 0:
            raise refuse("conv_transpose", "padding", p, f"the output would be {length} long")
        phases = math.ceil((p + length) / s)
        index += [f"{q} in 0..{phases}", f"{t} in 0..{s}"]
        reductions.append(f"{m} in 0..{math.ceil(kernel / s)}")
        reads.append(f"{q} - {m}")
        taps.append(f"{_scaled(s, m)} + {t}")
        axes += [Axis(phases, str(phases)), Axis(s, str(s))]
        lengths.append((phases * s, p, length))
    expr = (f"sum[{', '.join(reductions)}]({x.name}[{b}, {c}, {', '.join(reads)}] * "
            f"{w.name}[{c}, {o}, {', '.join(taps)}])")
    z = x.recording.let(expr, (x.axes[0], w.axes[1], *axes), x.element,
                        index=f"[{', '.join(index)}]")
    merged = z.reshape((*z.shape[:2], *(n for n, _, _ in lengths)))
    return merged[(slice(None), slice(None), *(slice(p, p + n) for _, p, n in lengths))]


# ---------------------------------------------------------------- the module rows

def conv_module(module: Any, weights: dict[str, Traced], input: Traced) -> Traced:
    """nn.Conv1d/2d/3d as torch runs them: padded by `padding_mode` first (F.pad
    with the module's padding) when it is not "zeros", then convolved."""
    padding = module.padding
    if module.padding_mode != "zeros":
        input = pad(input, module._reversed_padding_repeated_twice, module.padding_mode)
        padding = 0
    target = CONVOLUTIONS[len(module.kernel_size)]
    return rule_in(FUNCTIONS, target)(input, weights["weight"], weights.get("bias"), module.stride,
                        padding, module.dilation, module.groups)


def conv_transpose_module(module: Any, weights: dict[str, Traced], input: Traced,
                          output_size: Sequence[int] | None = None) -> Traced:
    """nn.ConvTranspose1d/2d/3d as torch runs them: the output padding is the module's, or
    what `output_size` asks for (torch's own `_output_padding`, on a meta tensor of the
    input's shape, which checks it)."""
    if module.padding_mode != "zeros":
        raise refuse(f"nn.{type(module).__name__}", "padding_mode", module.padding_mode,
                     "torch takes 'zeros' only")
    spatial = len(module.kernel_size)
    shape = torch.empty(tuple(a.size for a in input.axes), device="meta")
    extra = module._output_padding(shape, output_size, module.stride, module.padding,
                                   module.kernel_size, spatial, module.dilation)
    target = TRANSPOSED_CONVOLUTIONS[spatial]
    return rule_in(FUNCTIONS, target)(input, weights["weight"], weights.get("bias"), module.stride,
                        module.padding, extra, module.groups, module.dilation)


# ---------------------------------------------------------------- the tables

CONVOLUTIONS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}  # by spatial axes
TRANSPOSED_CONVOLUTIONS = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    **{target: (conv, {}) for target in CONVOLUTIONS.values()},
    **{target: (conv_transpose, {}) for target in TRANSPOSED_CONVOLUTIONS.values()},
    torch.conv_tbc: (conv_tbc, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}
MODULES: dict[type, Callable[..., Any]] = {
    **{module: conv_module for module in (nn.Conv1d, nn.Conv2d, nn.Conv3d)},
    **{module: conv_transpose_module for module in (nn.ConvTranspose1d, nn.ConvTranspose2d,
                                                    nn.ConvTranspose3d)},
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES"]
