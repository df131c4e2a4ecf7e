"""Dropout inside torch's recurrent layers and attention, and `masked_fill(_)`, through
`torch.compile(backend="reverie", fullgraph=True)` against eager torch (issue 33 item 2).

Dropout draws from torch's random stream: each case runs compiled and eager from the same
`torch.manual_seed` and compares the values, the gradients, the gradients of those, and a
draw made afterwards (the stream left where eager leaves it), in float32 and float64.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch.nn.attention import SDPBackend  # noqa: E402

from tests.api.fx_helpers import DTYPES, fresh_dynamo, tolerance  # noqa: E402, F401


def seeded_derivatives(fn, inputs, parameters=()) -> list:
    """From seed 7: fn's tensor outputs, the first derivatives of Σ out² with respect to
    the float inputs and `parameters`, the derivatives of Σ of those, and a draw after."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    wrt = [t for t in inputs if t.requires_grad] + list(parameters)
    torch.manual_seed(7)
    out = fn(*inputs)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
    first = torch.autograd.grad(sum((o * o).sum() for o in outs), wrt, create_graph=True)
    second = torch.autograd.grad(sum(g.sum() for g in first), wrt, allow_unused=True,
                                 materialize_grads=True)
    return [*outs, *first, *second, torch.rand(3)]


def assert_same(fn, inputs, dtype, parameters=()) -> None:
    """`fn` compiled whole equals eager `fn` under the same seed, to the second order."""
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    got = seeded_derivatives(compiled, inputs, parameters)
    want = seeded_derivatives(fn, inputs, parameters)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), **tolerance(dtype))


def refused(fn, inputs, name: str) -> None:
    with pytest.raises(Exception, match=f"argument {name}="):
        torch.compile(fn, backend="reverie", fullgraph=True)(*inputs)


# ---------------------------------------------------------------- recurrent layers

LAYERS = {
    "LSTM 3 layers": lambda: nn.LSTM(3, 4, num_layers=3, dropout=0.3),
    "LSTM bidirectional batch_first": lambda: nn.LSTM(3, 4, num_layers=2, dropout=0.4,
                                                      bidirectional=True, batch_first=True),
    "GRU 2 layers batch_first": lambda: nn.GRU(3, 4, num_layers=2, dropout=0.5,
                                               batch_first=True),
    "RNN relu bidirectional": lambda: nn.RNN(3, 4, num_layers=2, dropout=0.3,
                                             nonlinearity="relu", bidirectional=True),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_recurrent_layer_dropout_draws_eager_s_masks(name: str, dtype: torch.dtype,
                                                     monkeypatch) -> None:
    """Dropout after every layer but the last (allow_rnn's torch.lstm / gru / rnn_* node)
    drops what eager's layer drops, and the final states follow."""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    layer = LAYERS[name]().to(dtype)

    def run(x):
        out, state = layer(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)
    assert_same(run, [torch.randn(2, 5, 3, dtype=dtype)], dtype, list(layer.parameters()))


def test_recurrent_dropout_only_in_training(monkeypatch) -> None:
    """In eval mode the layer draws nothing: the stream after it is the seed's own."""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    layer = nn.LSTM(3, 4, num_layers=2, dropout=0.5).double().eval()
    assert_same(lambda x: layer(x)[0], [torch.randn(5, 2, 3, dtype=torch.float64)],
                torch.float64, list(layer.parameters()))


def test_recurrent_dropout_out_of_range_refused_by_name() -> None:
    weights = [torch.randn(4, 3), torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)]
    refused(lambda x, h: torch.rnn_tanh(x, h, weights, False, 2, 1.5, True, False, False),
            [torch.randn(5, 2, 3), torch.randn(2, 2, 4)], "dropout")


# ---------------------------------------------------------------- attention

def qkv(dtype, *batch, length=5, sources=6, depth=4):
    return [torch.randn(*batch, n, depth, dtype=dtype) for n in (length, sources, sources)]


SDPA = {
    "4-d": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3),
    "3-d, causal": lambda q, k, v: F.scaled_dot_product_attention(
        q[0], k[0], v[0], dropout_p=0.5, is_causal=True),
    "transposed inputs, bool mask": lambda q, k, v: F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
        attn_mask=k[0, 0, :, 0] > -0.5, dropout_p=0.2),
    "p = 1": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=1.0),
}


def test_cpu_sdpa_drops_out_on_its_math_path() -> None:
    """What the attention rows reproduce: with dropout, torch's CPU picks the math
    backend (its flash kernel would draw otherwise), also for shapes it fuses without."""
    q, k, v = qkv(torch.float32, 2, 3, sources=5)
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.0) != SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.3) == SDPBackend.MATH.value


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(SDPA))
def test_sdpa_dropout_draws_eager_s_masks(case: str, dtype: torch.dtype) -> None:
    assert_same(SDPA[case], qkv(dtype, 2, 3), dtype)


def test_sdpa_dropout_out_of_range_refused_by_name() -> None:
    refused(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=1.5),
            qkv(torch.float64, 2), "dropout_p")


MHA_CALLS = {
    "weights averaged": lambda m, x: m(x, x, x),
    "weights per head": lambda m, x: m(x, x, x, average_attn_weights=False),
    "need_weights=False": lambda m, x: m(x, x, x, need_weights=False),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(MHA_CALLS))
def test_multihead_attention_dropout_draws_eager_s_masks(case: str, dtype: torch.dtype
                                                         ) -> None:
    module = nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True).to(dtype)
    assert_same(lambda x: MHA_CALLS[case](module, x), [torch.randn(3, 5, 8, dtype=dtype)],
                dtype, list(module.parameters()))


# ---------------------------------------------------------------- masked_fill and bool masks

CAUSAL = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # True = masked out
KEY_PADDING = torch.tensor([[False] * 4 + [True], [False] * 5, [False, True] + [False] * 3])

MASKED_FILL = {
    "method, -inf": lambda x: x.masked_fill(x > 0.5, float("-inf")).softmax(-1),
    "function, broadcast mask": lambda x: torch.masked_fill(x * 2, CAUSAL[0], 1.5),
    "in place on a computed value": lambda x: (x * 3).masked_fill_(x < 0, 0.25) + x,
    "in place, +inf, then read": lambda x: (-(x * 2).masked_fill_(x > 1, float("inf"))).exp(),
    "a 0-d tensor value": lambda x: x.masked_fill(x > 0, x.sum()),
    "an integer tensor": lambda x: x + torch.arange(5).masked_fill(x[0] < 0, 7),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(MASKED_FILL))
def test_masked_fill(case: str, dtype: torch.dtype) -> None:
    assert_same(MASKED_FILL[case], [torch.randn(3, 5, dtype=dtype)], dtype)


@pytest.mark.parametrize(("fn", "name"), [
    (lambda x: x.masked_fill(x > 0, float("nan")), "value"),
    (lambda x: torch.arange(5).masked_fill(x[0] > 0, 2.5) * x, "value"),
])
def test_masked_fill_refused_by_name(fn, name: str) -> None:
    refused(fn, [torch.randn(3, 5, dtype=torch.float64)], name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_with_bool_masks(batch_first: bool, dtype: torch.dtype) -> None:
    """The module turns bool masks into float ones with `zeros_like(mask).masked_fill_(
    mask, -inf)`, which compiles whole."""
    module = nn.MultiheadAttention(8, 2, batch_first=batch_first).to(dtype)
    x = torch.randn(*((3, 5) if batch_first else (5, 3)), 8, dtype=dtype)
    assert_same(lambda x: module(x, x, x, attn_mask=CAUSAL, key_padding_mask=KEY_PADDING),
                [x], dtype, list(module.parameters()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_transformer_encoder_layer_training(dropout: float, dtype: torch.dtype) -> None:
    """nn.TransformerEncoderLayer in training, with a bool key padding mask and dropout in
    its attention and feed-forward: each call's output and every gradient equal eager's
    from the same seed (the masks differ between calls, as eager's do)."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=dropout, batch_first=True).to(dtype)
    eager = copy.deepcopy(layer)
    compiled = torch.compile(layer, backend="reverie", fullgraph=True)
    x = torch.randn(3, 5, 8, dtype=dtype, requires_grad=True)
    for call in range(2):
        results = []
        for model in (compiled, eager):
            torch.manual_seed(call)
            y = model(x, src_key_padding_mask=KEY_PADDING)
            results.append([y, *torch.autograd.grad(y.square().sum(),
                                                    [x, *model.parameters()])])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b, **tolerance(dtype))


# ---------------------------------------------------------------- the encoder's fast path

FAST_PATH_MASKS = {
    "none": {},
    "key padding": {"src_key_padding_mask": KEY_PADDING},
    "float causal": {"src_mask": torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)},
    "finite float, read as bool": {"src_mask": torch.tensor([0.0, 0.5, 0.0, -2.0, 0.0])
                                   .expand(5, 5)},
    "3-d float": {"src_mask": torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
                  .expand(6, 5, 5)},
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", sorted(FAST_PATH_MASKS))
def test_transformer_encoder_layer_fast_path(masks: str, activation: str, norm_first: bool,
                                             dtype: torch.dtype) -> None:
    """In eval mode without grad the layer calls torch._transformer_encoder_layer_fwd,
    which reads any mask as bool (nonzero masks out, even 0.5): equal to eager's, twice."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, activation=activation, norm_first=norm_first,
                                       batch_first=True).to(dtype).eval()
    compiled = torch.compile(layer, backend="reverie", fullgraph=True)
    kwargs = {name: mask.to(dtype) if mask.is_floating_point() else mask
              for name, mask in FAST_PATH_MASKS[masks].items()}
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 5, 8, dtype=dtype)
            torch.testing.assert_close(compiled(x, **kwargs), layer(x, **kwargs),
                                       **tolerance(dtype))
