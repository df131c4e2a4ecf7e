"""`torch.autocast` through `rv.fx` and `torch.compile(backend="reverie")` (issue 37 item 4).

Autocast regions compile: each node gives the dtype autocast's per-op policy gives it
(matmul/linear/conv in bf16/f16, its fp32 ops in f32, the rest promoted), computed in f32
from operands rounded as autocast rounds them, its result rounded once. Compiled results
are checked against eager autocast (same dtypes, values within a bf16/f16 tolerance) and
against an f64 twin (no less accurate than eager autocast), forward and gradients, for an
MLP, a conv net, attention and nn.MultiheadAttention; the AMP docs' gradient penalty recipe
with a GradScaler runs compiled over several steps (the model compiled whole; or the step's
forward, `torch.autograd.grad(create_graph=True)` and penalty as one Dynamo graph).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

import reverie as rv  # noqa: E402

LOW = {"bf16": torch.bfloat16, "f16": torch.float16}
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}  # unit roundoff
STEPS = 3


def assert_like_eager(got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor,
                      dtype: torch.dtype) -> None:
    """`got` (compiled) has eager autocast's dtype, is within 16 roundoffs of `want` (eager)
    relative to the values' scale, and is no further from `exact` (f64) than eager is,
    beyond 4 roundoffs."""
    assert got.dtype == want.dtype
    got, want, exact = got.detach().double(), want.detach().double(), exact.detach().double()
    scale = float(exact.abs().max()) or 1.0
    torch.testing.assert_close(got, want, rtol=0, atol=16 * EPS[dtype] * scale)
    assert (got - exact).abs().max() <= (want - exact).abs().max() * 2 + 4 * EPS[dtype] * scale


class Captured:
    """The `reverie` backend, keeping each graph it compiled."""

    def __init__(self, fallback: bool = False) -> None:
        self.fallback = fallback
        self.graphs: list[rv.fx.CompiledGraph] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(rv.fx.backend(gm, example_inputs,
                                         options={"fallback": self.fallback}))
        return self.graphs[-1]

    def eager_steps(self) -> list[str]:
        return [s.node.name for g in self.graphs for plan in g.plans.values()
                for s in plan.steps if isinstance(s, rv.fx.EagerNode)]


# ---------------------------------------------------------------- models

def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn = nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.conv2, self.fc = nn.Conv2d(4, 4, 3), nn.Linear(16, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        return F.log_softmax(self.fc(F.relu(self.conv2(h)).flatten(1)), -1)


class Attention(nn.Module):
    """A pre-norm self-attention block written out (nanoGPT's shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln, self.qkv, self.out = nn.LayerNorm(8), nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(8, -1)
        weights = (q @ k.transpose(-2, -1) / 8 ** 0.5).softmax(-1)
        return x + self.out(weights @ v)


class Mha(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


MODELS = {"mlp": (mlp, (4, 6)), "conv": (ConvNet, (3, 2, 8, 8)),
          "attention": (Attention, (2, 5, 8)), "mha": (Mha, (2, 5, 8))}


def run_model(run, model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None):
    """Output and the gradients of its squared sum (input, then parameters), the forward
    under autocast of `dtype` (None: none)."""
    x = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
        out = run(x)
    return [out, *torch.autograd.grad(out.float().pow(2).sum(), [x, *model.parameters()])]


@pytest.mark.parametrize("low", LOW)
@pytest.mark.parametrize("name", MODELS)
def test_model_under_autocast_compiles_and_matches_eager(name: str, low: str) -> None:
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model, dtype = build(), LOW[low]
    twin, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    backend = Captured()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    for _ in range(2):  # the second call runs the kernels compiled by the first
        x = torch.randn(*shape)
        got = run_model(compiled, model, x, dtype)
        want = run_model(twin, twin, x, dtype)
        reference = run_model(exact, exact, x.double(), None)
        for a, b, r in zip(got, want, reference, strict=True):
            assert_like_eager(a, b, r, dtype)
    assert backend.eager_steps() == []
    assert low in "".join(backend.graphs[0].sources)


class DropoutOfTransposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x):
        return F.dropout(self.inner(x).transpose(0, 1), 0.3) * 2


@pytest.mark.parametrize("model", [ConvNet, DropoutOfTransposed])
def test_bf16_input_and_dropout_masks_as_eager_under_autocast(model: type) -> None:
    """A bf16 graph input (a model fed another's autocast output, as DCGAN's critic is);
    a dropout mask drawn as eager draws it: laid out as the (transposed) bf16 value it
    masks, its 1 / (1 - p) rounded to bf16."""
    torch.manual_seed(0)
    model = model()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    x = torch.randn(3, 2, 8, 8) if isinstance(model, ConvNet) else torch.randn(4, 3, 8)
    for _ in range(2):
        outputs = []
        for run in (compiled, model):
            torch.manual_seed(1)
            with torch.autocast("cpu", torch.bfloat16):
                outputs.append(run(x.bfloat16()))
        got, want = outputs
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want, rtol=0, atol=4 * EPS[torch.bfloat16])


def test_f64_model_under_autocast_compiles_without_casts() -> None:
    """Autocast never casts f64 tensors: an f64 model compiles as it would without it."""
    model = mlp().double()
    backend = Captured()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(4, 6, dtype=torch.float64)
    with torch.autocast("cpu", torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)
    assert "bf16" not in "".join(backend.graphs[0].sources)


def test_model_cast_to_bf16_compiles_as_eager_bf16() -> None:
    """A bf16 model (no autocast): every op computed in f32 and rounded, as eager's."""
    torch.manual_seed(0)
    model = mlp()
    exact, low = copy.deepcopy(model).double(), model.bfloat16()
    compiled = torch.compile(low, backend="reverie", fullgraph=True)
    x = torch.randn(4, 6)
    got = run_model(compiled, low, x.bfloat16(), None)
    want = run_model(low, low, x.bfloat16(), None)
    reference = run_model(exact, exact, x.double(), None)
    for a, b, r in zip(got, want, reference, strict=True):
        assert a.dtype == torch.bfloat16
        assert_like_eager(a, b, r, torch.bfloat16)


class Conversions(nn.Module):
    """Tensor.double/float/bfloat16/half/to/type_as outside autocast."""

    def forward(self, x):
        h = x.double().sin().float() * 2
        low, half = h.bfloat16() * 3, h.half().exp()
        return low.to(torch.float32) + half.type_as(h) + h.to("cpu", torch.float64).float()


def test_conversions_compile_with_the_dtypes_eager_gives() -> None:
    backend = Captured()
    compiled = torch.compile(Conversions(), backend=backend, fullgraph=True)
    x = torch.randn(3, 4, requires_grad=True)
    got, want = compiled(x), Conversions()(x)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2 * EPS[torch.bfloat16], atol=1e-6)
    (gx,), (want_gx,) = (torch.autograd.grad(y.sum(), x) for y in (got, want))
    torch.testing.assert_close(gx, want_gx, rtol=4 * EPS[torch.bfloat16], atol=1e-6)
    source, = backend.graphs[0].sources
    assert all(f"{d}(" in source for d in ("f64", "bf16", "f16", "f32"))


def test_conversion_to_a_dtype_reverie_lacks_is_refused_by_name() -> None:
    compiled = torch.compile(lambda x: x.to(torch.int8) + 1, backend="reverie")
    with pytest.raises(Exception, match=r"Tensor.to: argument dtype=torch.int8"):
        compiled(torch.randn(3))


# ---------------------------------------------------------------- blocks inside forward

class AutocastBlock(nn.Module):
    """An autocast block inside forward, between f32 computations, with conversions."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.dtype = dtype
        self.inner, self.outer = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):  # x.dtype: f32, or f64 in the exact twin
        h = torch.tanh(x) * 2
        with torch.autocast("cpu", self.dtype):
            h = torch.relu(self.inner(h))
            h = h + h.to(x.dtype).exp().type_as(h)  # bf16 + f32 -> bf16 again
        return self.outer(h.to(x.dtype)).sin()


@pytest.mark.parametrize("low", LOW)
@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "fullgraph"])
def test_autocast_block_inside_forward_compiles(fallback: bool, low: str) -> None:
    torch.manual_seed(0)
    model = AutocastBlock(LOW[low])
    twin, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    backend = Captured(fallback)
    compiled = torch.compile(model, backend=backend, fullgraph=not fallback)
    for _ in range(STEPS):
        x = torch.randn(5, 6)
        got = run_model(compiled, model, x, None)
        want = run_model(twin, twin, x, None)
        reference = run_model(exact, exact, x.double(), None)
        for a, b, r in zip(got, want, reference, strict=True):
            assert_like_eager(a, b, r, LOW[low])
        assert not torch.is_autocast_enabled("cpu")  # the block was left
    graph, = backend.graphs
    assert backend.eager_steps() == []
    assert len(graph.sources) == 1 and f"{low}(" in graph.sources[0]


class EagerOpInBlock(nn.Module):
    """An unmapped op of autocast's fp32 list (`torch.quantile`: bf16 operands, an f32
    result under autocast, bf16 outside it) inside a block, between mapped ones."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x, batch):
        with torch.autocast("cpu", torch.bfloat16):
            h = torch.quantile(self.inner(x) @ batch.T, 0.25, dim=1, keepdim=True)
            return torch.tanh(h) * 3


def test_node_left_to_eager_inside_a_block_runs_under_the_block() -> None:
    torch.manual_seed(0)
    model, backend = EagerOpInBlock(), Captured(fallback=True)
    compiled = torch.compile(model, backend=backend)
    x, batch = torch.randn(4, 4), torch.randn(3, 4)
    got, want = compiled(x, batch), model(x, batch)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=8 * EPS[torch.bfloat16] * 3)
    assert backend.eager_steps() == ["h"]  # the quantile
    assert not torch.is_autocast_enabled("cpu")


class BlockThenUnmapped(AutocastBlock):
    """An autocast block, then a node with no mapping (`torch.kthvalue`)."""

    def forward(self, x):
        return torch.kthvalue(super().forward(x), 1, 0).values


def test_unmapped_node_beside_a_block_is_still_refused_without_fallback() -> None:
    compiled = torch.compile(BlockThenUnmapped(), backend="reverie")
    with pytest.raises(Exception, match=r"node 'kthvalue' \(call_function torch.kthvalue\)"):
        compiled(torch.randn(5, 6))
    assert not torch.is_autocast_enabled("cpu")


def test_fx_graph_called_under_autocast_plans_again() -> None:
    """rv.fx.compile outside autocast, called inside: the autocast state is part of the
    signature a plan is made for, so the call gives eager autocast's bf16."""
    model = mlp()
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [torch.randn(4, 6)])
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), model(x))
    with torch.autocast("cpu", torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=2 ** -6)
    assert len(compiled.plans) == 2


class RaisesInBlock(nn.Module):
    """An autocast block whose eager node raises (Cholesky of a matrix that is not
    positive definite; `linalg.cholesky` is unmapped)."""

    def forward(self, x):
        y = x * 2
        with torch.autocast("cpu", torch.bfloat16):
            factor = torch.linalg.cholesky(y @ y.T)
        return factor.float() + 1


def test_an_error_inside_a_block_leaves_autocast_as_it_was() -> None:
    backend = Captured(fallback=True)
    good = torch.eye(3) + 0.1
    torch.testing.assert_close(torch.compile(RaisesInBlock(), backend=backend)(good),
                               RaisesInBlock()(good))
    graph, = backend.graphs  # called directly: Dynamo's frame does not restore the state
    with pytest.raises(torch.linalg.LinAlgError):
        graph(torch.zeros(3, 3))
    assert not torch.is_autocast_enabled("cpu")  # as eager's `with` block leaves it


# ---------------------------------------------------------------- the AMP docs' recipe

def penalised_loss(model: nn.Module, x, target, scale):
    """The AMP examples' "Gradient penalty": scaled create_graph gradients, unscaled, their
    norm added to the loss under autocast (`scale` is `scaler.get_scale()`, what
    `scaler.scale(loss)` multiplies by)."""
    with torch.autocast("cpu", torch.bfloat16):
        output = model(x)
        loss = F.mse_loss(output, target)
    scaled_grads = torch.autograd.grad(loss * scale, list(model.parameters()),
                                       create_graph=True)
    grads = [g / scale for g in scaled_grads]
    with torch.autocast("cpu", torch.bfloat16):
        norm = sum(g.pow(2).sum() for g in grads).sqrt()
        return output, loss + norm, grads


def recipe(run, model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]]) -> list:
    """STEPS steps of the recipe with a GradScaler: the results, gradients and parameters
    of each."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    steps = []
    for x, target in data:
        optimizer.zero_grad()
        output, loss, grads = run(model, x, target, scaler.get_scale())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        steps.append([output, loss, *grads, *(p.grad for p in model.parameters()),
                      *(p.detach().clone() for p in model.parameters())])
    return steps


@pytest.mark.parametrize("route", ["model", "step"])
def test_gradient_penalty_recipe_matches_eager_autocast(route: str) -> None:
    """route "model": the model compiled whole (fullgraph); "step": forward, the
    create_graph gradients and the penalty traced by Dynamo as one graph
    (`trace_autograd_ops=True`, fullgraph), whose autograd.grad node runs Reverie's VJP
    kernels and whose segments before and after it compile."""
    torch.manual_seed(0)
    model = mlp()
    twin, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    data = [(torch.randn(8, 6), torch.randn(8, 3)) for _ in range(STEPS)]
    backend = Captured()
    if route == "model":
        got = recipe(penalised_loss, torch.compile(model, backend=backend, fullgraph=True),
                     data)
        assert backend.eager_steps() == []
    else:
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            got = recipe(torch.compile(penalised_loss, backend=backend, fullgraph=True),
                         model, data)
        assert backend.eager_steps() == ["grad", *(f"g{s}" for s in ["", "_1", "_2", "_3"])]
        assert "bf16" in "".join(backend.graphs[0].sources)
    want = recipe(penalised_loss, twin, data)
    reference = recipe(penalised_loss, exact, [(x.double(), t.double()) for x, t in data])
    for step_got, step_want, step_exact in zip(got, want, reference, strict=True):
        assert step_got[0].dtype == torch.bfloat16
        for a, b, r in zip(step_got, step_want, step_exact, strict=True):
            assert_like_eager(a, b, r, torch.bfloat16)
