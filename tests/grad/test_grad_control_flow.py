"""Derivatives through `if` and `while` (docs/language.md §11.1): the path that was taken.

Reverse mode is checked against central finite differences and against PyTorch eager
running the same control flow in Python, with and without `checkpoint=True`, on the
reference interpreter and natively; forward mode, Jacobians and Hessians against
`torch.func` (whose `jvp`/`jacfwd` follow Python control flow on unbatched values).
Batching with a batched condition (which `torch.func.vmap` refuses) is checked against
PyTorch run once per batch element, as the semantics of `vmap` of `cond`/`while_loop`
prescribe; this covers the batched adjoint of a `while`, whose trip count differs per
element.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from forward_helpers import batch_error
from grad_helpers import assert_jacobians_match, grad, run, specialise

import reverie as rv
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.reverse import vjp_function

torch = pytest.importorskip("torch")
func = torch.func

ROOT = Path(__file__).resolve().parents[2]
DIMS = {"N": 4}


def t_branchy(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    u, v = x.sum(), w
    if u > 0.0:
        u = u * 2.0
        v = v * u
    elif u < -1.0:
        u = (w * w).sum()
    else:
        u = -u
    n = 0.0
    while u > 1.0:
        u = u / 2.0 + 0.01 * (v * v).sum()
        n = n + 1.0
        v = v * 0.5 + 0.1 * u
    return u + n + (v * v).sum()


def t_damped(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    u, k = x, 0
    while torch.max(torch.abs(u)) > 0.1 and k < 30:
        u = torch.tanh(u * w) * 0.8
        if u.sum() > 0.0:
            u = u - 0.05 * w
        k += 1
    return (u * x).sum()


def t_loop_of_branches(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x
    for t in range(3):
        if (h * w).sum() > 0.0:
            h = torch.sin(h) * w
        else:
            h = h * h + w * t
    return h.sum()


PROGRAMS: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "branchy": ("""
fn f(x: f64[N], w: f64[N]) -> f64 {
    var u = sum(x);
    var v = w;
    if u > 0.0 { u = u * 2.0; v = v * u; } else if u < -1.0 { u = sum(w * w); } else { u = -u; }
    var n = 0.0;
    while u > 1.0 {
        u = u / 2.0 + 0.01 * sum(v * v);
        n = n + 1.0;
        v = v * 0.5 + 0.1 * u;
    }
    return u + n + sum(v * v);
}""", t_branchy),
    "damped": ("""
fn f(x: f64[N], w: f64[N]) -> f64 {
    var u = x;
    var k = 0;
    while max(abs(u)) > 0.1 and k < 30 {
        u = tanh(u * w) * 0.8;
        if sum(u) > 0.0 { u = u - 0.05 * w; }
        k = k + 1;
    }
    return sum(u * x);
}""", t_damped),
    "loop_of_branches": ("""
fn f(x: f64[N], w: f64[N]) -> f64 {
    var h = x;
    for t in 0..3 {
        if sum(h * w) > 0.0 { h = sin(h) * w; } else { h = h * h + w * f64(t); }
    }
    return sum(h);
}""", t_loop_of_branches),
}
CASES = [(name, seed) for name in PROGRAMS for seed in range(3)]


def draw(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(DIMS["N"]) * 1.5, rng.standard_normal(DIMS["N"])]


def torch_grads(reference: Callable[..., torch.Tensor], args: list[np.ndarray]
                ) -> list[np.ndarray]:
    tensors = [torch.tensor(a, requires_grad=True) for a in args]
    grads = torch.autograd.grad(reference(*tensors), tensors, allow_unused=True)
    return [np.zeros_like(a) if g is None else g.numpy() for g, a in zip(grads, args,
                                                                          strict=True)]


@pytest.mark.parametrize(("name", "seed"), CASES)
@pytest.mark.parametrize("checkpoint", [False, True])
def test_reverse_matches_finite_differences(name: str, seed: int, checkpoint: bool) -> None:
    fn = specialise(PROGRAMS[name][0])
    assert_jacobians_match(fn, draw(seed), DIMS, rtol=1e-5, atol=1e-7)
    if checkpoint:
        plain = grad(fn, [0, 1], draw(seed), DIMS)
        for a, b in zip(grad(fn, [0, 1], draw(seed), DIMS, checkpoint=True), plain,
                        strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("name", "seed"), CASES)
@pytest.mark.parametrize("backend", ["interp", "native"])
def test_reverse_matches_torch_eager(name: str, seed: int, backend: str) -> None:
    source, reference = PROGRAMS[name]
    args = draw(seed)
    module = rv.compile(source, backend=backend)
    ours = module.f.grad()(*args)
    for a, b in zip(ours, torch_grads(reference, args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "seed"), CASES)
def test_forward_mode_matches_torch_func_jvp(name: str, seed: int) -> None:
    source, reference = PROGRAMS[name]
    args = draw(seed)
    tangents = [np.ones(DIMS["N"]), np.linspace(-1.0, 1.0, DIMS["N"])]
    value, tangent = rv.compile(source).f.jvp()(*args, tuple(tangents))
    want_value, want_tangent = func.jvp(reference, tuple(map(torch.tensor, args)),
                                        tuple(map(torch.tensor, tangents)))
    np.testing.assert_allclose(value, want_value.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "seed"), CASES[::3])
def test_hessian_matches_torch_func(name: str, seed: int) -> None:
    source, reference = PROGRAMS[name]
    x, w = draw(seed)
    ours = rv.compile(source).f.hessian("x")(x, w)
    theirs = func.hessian(reference, argnums=0)(torch.tensor(x), torch.tensor(w))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", PROGRAMS)
def test_batched_conditions_match_each_element(name: str) -> None:
    fn = specialise(PROGRAMS[name][0])
    arg_sets = [draw(seed) for seed in range(5)]
    for batched in ([0], [0, 1]):
        for got, want in batch_error(fn, arg_sets, DIMS, batched):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PROGRAMS)
def test_batched_adjoints_match_torch_per_element(name: str) -> None:
    """The VJP batched over x and the cotangent: each element takes its own path."""
    source, reference = PROGRAMS[name]
    fn = specialise(source)
    batched = batch_function(vjp_function(fn, [0, 1]), [0, 2])
    sets = [draw(seed) for seed in range(5)]
    xs = np.stack([s[0] for s in sets])
    cotangents = np.linspace(0.5, 2.0, len(sets))
    _, x_bars, w_bars = run(batched, [xs, sets[0][1], cotangents], {**DIMS, "B": len(sets)})
    for k, s in enumerate(sets):
        want = torch_grads(reference, [s[0], sets[0][1]])
        np.testing.assert_allclose(x_bars[k], cotangents[k] * want[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(w_bars[k], cotangents[k] * want[1], rtol=1e-9, atol=1e-12)


def test_is_grads_batched_through_a_while() -> None:
    source, reference = PROGRAMS["branchy"]
    x, w = draw(1)
    module = rv.compile(source)
    xt, wt = rv.tensor(x, requires_grad=True), rv.tensor(w, requires_grad=True)
    out = module.f(xt, wt)
    seeds = np.array([1.0, -2.0, 0.5])
    (x_bar,) = rv.grad(out, xt, grad_outputs=rv.tensor(seeds), is_grads_batched=True)
    np.testing.assert_allclose(np.asarray(x_bar),
                               seeds[:, None] * torch_grads(reference, [x, w])[0][None],
                               rtol=1e-9, atol=1e-12)


def test_newton_example_gradient_flows() -> None:
    module = rv.load(ROOT / "examples" / "newton.rv")
    rng = np.random.default_rng(3)
    x, target = rng.standard_normal(6), rng.standard_normal(6)
    g_x, g_target = module.newton_loss.grad()(x, target)
    y, sign = np.sqrt(x * x + 1.0), (-1.0 if target.mean() < 0 else 1.0)
    np.testing.assert_allclose(g_x, 2.0 * (sign * y - target) * sign * x / y, rtol=1e-10)
    np.testing.assert_allclose(g_target, -2.0 * (sign * y - target), rtol=1e-10)
    assert rv.gradcheck(module.newton_loss, (rv.tensor(x, requires_grad=True),
                                             rv.tensor(target, requires_grad=True)))


def test_a_branch_not_taken_gets_no_gradient() -> None:
    """Only the taken branch is differentiated: a NaN in the other one does not leak."""
    module = rv.compile("fn f(x: f64) -> f64 { var u = x; if x > 0.0 { u = x * x; } "
                        "else { u = sqrt(x); } return u; }")
    assert module.f.grad("x")(3.0) == 6.0
    assert np.isnan(module.f.grad("x")(-3.0))
    assert np.isinf(module.f.grad("x")(0.0))
