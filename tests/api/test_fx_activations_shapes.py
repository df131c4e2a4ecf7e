"""The activation, dropout, shape and factory rows of `rv.fx` (issue 33 item 2).

Each target runs through `torch.compile(..., backend="reverie", fullgraph=True)` and is
compared with eager torch in f32 and f64: values, gradients and second derivatives
(`create_graph=True`). Dropout and the random factories are compared under one
`torch.manual_seed` with eager: the same values bit for bit, and the random stream left
where eager leaves it. Small models train for three steps beside their eager twins.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402

DTYPES = [torch.float64, torch.float32]
TOLERANCE = {torch.float64: {"rtol": 1e-10, "atol": 1e-12},
             torch.float32: {"rtol": 2e-5, "atol": 2e-6}}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled(fn):
    return torch.compile(fn, backend="reverie", fullgraph=True)


def derivatives(fn, inputs, second_order: bool = True):
    """Value, gradient and gradient of the gradient's sum of `fn` at `inputs`."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    float_inputs = [t for t in inputs if t.requires_grad]
    loss = sum((o * o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype).view(o.shape)).sum()
               for o in outs)
    grads = torch.autograd.grad(loss, float_inputs, create_graph=True)
    total = sum((g * g).sum() for g in grads)
    second = torch.autograd.grad(total, float_inputs, allow_unused=True,
                                 materialize_grads=True) \
        if second_order and total.requires_grad else None
    return [o.detach() for o in outs], [g.detach() for g in grads], second


def assert_same_derivatives(fn, inputs, second_order: bool = True) -> None:
    got, want = (derivatives(run, inputs, second_order) for run in (compiled(fn), fn))
    tolerance = TOLERANCE[inputs[0].dtype]
    for a, b in zip(got[0] + got[1], want[0] + want[1], strict=True):
        torch.testing.assert_close(a, b, **tolerance)
    if want[2] is not None:
        for a, b in zip(got[2], want[2], strict=True):
            torch.testing.assert_close(a, b, **tolerance)


def normal(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(7)) * 2


# ---------------------------------------------------------------- activations

SLOPES = torch.linspace(-0.5, 0.5, 7, dtype=torch.float64)  # prelu's, one per channel

ACTIVATIONS = {
    "leaky_relu": lambda x: F.leaky_relu(x) + F.leaky_relu(x, negative_slope=0.3),
    "elu": lambda x: F.elu(x) + F.elu(x, alpha=0.5),
    "selu": lambda x: F.selu(x) + torch.selu(x),
    "celu": lambda x: F.celu(x) + F.celu(x, alpha=2.0) + torch.celu(x, 0.75),
    "silu": F.silu,
    "mish": F.mish,
    "hardtanh": lambda x: F.hardtanh(x) + F.hardtanh(x, min_val=-0.5, max_val=2.0),
    "relu6": lambda x: F.relu6(x * 4),
    "hardsigmoid": lambda x: F.hardsigmoid(x * 2),
    "hardswish": lambda x: F.hardswish(x * 2),
    "softplus": lambda x: F.softplus(x) + F.softplus(x, beta=2.0, threshold=1.0),
    "gelu": lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"),
    "sigmoid, tanh": lambda x: F.sigmoid(x) + F.tanh(x) + torch.sigmoid(x) + x.tanh(),
    "logsigmoid": F.logsigmoid,
    "softsign": F.softsign,
    "prelu, one slope": lambda x: F.prelu(x, SLOPES[:1].to(x.dtype)),
    "prelu per channel": lambda x: torch.prelu(x, SLOPES[:x.shape[1] if x.ndim > 1 else 1]
                                               .to(x.dtype)),
}

MODULES = {
    "LeakyReLU": nn.LeakyReLU(0.2), "ELU": nn.ELU(0.7), "SELU": nn.SELU(), "CELU": nn.CELU(1.5),
    "SiLU": nn.SiLU(), "Mish": nn.Mish(), "Hardtanh": nn.Hardtanh(-2.0, 1.5),
    "Hardtanh(min_value)": nn.Hardtanh(min_value=-0.5), "ReLU6": nn.ReLU6(),
    "Hardsigmoid": nn.Hardsigmoid(), "Hardswish": nn.Hardswish(), "Softplus": nn.Softplus(2.0),
    "GELU(tanh)": nn.GELU("tanh"), "Sigmoid": nn.Sigmoid(), "Tanh": nn.Tanh(),
    "LogSigmoid": nn.LogSigmoid(), "Softsign": nn.Softsign(), "PReLU": nn.PReLU(7, 0.2),
    "Dropout(eval)": nn.Dropout(0.4).eval(), "AlphaDropout(eval)": nn.AlphaDropout(0.4).eval(),
}


NO_DOUBLE_BACKWARD_IN_TORCH = {"hardsigmoid", "Hardsigmoid"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_functions(name: str, dtype: torch.dtype) -> None:
    assert_same_derivatives(ACTIVATIONS[name], [normal(5, 7, dtype=dtype)],
                            name not in NO_DOUBLE_BACKWARD_IN_TORCH)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_activation_modules(name: str, dtype: torch.dtype) -> None:
    assert_same_derivatives(MODULES[name].to(dtype), [normal(5, 7, dtype=dtype)],
                            name not in NO_DOUBLE_BACKWARD_IN_TORCH)


KINKS = torch.tensor([-6.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 6.0, 7.0],
                     dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS) - {"softplus"}))
def test_gradients_at_the_kinks_are_torch_s(name: str) -> None:
    """At the points where an activation switches formula (0, ±3, the bounds) the gradient
    is torch's choice of branch (hardtanh: 0 at the bounds; elu: α at 0; ...)."""
    fn = ACTIVATIONS[name]
    x = KINKS.clone().requires_grad_()
    want, = torch.autograd.grad(fn(x).sum(), x)
    got, = torch.autograd.grad(compiled(fn)(x).sum(), x)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn, name", [
    (lambda x: F.leaky_relu(x, 0.1, True), "inplace"),
    (lambda x: F.elu(x, inplace=True), "inplace"),
    (lambda x: F.celu(x, alpha=0.0), "alpha"),
    (lambda x: F.hardtanh(x, 2.0, 1.0), "min_val"),
    (lambda x: F.dropout(x, 0.3, inplace=True), "inplace"),
    (lambda x: F.alpha_dropout(x, 0.3, training=True), "training"),
    (lambda x: F.feature_alpha_dropout(x, 0.3, training=True), "training"),
    (lambda x: F.dropout1d(x[0], 0.3), "input"),
])
def test_unhonoured_arguments_are_refused_by_name(fn, name: str) -> None:
    with pytest.raises(rv.fx.UnsupportedNodeError, match=name):
        rv.fx.compile(torch.fx.symbolic_trace(fn), [normal(3, 4)])


# ---------------------------------------------------------------- dropout and random draws

def assert_same_draws(fn, x: torch.Tensor) -> None:
    """fn and its compiled form under one seed: the same draws (the draws themselves, and
    where they are dropped, bit for bit; results to rounding, as Reverie's arithmetic may
    fuse a multiply and an add), and the random stream left where eager leaves it."""
    fast = compiled(fn)
    for seed in (0, 1):  # the first call compiles, the second reuses the kernels
        torch.manual_seed(seed)
        want, after = fn(x), torch.randn(3)
        torch.manual_seed(seed)
        got, got_after = fast(x), torch.randn(3)
        assert got.dtype == want.dtype and torch.equal(got == 0, want == 0)
        torch.testing.assert_close(got, want, **TOLERANCE[x.dtype])
        assert torch.equal(after, got_after)


DRAWS = {
    "dropout": lambda x: F.dropout(x, 0.3) * 2 + F.dropout(x, p=0.6, training=True),
    "torch.dropout": lambda x: torch.dropout(x.exp(), 0.25, True),
    "dropout p=0 and p=1": lambda x: F.dropout(x, 0.0) + F.dropout(x, 1.0),
    "dropout of a transposed tensor": lambda x: F.dropout(x.transpose(0, 2), 0.5) * 3,
    "dropout1d": lambda x: F.dropout1d(x, 0.4) + F.dropout1d(x[0], 0.4).unsqueeze(0),
    "dropout2d": lambda x: F.dropout2d(x.unsqueeze(-1), 0.5).squeeze(-1),
    "dropout3d": lambda x: F.dropout3d(x.unsqueeze(0).unsqueeze(-1), 0.5).sum(0),
    "feature_dropout": lambda x: torch.feature_dropout(x, 0.5, True),
    "randn_like, rand_like": lambda x: torch.randn_like(x) * x
    + torch.rand_like(x.transpose(0, 2)).transpose(0, 2),
    "randn, rand": lambda x: x * torch.randn(3, 4, 5, dtype=x.dtype)
    + torch.rand(4, 5, dtype=x.dtype),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(DRAWS))
def test_random_draws_are_eager_s(name: str, dtype: torch.dtype) -> None:
    assert_same_draws(DRAWS[name], normal(3, 4, 5, dtype=dtype))


def raw_draws(x):
    t = x.transpose(0, 2)
    return (F.dropout(x, 0.3), F.dropout(t, 0.5), F.dropout2d(x, 0.5), torch.randn_like(t),
            torch.rand_like(x), torch.randn(2, 3, dtype=x.dtype), F.dropout(t[1:], 0.2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_random_draws_are_eager_s_bit_for_bit(dtype: torch.dtype) -> None:
    x = normal(3, 4, 5, dtype=dtype)
    torch.manual_seed(5)
    want = raw_draws(x)
    torch.manual_seed(5)
    got = compiled(raw_draws)(x)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_dropout_modules_of_a_traced_model_draw_eager_s_masks() -> None:
    """call_module nodes (torch.fx.symbolic_trace): nn.Dropout, nn.Dropout1d/2d in
    training mode, twice, each call drawing new masks as eager does."""
    model = nn.Sequential(nn.Linear(5, 6), nn.Dropout(0.4), nn.Unflatten(1, (2, 3)),
                          nn.Dropout1d(0.5), nn.Dropout2d(0.3), nn.Flatten()).double()
    x = normal(4, 5)
    fast = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    for seed in (0, 1):
        torch.manual_seed(seed)
        want = model(x)
        torch.manual_seed(seed)
        got = fast(x)
        assert torch.equal(got == 0, want == 0)
        torch.testing.assert_close(got, want, **TOLERANCE[torch.float64])


def test_dropout_at_new_batch_sizes() -> None:
    """A batch size Dynamo makes dynamic: the masks are made at each call's size (the plan
    of a graph with made tensors is static per size), equal to eager's."""
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.LeakyReLU()).double()
    fast = compiled(model)
    for n in (4, 8, 3):
        x = normal(n, 6)
        torch.manual_seed(n)
        want = model(x) + torch.randn_like(x).sum()
        torch.manual_seed(n)
        got = fast(x) + torch.randn_like(x).sum()
        assert torch.equal(got == 0, want == 0)
        torch.testing.assert_close(got, want, **TOLERANCE[torch.float64])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dropout_gradients_use_the_same_mask(dtype: torch.dtype) -> None:
    def fn(x):
        return F.dropout(x * x, 0.4) * x

    x = normal(6, 5, dtype=dtype)
    results = []
    for run in (fn, compiled(fn)):
        torch.manual_seed(3)
        results.append(derivatives(run, [x]))
    (got, grad, second), (want, grad_want, second_want) = results
    for a, b in zip(got + grad + list(second), want + grad_want + list(second_want),
                    strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[dtype])


# ---------------------------------------------------------------- shapes

SHAPES = {
    "squeeze": lambda x: x[:, :1].squeeze() + x[:, :1].squeeze(1) + x[:1].squeeze(-2)
    .squeeze((0, 1)).sum() + torch.squeeze(x[:, 1:2, :], -2) + x.squeeze(0)[0],
    "unsqueeze": lambda x: x.unsqueeze(0) * x.unsqueeze(-1).sum(-1) + torch.unsqueeze(x, 1)
    .squeeze(1),
    "split": lambda x: x.split(2, dim=2)[2] * torch.split(x, [1, 2], 1)[1][:, 1:],
    "split sizes": lambda x: torch.cat(x.split([3, 2], -1)[::-1], -1) + x.split_with_sizes(
        [4, 1], 2)[0].sum(),
    "chunk": lambda x: x.chunk(2, 1)[0] * x.chunk(2, 1)[1][:, :1] + torch.chunk(x, 3, -1)[2]
    .sum(),
    "unbind": lambda x: torch.stack(x.unbind(1)[::-1], 1) * torch.unbind(x)[0],
    "cat, stack": lambda x: torch.cat([x, x * 2], dim=-1)[..., 3:8] + torch.stack([x, x.exp()], -1)
    .sum(-1) + torch.stack((x, x), dim=0).prod(0) + torch.cat((x, x), 0)[2:5],
    "expand": lambda x: x[:, :1].expand(3, 3, 5) * x + x[0, 0].expand(2, 3, 3, -1).sum(0)
    + x.sum(0).expand_as(x) + torch.broadcast_to(x[:1], (3, 3, 5)),
    "permute, flatten, unflatten": lambda x: x.permute(-1, 0, -2).transpose(1, 2).flatten(1)
    .unflatten(1, (3, -1)).permute(1, 2, 0)
    * torch.unflatten(x.flatten(), 0, (3, 15)).view(3, 3, 5),
    "view, reshape": lambda x: x.view(-1, 5).reshape(3, -1).view_as(x) + x.reshape(9, 5)
    .reshape_as(x) * x.view(3, 15)[:, :5].reshape(-1).sum(),
    "repeat, tile": lambda x: x.repeat(2, 1, 1)[3:] + x[:, :, :1].repeat(1, 1, 5)
    + x[0].repeat(1, 2, 1, 1)[0, 1] + torch.tile(x[0, :, :2], (2, 1, 1)).sum(0)[:, :1],
    "narrow, select": lambda x: x.narrow(2, 1, 3) * torch.narrow(x, -1, -3, 3)
    + x.select(1, -1).unsqueeze(1)[..., 1:4] + torch.select(x, 0, 2)[None, :, 2:],
    "indexing with None and ...": lambda x: x[None, ..., 1] * x[:, None, 1, ::2].sum()
    + x[..., None][1:, 0, None, :, 0].sum() + x[None][0, :, None, 2, :].sum(),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes(name: str, dtype: torch.dtype) -> None:
    assert_same_derivatives(SHAPES[name], [normal(3, 3, 5, dtype=dtype)])


def test_unflatten_module_and_tuple_outputs() -> None:
    """nn.Unflatten, and a graph returning split's tuple itself (fx.symbolic_trace)."""
    model = nn.Sequential(nn.Flatten(), nn.Unflatten(1, (5, 3)))
    x = normal(2, 3, 5)
    traced = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
    torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)

    def pieces(x):
        return x.split([1, 2], 1)

    got = rv.fx.compile(torch.fx.symbolic_trace(pieces), [x])(x)
    assert isinstance(got, tuple) and len(got) == 2
    for a, b in zip(got, pieces(x), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("fn, name", [
    (lambda x: x.split([1, 1], 1), "split_size_or_sections"),
    (lambda x: x.unsqueeze(4), "dim"),
    (lambda x: x.narrow(1, 1, 5), "length"),
    (lambda x: x.expand(2, 3), "size"),
    (lambda x: x.repeat(2), "repeats"),
    (lambda x: x + torch.ones_like(x, dtype=torch.int8), "dtype"),
    (lambda x: x + torch.arange(4, device="meta"), "device"),
    (lambda x: x + torch.zeros_like(x, pin_memory=True), "pin_memory"),
])
def test_unhonoured_shapes_are_refused_by_name(fn, name: str) -> None:
    with pytest.raises(Exception, match=name):  # noqa: PT011 (Dynamo's wrapper of the error)
        compiled(fn)(normal(3, 4))


def test_traced_subscript_with_none() -> None:
    """rv.trace: `x[None, ..., 1]` and `x[:, None]`, NumPy's np.newaxis."""
    import numpy as np

    x = np.arange(12.0).reshape(3, 4)
    module = rv.trace(lambda x: x[None, ..., 1] * 2 + x[:, None, 0].sum(), x)
    np.testing.assert_allclose(module.kernel(x), x[None, ..., 1] * 2 + x[:, None, 0].sum())


# ---------------------------------------------------------------- factories

FACTORIES = {
    "arange": lambda x: x + torch.arange(5, dtype=x.dtype) + torch.arange(1, 3, 0.4,
                                                                       dtype=x.dtype).sum()
    + torch.arange(0.5, 5.5, dtype=x.dtype),
    "integer arange": lambda x: torch.arange(2, 11, 3) * torch.arange(4)[:3, None],
    "zeros, ones, full": lambda x: x * torch.ones(3, 4, 5, dtype=x.dtype) + torch.zeros(
        (4, 5), dtype=x.dtype) + torch.full((5,), 2.5, dtype=x.dtype) * torch.full_like(x, 3),
    "zeros_like, ones_like": lambda x: (torch.zeros_like(x) + x) * torch.ones_like(x),
    "new_*": lambda x: x.new_ones(4, 5) * x + x.new_full((5,), 1.5) + x.new_zeros((3, 1, 1)),
    "integer results": lambda x: (torch.ones(2, 3, dtype=torch.int64),
                                  torch.full((2,), 3), torch.zeros_like(x, dtype=torch.int32)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories(name: str, dtype: torch.dtype) -> None:
    fn, x = FACTORIES[name], normal(3, 4, 5, dtype=dtype)
    got, want = compiled(fn)(x), fn(x)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    if not name.startswith("integer"):
        assert_same_derivatives(fn, [x])


# ---------------------------------------------------------------- training steps

class Net(nn.Module):
    """Most of the rows at once: activations, dropout, split/chunk, stack, expand, flatten."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 8)
        self.act = nn.Sequential(nn.LeakyReLU(0.1), nn.Dropout(0.25))
        self.second = nn.Linear(8, 8)
        self.head = nn.Linear(12, 3)
        self.drop2d = nn.Dropout2d(0.3)

    def forward(self, x):
        h = self.act(self.first(x))
        a, b = self.second(h).chunk(2, dim=-1)
        h = torch.stack([F.elu(a), F.hardswish(b)], 1).flatten(1)  # [N, 8]
        h = self.drop2d(h.unsqueeze(-1)).squeeze(-1)
        h = torch.cat([F.mish(h), F.dropout(h[:, :4], 0.5, self.training)
                       + torch.randn_like(h[:, :4]) * 0.1], dim=1)
        pos = torch.arange(12, dtype=x.dtype).expand(x.shape[0], 12)
        return self.head(F.gelu(h + pos * 0.01, approximate="tanh"))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_training_steps_match_eager(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Net().to(dtype)
    twin = Net().to(dtype)
    twin.load_state_dict(model.state_dict())
    fast = compiled(model)
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, twin)]
    x, y = normal(5, 6, dtype=dtype), normal(5, 3, dtype=dtype) / 2
    for step in range(3):
        losses = []
        for run, module, optimiser in ((fast, model, optimisers[0]),
                                       (twin, twin, optimisers[1])):
            torch.manual_seed(100 + step)
            optimiser.zero_grad()
            loss = F.mse_loss(run(x), y)
            loss.backward()
            losses.append((loss.detach(), [p.grad.clone() for p in module.parameters()]))
            optimiser.step()
        (loss, grads), (loss_want, grads_want) = losses
        torch.testing.assert_close(loss, loss_want, **TOLERANCE[dtype])
        for a, b in zip(grads, grads_want, strict=True):
            torch.testing.assert_close(a, b, **TOLERANCE[dtype])
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[dtype])
    model.eval(), twin.eval()
    torch.manual_seed(7)
    got = fast(x)  # Dynamo compiles the graph again for eval mode
    torch.manual_seed(7)
    torch.testing.assert_close(got, twin(x), **TOLERANCE[dtype])


def test_double_backward_through_a_model_with_dropout() -> None:
    """A gradient penalty (WGAN-GP style) through dropout and the activations."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ELU(), nn.Dropout(0.3), nn.Linear(6, 6),
                          nn.Mish(), nn.Linear(6, 1)).double()
    x = normal(5, 4)

    def penalty(run):
        torch.manual_seed(4)
        inputs = x.clone().requires_grad_()
        g, = torch.autograd.grad(run(inputs).sum(), inputs, create_graph=True)
        loss = ((g.norm(dim=1) - 1) ** 2).mean()
        return loss, torch.autograd.grad(loss, list(model.parameters()), allow_unused=True,
                                         materialize_grads=True)

    (got, grads), (want, grads_want) = penalty(compiled(model)), penalty(model)
    torch.testing.assert_close(got, want, **TOLERANCE[torch.float64])
    for a, b in zip(grads, grads_want, strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[torch.float64])
