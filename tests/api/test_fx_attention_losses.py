"""The attention, loss and recurrent families of `rv.fx` (issue 33 item 2) against eager torch.

Each case compiles through `torch.compile(backend="reverie", fullgraph=True)` (Dynamo's own
graph) and compares the value, the gradient of every float input and parameter, and the
gradient of that gradient with eager PyTorch, in float32 and float64; the recurrent models
(Dynamo's `allow_rnn=True` route) train for three steps, compared step by step.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    fresh_dynamo,
    refused,
    tolerance,
)

# ---------------------------------------------------------------- losses

def logits(dtype, *shape):
    return torch.randn(*shape, dtype=dtype)


def probabilities(dtype, *shape):
    return torch.rand(*shape, dtype=dtype) * 0.9 + 0.05


LOSSES = {
    "nll_loss": lambda d: (lambda x, t: F.nll_loss(x.log_softmax(1), t),
                           [logits(d, 4, 3), torch.tensor([0, 2, 1, 2])]),
    "nll_loss weight ignore_index": lambda d: (
        lambda x, t, w: F.nll_loss(x.log_softmax(1), t, w, ignore_index=2),
        [logits(d, 4, 3), torch.tensor([0, 2, 1, 1]), probabilities(d, 3)]),
    "nll_loss 3-d sum": lambda d: (
        lambda x, t: F.nll_loss(x.log_softmax(1), t, reduction="sum"),
        [logits(d, 2, 3, 5), torch.tensor([[0, 2, 1, 1, 0], [2, 2, 0, 1, 1]])]),
    "nll_loss none": lambda d: (
        lambda x, t, w: F.nll_loss(x.log_softmax(1), t, w, reduction="none", ignore_index=0),
        [logits(d, 4, 3), torch.tensor([0, 2, 1, 1]), probabilities(d, 3)]),
    "cross_entropy ignore_index label_smoothing": lambda d: (
        lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=1, label_smoothing=0.2),
        [logits(d, 4, 3), torch.tensor([0, 2, 1, 1]), probabilities(d, 3)]),
    "binary_cross_entropy": lambda d: (
        lambda x, t, w: F.binary_cross_entropy(x.sigmoid(), t, w),
        [logits(d, 4, 3), probabilities(d, 4, 3), probabilities(d, 4, 3)]),
    "binary_cross_entropy sum": lambda d: (
        lambda x, t: F.binary_cross_entropy(x.sigmoid(), t, reduction="sum"),
        [logits(d, 4, 3), probabilities(d, 4, 3)]),
    "binary_cross_entropy_with_logits": lambda d: (
        lambda x, t, w, p: F.binary_cross_entropy_with_logits(x, t, w, pos_weight=p),
        [logits(d, 4, 3), probabilities(d, 4, 3), probabilities(d, 4, 3),
         probabilities(d, 3) * 3]),
    "binary_cross_entropy_with_logits none": lambda d: (
        lambda x, t: F.binary_cross_entropy_with_logits(x * 30, t, reduction="none"),
        [logits(d, 4, 3), probabilities(d, 4, 3)]),
    "kl_div batchmean": lambda d: (
        lambda x, t: F.kl_div(x.log_softmax(1), t, reduction="batchmean"),
        [logits(d, 4, 3), probabilities(d, 4, 3)]),
    "kl_div log_target": lambda d: (
        lambda x, t: F.kl_div(x.log_softmax(1), t, reduction="sum", log_target=True),
        [logits(d, 4, 3), logits(d, 4, 3)]),
    "kl_div zero target": lambda d: (
        lambda x, t: F.kl_div(x.log_softmax(1), t, reduction="none"),
        [logits(d, 4, 2), torch.tensor([[0.0, 1.0]], dtype=d).expand(4, 2)]),
    "l1_loss": lambda d: (lambda x, t: F.l1_loss(x, t), [logits(d, 4, 3), logits(d, 4, 3)]),
    "l1_loss weight": lambda d: (lambda x, t, w: F.l1_loss(x, t, weight=w),
                                 [logits(d, 4, 3), logits(d, 4, 3), probabilities(d, 4, 3)]),
    "smooth_l1_loss": lambda d: (lambda x, t: F.smooth_l1_loss(x, t, beta=0.5),
                                 [logits(d, 4, 3), logits(d, 4, 3)]),
    "smooth_l1_loss beta 0": lambda d: (lambda x, t: F.smooth_l1_loss(x, t, beta=0.0),
                                        [logits(d, 4, 3), logits(d, 4, 3)]),
    "huber_loss weight": lambda d: (
        lambda x, t, w: F.huber_loss(x, t, delta=0.7, weight=w),
        [logits(d, 4, 3), logits(d, 4, 3), probabilities(d, 4, 3)]),
}


# inputs torch does not differentiate (the weights), or not at 0 (kl_div's target)
FROZEN = {"binary_cross_entropy": (2,), "binary_cross_entropy_with_logits": (2, 3),
          "cross_entropy ignore_index label_smoothing": (2,), "kl_div zero target": (1,),
          "nll_loss weight ignore_index": (2,), "nll_loss none": (2,)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(LOSSES))
def test_loss(case: str, dtype: torch.dtype) -> None:
    fn, inputs = LOSSES[case](dtype)
    assert_same(fn, inputs, dtype, frozen=FROZEN.get(case, ()))


def test_loss_arguments_refused_by_name() -> None:
    x, t = logits(torch.float64, 4, 3), logits(torch.float64, 4, 1)
    refused(lambda x, t: F.l1_loss(x, t), [x, t], "target")
    refused(lambda x, t: F.smooth_l1_loss(x, t, reduction="mean_all"), [x, x], "reduction")
    refused(lambda x: F.nll_loss(x, torch.tensor(1)), [x[0]], "input")


# ---------------------------------------------------------------- attention

def qkv(dtype, *batch, length=5, sources=5, depth=4):
    return [logits(dtype, *batch, length, depth), logits(dtype, *batch, sources, depth),
            logits(dtype, *batch, sources, depth)]


ATTENTION = {
    "plain 4-d": lambda d: (F.scaled_dot_product_attention, qkv(d, 2, 3)),
    "3-d, cross": lambda d: (F.scaled_dot_product_attention, qkv(d, 2, sources=6)),
    "is_causal": lambda d: (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), qkv(d, 2, 2, sources=7)),
    "scale": lambda d: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
                        qkv(d, 2, 2)),
    "bool mask": lambda d: (lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m > -0.5),
        [*qkv(d, 2, 2), logits(d, 5, 5) + 10 * torch.eye(5, dtype=d)]),
    "bool mask, a query masked whole": lambda d: (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.arange(5) < torch.arange(5)[:, None]), qkv(d, 2)),
    "float mask": lambda d: (lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m), [*qkv(d, 2, 2), logits(d, 2, 1, 5, 5)]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_scaled_dot_product_attention(case: str, dtype: torch.dtype) -> None:
    fn, inputs = ATTENTION[case](dtype)
    assert_same(fn, inputs, dtype, frozen=(3,) if case == "bool mask" else ())


def test_attention_arguments_refused_by_name() -> None:
    q, k, v = qkv(torch.float64, 2, 2)
    refused(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=1.5),
            [q, k, v], "dropout_p")
    refused(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            [q, k, v], "enable_gqa")


def attention_module(dtype, batch_first, **options) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(8, 2, batch_first=batch_first, **options).to(dtype)


# forward(module, x, key padding, attention mask) for each call pattern; the module turns
# bool masks into float ones in place (`_canonical_mask`: masked_fill_), so it gets float
# masks here, and F.multi_head_attention_forward gets bool ones in test_mha_bool_masks
MHA = {
    "self": lambda m, x, kpm, mask: m(x, x, x),
    "per-head weights": lambda m, x, kpm, mask: m(x, x, x, average_attn_weights=False),
    "key_padding_mask": lambda m, x, kpm, mask: m(x, x, x, key_padding_mask=kpm),
    "attn_mask": lambda m, x, kpm, mask: m(x, x, x, attn_mask=mask),
    "both masks": lambda m, x, kpm, mask: m(x, x, x, key_padding_mask=kpm, attn_mask=mask),
    "cross": lambda m, x, kpm, mask: m(x, x.tanh() * 2, x.tanh() * 2, attn_mask=mask),
}


def float_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))


KEY_PADDING = torch.tensor([[False] * 4 + [True], [False] * 5, [False, True] + [False] * 3])
CAUSAL = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("case", sorted(MHA))
def test_multihead_attention(case: str, batch_first: bool, dtype: torch.dtype) -> None:
    module = attention_module(dtype, batch_first)
    x = logits(dtype, 3, 5, 8) if batch_first else logits(dtype, 5, 3, 8)
    key_padding, mask = float_mask(KEY_PADDING, dtype), float_mask(CAUSAL, dtype)
    forward = MHA[case]
    assert_same(lambda x: forward(module, x, key_padding, mask), [x], dtype,
                list(module.parameters()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batched", [True, False])
def test_mha_bool_masks(batched: bool, dtype: torch.dtype) -> None:
    """F.multi_head_attention_forward itself, bool masks (True = masked out), 3-D
    attn_mask (one per batch row and head), separate projection weights, unbatched input."""
    m = attention_module(dtype, False)
    w = list(m.in_proj_weight.detach().chunk(3))
    x = logits(dtype, 5, 3, 8) if batched else logits(dtype, 5, 8)
    key_padding = KEY_PADDING if batched else KEY_PADDING[0]
    mask = CAUSAL.expand(6, 5, 5) if batched else CAUSAL

    def forward(x, q_weight, k_weight, v_weight):
        return F.multi_head_attention_forward(
            x, x, x, 8, 2, None, m.in_proj_bias, None, None, False, 0.0, m.out_proj.weight,
            m.out_proj.bias, key_padding_mask=key_padding, attn_mask=mask,
            use_separate_proj_weight=True, q_proj_weight=q_weight, k_proj_weight=k_weight,
            v_proj_weight=v_weight)
    assert_same(forward, [x, *w], dtype, list(m.parameters())[1:])


# ---------------------------------------------------------------- recurrent cells and layers

CELLS = {"LSTMCell": nn.LSTMCell, "GRUCell": nn.GRUCell, "RNNCell tanh": nn.RNNCell,
         "RNNCell relu": lambda i, h: nn.RNNCell(i, h, nonlinearity="relu")}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_recurrent_cell(name: str, bias: bool, dtype: torch.dtype) -> None:
    """Dynamo hands a cell over as torch.lstm_cell / gru_cell / rnn_*_cell; two steps."""
    cell = (CELLS[name](3, 5) if bias else _without_bias(CELLS[name], 3, 5)).to(dtype)
    h = [logits(dtype, 2, 5)] * (2 if name == "LSTMCell" else 1)

    def two_steps(x, *state):
        state = cell(x, tuple(state) if len(state) == 2 else state[0])
        state = cell(x.tanh(), state)
        return state if isinstance(state, tuple) else (state,)
    assert_same(two_steps, [logits(dtype, 2, 3), *h], dtype, list(cell.parameters()))


def _without_bias(make, *sizes):
    return make(*sizes, bias=False) if make is not CELLS["RNNCell relu"] else \
        nn.RNNCell(*sizes, bias=False, nonlinearity="relu")


LAYERS = {
    "LSTM": lambda: nn.LSTM(3, 4, batch_first=True),
    "LSTM 2 layers bidirectional": lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True),
    "GRU 2 layers": lambda: nn.GRU(3, 4, num_layers=2, batch_first=True),
    "GRU bidirectional no bias": lambda: nn.GRU(3, 4, bidirectional=True, bias=False),
    "RNN relu": lambda: nn.RNN(3, 4, nonlinearity="relu", num_layers=2),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_recurrent_layer_allow_rnn(name: str, dtype: torch.dtype, monkeypatch) -> None:
    """Under allow_rnn=True Dynamo hands a layer over as one torch.lstm / gru / rnn_* node."""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    layer = LAYERS[name]().to(dtype)

    def run(x):
        out, state = layer(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)
    assert_same(run, [logits(dtype, 2, 3, 3)], dtype, list(layer.parameters()))


class LanguageModel(nn.Module):
    """pytorch/examples' word-level language model: embedding -> LSTM -> linear."""

    def __init__(self, kind: type = nn.LSTM) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.rnn = kind(6, 5, num_layers=2)
        self.decode = nn.Linear(5, 11)

    def forward(self, tokens, targets):
        out, _ = self.rnn(self.embed(tokens))
        return F.cross_entropy(self.decode(out).reshape(-1, 11), targets.reshape(-1))


class Classifier(nn.Module):
    """A GRU classifier: the last hidden state through a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x, labels):
        _, hidden = self.rnn(x)
        return F.cross_entropy(self.head(hidden[-1]), labels)


def training_losses(model, batches, steps=3):
    """Losses and every parameter after each of `steps` SGD steps."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    history = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(*batches[step])
        loss.backward()
        optimizer.step()
        history.append([loss.detach(), *(p.detach().clone() for p in model.parameters())])
    return history


MODELS = {
    "LSTM language model": lambda d: (
        LanguageModel().to(d),
        [(torch.randint(0, 11, (7, 2)), torch.randint(0, 11, (7, 2))) for _ in range(3)]),
    "GRU classifier": lambda d: (
        Classifier().to(d),
        [(logits(d, 3, 5, 4), torch.randint(0, 3, (3,))) for _ in range(3)]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_recurrent_model_training(name: str, dtype: torch.dtype, monkeypatch) -> None:
    """Three training steps equal eager's, the model compiled whole under allow_rnn=True
    (without it Dynamo gives the backend no graph: it runs the model's frame eagerly)."""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    model, batches = MODELS[name](dtype)
    twin = type(model)().to(dtype)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(twin, backend="reverie", fullgraph=True)
    for got, want in zip(training_losses(compiled, batches), training_losses(model, batches),
                         strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transformer_encoder_layer_compiles_whole(dtype: torch.dtype) -> None:
    """nn.TransformerEncoderLayer calls its attention with need_weights=False, whose
    (output, None) result rv.fx records: the layer compiles with fullgraph=True and its
    output and every gradient equal eager's, on the first call and the next."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0,
                                       batch_first=True).to(dtype)
    eager = copy.deepcopy(layer)
    compiled = torch.compile(layer, backend="reverie", fullgraph=True)
    x = torch.randn(2, 5, 16, dtype=dtype, requires_grad=True)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    for _ in range(2):
        got, expected = compiled(x), eager(x)
        torch.testing.assert_close(got, expected, **tolerance)
        grads = torch.autograd.grad(got.square().sum(), [x, *layer.parameters()])
        wanted = torch.autograd.grad(expected.square().sum(), [x, *eager.parameters()])
        for g, w in zip(grads, wanted, strict=True):
            torch.testing.assert_close(g, w, **tolerance)
