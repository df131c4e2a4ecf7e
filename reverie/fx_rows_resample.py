"""Rows of the `rv.fx` target table (`fx_targets.py`): resampling, `F.interpolate` and the
`nn.Upsample` modules.

Each table has the form of `fx_targets`' own (see `fx_rows_losses.py`). The sizes are
known when compiling, so each spatial axis is resampled by index and weight tables made
once (by torch, as host inputs of the kernel, `fx_rows_shapes.made`) and read by a gather,
one axis after the other; the gradient is the gather's scatter-add, torch's. With
s = in / out (or 1 / scale_factor where one is given), output position j reads, as
ATen's CPU kernels compute them:

    nearest        i = min(⌊j s⌋, in − 1)            (j s in float32, as ATen)
    nearest-exact  i = min(⌊(j + ½) s⌋, in − 1)
    linear         x = (j + ½) s − ½ clamped at 0 (align_corners: j (in − 1) / (out − 1)),
                   i₀ = ⌊x⌋, i₁ = min(i₀ + 1, in − 1), weights 1 − (x − i₀) and x − i₀
                   (linear, bilinear, trilinear: one axis each)

Bicubic, area and antialiasing are refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)
from torch import nn

from reverie.fx_functional import refuse
from reverie.fx_rows_shapes import made
from reverie.tracing import RECORDER_FILES, Traced

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]
LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}  # mode -> spatial axes


def _sizes(input: Traced, size: Any, scale_factor: Any, spatial: int,
           recompute_scale_factor: bool | None) -> tuple[list[int], list[float | None]]:
    """The output size of each spatial axis, and the scale torch maps positions by (None:
    in / out)."""
    inputs = list(input.shape[-spatial:])
    if (size is None) == (scale_factor is None):
        raise refuse("interpolate", "size", size, "torch takes size or scale_factor")
    if size is not None:
        sizes = list(size) if isinstance(size, tuple | list) else [size] * spatial
        return [int(s) for s in sizes], [None] * spatial
    factors = list(scale_factor) if isinstance(scale_factor, tuple | list) else \
        [scale_factor] * spatial
    sizes = [math.floor(n * float(f)) for n, f in zip(inputs, factors, strict=True)]
    scales = [None if recompute_scale_factor else float(f) for f in factors]
    return sizes, scales


def _ratio(length: int, out: int, scale: float | None, align_corners: bool,
           dtype: type) -> Any:
    """ATen's `area_pixel_compute_scale` in the kernel's arithmetic `dtype`."""
    if align_corners:
        return dtype((length - 1) / (out - 1)) if out > 1 else dtype(0)
    return dtype(1.0 / scale) if scale is not None and scale > 0 else dtype(length / out)


def _nearest(length: int, out: int, scale: float | None, exact: bool) -> list[int]:
    ratio = np.float32(1.0 / scale if scale is not None and scale > 0 else length / out)
    if exact:  # (j + 0.5) in double times the float scale, then floorf
        return [min(int(np.floor(np.float32((j + 0.5) * float(ratio)))), length - 1)
                for j in range(out)]
    return [min(int(np.floor(np.float32(j) * ratio)), length - 1) for j in range(out)]


def _linear(length: int, out: int, scale: float | None, align_corners: bool, dtype: type
            ) -> tuple[list[int], list[int], list[float]]:
    """(i₀, i₁, the weight of i₁) of each output position."""
    ratio = _ratio(length, out, scale, align_corners, dtype)
    firsts, seconds, weights = [], [], []
    for j in range(out):
        x = ratio * dtype(j) if align_corners else max(ratio * (dtype(j) + dtype(0.5))
                                                       - dtype(0.5), dtype(0))
        first = min(int(np.floor(x)), length - 1)
        firsts.append(first)
        seconds.append(min(first + 1, length - 1))
        weights.append(float(min(max(x - dtype(first), dtype(0)), dtype(1))))
    return firsts, seconds, weights


def _table(values: list[Any], dtype: torch.dtype) -> Traced:
    """A constant table, made by torch at each call (a host input of the kernel)."""
    return made(lambda _: torch.tensor(values, dtype=dtype))


def _along(x: Traced, axis: int, index: Traced) -> Traced:
    return x[(slice(None),) * axis + (index,)]


def interpolate(input: Traced, size: Any = None, scale_factor: Any = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False
                ) -> Traced:
    """F.interpolate of [N, C, *spatial] in modes nearest, nearest-exact, linear, bilinear
    and trilinear."""
    spatial = input.ndim - 2
    if mode in LINEAR_MODES and LINEAR_MODES[mode] != spatial or spatial not in (1, 2, 3):
        raise refuse("interpolate", "mode", mode, f"an input of {spatial} spatial axes")
    if mode not in ("nearest", "nearest-exact", *LINEAR_MODES):
        raise refuse("interpolate", "mode", mode, "Reverie takes nearest, nearest-exact, "
                     "linear, bilinear and trilinear")
    if antialias:
        raise refuse("interpolate", "antialias", antialias)
    if align_corners is not None and mode not in LINEAR_MODES:
        raise refuse("interpolate", "align_corners", align_corners,
                     "torch takes it with the linear modes")
    sizes, scales = _sizes(input, size, scale_factor, spatial, recompute_scale_factor)
    arithmetic = np.float64 if input.element == "f64" else np.float32
    weight_dtype = torch.float64 if input.element == "f64" else torch.float32
    x = input
    for k, (out, scale) in enumerate(zip(sizes, scales, strict=True)):
        axis, length = 2 + k, input.shape[2 + k]
        if mode in LINEAR_MODES:
            firsts, seconds, weights = _linear(length, out, scale, bool(align_corners),
                                               arithmetic)
            w = _table(weights, weight_dtype).reshape((out,) + (1,) * (spatial - 1 - k))
            low = _along(x, axis, _table(firsts, torch.int64))
            high = _along(x, axis, _table(seconds, torch.int64))
            x = low * (1.0 - w) + high * w
        else:
            indices = _nearest(length, out, scale, mode == "nearest-exact")
            x = _along(x, axis, _table(indices, torch.int64))
    return x


def upsample_module(module: Any, weights: dict[str, Traced], input: Traced) -> Traced:
    """nn.Upsample (and UpsamplingNearest2d / UpsamplingBilinear2d): F.interpolate with the
    module's attributes."""
    return interpolate(input, module.size, module.scale_factor, module.mode,
                       module.align_corners, getattr(module, "recompute_scale_factor", None))


FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {F.interpolate: (interpolate, {})}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}
MODULES: dict[type, Callable[..., Any]] = {
    nn.Upsample: upsample_module, nn.UpsamplingNearest2d: upsample_module,
    nn.UpsamplingBilinear2d: upsample_module,
}

__all__ = ["FUNCTIONS", "METHODS", "MODULES"]
