"""`rv.fx` with `fallback=True`: graph breaks equal eager PyTorch on every call (issues 30, 33).

Each model runs beside an eager twin from the same weights for several training steps,
with new inputs (and new float arguments) at every call: outputs, gradients, parameters
and buffers (BatchNorm's running statistics and step count) must agree. The regressions:
nothing runs at compile time (no buffer update, no in-place write on the example inputs),
nothing computed is frozen (a float argument, an eager node's tuple), an in-place op runs
once per call, and a segment reads only what it uses (so an in-place `h += z` after it
does not break its backward).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402

STEPS = 4


def compile_fx(model, inputs):
    return rv.fx.compile(torch.fx.symbolic_trace(model), inputs, fallback=True)


def compile_dynamo(model, inputs):
    return torch.compile(model, backend="reverie", options={"fallback": True})


ROUTES = {"rv.fx": compile_fx, "torch.compile": compile_dynamo}


def normal(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def assert_same_training(route, make_model, make_inputs, steps: int = STEPS) -> None:
    """Train a compiled model and its eager twin side by side with SGD: each call's
    outputs, the gradients of inputs and parameters, and the state after each step agree."""
    torch.manual_seed(0)
    model = make_model().double()
    twin = copy.deepcopy(model)
    compiled = ROUTES[route](model, make_inputs(0))
    for step in range(steps):
        inputs = make_inputs(step)
        (got, got_grads), (want, want_grads) = (sgd_step(run, m, inputs) for run, m in
                                                ((compiled, model), (twin, twin)))
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        assert_same_state(model, twin)


def sgd_step(run, model: nn.Module, inputs: list) -> tuple:
    """One step of SGD on the loss Σ out²: the output and the inputs' gradients."""
    args = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a
            for a in inputs]
    model.zero_grad()
    out = run(*args)
    (out * out).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    return out.detach(), [a.grad for a in args if isinstance(a, torch.Tensor)]


def assert_same_state(model: nn.Module, twin: nn.Module) -> None:
    """Parameters and buffers (running_mean, running_var, num_batches_tracked) agree."""
    got, want = model.state_dict(), twin.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-12, msg=name)


# ---------------------------------------------------------------- float arguments

class Scaled(nn.Module):
    """A float argument used by compiled nodes on both sides of a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x, scale):
        z = torch.special.erfinv(torch.tanh(self.linear(x)) * scale)
        return z * scale + x


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_float_argument_is_read_at_every_call(route: str) -> None:
    scales = [0.5, 0.7, 0.9, 0.3]  # Dynamo: a constant at the first call, a SymFloat later
    assert_same_training(route, Scaled, lambda step: [normal(4, 3), scales[step]])


def test_float_argument_is_a_kernel_input_not_a_constant() -> None:
    compiled = compile_fx(Scaled().double(), [normal(4, 3), 0.5])
    x = normal(4, 3)
    for scale in (0.5, 0.25, 0.75):
        torch.testing.assert_close(compiled(x, scale), compiled.gm(x, scale))
    assert len(compiled.plans) == 1  # one plan for every value of the float
    assert all("v_scale_f64: f64" in source for source in compiled.sources)


# ---------------------------------------------------------------- in-place updates

def add_in_place(x):
    return x.add_(1) * 2


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_in_place_update_runs_once_per_call(route: str) -> None:
    example = torch.zeros(3, dtype=torch.float64)
    compiled = ROUTES[route](add_in_place, [example])
    assert example.tolist() == [0, 0, 0]  # compiling wrote nothing into the example
    for _ in range(STEPS):
        x = normal(3)
        twin = x.clone()
        torch.testing.assert_close(compiled(x), add_in_place(twin))
        torch.testing.assert_close(x, twin)  # the input updated once, as eager's


def view_written_in_place(x):
    y = x * 2
    flat = y.view(-1)  # torch's view: the write below reaches y
    flat.add_(1)
    return y * 3


def relu_in_place(x):
    y = x * 2
    F.relu(y, inplace=True)
    return y + 1


@pytest.mark.parametrize("fn", [view_written_in_place, relu_in_place])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_writes_in_place_reach_every_alias(route: str, fn) -> None:
    compiled = ROUTES[route](fn, [normal(2, 3)])
    for _ in range(STEPS):
        x = normal(2, 3)
        torch.testing.assert_close(compiled(x), fn(x.clone()))


# ---------------------------------------------------------------- BatchNorm

def batch_norm_model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_batch_norm_buffers_update_once_per_step(route: str) -> None:
    assert_same_training(route, batch_norm_model, lambda step: [normal(8, 3) + step])


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_batch_norm_train_then_eval(route: str) -> None:
    torch.manual_seed(0)
    model = batch_norm_model().double()
    twin = copy.deepcopy(model)
    compiled = ROUTES[route](model, [normal(8, 3)])
    assert_same_state(model, twin)  # compiling updated no buffer
    for step in range(STEPS):
        x = normal(8, 3) * (step + 1)
        torch.testing.assert_close(compiled(x), twin(x), rtol=1e-10, atol=1e-12)
        assert_same_state(model, twin)
    assert int(model[1].num_batches_tracked) == STEPS
    model.eval(), twin.eval()
    compiled = ROUTES[route](model, [normal(8, 3)])
    for _ in range(STEPS):
        x = normal(5, 3)
        torch.testing.assert_close(compiled(x), twin(x), rtol=1e-10, atol=1e-12)
    assert_same_state(model, twin)


# ---------------------------------------------------------------- tuples of eager nodes

class Chunked(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, 1)
        return a * b


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_tuple_of_an_eager_node_is_read_at_every_call(route: str) -> None:
    assert_same_training(route, Chunked, lambda step: [normal(3, 4)])


class GRUHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        out, h = self.gru(x)
        return self.head(h[0] * out.sum(1))


def test_gru_and_linear_train_like_eager() -> None:
    assert_same_training("rv.fx", GRUHead, lambda step: [normal(2, 4, 3)])


def test_gru_and_linear_through_dynamo() -> None:
    with torch._dynamo.config.patch(allow_rnn=True):  # else Dynamo runs RNNs itself
        torch._dynamo.reset()
        assert_same_training("torch.compile", GRUHead, lambda step: [normal(2, 4, 3)])


# ---------------------------------------------------------------- segment inputs

def add_into_eager_value(x):
    h = torch.special.erfinv(x * 0.5)
    y = x * 3
    h += y  # unmapped: the segment of `y` must not take (and save) `h`
    return h


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_segment_reads_only_what_it_uses(route: str) -> None:
    assert_same_training(route, lambda: _Wrap(add_into_eager_value),
                         lambda step: [torch.rand(4, 3, dtype=torch.float64) - 0.5])


class _Wrap(nn.Module):
    """A one-argument function as a module (symbolic_trace does not trace `*args`)."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def copysign_beside(x):
    h = torch.special.erfinv(x * 0.5)
    y = x * 3
    return torch.copysign(h, y) + y  # unmapped: recording it must leave `h` out of y's segment


def test_refused_node_leaves_no_parameter() -> None:
    x = torch.rand(4, 3, dtype=torch.float64) - 0.5
    compiled = compile_fx(_Wrap(copysign_beside), [x])
    assert "v_special_erfinv" not in "".join(compiled.sources)
    torch.testing.assert_close(compiled(x), copysign_beside(x))
