"""Rows of the `rv.fx` target table (`fx_targets.py`): the attention and recurrent family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

Attention is recorded as torch's math: batched products (`@` over the leading axes),
an additive mask, a softmax over the last axis.

    scaled_dot_product_attention   softmax(q kᵀ · scale + mask) v; a bool `attn_mask`
        keeps the positions where it is True, a float one is added; `is_causal` keeps
        key j ≤ query i. A query masked from every key gets 0 (torch's safe softmax).
        Grouped-query attention is refused.
    multi_head_attention_forward   what `nn.MultiheadAttention` calls (Dynamo hands it over
        as one node, the module's inputs transposed to (L, N, E) for `batch_first`): the
        in-projection (packed or separate weights), `attn_mask` (2-D or 3-D, bool True =
        masked out, or float) and `key_padding_mask` merged as torch merges them, the heads'
        attention, the out-projection, and the attention weights, averaged over the heads
        with `average_attn_weights`. `is_causal` is the hint torch then ignores (the mask
        is used); `need_weights=False` gives (output, None). `bias_k`/`bias_v`,
        `add_zero_attn` and `static_k`/`static_v` are refused.
    _transformer_encoder_layer_fwd   `nn.TransformerEncoderLayer`'s fused fast path (eval
        mode without grad): its self-attention through the row above, its mask read as
        aten's `masked_softmax` reads it (as bool: nonzero masks out), then the
        feed-forward block, each with its residual and layer norm (`norm_first` or not).
    masked_fill   `value` where a bool mask is True (also `masked_fill_` on a value the
        graph computes: how `nn.MultiheadAttention` turns a bool mask into a float one).

Dropout on the attention weights (`dropout_p` > 0, in training) multiplies them by noise
torch draws at every call, as eager draws it on the CPU (SDPA takes its math path there
when dropping out, and MHA's `need_weights` path drops out alike): `at::dropout` of the
(…, L, S) weights, so under one `torch.manual_seed` the compiled model drops what eager
drops (`fx_rows_activations.dropout_in_training`).

Recurrent cells and layers, as Dynamo hands them over: `nn.LSTMCell`/`GRUCell`/`RNNCell`
as `torch.lstm_cell`/`gru_cell`/`rnn_tanh_cell`/`rnn_relu_cell`, and, under
`torch._dynamo.config.allow_rnn = True`, `nn.LSTM`/`GRU`/`RNN` as one `torch.lstm`/`gru`/
`rnn_tanh`/`rnn_relu` node (without it Dynamo runs the model's frame in eager torch and
gives the backend no graph). A layer is unrolled over the example's time steps (rv.fx's
kernels are compiled per shape), each direction and layer in turn (`num_layers`,
`bidirectional`, `batch_first`, with or without biases); `proj_size` is refused. Dropout
in training follows every layer's output but the last, as aten's `_rnn_impl` applies it:
`at::dropout` of the (T, N, directions · H) output, layer by layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

from reverie.fx_functional import cast, gelu, layer_norm, linear, refuse
from reverie.fx_rows_activations import dropout_in_training
from reverie.tracing import RECORDER_FILES, Axis, Traced, concatenate, where

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]


def _minus_infinity(like: Traced) -> Traced:
    """−∞ of `like`'s dtype, as a statement (source constants are finite): the score of a
    masked position, which the softmax turns into a weight of exactly 0."""
    return like.recording.let("log(0.0)", (), like.element)


def _float_constant(target: str, value: float, like: Traced) -> Traced | float:
    """A float argument `value` as an operand beside `like`: the number, or ±∞ as a
    statement of `like`'s dtype; NaN is refused."""
    if math.isnan(value):
        raise refuse(target, "value", value, "Reverie writes no NaN constant")
    if math.isfinite(value):
        return value
    return _minus_infinity(like) if value < 0 else -_minus_infinity(like)


def _causal(length: int, sources: int, like: Traced) -> Traced:
    """The bool [length, sources] mask of torch's `is_causal`, in `like`'s recording:
    key j ≤ query i."""
    rec = like.recording
    i, j = rec.claim("ci"), rec.claim("cj")
    return rec.let(f"{j} <= {i}", (Axis(length, str(length)), Axis(sources, str(sources))),
                   "bool", index=f"[{i} in 0..{length}, {j} in 0..{sources}]")


def _masked(scores: Traced, mask: Traced | None) -> Traced:
    """Scores with a mask applied as SDPA reads it: bool keeps where True, float adds."""
    if mask is None:
        return scores
    if mask.element == "bool":
        return where(mask, scores, _minus_infinity(scores))
    return scores + mask


def _attend(target: str, q: Traced, k: Traced, v: Traced, scale: float, mask: Traced | None,
            dropout_p: float, safe: bool = False) -> tuple[Traced, Traced]:
    """(softmax(q kᵀ · scale + mask) v, the weights) over the leading batch axes, the
    mask read as `_masked` reads it. `safe` is SDPA's softmax: a row masked out whole
    weighs 0 (torch's `_safe_softmax`), where the plain one is NaN. With `dropout_p` > 0
    the weights are dropped out, by noise torch draws as both of its CPU paths do (the
    math SDPA, which the CPU picks for dropout, and MHA's `need_weights` path):
    `at::dropout` on the weights, (…, L, S) and contiguous."""
    order = (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)
    scores = _masked((q @ k.transpose(order)) * scale, mask)
    weights = scores.along("softmax", -1)
    if safe:
        dead = scores.max(axis=-1, keepdims=True) == _minus_infinity(scores)
        weights = where(dead, 0.0, weights)
    weights = dropout_in_training(target, "dropout_p", weights, dropout_p)
    return weights @ v, weights


def scaled_dot_product_attention(query: Traced, key: Traced, value: Traced,
                                 attn_mask: Traced | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Traced:
    """F.scaled_dot_product_attention (torch's math): softmax(q kᵀ · scale + mask) v."""
    if query.shape[:-2] != key.shape[:-2]:
        raise refuse("scaled_dot_product_attention", "key", key,
                     "Reverie takes the query's batch axes (no broadcasting)")
    if is_causal and attn_mask is not None:
        raise refuse("scaled_dot_product_attention", "is_causal", is_causal,
                     "torch takes is_causal or attn_mask, not both")
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    mask = _causal(query.shape[-2], key.shape[-2], query) if is_causal else attn_mask
    return _attend("scaled_dot_product_attention", query, key, value, factor, mask,
                   dropout_p, safe=True)[0]


def _additive(mask: Traced | None, like: Traced) -> Traced | None:
    """A mask of `nn.MultiheadAttention` (bool True = masked out, or float) as the float
    mask torch adds to the scores."""
    if mask is None or mask.element != "bool":
        return mask
    return where(mask, _minus_infinity(like), 0.0)


def _in_projection(query: Traced, key: Traced, value: Traced, weights: list[Traced],
                   bias: Traced | None) -> list[Traced]:
    """q, k, v: each input through its weight and its third of the packed bias."""
    embed = weights[0].shape[0]
    biases = [None] * 3 if bias is None else [bias[i * embed:(i + 1) * embed] for i in range(3)]
    return [linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases,
                                               strict=True)]


def _heads(x: Traced, batch: int, heads: int) -> Traced:
    """(L, N, E) -> (N, heads, L, E / heads)."""
    length, _, embed = x.shape
    return x.reshape(length, batch, heads, embed // heads).transpose(1, 2, 0, 3)


def _attention_bias(attn_mask: Traced | None, key_padding_mask: Traced | None, batch: int,
                    heads: int, like: Traced) -> Traced | None:
    """The float mask torch adds to the (N, heads, L, S) scores: `attn_mask` (L, S) or
    (N·heads, L, S) plus `key_padding_mask` (N, S) along the keys."""
    bias = _additive(attn_mask, like)
    if bias is not None and bias.ndim == 3:
        bias = bias.reshape(batch, heads, *bias.shape[1:])
    padding = _additive(key_padding_mask, like)
    if padding is not None:
        padding = padding.reshape(batch, 1, 1, padding.shape[-1])
        bias = padding if bias is None else bias + padding
    return bias


def multi_head_attention_forward(
        query: Traced, key: Traced, value: Traced, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Traced | None, in_proj_bias: Traced | None, bias_k: Any, bias_v: Any,
        add_zero_attn: bool, dropout_p: float, out_proj_weight: Traced,
        out_proj_bias: Traced | None, training: bool = True,
        key_padding_mask: Traced | None = None, need_weights: bool = True,
        attn_mask: Traced | None = None, use_separate_proj_weight: bool = False,
        q_proj_weight: Traced | None = None, k_proj_weight: Traced | None = None,
        v_proj_weight: Traced | None = None, static_k: Any = None, static_v: Any = None,
        average_attn_weights: bool = True, is_causal: bool = False
) -> tuple[Traced, Traced | None]:
    """F.multi_head_attention_forward on (L, N, E) inputs (or unbatched (L, E))."""
    target = "multi_head_attention_forward"
    if query.shape[-1] != embed_dim_to_check:
        raise refuse(target, "embed_dim_to_check", embed_dim_to_check,
                     f"the query's embedding is {query.shape[-1]}")
    batched = query.ndim == 3
    if not batched:
        query, key, value = (x.reshape(x.shape[0], 1, x.shape[1]) for x in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.reshape(1, *key_padding_mask.shape)
    length, batch, embed = query.shape
    weights = [q_proj_weight, k_proj_weight, v_proj_weight] if use_separate_proj_weight \
        else [in_proj_weight[i * embed:(i + 1) * embed] for i in range(3)]
    q, k, v = (_heads(x, batch, num_heads)
               for x in _in_projection(query, key, value, weights, in_proj_bias))
    bias = _attention_bias(attn_mask, key_padding_mask, batch, num_heads, q)
    out, attention = _attend(target, q, k, v, 1 / math.sqrt(embed // num_heads), bias,
                             dropout_p if training else 0.0)
    out = linear(out.transpose(2, 0, 1, 3).reshape(length, batch, embed), out_proj_weight,
                 out_proj_bias)
    if average_attn_weights:
        attention = attention.mean(axis=1)
    if not batched:
        out = out.reshape(length, embed)
        attention = attention.reshape(attention.shape[1:])
    return (out, attention) if need_weights else (out, None)


def _fast_path_masks(mask: Traced | None, mask_type: int | None, batch: int, heads: int
                     ) -> tuple[Traced | None, Traced | None]:
    """The fused fast path's `mask` as MHA's (attn_mask, key_padding_mask), bool: aten's
    `masked_softmax` reads any mask as bool (nonzero masks out, even a finite float), by
    `mask_type`: 0 (L, S), 1 key padding (N, S), 2 (N, heads, L, S)."""
    target = "_transformer_encoder_layer_fwd"
    if mask is None:
        return None, None
    masked = mask if mask.element == "bool" else mask != 0
    if mask_type == 0:
        return masked, None
    if mask_type == 1:
        return None, masked
    if mask_type != 2:
        raise refuse(target, "mask_type", mask_type, "torch takes 0, 1 or 2 with a mask")
    if masked.shape[:2] != (batch, heads):
        raise refuse(target, "mask", mask, f"mask_type 2 takes ({batch}, {heads}, L, S)")
    return masked.reshape(batch * heads, *masked.shape[2:]), None


def transformer_encoder_layer_fwd(
        src: Traced, embed_dim: int, num_heads: int, qkv_weight: Traced, qkv_bias: Traced,
        proj_weight: Traced, proj_bias: Traced, use_gelu: bool, norm_first: bool, eps: float,
        norm_weight_1: Traced, norm_bias_1: Traced, norm_weight_2: Traced,
        norm_bias_2: Traced, ffn_weight_1: Traced, ffn_bias_1: Traced, ffn_weight_2: Traced,
        ffn_bias_2: Traced, mask: Traced | None = None, mask_type: int | None = None
) -> Traced:
    """torch._transformer_encoder_layer_fwd, `nn.TransformerEncoderLayer`'s fused fast path
    (eval mode without grad, batch first): self-attention (its mask read as bool, a query
    masked from every key NaN, as aten's), the feed-forward block (ReLU or GELU), each
    added to its input and layer-normalised after it or, with `norm_first`, before."""
    if src.ndim != 3:
        raise refuse("_transformer_encoder_layer_fwd", "src", src, "Reverie takes (N, L, E)")
    attn_mask, key_padding_mask = _fast_path_masks(mask, mask_type, src.shape[0], num_heads)

    def attend(x: Traced) -> Traced:
        sequence = x.transpose(1, 0, 2)
        out, _ = multi_head_attention_forward(
            sequence, sequence, sequence, embed_dim, num_heads, qkv_weight, qkv_bias, None,
            None, False, 0.0, proj_weight, proj_bias, training=False,
            key_padding_mask=key_padding_mask, need_weights=False, attn_mask=attn_mask)
        return out.transpose(1, 0, 2)

    def feed_forward(x: Traced) -> Traced:
        hidden = linear(x, ffn_weight_1, ffn_bias_1)
        return linear(gelu(hidden) if use_gelu else hidden.relu(), ffn_weight_2, ffn_bias_2)

    def norm(x: Traced, weight: Traced, bias: Traced) -> Traced:
        return layer_norm(x, (embed_dim,), weight, bias, eps)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def masked_fill(input: Traced, mask: Traced, value: Any) -> Traced:
    """Tensor.masked_fill: `value` (a number, or a 0-d tensor) where the bool `mask` is True,
    else the input, in the input's dtype (what `nn.MultiheadAttention` makes of a bool mask:
    `zeros_like(mask, dtype).masked_fill_(mask, -inf)`; rv.fx records the in-place
    `masked_fill_` on a value the graph computes as this)."""
    target = "masked_fill"
    if not isinstance(mask, Traced) or mask.element != "bool":
        raise refuse(target, "mask", mask, "torch takes a bool mask")
    floating = input.element in ("f32", "f64")
    if isinstance(value, Traced):
        if value.ndim:
            raise refuse(target, "value", value, "torch takes a number or a 0-d tensor")
        value = cast(value, input.element)
    elif isinstance(value, int | float) and floating:
        value = _float_constant(target, float(value), input)
    elif isinstance(value, float) or isinstance(value, bool) != (input.element == "bool"):
        raise refuse(target, "value", value,
                     f"a {type(value).__name__} into a {input.element} tensor")
    return where(mask, value, input)


ONE_VALUE = {"enable_gqa": False}  # grouped-query attention: refused
MHA_ONLY = {"bias_k": None, "bias_v": None, "add_zero_attn": False, "static_k": None,
            "static_v": None}

FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    F.scaled_dot_product_attention: (scaled_dot_product_attention, ONE_VALUE),
    F.multi_head_attention_forward: (multi_head_attention_forward, MHA_ONLY),
    torch._transformer_encoder_layer_fwd: (transformer_encoder_layer_fwd, {}),
    torch.masked_fill: (masked_fill, {}),
}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {"masked_fill": (masked_fill, {})}
MODULES: dict[type, Callable[..., Any]] = {}


# ---------------------------------------------------------------- recurrent cells and layers

def _gates(x: Traced, h: Traced, w_ih: Traced, w_hh: Traced, b_ih: Traced | None,
           b_hh: Traced | None, count: int) -> tuple[list[Traced], list[Traced]]:
    """The `count` gate blocks of x W_ihᵀ + b_ih and of h W_hhᵀ + b_hh, apart (GRU reads
    its new gate's halves apart; the others add them)."""
    size = w_hh.shape[1]
    outer, inner = linear(x, w_ih, b_ih), linear(h, w_hh, b_hh)
    return ([outer[..., g * size:(g + 1) * size] for g in range(count)],
            [inner[..., g * size:(g + 1) * size] for g in range(count)])


def lstm_cell(input: Traced, hx: Any, w_ih: Traced, w_hh: Traced, b_ih: Traced | None = None,
              b_hh: Traced | None = None) -> tuple[Traced, Traced]:
    """torch.lstm_cell: gates i, f, g, o; c' = σ(f) c + σ(i) tanh(g), h' = σ(o) tanh(c')."""
    h, c = hx
    outer, inner = _gates(input, h, w_ih, w_hh, b_ih, b_hh, 4)
    i, f, g, o = (a + b for a, b in zip(outer, inner, strict=True))
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def gru_cell(input: Traced, hx: Traced, w_ih: Traced, w_hh: Traced, b_ih: Traced | None = None,
             b_hh: Traced | None = None) -> Traced:
    """torch.gru_cell: r, z = σ(…), n = tanh(x_n + r h_n), h' = n + z (h − n)."""
    (x_r, x_z, x_n), (h_r, h_z, h_n) = _gates(input, hx, w_ih, w_hh, b_ih, b_hh, 3)
    r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return n + z * (hx - n)


def _rnn_cell(activation: str) -> Emit:
    """torch.rnn_tanh_cell / rnn_relu_cell: act(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)."""
    def cell(input: Traced, hx: Traced, w_ih: Traced, w_hh: Traced,
             b_ih: Traced | None = None, b_hh: Traced | None = None) -> Traced:
        (outer,), (inner,) = _gates(input, hx, w_ih, w_hh, b_ih, b_hh, 1)
        return (outer + inner)._call(activation)

    return cell


CELLS: dict[str, tuple[Emit, int]] = {  # the cell of each layer, its weights' gate count
    "lstm": (lstm_cell, 4), "gru": (gru_cell, 3),
    "rnn_tanh": (_rnn_cell("tanh"), 1), "rnn_relu": (_rnn_cell("relu"), 1),
}


def _stack(steps: list[Traced]) -> Traced:
    """[N, H] values along a new first (time) axis."""
    return concatenate([s.reshape(1, *s.shape) for s in steps], axis=0)


def _direction(kind: str, sequence: Traced, state: Any, weights: list[Traced],
               reverse: bool) -> tuple[Traced, Any]:
    """One direction of one layer over time (T, N, F), unrolled: the outputs (T, N, H) in
    time order and the last state."""
    cell = CELLS[kind][0]
    times = range(sequence.shape[0])
    outputs = []
    for t in reversed(times) if reverse else times:
        state = cell(sequence[t], state, *weights)
        outputs.append(state[0] if kind == "lstm" else state)
    return _stack(outputs[::-1] if reverse else outputs), state


def _layers(kind: str, input: Traced, hx: Any, params: list[Traced], has_biases: bool,
            num_layers: int, dropout: float, train: bool, bidirectional: bool,
            batch_first: bool) -> tuple[Traced, ...]:
    """torch.lstm / gru / rnn_tanh / rnn_relu (Dynamo's graph under allow_rnn=True): the
    layers over the sequence, each direction unrolled; the outputs and the last states."""
    target = f"torch.{kind}"
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    if len(params) != num_layers * directions * per_layer:
        raise refuse(target, "params", f"{len(params)} tensors", "a projection (proj_size) "
                     "is not supported")
    states = list(hx) if kind == "lstm" else [hx]
    sequence = input.transpose(1, 0, 2) if batch_first else input
    last: list[list[Traced]] = [[] for _ in states]
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            weights = params[index * per_layer:(index + 1) * per_layer] + [None] * (4 - per_layer)
            start = tuple(s[index] for s in states)
            out, final = _direction(kind, sequence, start if kind == "lstm" else start[0],
                                    weights, reverse=direction == 1)
            for kept, value in zip(last, final if kind == "lstm" else (final,), strict=True):
                kept.append(value)
            outputs.append(out)
        sequence = concatenate(outputs, axis=2) if bidirectional else outputs[0]
        if train and layer < num_layers - 1:  # aten's `_rnn_impl`: (T, N, D·H), time first
            sequence = dropout_in_training(target, "dropout", sequence, dropout)
    output = sequence.transpose(1, 0, 2) if batch_first else sequence
    return (output, *(_stack(values) for values in last))


def _layer_row(kind: str) -> Emit:
    def emit(input: Traced, hx: Any, params: list[Traced], has_biases: bool, num_layers: int,
             dropout: float, train: bool, bidirectional: bool, batch_first: bool
             ) -> tuple[Traced, ...]:
        return _layers(kind, input, hx, list(params), has_biases, num_layers, dropout,
                       train, bidirectional, batch_first)

    return emit


FUNCTIONS.update({
    torch.lstm_cell: (lstm_cell, {}), torch.gru_cell: (gru_cell, {}),
    torch.rnn_tanh_cell: (CELLS["rnn_tanh"][0], {}),
    torch.rnn_relu_cell: (CELLS["rnn_relu"][0], {}),
    **{getattr(torch, kind): (_layer_row(kind), {}) for kind in CELLS},
})
