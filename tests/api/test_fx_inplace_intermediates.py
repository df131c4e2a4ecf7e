"""In-place calls on values the graph computed (`out += x`, `F.relu(out, inplace=True)`,
`out.mul_(2)`), as torchvision's and DCGAN's models write them: recorded out of place, the
later nodes reading the new value, so the graph compiles whole and equals eager."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.l1(x))
        out = self.l2(out)
        out += identity
        out.mul_(2)
        return F.leaky_relu(out, 0.2, inplace=True) + out  # `out` read after the writes


class LeakyBlock(torch.nn.Module):
    """DCGAN's discriminator layer: Dynamo passes `inplace` to leaky_relu by position."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.leaky = torch.nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.leaky(self.l1(x)))


class WriteThenView(torch.nn.Module):
    """A view taken after the last write (how MHA reshapes the float mask it made with
    `masked_fill_`): it holds the final value, so the graph compiles whole."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x * 2
        out.add_(1)
        return out.view(1, -1) * 3


class ViewThenWrite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x * 2
        head = out[:2]  # a view of `out`, read after `out` is written
        out += 1
        return head * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make", [Residual, LeakyBlock])
def test_in_place_calls_on_computed_values_compile_whole(make: type, dtype: torch.dtype) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make().to(dtype)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    x = torch.randn(4, 8, dtype=dtype, requires_grad=True)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    for _ in range(2):
        got, expected = compiled(x), eager(x)
        torch.testing.assert_close(got, expected, **tolerance)
        grads = torch.autograd.grad(got.square().sum(), [x, *model.parameters()])
        wanted = torch.autograd.grad(expected.square().sum(), [x, *eager.parameters()])
        for g, w in zip(grads, wanted, strict=True):
            torch.testing.assert_close(g, w, **tolerance)


def test_a_view_of_the_written_value_is_not_rebound() -> None:
    """A view taken before the write sees it in eager: the write is refused as a whole
    graph, and the fallback route gives eager's value."""
    torch._dynamo.reset()
    x = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(Exception, match="view|in place"):
        torch.compile(ViewThenWrite(), backend="reverie", fullgraph=True)(x)
    torch._dynamo.reset()
    compiled = torch.compile(ViewThenWrite(), backend="reverie", options={"fallback": True})
    torch.testing.assert_close(compiled(x), ViewThenWrite()(x))


def test_a_view_after_the_last_write_compiles_whole() -> None:
    torch._dynamo.reset()
    x = torch.randn(4, 3, dtype=torch.float64)
    compiled = torch.compile(WriteThenView(), backend="reverie", fullgraph=True)
    torch.testing.assert_close(compiled(x), WriteThenView()(x))


def test_encoder_layer_with_a_bool_mask_in_eval_without_grad() -> None:
    """nn.TransformerEncoderLayer's fast path: the bool `src_mask` made a float mask by
    `masked_fill_`, then viewed as [1, 1, L, L]."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).double().eval()
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    compiled = torch.compile(lambda v: layer(v, src_mask=mask), backend="reverie",
                             fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x, src_mask=mask))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inplace_modules_as_call_module_nodes(dtype: torch.dtype) -> None:
    """rv.fx.compile of a symbolically traced model keeps `nn.ReLU(True)` and its kind as
    `call_module` nodes: recorded out of place, like the functional spelling."""
    import reverie as rv

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(True),
                                torch.nn.Linear(5, 3), torch.nn.LeakyReLU(0.1, True),
                                torch.nn.Linear(3, 3), torch.nn.Hardtanh(-0.5, 0.5, True)
                                ).to(dtype)
    x = torch.randn(6, 4, dtype=dtype, requires_grad=True)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    got, expected = compiled(x), model(x)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, expected, **tolerance)
    for g, w in zip(torch.autograd.grad(got.sum(), [x, *model.parameters()]),
                    torch.autograd.grad(expected.sum(), [x, *model.parameters()]), strict=True):
        torch.testing.assert_close(g, w, **tolerance)
