"""`rv.torch.function` as a torch custom operator (docs/api.md §6–7), checked against the same maths
written natively in torch: autograd to third order, every torch.func transform, torch.vmap
through the batched kernel (one call, never a loop), torch.compile(fullgraph=True), dtype
conversion at the boundary, and an nn.Module trained eagerly and compiled."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")
func = torch.func

SOURCE = """
fn wave(x: float[N], w: float[N]) -> float { return sum(sin(x * w) * x); }
fn layer(x: float[B, D], w: float[D, H], b: float[H]) -> float[B, H] {
    return tanh(x @ w + b);
}
fn stats(x: float[N], k: i64[N]) -> (float, float[N], i64[N]) {
    return (sum(x * x), sin(x) * 2.0, k + 1);
}
fn cubes(x: f64[N], y: f64[N]) -> f64[N] { return x * x * x * y; }
fn head(u: f64[N], steps: i64) -> f64 { return sum(exp(u[:steps])); }
fn scale(x: float[N], a: float) -> float[N] { return x * a; }
fn shift(x: f64[N], c: f64) -> f64[N] { return x + c; }
fn pairs(x: float[2 * K]) -> float[K] { return x[:K] * x[K:]; }
"""


def wave_native(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.sin(x * w) * x).sum()


def layer_native(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w + b)


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch (no graph reused from another test)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()



def normal(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape)
    return torch.tensor(data, dtype=dtype)


def assert_close(ours: object, theirs: object, atol: float = 1e-10) -> None:
    """Equal nested tuples of tensors: same shapes, dtypes and values."""
    if isinstance(theirs, tuple | list):
        assert isinstance(ours, tuple | list) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_close(a, b, atol)
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
    assert torch.allclose(ours, theirs, rtol=0, atol=atol), (ours, theirs)


# ---------------------------------------------------------------- autograd


def test_autograd_to_third_order_runs_the_vjp_kernels(m: rv.Module,
                                                      kernel_calls: list[str]) -> None:
    wave = rv.torch.function(m.wave)
    w = normal(6, seed=1)

    def derivatives(f: Callable) -> list[torch.Tensor]:
        x = normal(6).requires_grad_()
        out, grads = f(x, w), []
        for order in range(3):
            (out,) = torch.autograd.grad(out.sum(), x, create_graph=order < 2)
            grads.append(out)
        return grads

    ours = derivatives(wave)
    # each call that autograd records runs the forward half of its VJP (results and
    # residuals); the last backward, which builds no graph, runs the backward half alone
    assert kernel_calls == ["wave_vjp_forward", "wave_vjp_vjp_forward",
                            "wave_vjp_vjp_vjp_forward", "wave_vjp_vjp_vjp_backward"]
    assert_close(ours, derivatives(wave_native))


# ---------------------------------------------------------------- torch.func

TRANSFORMS: dict[str, Callable[[Callable, torch.Tensor, torch.Tensor], object]] = {
    "grad": lambda f, x, w: func.grad(f, argnums=(0, 1))(x, w),
    "grad_of_grad": lambda f, x, w: func.grad(lambda a: func.grad(f)(a, w).sum())(x),
    "vjp": lambda f, x, w: func.vjp(f, x, w)[1](torch.tensor(1.5, dtype=torch.float64)),
    "jvp": lambda f, x, w: func.jvp(f, (x, w), (w, torch.ones_like(x))),
    "jacrev": lambda f, x, w: func.jacrev(f, argnums=(0, 1))(x, w),
    "jacfwd": lambda f, x, w: func.jacfwd(f, argnums=(0, 1))(x, w),
    "hessian": lambda f, x, w: func.hessian(f, argnums=(0, 1))(x, w),
    "jacfwd_of_jacfwd": lambda f, x, w: func.jacfwd(func.jacfwd(f))(x, w),
    "vmap_of_grad": lambda f, x, w: torch.vmap(func.grad(f), in_dims=(0, None))(
        torch.stack([x, w, x * w]), w),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_torch_func_transforms_match_native_torch(m: rv.Module, name: str) -> None:
    x, w = normal(5), normal(5, seed=1)
    transform = TRANSFORMS[name]
    assert_close(transform(rv.torch.function(m.wave), x, w), transform(wave_native, x, w))


def test_forward_mode_tangents_of_tuple_and_integer_outputs(m: rv.Module) -> None:
    stats = rv.torch.function(m.stats)
    x, k, t = normal(4), torch.arange(4), normal(4, seed=2)
    values, tangents = func.jvp(lambda a: stats(a, k)[:2], (x,), (t,))
    assert_close(values, ((x * x).sum(), 2 * torch.sin(x)))
    assert_close(tangents, ((2 * x * t).sum(), 2 * torch.cos(x) * t))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, t)
        total, waves, shifted = stats(dual, k)
        assert_close(torch.autograd.forward_ad.unpack_dual(waves).tangent,
                     2 * torch.cos(x) * t)
        assert torch.autograd.forward_ad.unpack_dual(shifted).tangent is None
        assert torch.equal(shifted, k + 1)


# ---------------------------------------------------------------- torch.vmap


def test_vmap_calls_the_batched_kernel_once(m: rv.Module, kernel_calls: list[str]) -> None:
    layer = rv.torch.function(m.layer)
    xs, w, b = normal(7, 2, 3), normal(3, 4, seed=1), normal(4, seed=2)
    ours = torch.vmap(layer, in_dims=(0, None, None))(xs, w, b)
    assert kernel_calls == ["layer_batched"]
    assert_close(ours, torch.vmap(layer_native, in_dims=(0, None, None))(xs, w, b))

    kernel_calls.clear()
    ws = normal(3, 4, 5, seed=3)  # batched along dimension 2
    ours = torch.vmap(layer, in_dims=(None, 2, None), out_dims=1)(xs[0], ws, b)
    assert kernel_calls == ["layer_batched"]
    assert_close(ours, torch.vmap(layer_native, in_dims=(None, 2, None), out_dims=1)(
        xs[0], ws, b))


def test_nested_vmap_and_vmap_of_jacrev_are_single_calls(m: rv.Module,
                                                         kernel_calls: list[str]) -> None:
    wave = rv.torch.function(m.wave)
    xs, w = normal(2, 3, 5), normal(5, seed=1)
    nested = lambda f: torch.vmap(torch.vmap(f, in_dims=(0, None)), in_dims=(0, None))  # noqa: E731
    assert_close(nested(wave)(xs, w), nested(wave_native)(xs, w))
    assert kernel_calls == ["wave_batched_batched"]

    kernel_calls.clear()
    ours = torch.vmap(func.jacrev(wave), in_dims=(0, None))(xs[0], w)
    assert_close(ours, torch.vmap(func.jacrev(wave_native), in_dims=(0, None))(xs[0], w))
    assert kernel_calls == ["wave_batched", "wave_vjp_batched_batched"]


def test_vmap_with_integer_inputs_and_outputs(m: rv.Module, kernel_calls: list[str]) -> None:
    stats = rv.torch.function(m.stats)
    xs, ks = normal(3, 4), torch.arange(12).reshape(3, 4)
    total, waves, shifted = torch.vmap(stats)(xs, ks)
    assert kernel_calls == ["stats_batched"]
    assert_close((total, waves, shifted), ((xs * xs).sum(1), 2 * torch.sin(xs), ks + 1))


# ---------------------------------------------------------------- torch.compile


def test_compile_fullgraph_has_one_node_per_call_and_no_graph_break(m: rv.Module) -> None:
    layer = rv.torch.function(m.layer)
    x, w, b = normal(4, 3), normal(3, 2, seed=1), normal(2, seed=2)

    def model(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (layer(x, w, b) * 2.0).sum()

    explained = torch._dynamo.explain(model)(x, w, b)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    nodes = [str(n.target) for n in explained.graphs[0].graph.nodes if n.op == "call_function"]
    assert sum(target.startswith("reverie.") for target in nodes) == 1, nodes

    compiled = torch.compile(model, fullgraph=True)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    ours = compiled(*leaves)
    theirs = (layer_native(x, w, b) * 2.0).sum()
    assert_close(ours.detach(), theirs)
    assert_close(torch.autograd.grad(ours, leaves),
                 torch.autograd.grad((layer_native(*leaves) * 2.0).sum(), leaves))


def test_compile_with_changing_shapes_integer_sizes_and_solved_dimensions(
        m: rv.Module) -> None:
    wave, head = rv.torch.function(m.wave), rv.torch.function(m.head)
    pairs = rv.torch.function(m.pairs)
    compiled = torch.compile(lambda x, w: wave(x, w) + head(x, 2) + pairs(x).sum(),
                             fullgraph=True)
    for n in (4, 6, 8):  # later sizes compile with symbolic shapes
        x, w = normal(n), normal(n, seed=1)
        expected = wave_native(x, w) + torch.exp(x[:2]).sum() + (x[:n // 2] * x[n // 2:]).sum()
        assert_close(compiled(x, w), expected)


def test_compile_vmap_runs_the_batched_kernel(m: rv.Module, kernel_calls: list[str]) -> None:
    wave = rv.torch.function(m.wave)
    xs, w = normal(3, 5), normal(5, seed=1)
    compiled = torch.compile(torch.vmap(wave, in_dims=(0, None)), fullgraph=True)
    assert_close(compiled(xs, w), torch.vmap(wave_native, in_dims=(0, None))(xs, w))
    assert "wave_batched" in kernel_calls and "wave" not in kernel_calls


def test_make_fx_and_export_record_the_kernel_operators(m: rv.Module) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    wave = rv.torch.function(m.wave)
    x, w = normal(5), normal(5, seed=1)
    traced = make_fx(func.grad(wave))(x, w)
    targets = [str(n.target) for n in traced.graph.nodes if n.op == "call_function"]
    assert [t for t in targets if t.startswith("reverie.")] == [
        f"{wave.op.qualname.replace('::', '.')}.default",
        f"{rv.torch.function(m.wave.vjp([0])).op.qualname.replace('::', '.')}.default"]
    assert_close(traced(x, w), func.grad(wave_native)(x, w))

    class Wave(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return wave(x, w)

    exported = torch.export.export(Wave(), (x, w))
    assert_close(exported.module()(x, w), wave_native(x, w))


def test_operator_names_differ_between_processes(m: rv.Module) -> None:
    """TorchInductor's disk cache keys graphs by operator names: another process must not
    find its graphs (its own operators are other kernels, or not yet defined)."""
    code = ("import reverie as rv\n"
            f"m = rv.compile({SOURCE!r})\n"
            "print(rv.torch.function(m.wave).op.qualname)\n")
    other = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                           text=True).stdout.strip()
    ours = rv.torch.function(m.wave).op.qualname
    assert other.startswith("reverie::wave_") and ours.startswith("reverie::wave_")
    assert other != ours


# ---------------------------------------------------------------- dtypes


def test_float32_into_an_f64_kernel_gives_f64_results_and_f32_gradients(m: rv.Module) -> None:
    cubes = rv.torch.function(m.cubes)
    x, y = normal(5, dtype=torch.float32).requires_grad_(), normal(5, seed=1)
    out = cubes(x, y)
    assert out.dtype == torch.float64
    assert_close(out.detach(), x.detach().double() ** 3 * y)
    (gx,) = torch.autograd.grad(out.sum(), x)
    assert gx.dtype == torch.float32
    assert_close(gx, (3 * x.detach().double() ** 2 * y).float(), atol=1e-5)
    (gx,) = func.grad(lambda a: cubes(a, y).sum())(x.detach()),
    assert gx.dtype == torch.float32


@pytest.mark.parametrize(("dtype", "result"), [(torch.float32, torch.float32),
                                               (torch.float16, torch.float16),
                                               (torch.bfloat16, torch.bfloat16),
                                               (torch.float64, torch.float64)])
def test_float_kernels_follow_the_tensor_precision(m: rv.Module, dtype: torch.dtype,
                                                    result: torch.dtype) -> None:
    wave = rv.torch.function(m.wave)
    x, w = normal(4, dtype=dtype).requires_grad_(), normal(4, seed=1, dtype=dtype)
    value = wave(x, w)
    assert value.dtype == result
    (gx,) = torch.autograd.grad(value, x)
    assert gx.dtype == dtype
    xs, ws = x.detach().double(), w.double()
    assert_close(gx.double(), torch.sin(xs * ws) + xs * ws * torch.cos(xs * ws),
                 atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5)


def test_python_numbers_take_the_call_precision_and_mixed_floats_are_refused(
        m: rv.Module) -> None:
    scale, shift = rv.torch.function(m.scale), rv.torch.function(m.shift)
    x = normal(3, dtype=torch.float32)
    assert_close(scale(x, 2.0), x * 2)
    assert_close(shift(x, 2 ** 60), x.double() + 2.0 ** 60)
    with pytest.raises(rv.ArgumentTypeError, match="float32 .* and float64"):
        scale(x, torch.tensor(2.0, dtype=torch.float64))
    with pytest.raises(rv.ArgumentTypeError, match="cannot be converted"):
        rv.torch.function(m.stats)(normal(3), torch.tensor([0.5, 1.5, 2.5]))
    with pytest.raises(rv.ArgumentTypeError, match="sizes a dimension"):
        rv.torch.function(m.head)(normal(3), 2.5)
    with pytest.raises(rv.ArgumentValueError, match="cannot be made a tensor"):
        rv.torch.function(m.stats)(x, [2 ** 80] * 3)
    with pytest.raises(rv.ArgumentTypeError, match="cannot be made a tensor"):
        scale(x, "two")


# ---------------------------------------------------------------- nn.Module training


class Model(torch.nn.Module):
    """A compiled tanh layer feeding a torch linear head."""

    def __init__(self, layer: Callable, d: int, h: int) -> None:
        super().__init__()
        self.layer = layer
        self.w = torch.nn.Parameter(normal(d, h, seed=1) * 0.5)
        self.b = torch.nn.Parameter(torch.zeros(h, dtype=torch.float64))
        self.head = torch.nn.Linear(h, 1, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x, self.w, self.b))


def train(model: torch.nn.Module, step: Callable, x: torch.Tensor, target: torch.Tensor
          ) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = torch.mean((step(x) - target) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_module_trains_eagerly_and_compiled_like_native_torch(m: rv.Module) -> None:
    x, target = normal(16, 3, seed=4), normal(16, 1, seed=5)
    runs = []
    for layer, compile_it in [(rv.torch.function(m.layer), False),
                              (rv.torch.function(m.layer), True), (layer_native, False)]:
        torch.manual_seed(0)
        model = Model(layer, 3, 8)
        step = torch.compile(model, fullgraph=True) if compile_it else model
        runs.append(train(model, step, x, target))
    eager, compiled, native = runs
    assert native[-1] < 0.7 * native[0]
    np.testing.assert_allclose(eager, native, rtol=1e-9)
    np.testing.assert_allclose(compiled, native, rtol=1e-9)


# ---------------------------------------------------------------- the benchmark


def test_interop_benchmark_pairs_compute_the_same_values() -> None:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "interop_torch.py"
    spec = importlib.util.spec_from_file_location("interop_torch_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    for _, ours, theirs in benchmark.cases():
        assert_close(ours(), theirs())
    rows = benchmark.table(rounds=1, seconds=0.001)
    assert [r[0] for r in rows] == [c[0] for c in benchmark.cases()]
    assert all(ours > 0 and theirs > 0 for _, ours, theirs in rows)
    assert "ratio" in benchmark.markdown(rows)
