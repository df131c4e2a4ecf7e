"""The `torch.nn.functional` targets of `rv.fx`, recorded on `reverie.tracing` stand-ins.

Each function takes torch's parameters under torch's names and in torch's order
(`softplus(input, beta=1.0, threshold=20.0)`), so that the table in `reverie/fx_targets.py`
can bind a graph node's arguments to it and refuse by name any argument it does not
honour. Every value is torch's, to rounding, and so is every gradient:

    softplus     x if βx > threshold, else log(1 + e^(βx)) / β
    cross_entropy  class-index targets with `weight`, `ignore_index` (rows whose label is
                 ignored count for nothing, the mean divides by the weight of the rest) and
                 `label_smoothing`; probability targets
    pad          "constant" (any value), "reflect", "replicate" and "circular" padding, by
                 which the `nn.Conv` modules honour their `padding_mode`
                 (`reverie/fx_rows_conv.py`)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.tracing import RECORDER_FILES, Axis, Traced, concatenate, where

RECORDER_FILES.add(__file__)


class UnsupportedArgument(NotImplementedError):
    """An argument of a mapped target that Reverie does not honour at the value given: the
    node is refused by name (or left to eager PyTorch with `fallback=True`)."""


def refuse(target: str, name: str, value: Any, why: str = "") -> UnsupportedArgument:
    """The refusal of `target`'s argument `name` at `value`."""
    return UnsupportedArgument(f"{target}: argument {name}={value!r} is not supported"
                               + (f" ({why})" if why else ""))


def unary(builtin: str) -> Callable[[Traced], Traced]:
    """The row of an elementwise built-in of the language (`torch.tanh` -> `tanh(x)`)."""
    def emit(input: Traced) -> Traced:
        return input._call(builtin)

    return emit


def reduced_axes(x: Traced, dim: Any) -> tuple[int, ...]:
    """torch's `dim` of a reduction (None, an int, a sequence; an empty one is every axis)
    as non-negative axes of `x`."""
    dims = () if dim is None else tuple(dim) if isinstance(dim, tuple | list) else (dim,)
    return tuple(d % x.ndim for d in dims) if dims else tuple(range(x.ndim))


def safe_root(total: Traced, power: float = 2.0) -> Traced:
    """total^(1/power) with torch's gradient at total = 0: none (a norm's or std's backward
    is masked there), where the plain root's would be 0 · ∞."""
    positive = total > 0
    safe = where(positive, total, 1.0)
    return where(positive, safe.sqrt() if power == 2 else safe ** (1.0 / power), 0.0)


def cast(x: Traced, dtype: str) -> Traced:
    """`x` converted to the Reverie dtype `dtype` ("f64", "bool", ...); to bool as torch
    converts, x ≠ 0 (NaN is True; the language has no bool cast)."""
    if x.element == dtype:
        return x
    if dtype == "bool":
        return x.recording.let(f"{x.name} != 0", x.axes, dtype)
    return x.recording.let(f"{dtype}({x.name})", x.axes, dtype)


# ---------------------------------------------------------------- activations

def linear(input: Traced, weight: Traced, bias: Traced | None = None) -> Traced:
    """F.linear: y = x Wᵀ + b over the last axis of x, of any rank (`@`'s batch axes)."""
    y = input @ weight.T
    return y if bias is None else y + bias


def gelu(input: Traced, approximate: str = "none") -> Traced:
    """F.gelu: x Φ(x) = x (1 + erf(x / √2)) / 2, or torch's tanh approximation."""
    x = input
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    if approximate != "none":
        raise refuse("gelu", "approximate", approximate, "torch takes 'none' or 'tanh'")
    return 0.5 * x * (1.0 + (x * (1 / math.sqrt(2))).erf())


def silu(input: Traced, inplace: bool = False) -> Traced:
    """F.silu: x σ(x)."""
    return input * input.sigmoid()


def softplus(input: Traced, beta: float = 1.0, threshold: float = 20.0) -> Traced:
    """F.softplus: x where βx > threshold (torch's switch to the identity), else
    log(1 + e^(βx)) / β; the gradient is torch's, 1 past the threshold, σ(βx) before."""
    x = input
    scaled = x if beta == 1 else x * beta
    smooth = scaled.softplus() if beta == 1 else scaled.softplus() / beta
    return where(scaled > threshold, x, smooth)


def layer_norm(input: Traced, normalized_shape: Sequence[int], weight: Traced | None = None,
               bias: Traced | None = None, eps: float = 1e-5) -> Traced:
    """F.layer_norm over the last len(shape) axes: (x - mean) / √(var + eps) · w + b."""
    x = input
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centred = x - x.mean(axis=axes, keepdims=True)
    y = centred * ((centred * centred).mean(axis=axes, keepdims=True) + eps).rsqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def dropout(input: Traced, p: float = 0.5, training: bool = True, inplace: bool = False
            ) -> Traced:
    """F.dropout: the identity when not training (or p = 0); training-mode dropout draws
    random masks, which Reverie does not (call model.eval())."""
    if training and p > 0:
        raise refuse("dropout", "training", training, "dropout in training mode draws "
                     "random masks; call model.eval()")
    return input


# ---------------------------------------------------------------- softmax

def _softmax_dim(dim: int | None, ndim: int) -> int:
    """torch's implicit softmax axis when `dim` is None (0 for rank 0, 1 and 3, else 1)."""
    if dim is not None:
        return dim
    return 0 if ndim in (0, 1, 3) else 1


def along(builtin: str) -> Any:
    """softmax or log_softmax along `dim`, of the input first converted to `dtype`."""
    def emit(input: Traced, dim: int | None = None, dtype: Any = None) -> Traced:
        x = input if dtype is None else cast(input, float_dtype(builtin, dtype))
        return x.along(builtin, _softmax_dim(dim, x.ndim))

    return emit


def functional_along(builtin: str) -> Any:
    """F.softmax's spelling: `_stacklevel` (where a warning points) before `dtype`."""
    inner = along(builtin)

    def emit(input: Traced, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None
             ) -> Traced:
        return inner(input, dim, dtype)

    return emit


def float_dtype(target: str, dtype: Any) -> str:
    """A torch float dtype as a Reverie dtype name; other dtypes are refused."""
    names = {"torch.float64": "f64", "torch.float32": "f32", "torch.bfloat16": "bf16",
             "torch.float16": "f16"}
    if str(dtype) not in names:
        raise refuse(target, "dtype", dtype, "Reverie converts to float32, float64, "
                     "bfloat16 or float16")
    return names[str(dtype)]


def accumulated(target: str, input: Traced, dtype: Any) -> Traced:
    """The input of a sum or product (torch.sum, prod, cumsum, ...): converted to `dtype`
    where given, else integers and booleans widened to int64, as torch accumulates them."""
    if dtype is not None:
        return cast(input, float_dtype(target, dtype))
    return input if input.element in FLOAT_DTYPES else cast(input, "i64")


# ---------------------------------------------------------------- losses

def _reduction(target: str, size_average: bool | None, reduce: bool | None,
               reduction: str) -> str:
    """torch's legacy `size_average`/`reduce` folded into `reduction`, as torch does."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "none" if not reduce else "mean" if size_average else "sum"
    if reduction not in ("mean", "sum", "none"):
        raise refuse(target, "reduction", reduction, "torch takes 'mean', 'sum' or 'none'")
    return reduction


def _reduced(loss: Traced, reduction: str, total: Traced | None = None) -> Traced:
    """The loss reduced: its mean (its sum over `total` where given), sum, or itself."""
    if reduction == "mean":
        return loss.mean() if total is None else loss.sum() / total
    return loss.sum() if reduction == "sum" else loss


def mse_loss(input: Traced, target: Traced, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean",
             weight: Traced | None = None) -> Traced:
    """F.mse_loss: (x - t)², weighted by `weight` (the mean then divides by its sum)."""
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    difference = input - target
    loss = difference * difference
    if weight is None:
        return _reduced(loss, reduction)
    return _reduced(loss * weight, reduction, weight.sum())


def cross_entropy(input: Traced, target: Traced, weight: Traced | None = None,
                  size_average: bool | None = None, ignore_index: int = -100,
                  reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Traced:
    """F.cross_entropy of logits [N, C, d…] against class indices [N, d…] (or class
    probabilities [N, C, d…]): −Σ_c w_c q_c log_softmax(z)_c per row, reduced."""
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    if input.ndim < 2:
        raise refuse("cross_entropy", "input", input, "logits need a batch axis: [N, C, ...]")
    log_p = input.along("log_softmax", 1)
    if target.element in ("f32", "f64"):
        return _soft_cross_entropy(log_p, target, weight, reduction, label_smoothing)
    return _label_cross_entropy(log_p, target, weight, ignore_index, reduction,
                                label_smoothing)


def _class_weights(log_p: Traced, weight: Traced | None) -> Traced | None:
    """`weight` [C] shaped to broadcast along the class axis of log_p [N, C, d…]."""
    if weight is None or log_p.ndim == 2:
        return weight
    return weight.reshape(weight.shape + (1,) * (log_p.ndim - 2))


def _label_cross_entropy(log_p: Traced, target: Traced, weight: Traced | None,
                         ignore_index: int, reduction: str, smoothing: float) -> Traced:
    """Class-index targets: rows labelled `ignore_index` count for nothing (their label is
    never read), and the mean divides by the weight of the rows that count."""
    rec, dtype = log_p.recording, log_p.element
    counted = cast(target != ignore_index, dtype)
    label = where(target == ignore_index, 0, target)  # a label that is safe to read
    batch = ", ".join(f"n{i}" for i in range(target.ndim))
    at = ", ".join(["n0", f"{label.name}[{batch}]", *(f"n{i}" for i in range(1, target.ndim))])
    picked = rec.let(f"{log_p.name}[{at}]", target.axes, dtype, index=f"[{batch}]")
    kept = counted if weight is None else counted * rec.let(
        f"{weight.name}[{label.name}[{batch}]]", target.axes, dtype, index=f"[{batch}]")
    loss = -picked * kept
    if smoothing:
        classes = log_p.shape[1]
        weighted = log_p if weight is None else log_p * _class_weights(log_p, weight)
        spread = -weighted.sum(axis=1) * counted
        loss = (1 - smoothing) * loss + (smoothing / classes) * spread
    return _reduced(loss, reduction, kept.sum())


def _soft_cross_entropy(log_p: Traced, target: Traced, weight: Traced | None,
                        reduction: str, smoothing: float) -> Traced:
    """Probability targets: −Σ_c w_c q_c log p_c, with q smoothed towards uniform; the
    mean divides by the number of rows (torch's, whatever the weights)."""
    classes = log_p.shape[1]
    q = target if not smoothing else target * (1 - smoothing) + smoothing / classes
    weighted = log_p * q if weight is None else log_p * q * _class_weights(log_p, weight)
    loss = -weighted.sum(axis=1)
    return _reduced(loss, reduction)


# ---------------------------------------------------------------- padding

def _reflect(t: int, size: int) -> int:
    return -t if t < 0 else 2 * (size - 1) - t if t >= size else t


PAD_SOURCES = {  # the source index of padded position t (t - before) along an axis
    "circular": lambda t, size: t % size,
    "reflect": _reflect,
    "replicate": lambda t, size: min(max(t, 0), size - 1),
}


def pad(input: Traced, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Traced:
    """F.pad: `pad` holds (before, after) widths from the last axis backwards (negative
    widths crop, in mode "constant" only). "constant" reads `value` outside the input;
    the other modes read the input at the index PAD_SOURCES maps each new position to."""
    if len(pad) % 2 or len(pad) > 2 * input.ndim:
        raise refuse("pad", "pad", pad, "(before, after) pairs, at most one per axis")
    widths = {input.ndim - 1 - i: (int(pad[2 * i]), int(pad[2 * i + 1]))
              for i in range(len(pad) // 2)}
    if mode == "constant":
        return _pad_constant(input, widths, 0.0 if value is None else value)
    if mode not in PAD_SOURCES:
        raise refuse("pad", "mode", mode, f"torch takes 'constant', {', '.join(PAD_SOURCES)}")
    if any(w < 0 for pair in widths.values() for w in pair):
        raise refuse("pad", "pad", pad, f"negative widths (cropping) in mode {mode!r}")
    for axis, (before, after) in widths.items():
        size = input.shape[axis]
        sources = [PAD_SOURCES[mode](t, size) for t in range(-before, size + after)]
        input = _gather_runs(input, axis, sources)
    return input


def _gather_runs(x: Traced, axis: int, sources: list[int]) -> Traced:
    """x with axis `axis` replaced by x[sources] along it: one slice per run of
    consecutive sources, concatenated."""
    if sources == list(range(x.shape[axis])):
        return x
    runs: list[list[int]] = []
    for s in sources:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    lead = (slice(None),) * axis
    pieces = [x[(*lead, slice(run[0], run[-1] + 1))] for run in runs]
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=axis)


def _pad_constant(x: Traced, widths: dict[int, tuple[int, int]], value: float) -> Traced:
    """Constant padding in index notation: a read outside x is 0 (Reverie's out-of-range
    reads), or `value` through a `where` on the index ranges."""
    names, reads, axes, inside = [], [], [], []
    for axis, size in enumerate(x.axes):
        before, after = widths.get(axis, (0, 0))
        i = f"p{axis}"
        extent = size.size + before + after
        names.append(f"{i} in 0..{extent}" if (before, after) != (0, 0) else i)
        reads.append(_offset(i, -before))
        axes.append(size if (before, after) == (0, 0) else Axis(extent, str(extent)))
        if before > 0 or after > 0:
            inside.append(f"{i} >= {before} and {i} < {before + size.size}")
    read = f"{x.name}[{', '.join(reads)}]"
    expr = read if value == 0 or not inside else \
        f"where({' and '.join(inside)}, {read}, {float(value)!r})"
    return x.recording.let(expr, tuple(axes), x.element, index=f"[{', '.join(names)}]")


def _scaled(factor: int, index: str) -> str:
    """`2 * i`, or `i` for a factor of 1."""
    return index if factor == 1 else f"{factor} * {index}"


def _offset(index: str, shift: int) -> str:
    """`i + 2`, `i - 1` or `i`."""
    return index if not shift else f"{index} + {shift}" if shift > 0 else f"{index} - {-shift}"
