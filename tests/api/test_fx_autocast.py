"""`torch.autocast` through `rv.fx` and `torch.compile(backend="reverie")` (issue 33 item 3).

Reverie has no bf16/f16 kernels yet, so a node that autocast casts runs in eager PyTorch in
both routes (with or without `fallback=True`: a deliberate delegation, not a graph break),
as do the block's `_enter_autocast`/`_exit_autocast` nodes and a node reading the bf16
tensor such a node made: the compiled model gives eager autocast's dtypes and values, never
an f32 computation in their place. Nodes autocast does not cast (f64 ones, those outside a
`with torch.autocast` block) still compile, and an unmapped node is still refused without
`fallback`.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import reverie as rv  # noqa: E402

BF16 = {"rtol": 1.6e-2, "atol": 1e-2}  # bf16 has 8 bits of mantissa
STEPS = 3


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def fallback(model: nn.Module) -> nn.Module:
    return torch.compile(model, backend="reverie", options={"fallback": True})


def penalty_step(run, model: nn.Module, optimizer, scaler, x, target) -> tuple:
    """One step of the AMP docs' gradient penalty recipe: scaled create_graph gradients,
    unscaled by hand, their norm added to the loss under autocast, then scaler.step."""
    optimizer.zero_grad()
    with torch.autocast("cpu", torch.bfloat16):
        output = run(x)
        loss = nn.functional.mse_loss(output, target)
    params = list(model.parameters())
    scaled = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    inv_scale = 1.0 / scaler.get_scale()
    grads = [g * inv_scale for g in scaled]
    with torch.autocast("cpu", torch.bfloat16):
        norm = sum(g.pow(2).sum() for g in grads).sqrt()
        loss = loss + norm
    scaler.scale(loss).backward()
    step_grads = [p.grad.clone() for p in params]
    scaler.step(optimizer)
    scaler.update()
    return output, loss, grads, step_grads


def test_gradient_penalty_recipe_equals_eager_autocast() -> None:
    model = mlp()
    twin = copy.deepcopy(model)
    compiled = fallback(model)
    runs = []
    for run, m in ((compiled, model), (twin, twin)):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
        torch.manual_seed(1)
        runs.append([penalty_step(run, m, optimizer, scaler, torch.randn(8, 6),
                                  torch.randn(8, 3)) for _ in range(STEPS)])
    for got, want in zip(*runs, strict=True):
        for a, b in zip(torch.utils._pytree.tree_leaves(got),
                        torch.utils._pytree.tree_leaves(want), strict=True):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a, b, **BF16)
    assert got[0].dtype == torch.bfloat16  # not computed in f32
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, **BF16)


def test_model_called_under_autocast_gives_eager_autocast_without_fallback() -> None:
    model = mlp()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    x = torch.randn(4, 6)
    with torch.autocast("cpu", torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, **BF16)


def test_f64_model_under_autocast_compiles_whole() -> None:
    """Autocast never casts f64 tensors, so an f64 model compiles without fallback."""
    model = mlp().double()
    compiled = torch.compile(model, backend="reverie", fullgraph=True)
    x = torch.randn(4, 6, dtype=torch.float64)
    with torch.autocast("cpu", torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)


class AutocastBlock(nn.Module):
    """An autocast block inside forward, between f32 computations."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(6, 16)
        self.outer = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(x) * 2
        with torch.autocast("cpu", torch.bfloat16):
            h = torch.relu(self.inner(h))
        return self.outer(h.float()).sin()


class Captured:
    """The `reverie` backend (with `fallback` or without), keeping each graph it compiled."""

    def __init__(self, fallback: bool = True) -> None:
        self.fallback = fallback
        self.graphs: list[rv.fx.CompiledGraph] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(rv.fx.backend(gm, example_inputs,
                                         options={"fallback": self.fallback}))
        return self.graphs[-1]


@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "fullgraph"])
def test_autocast_block_inside_forward_runs_eagerly_the_rest_compiles(fallback: bool) -> None:
    torch.manual_seed(0)
    model = AutocastBlock()
    twin = copy.deepcopy(model)
    backend = Captured(fallback)
    compiled = torch.compile(model, backend=backend, fullgraph=not fallback)
    for _ in range(STEPS):
        x = torch.randn(5, 6)
        outputs = []
        for run, m in ((compiled, model), (twin, twin)):
            m.zero_grad()
            xg = x.clone().requires_grad_()
            out = run(xg)
            out.pow(2).sum().backward()
            outputs.append([out, xg.grad, *(p.grad for p in m.parameters())])
        for a, b in zip(*outputs, strict=True):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a, b, **BF16)
        assert not torch.is_autocast_enabled("cpu")  # the block was left
    graph, = backend.graphs
    eager = [s.node.name for s in next(iter(graph.plans.values())).steps
             if isinstance(s, rv.fx.EagerNode)]
    # the block (its linear and relu) and `h.float()`, which reads its bf16 result
    assert eager == ["_enter_autocast", "linear", "h_1", "_exit_autocast", "float_1"]
    assert len(graph.sources) == 2  # tanh * 2 before the block, outer/sin after it
    assert "bf16" not in "".join(graph.sources)


class BlockThenUnmapped(AutocastBlock):
    """An autocast block, then a node with no mapping (`torch.roll`)."""

    def forward(self, x):
        return torch.roll(super().forward(x), 1, 0)


def test_unmapped_node_beside_a_block_is_still_refused_without_fallback() -> None:
    compiled = torch.compile(BlockThenUnmapped(), backend="reverie")
    with pytest.raises(Exception, match=r"node 'roll' \(call_function torch.roll\)"):
        compiled(torch.randn(5, 6))
    assert not torch.is_autocast_enabled("cpu")


def test_model_cast_to_bf16_is_refused_without_fallback() -> None:
    """Only autocast's reduced precision is delegated: a bf16 model is refused by dtype."""
    compiled = torch.compile(mlp().bfloat16(), backend="reverie")
    with pytest.raises(Exception, match="dtype torch.bfloat16"):
        compiled(torch.randn(4, 6, dtype=torch.bfloat16))


def test_fx_graph_called_under_autocast_plans_again() -> None:
    """rv.fx.compile outside autocast, called inside: the autocast state is part of the
    signature a plan is made for, so the call gives eager autocast's bf16."""
    model = mlp()
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), [torch.randn(4, 6)],
                             fallback=True)
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), model(x))
    with torch.autocast("cpu", torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, **BF16)
    assert len(compiled.plans) == 2


class RaisesInBlock(nn.Module):
    """An autocast block whose eager node raises (Cholesky of a matrix that is not
    positive definite)."""

    def forward(self, x):
        y = x * 2
        with torch.autocast("cpu", torch.bfloat16):
            factor = torch.linalg.cholesky(y @ y.T)
        return factor.float() + 1


def test_an_error_inside_a_block_leaves_autocast_as_it_was() -> None:
    backend = Captured()
    good = torch.eye(3) + 0.1
    torch.testing.assert_close(torch.compile(RaisesInBlock(), backend=backend)(good),
                               RaisesInBlock()(good))
    graph, = backend.graphs  # called directly: Dynamo's frame does not restore the state
    with pytest.raises(torch.linalg.LinAlgError):
        graph(torch.zeros(3, 3))
    assert not torch.is_autocast_enabled("cpu")  # as eager's `with` block leaves it
