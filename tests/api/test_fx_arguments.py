"""Every argument of every mapped FX target is honoured or refused by name (docs/api.md §8–9).

For each row of `reverie.fx_targets` (functions, tensor methods, `nn` modules) the
optional parameters come from torch's own signature (Python's, or the aten schemas of a
built-in; a module's constructor), so a new row is covered without editing this file. Each
is passed, one at a time, at the values of `VALUES` (or at the value the row's example
gives it), in a one-node graph; the compiled graph must equal eager torch, or compiling it
must raise an error naming the argument. A row without an example, or a parameter without
a value to try, fails here until one is added.
"""

from __future__ import annotations

import inspect
import keyword
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch.utils._pytree import tree_flatten, tree_unflatten  # noqa: E402

import reverie as rv  # noqa: E402
from reverie.fx_rows_shapes import FILLS  # noqa: E402
from reverie.fx_targets import FUNCTIONS, METHODS, MODULES, target_name  # noqa: E402

torch.manual_seed(0)


def normal(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def positive(*shape):
    return torch.rand(*shape, dtype=torch.float64) + 0.5


X, Y = normal(3, 4), normal(3, 4)
LABELS = torch.tensor([0, 2, 1])

# The values each parameter is tried at (any that torch accepts for the target).
VALUES: dict[str, list[Any]] = {
    "alpha": [2.5], "out": [torch.empty(0, dtype=torch.float64)],
    "rounding_mode": ["floor", "trunc"], "out_dtype": [torch.float32],
    "min": [-0.5], "max": [0.5], "dim": [0, 1, (0, 1)], "keepdim": [True],
    "dtype": [torch.float32], "start_dim": [1], "end_dim": [0, -2], "approximate": ["tanh"],
    "beta": [2.0, 0.5], "threshold": [0.5, -1.0], "eps": [1e-3],
    "reduction": ["sum", "none"], "size_average": [False], "reduce": [False],
    "ignore_index": [1, 0], "label_smoothing": [0.2], "training": [True, False],
    "p": [0.0, 0.3], "inplace": [True], "stride": [2], "padding": [1, "same", "valid"],
    "dilation": [2], "groups": [2], "mode": ["reflect", "replicate", "circular"],
    "value": [2.5], "memory_format": [torch.preserve_format], "_stacklevel": [5],
    "other": [0.5], "self": [0.5], "size": [(4, 3)], "padding_mode":
    ["circular", "reflect", "replicate"], "bias": [False], "elementwise_affine": [False],
    "device": ["cpu"], "copy": [True], "non_blocking": [True], "cudnn_enable": [False],
    "weight": [positive(4)],
    "log_target": [True], "pos_weight": [positive(4)], "delta": [0.5, 2.0],
    "attn_mask": [normal(3, 3) > 0.3, normal(3, 3)], "dropout_p": [0.0, 0.1],
    "is_causal": [True], "scale": [0.3], "enable_gqa": [True],
    "key_padding_mask": [torch.tensor([[False, False, True], [False] * 3])],
    "need_weights": [False], "average_attn_weights": [False],
    "use_separate_proj_weight": [True],
    "static_k": [normal(4, 3, 2)], "static_v": [normal(4, 3, 2)],
    "batch_first": [True], "input": [normal(5, 2, 3)], "data": [normal(5, 3)],
    "batch_sizes": [torch.tensor([2, 2, 1])],
}
WRITES = ("out", "inplace")  # refused as in-place writes by rv.fx, which is a refusal
# parameters torch takes only with others (instance_norm's running statistics)
TOGETHER: dict[str, dict[str, Any]] = {}

# Example arguments of the targets that take more than one tensor (others take X).
EXAMPLES: dict[Any, tuple[tuple[Any, ...], dict[str, Any]]] = {
    **{t: ((X, Y), {}) for t in (torch.add, torch.sub, torch.mul, torch.div, torch.maximum,
                                 torch.minimum, F.mse_loss, "add", "sub", "mul", "div")},
    **{t: ((positive(3, 4), normal(3, 4)), {}) for t in (torch.pow, "pow")},
    **{t: ((X, normal(4, 2)), {}) for t in (torch.matmul, torch.mm, "matmul", "mm")},
    **{t: ((normal(2, 3, 4), normal(2, 4, 5)), {}) for t in (torch.bmm, "bmm")},
    **{t: ((normal(3, 2), X, normal(4, 2)), {}) for t in (torch.addmm, "addmm")},
    **{t: ((normal(2, 3, 5), normal(2, 3, 4), normal(2, 4, 5)), {})
       for t in (torch.baddbmm, "baddbmm")},
    torch.mv: ((X, normal(4)), {}), torch.where: ((X > 0, X), {"other": Y}),
    torch.clamp: ((X,), {"min": -0.5}), "clamp": ((X,), {"min": -0.5}),
    torch.cat: (([X, Y],), {}), torch.concat: (([X, Y],), {}),
    **{t: ((X, 1), {}) for t in (torch.logsumexp, torch.softmax, torch.log_softmax,
                                 "logsumexp", "softmax", "log_softmax")},
    torch.transpose: ((X, 0, 1), {}), "transpose": ((X, 0, 1), {}),
    torch.permute: ((X, (1, 0)), {}), "permute": ((X, 1, 0), {}),
    torch.reshape: ((X, (4, 3)), {}), "reshape": ((X, 12), {}), "view": ((X, 4, 3), {}),
    F.linear: ((X, normal(2, 4)), {"bias": normal(2)}),
    F.layer_norm: ((X, (4,)), {"weight": normal(4), "bias": normal(4)}),
    F.mse_loss: ((X, Y), {"weight": positive(3, 4)}),
    F.cross_entropy: ((X, LABELS), {"weight": positive(4)}),
    F.dropout: ((X,), {"training": False}),
    F.conv1d: ((normal(2, 4, 7), normal(4, 2, 3)), {"bias": normal(4), "groups": 2}),
    F.conv2d: ((normal(2, 4, 6, 5), normal(4, 2, 3, 2)), {"bias": normal(4), "groups": 2}),
    F.pad: ((normal(2, 3, 5), (1, 2)), {}), torch._C._nn.pad: ((normal(2, 3, 5), (1, 2)), {}),
    # the losses family (reverie/fx_rows_losses.py)
    F.nll_loss: ((X, LABELS), {"weight": positive(4)}),
    F.binary_cross_entropy: ((X.sigmoid(), Y.sigmoid()), {"weight": positive(3, 4)}),
    F.binary_cross_entropy_with_logits: ((X, Y.sigmoid()), {"weight": positive(3, 4)}),
    F.kl_div: ((X, positive(3, 4)), {}),
    **{t: ((X, Y), {"weight": positive(3, 4)}) for t in (F.l1_loss, F.huber_loss)},
    F.smooth_l1_loss: ((X, Y), {}),
    # the attention family (reverie/fx_rows_attention.py)
    F.scaled_dot_product_attention: ((normal(2, 3, 4), normal(2, 3, 4), normal(2, 3, 4)), {}),
    F.multi_head_attention_forward: (
        (normal(3, 2, 4), normal(3, 2, 4), normal(3, 2, 4), 4, 2, normal(12, 4), normal(12),
         None, None, False, 0.0, normal(4, 4), normal(4)),
        {"attn_mask": normal(3, 3), **{f"{x}_proj_weight": normal(4, 4) for x in "qkv"}}),
    torch._transformer_encoder_layer_fwd: (
        (normal(2, 3, 4), 4, 2, normal(12, 4), normal(12), normal(4, 4), normal(4), False,
         False, 1e-5, *(positive(4), normal(4)) * 2, normal(6, 4), normal(6), normal(4, 6),
         normal(4)),
        {"mask": torch.tensor([[False, False, True], [False] * 3]), "mask_type": 1}),
    **{t: ((X, X > 0.5, 2.5), {}) for t in (torch.masked_fill, "masked_fill")},
    # recurrent cells (gates × hidden 4 over inputs of 3) and layers (torch.lstm's .input)
    **{getattr(torch, f"{kind}_cell"): (
        (normal(2, 3), [normal(2, 4)] * 2 if kind == "lstm" else normal(2, 4),
         normal(gates * 4, 3), normal(gates * 4, 4)),
        {"b_ih": normal(gates * 4), "b_hh": normal(gates * 4)})
       for kind, gates in (("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1))},
    **{getattr(torch, kind): (
        (normal(5, 2, 3), [normal(1, 2, 4)] * 2 if kind == "lstm" else normal(1, 2, 4),
         [normal(gates * 4, 3), normal(gates * 4, 4), normal(gates * 4), normal(gates * 4)],
         True, 1, 0.0, True, False), {"batch_first": False})
       for kind, gates in (("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1))},
}

# Module rows: constructor arguments and inputs.
MODULE_EXAMPLES: dict[type, tuple[tuple[Any, ...] | dict[str, Any], list[Any]]] = {
    nn.Linear: ((4, 2), [X]), nn.LayerNorm: ((4,), [X]),
    nn.Conv1d: ((4, 4, 3), [normal(2, 4, 7)]), nn.Conv2d: ((4, 4, 3), [normal(2, 4, 6, 5)]),
    nn.MSELoss: ((), [X, Y]), nn.CrossEntropyLoss: ((), [X, LABELS]),
}

# The normalisation, pooling and embedding family (reverie/fx_rows_norm_pool.py).
TOKENS = torch.tensor([[1, 2], [0, 5]])
VALUES.update({
    "padding_idx": [1, -1], "max_norm": [1.0], "norm_type": [1.0],
    "scale_grad_by_freq": [True], "sparse": [True], "_weight": [normal(6, 3)],
    "_freeze": [True], "momentum": [0.5, None], "affine": [False],
    "track_running_stats": [False], "ceil_mode": [True], "return_indices": [True],
    "count_include_pad": [False], "divisor_override": [3],
})
EXAMPLES.update({
    F.embedding: ((TOKENS, normal(6, 3)), {}), "add_": ((X, Y), {}),
    F.batch_norm: ((normal(3, 4, 2), normal(4), positive(4)),
                   {"weight": normal(4), "bias": normal(4)}),
    F.group_norm: ((normal(2, 4, 3), 2), {"weight": normal(4), "bias": normal(4)}),
    **{t: ((normal(2, 3, 8), 3), {}) for t in (F.max_pool1d_with_indices, F.avg_pool1d,
                                               F.adaptive_avg_pool1d)},
    **{t: ((normal(2, 3, 6, 8), 3), {}) for t in (F.max_pool2d_with_indices, F.avg_pool2d)},
})
MODULE_EXAMPLES.update({
    nn.Embedding: ((6, 3), [TOKENS]), nn.GroupNorm: ((2, 4), [normal(2, 4, 3)]),
    nn.BatchNorm1d: ((4,), [normal(3, 4, 2)]), nn.BatchNorm2d: ((4,), [normal(2, 4, 3, 2)]),
    **{cls: ((3,), [normal(2, 3, 8)]) for cls in (nn.MaxPool1d, nn.AvgPool1d,
                                                  nn.AdaptiveAvgPool1d)},
    **{cls: ((3,), [normal(2, 3, 6, 8)]) for cls in (nn.MaxPool2d, nn.AvgPool2d,
                                                     nn.AdaptiveAvgPool2d)},
})

# The activations and shapes families (reverie/fx_rows_activations.py, fx_rows_shapes.py).
VALUES.update({
    "negative_slope": [0.2], "min_val": [-0.5], "max_val": [0.5], "min_value": [-0.5],
    "max_value": [0.5], "layout": [torch.strided], "pin_memory": [False],
    "generator": [None], "implicit": [True],
})
EXAMPLES.update({
    **{t: ((X, 2), {}) for t in (torch.split, "split", torch.chunk, "chunk")},
    **{t: ((X, [1, 2]), {}) for t in (torch.split_with_sizes, "split_with_sizes")},
    torch.stack: (([X, Y],), {}), torch.full_like: ((X, 2.5), {}),
    "expand": ((X, 2, 3, 4), {}), "repeat": ((X, 2, 1), {}),
    **{t: ((X, (2, 3)), {}) for t in ("new_zeros", "new_ones")},
    "new_full": ((X, (2, 3), 1.5), {}),
})

# The convolution family (reverie/fx_rows_conv.py): transposed convolutions (an output
# padding of 1 is one torch takes at stride 2, the functions' example).
VALUES.update({"output_padding": [1, 0], "padding_mode": [*VALUES["padding_mode"], "zeros"]})
EXAMPLES.update({
    F.conv_transpose1d: ((normal(2, 4, 5), normal(4, 3, 3)),
                         {"bias": normal(6), "stride": 2, "groups": 2}),
    F.conv_transpose2d: ((normal(2, 4, 5, 4), normal(4, 3, 3, 2)),
                         {"bias": normal(6), "stride": 2, "groups": 2}),
})
MODULE_EXAMPLES.update({
    nn.ConvTranspose1d: ((4, 4, 3), [normal(2, 4, 5)]),
    nn.ConvTranspose2d: ((4, 4, 3), [normal(2, 4, 5, 4)]),
})

# The 3-D rows, the margin losses (reverie/fx_rows_margin_losses.py), the ATen spellings
# (reverie/fx_rows_aten.py: the reduction as torch's enum) and prelu, addbmm & co.
SIGNS = torch.tensor([[1.0, -1.0, -1.0, 1.0], [-1.0, 1.0, 1.0, 1.0], [1.0, 1.0, -1.0, -1.0]],
                     dtype=torch.float64)
MULTILABELS = torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 0, 0]])
COUNTS = torch.tensor([[0.0, 1.0, 3.0, 2.0], [5.0, 0.0, 1.0, 1.0], [2.0, 2.0, 0.0, 4.0]],
                      dtype=torch.float64)
ROWS = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
VOLUME = normal(2, 3, 6, 8, 7)
VALUES.update({
    "use_gelu": [True], "pad": [1], "a": [0.5], "b": [0.5], "margin": [0.5], "swap": [True],
    "full": [True], "log_input": [False], "num_parameters": [3], "init": [0.5],
    "p": [*VALUES["p"], 2],  # (multi_margin_loss takes p = 1 or 2 alone)
})
_nn = torch._C._nn
EXAMPLES.update({
    torch._addmm_activation: ((normal(3, 2), X, normal(4, 2)), {}),
    **{t: ((normal(4, 2), normal(3, 4, 5), normal(3, 5, 2)), {}) for t in (torch.addbmm,
                                                                          "addbmm")},
    **{t: ((X, Y), {}) for t in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
                                 torch.greater, torch.greater_equal, torch.less,
                                 torch.less_equal, torch.not_equal)},
    torch.addmv: ((normal(3), X, normal(4)), {}), "addmv": ((normal(3), X, normal(4)), {}),
    torch.addr: ((X, normal(3), normal(4)), {}), "addr": ((X, normal(3), normal(4)), {}),
    F.prelu: ((normal(2, 3, 4), positive(3)), {}),
    F.conv3d: ((normal(2, 4, 5, 4, 3), normal(4, 2, 3, 2, 2)), {"bias": normal(4), "groups": 2}),
    F.conv_transpose3d: ((normal(2, 4, 3, 4, 3), normal(4, 3, 3, 2, 2)),
                         {"bias": normal(6), "stride": 2, "groups": 2}),
    torch.conv_tbc: ((normal(6, 2, 3), normal(3, 3, 4), normal(4)), {}),
    **{t: ((VOLUME, 3), {}) for t in (F.max_pool3d_with_indices, F.avg_pool3d)},
    **{getattr(_nn, f"{kind}_pad{n}d"): ((normal(2, 3, 5, 4, 6)[(0,) * (3 - n)], (1, 2) * n),
                                        {})
       for kind in ("reflection", "replication") for n in (1, 2, 3)},
    torch.constant_pad_nd: ((normal(2, 3, 5), (1, 2)), {}),
    **{t: ((X, Y), {"reduction": 2}) for t in (_nn.mse_loss, _nn.l1_loss, _nn.smooth_l1_loss,
                                              _nn.huber_loss)},
    _nn.nll_loss: ((X, LABELS), {"reduction": 1}),
    _nn.nll_loss2d: ((normal(2, 4, 3, 2), torch.tensor([[[0, 3], [1, 1], [2, 0]]] * 2)),
                     {"reduction": 1}),
    _nn.binary_cross_entropy: ((X.sigmoid(), Y.sigmoid()), {"reduction": 1}),
    torch.binary_cross_entropy_with_logits: ((X, Y.sigmoid()), {"reduction": 1}),
    torch.kl_div: ((X, positive(3, 4)), {"reduction": 1}),
    _nn.soft_margin_loss: ((X, SIGNS), {"reduction": 1}),
    _nn.multi_margin_loss: ((X, LABELS), {"reduction": 1, "p": 2}),
    _nn.multilabel_margin_loss: ((X, MULTILABELS), {"reduction": 1}),
    torch.margin_ranking_loss: ((X, Y, SIGNS), {"reduction": 1}),
    torch.hinge_embedding_loss: ((X, SIGNS), {"reduction": 1}),
    torch.cosine_embedding_loss: ((X, Y, ROWS), {"reduction": 1}),
    torch.poisson_nll_loss: ((X, COUNTS, True, False, 1e-8, 1), {}),
    torch.triplet_margin_loss: ((X, Y, normal(3, 4)), {"reduction": 1}),
    F.margin_ranking_loss: ((X, Y, SIGNS), {}),
    **{t: ((X, SIGNS), {}) for t in (F.hinge_embedding_loss, F.soft_margin_loss)},
    F.cosine_embedding_loss: ((X, Y, ROWS), {}),
    F.poisson_nll_loss: ((positive(3, 4), COUNTS), {}),
    F.pairwise_distance: ((X, Y), {}),
    F.triplet_margin_loss: ((X, Y, normal(3, 4)), {}),
    F.multi_margin_loss: ((X, LABELS), {"p": 2}),
    F.multilabel_margin_loss: ((X, MULTILABELS), {}),
})
MODULE_EXAMPLES.update({
    nn.Conv3d: ((4, 4, 3), [normal(2, 4, 6, 6, 6)]),
    nn.ConvTranspose3d: ((4, 4, 3), [normal(2, 4, 3, 4, 3)]),
    nn.BatchNorm3d: ((3,), [VOLUME]),
    **{cls: ((3,), [VOLUME]) for cls in (nn.MaxPool3d, nn.AvgPool3d, nn.AdaptiveAvgPool3d)},
    nn.PReLU: ((), [normal(2, 3, 4)]),
    nn.MarginRankingLoss: ((), [X, Y, SIGNS]),
    **{cls: ((), [X, SIGNS]) for cls in (nn.HingeEmbeddingLoss, nn.SoftMarginLoss)},
    nn.CosineEmbeddingLoss: ((), [X, Y, ROWS]),
    nn.PoissonNLLLoss: ((), [positive(3, 4), COUNTS]),
    nn.PairwiseDistance: ((), [X, Y]),
    nn.TripletMarginLoss: ((), [X, Y, normal(3, 4)]),
    nn.MultiMarginLoss: ((), [X, LABELS]),
    nn.MultiLabelMarginLoss: ((), [X, MULTILABELS]),
})

# Elementwise spellings, scans, norms and other spellings (reverie/fx_rows_math.py).
VALUES.update({"ord": [1, 3, math.inf, 0.5], "cudnn_enabled": [False],
               "allow_tf32": [False],
               "compute_mode": ["use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"]})
EXAMPLES.update({
    **{t: ((X, Y), {}) for t in (torch.atan2, torch.arctan2, "atan2", "arctan2", torch.dist,
                                 "dist", F.cosine_similarity, torch.linalg.vecdot,
                                 torch.cdist)},
    **{t: ((X, 1), {}) for t in (torch.cumsum, torch.cumprod, "cumsum", "cumprod")},
    **{t: ((X,), {"dtype": torch.float64}) for t in (torch.linalg.vector_norm, torch.norm,
                                                     "norm")},
    **{t: ((X, (4,)), {}) for t in (F.rms_norm, torch.rms_norm)},
    torch.layer_norm: ((X, (4,)), {"bias": normal(4)}),
    torch.group_norm: ((normal(2, 4, 3), 2), {"bias": normal(4)}),
    torch.convolution: ((normal(2, 4, 7), normal(4, 2, 3), None, [1], [0], [1], False, [0], 2),
                        {}),
    torch._convolution: ((normal(2, 4, 7), normal(4, 2, 3), None, [1], [0], [1], False, [0], 2,
                          False, False, True), {"allow_tf32": True}),
    **{t: ((X, Y, Y), {}) for t in (torch.addcmul, torch.addcdiv, "addcmul", "addcdiv")},
    **{t: ((X, 0.1), {}) for t in (torch.clamp_min, torch.clamp_max, "clamp_min", "clamp_max")},
    torch.linalg.multi_dot: (([X, normal(4, 2)],), {}),
    torch.tensordot: ((X, normal(4, 2)), {"dims": 1}),
    **{t: ((normal(3), normal(4)), {}) for t in (torch.outer, torch.ger, "outer")},
    **{t: ((X, Y), {}) for t in (torch.inner, "inner")},
    **{t: ((normal(3, 4, 5),), {"dim1": 0, "dim2": 1}) for t in (torch.diagonal, "diagonal")},
})
VALUES.update({"dims": [([1], [0])], "offset": [1, -1], "dim1": [2], "dim2": [2],
               "diagonal": [1, -1]})
MODULE_EXAMPLES.update({nn.RMSNorm: ((4,), [X]), nn.CosineSimilarity: ((), [X, Y])})

# Selections, orderings, statistics, masks (reverie/fx_rows_tensor_ops.py) and the
# shrinking activations and instance norm.
EMPTY = torch.empty(0, dtype=torch.float64)
VALUES.update({
    "lower": [0.2], "upper": [0.4], "lambd": [0.3], "correction": [0, 2], "unbiased": [False],
    "descending": [True], "stable": [True], "largest": [False], "sorted": [False],
    "sparse_grad": [True], "n": [2], "prepend": [normal(3, 1)],
    "append": [normal(3, 2)], "nan": [0.5], "posinf": [5.0], "neginf": [-5.0],
    "running_mean": [torch.zeros(4, dtype=torch.float64)],
    "running_var": [torch.ones(4, dtype=torch.float64)], "use_input_stats": [False],
    "num_classes": [5], "indexing": ["ij", "xy"],
    **{name: [EMPTY] for name in ("max_values", "min_indices", "out0", "out1", "values",
                                  "indices", "sign", "logabsdet")},
    "reverse": [True],
})
EXAMPLES.update({
    **{t: ((X, 0.1, 2.0), {}) for t in (F.threshold, torch.threshold)},
    **{t: ((X, 1, torch.tensor([[0, 2], [1, 3], [3, 0]])), {}) for t in (torch.gather,
                                                                         "gather")},
    **{t: ((X, 1, torch.tensor([3, 0])), {}) for t in (torch.index_select, "index_select")},
    **{t: ((X, 2), {}) for t in (torch.topk, "topk")},
    **{t: ((X, 1), {"dims": 1}) for t in (torch.roll, "roll")},
    **{t: ((X, [0]), {}) for t in (torch.flip,)},
    **{t: ((X, Y), {}) for t in (torch.hypot, "hypot", torch.logaddexp, "logaddexp",
                                 torch.logical_and, "logical_and", torch.logical_or,
                                 "logical_or", torch.logical_xor, "logical_xor")},
    "flip": ((X, 0), {}),
    F.instance_norm: ((normal(2, 4, 3),), {"weight": positive(4), "bias": normal(4)}),
})
TOGETHER.update({
    "running_mean": {"running_var": torch.ones(4, dtype=torch.float64)},
    "running_var": {"running_mean": torch.zeros(4, dtype=torch.float64)},
    "use_input_stats": {"running_mean": torch.zeros(4, dtype=torch.float64),
                        "running_var": torch.ones(4, dtype=torch.float64)},
})
EXAMPLES.update({
    **{t: ((X, 1), {}) for t in (torch.remainder, torch.fmod, torch.floor_divide,
                                 torch.xlogy)},
    F.one_hot: ((torch.tensor([0, 2, 1]),), {"num_classes": 3}),
    torch.meshgrid: ((normal(3), normal(4)), {}),
    **{t: (([X, Y],), {}) for t in (torch.vstack, torch.hstack, torch.dstack,
                                    torch.column_stack)},
    **{t: ((normal(2, 8, 3, 2), 2), {}) for t in (torch.pixel_shuffle,)},
    torch.pixel_unshuffle: ((normal(2, 2, 4, 6), 2), {}),
    **{t: ((normal(3, 3),), {}) for t in (torch.det, torch.linalg.det, torch.slogdet,
                                          torch.linalg.slogdet, torch.logdet)},
    torch.lerp: ((X, Y, 0.3), {}),
    torch.linalg.solve_triangular: ((normal(3, 3) + 3 * torch.eye(3), normal(3, 3)),
                                    {"upper": False}),
    **{t: ((X,), {"dim1": 0, "dim2": 2}) for t in (torch.diag_embed, "diag_embed")},
    "geometric_": ((X,), {"p": 0.3}),
    # `from` is a Python keyword: FX code passes it by position only
    "uniform_": ((X, -2), {}), "random_": ((X, 1), {}),
    **{t: ((X, 2), {"dim": 0}) for t in (torch.repeat_interleave, "repeat_interleave")},
    torch.linspace: ((0.0, 1.0, 5), {}), torch.eye: ((3,), {}),
    torch.tensor: (([1.0, 2.0],), {}),
})
VALUES["output_size"] = [6]
VALUES["out"] = [*VALUES["out"], torch.empty(0, dtype=torch.int64),
                 torch.empty(0, dtype=torch.bool)]  # what an argmax or an `any` writes
VALUES.update({"scale_factor": [2, 1.5], "align_corners": [True],
               "recompute_scale_factor": [True], "antialias": [True],
               "mode": [*VALUES["mode"], "bilinear", "nearest"]})
TOGETHER.update({"size": {"scale_factor": None}, "scale_factor": {"size": None},
                 "recompute_scale_factor": {"size": None, "scale_factor": 1.5}})
EXAMPLES.update({F.interpolate: ((normal(1, 2, 4, 5),), {"size": (5, 7), "mode": "bilinear"})})
MODULE_EXAMPLES.update({  # (keywords: the constructor's own)
    nn.Upsample: ({"scale_factor": 2, "mode": "bilinear"}, [normal(1, 2, 4, 5)]),
    **{cls: ({"scale_factor": 2}, [normal(2, 3, 4, 5)]) for cls in (nn.UpsamplingNearest2d,
                                                                   nn.UpsamplingBilinear2d)},
})
MODULE_EXAMPLES.update({
    nn.Threshold: ((0.1, 2.0), [X]),
    **{cls: ((4,), [normal(2, 4, 3, 5, 2)[(0,) * (3 - n)]])
       for n, cls in ((1, nn.InstanceNorm1d), (2, nn.InstanceNorm2d), (3, nn.InstanceNorm3d))},
})

# ---------------------------------------------------------------- torch's parameters

def optional_parameters(function: Any) -> list[str]:
    """The parameters torch's signature of `function` lets a call leave out."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a built-in: its aten schemas
        return _schema_optional(function.__name__)
    return [p.name for p in parameters if p.name != "self" and (
        p.default is not p.empty or p.kind is p.KEYWORD_ONLY)]


def _schema_optional(name: str) -> list[str]:
    """Arguments of aten::name that some tensor overload lacks, defaults or takes by
    keyword."""
    schemas = [s for s in torch._C._jit_get_schemas_for_operator(f"aten::{name}")
               if s.arguments and str(s.arguments[0].type) in ("Tensor", "List[Tensor]")]
    names = {a.name for s in schemas for a in s.arguments}
    required = {a.name for a in schemas[0].arguments} if schemas else set()
    for schema in schemas:
        required &= {a.name for a in schema.arguments
                     if not a.has_default_value() and not a.kwarg_only}
    return sorted(names - required)


VALUES.update({"mean": [0.5], "std": [2.0], "median": [0.5], "sigma": [2.0], "to": [3],
               "left": [False], "unitriangular": [True]})
# rows whose values torch leaves unspecified: compared by shape and dtype
UNSPECIFIED = (torch.empty_like,)

# ---------------------------------------------------------------- one-node graphs

def one_node_graph(op: str, target: Any, args: tuple, kwargs: dict, root: nn.Module,
                   computed: bool = False) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """A graph of the single node `op target(*args, **kwargs)`, its tensors inputs
    (`computed`: its first argument a clone of the input, a value the graph computed, as
    an in-place fill such as `normal_` needs)."""
    leaves, spec = tree_flatten((list(args), kwargs))
    graph = torch.fx.Graph()
    tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
    slots = iter(graph.placeholder(f"t{i}") for i in range(len(tensors)))
    node_args, node_kwargs = tree_unflatten(
        [next(slots) if isinstance(v, torch.Tensor) else v for v in leaves], spec)
    if computed:
        node_args[0] = graph.call_method("clone", (node_args[0],))
    graph.output(graph.create_node(op, target, tuple(node_args), node_kwargs))
    return torch.fx.GraphModule(root, graph), tensors


def verdict(gm: torch.fx.GraphModule, tensors: list[torch.Tensor], name: str) -> str | None:
    """None when eager torch rejects the call; "ok" when the compiled graph equals eager
    torch or refuses naming `name`; else what went wrong."""
    try:
        torch.manual_seed(0)  # random rows (dropout, randn_like) draw what eager draws
        want = gm(*[t.clone() for t in tensors])
    except (TypeError, RuntimeError, ValueError, NotImplementedError):
        return None
    try:
        compiled = rv.fx.compile(gm, [t.clone() for t in tensors])
        torch.manual_seed(0)
        got = compiled(*[t.clone() for t in tensors])
    except Exception as error:  # noqa: BLE001 (any refusal, judged by what it names)
        message = str(error)
        named = name in message or (name in WRITES and "in place" in message)
        return "ok" if named else f"raised without naming it: {message[:300]}"
    if any(node.target in UNSPECIFIED for node in gm.graph.nodes):
        same = (got.shape, got.dtype) == (want.shape, want.dtype)
        return "ok" if same else f"differs from torch: {got.shape, got.dtype}"
    try:
        float32 = isinstance(want, torch.Tensor) and want.dtype == torch.float32
        torch.testing.assert_close(got, want, **({} if float32 else
                                                 {"rtol": 1e-10, "atol": 1e-12}))
    except AssertionError as error:
        return f"differs from torch: {str(error)[:300]}"
    return "ok"


def judged(make, kwargs: dict[str, Any], name: str) -> str | None:
    """The verdict on the graph `make(kwargs)`; None when torch rejects `kwargs` already
    in making it (a module's constructor: ConvTranspose takes padding_mode="zeros" only)."""
    try:
        built = make(kwargs)
    except (TypeError, ValueError):
        return None
    return verdict(*built, name)


def check_parameters(names: list[str], given: dict[str, Any], make) -> list[str]:
    """Each parameter in turn at each of its values through `make(kwargs)` -> (graph,
    tensors); the failures, and the parameters no value of which torch accepts."""
    problems = []
    for name in names:
        if name not in given and name not in VALUES:
            problems.append(f"{name}: no value to try (add one to VALUES)")
            continue
        values = [given[name], *VALUES.get(name, [])] if name in given else VALUES[name]
        partners = TOGETHER.get(name, {})
        verdicts = [judged(make, {**given, **partners, name: value}, name) for value in values]
        problems += [f"{name}={v!r}: {r}" for v, r in zip(values, verdicts, strict=True)
                     if r not in (None, "ok")]
        if all(r is None for r in verdicts) and not _only_unexpected(name, given, make):
            problems.append(f"{name}: torch accepts none of {values}")
    return problems


def _only_unexpected(name: str, given: dict[str, Any], make) -> bool:
    """Whether torch's Python spelling has no such keyword (it is in another overload
    or spelling only, as `out` of a tensor method), or no kernel for it on the CPU."""
    gm, tensors = make({**given, name: VALUES.get(name, [None])[0]})
    try:
        gm(*tensors)
    except TypeError as error:
        return "keyword" in str(error) or "invalid combination" in str(error) or \
            "incompatible function arguments" in str(error)
    except NotImplementedError:
        return True
    except (RuntimeError, ValueError):
        return False
    return False


# ---------------------------------------------------------------- the property

def _label(target: Any) -> str:
    return target if isinstance(target, str) else target_name(target)


@pytest.mark.parametrize("target", list(FUNCTIONS), ids=_label)
def test_every_function_argument_is_honoured_or_refused(target: Any) -> None:
    args, given = EXAMPLES.get(target, ((positive(3, 4),), {}))
    names = optional_parameters(target)

    def make(kwargs):
        return one_node_graph("call_function", target, args, kwargs, nn.Module())

    problems = check_parameters(names, given, make)
    assert not problems, f"{_label(target)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_argument_is_honoured_or_refused(method: str) -> None:
    args, given = EXAMPLES.get(method, ((positive(3, 4),), {}))
    names = [n for n in optional_parameters(getattr(torch.Tensor, method))
             if n != "self" and not keyword.iskeyword(n)]  # a keyword: in the example

    def make(kwargs):
        return one_node_graph("call_method", method, args, kwargs, nn.Module(),
                              computed=method in FILLS)

    problems = check_parameters(names, given, make)
    assert not problems, f"Tensor.{method}:\n" + "\n".join(problems)


@pytest.mark.parametrize("cls", list(MODULES), ids=lambda cls: f"nn.{cls.__name__}")
def test_every_module_argument_is_honoured_or_refused(cls: type) -> None:
    constructor, inputs = MODULE_EXAMPLES.get(cls, ((), [normal(2, 3, 4)]))
    names = [n for n, p in inspect.signature(cls.__init__).parameters.items()
             if p.default is not p.empty]

    positional, keywords = (constructor, {}) if isinstance(constructor, tuple) else \
        ((), constructor)

    def make(kwargs):
        root = nn.Module()
        root.m = cls(*positional, **{**keywords, **kwargs}).double().eval()
        return one_node_graph("call_module", "m", tuple(inputs), {}, root)

    problems = check_parameters(names, {}, make)
    assert not problems, f"nn.{cls.__name__}:\n" + "\n".join(problems)


def test_every_row_has_an_example_or_takes_one_tensor() -> None:
    """Rows whose first parameters are more than one tensor need an entry in EXAMPLES."""
    for target, rule in FUNCTIONS.items():
        needed = [p for p in inspect.signature(rule.emit).parameters.values()
                  if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
        if len(needed) > 1 and optional_parameters(target):
            assert target in EXAMPLES, _label(target)
