"""Gradients of bf16/f16 kernels in native code: reverse mode, forward mode and second order
(Hessian-vector products, forward over reverse).

Adjoints are stored in the primal's dtype and computed in f32 with every op rounded (the
widening pass), so the native gradients must be the interpreter's (bit for bit but for the
last-bit differences of f32 sums taken in another order and of the math library: within one
ulp), and close to the derivative of the same program in f64 — central differences of its
f64 kernel at the same (exactly representable) inputs — to a tolerance of a few rounding
errors of the 16-bit type; torch's bf16/f16 autograd to the same tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from storage_helpers import STORAGE, TORCH, assert_close_in_ulps

import reverie as rv

# relative to the largest derivative: a few 16-bit roundings of each term
TOLERANCE = {"bf16": 4e-2, "f16": 6e-3}
STEP = 1e-6  # of the f64 central differences


@dataclass(frozen=True)
class Loss:
    """A scalar kernel (`T` standing for the 16-bit type), its arguments, the positions of
    the ones to differentiate and torch's loss."""

    source: str
    arguments: Callable[[np.dtype, np.random.Generator], list[np.ndarray]]
    wrt: tuple[int, ...]
    torch: Callable[..., torch.Tensor]


def normal(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
           scale: float = 0.5) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def heat(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    for _ in range(5):
        u = u + k * (torch.roll(u, 1) - 2.0 * u + torch.roll(u, -1))
    return u


def iterate_sin(x: torch.Tensor) -> torch.Tensor:
    y = x
    for _ in range(3):
        y = torch.sin(y) + x
    return y


LOSSES = {
    "elementwise": Loss(
        "fn f(x: T[N], w: T[N]) -> T { return sum(tanh(x * w) + 0.5 * x * x * w); }",
        lambda t, r: [normal((23,), t, r), normal((23,), t, r)], (0, 1),
        lambda x, w: (torch.tanh(x * w) + 0.5 * x * x * w).sum()),
    "mlp": Loss(
        """fn f(x: T[B, I], w1: T[I, H], w2: T[H, O], y: T[B, O]) -> T {
            return mean((tanh(x @ w1) @ w2 - y) ** 2); }""",
        lambda t, r: [normal((6, 5), t, r), normal((5, 7), t, r), normal((7, 3), t, r),
                      normal((6, 3), t, r)], (1, 2),
        lambda x, w1, w2, y: ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()),
    "softmax cross-entropy": Loss(
        "fn f(z: T[N, C], t: T[N, C]) -> T { return -sum(log_softmax(z) * t); }",
        lambda t, r: [normal((4, 6), t, r, 2.0), r.dirichlet(np.ones(6), 4).astype(t)], (0,),
        lambda z, t: -(torch.log_softmax(z, 1) * t).sum()),
    "gather": Loss(
        """fn f(table: T[V, D], ids: i64[N]) -> T {
            let g[n, d] = table[ids[n], d] * 2.0;
            return sum(g * g); }""",
        lambda t, r: [normal((5, 3), t, r), r.integers(0, 5, 9)], (0,),
        lambda table, ids: ((table[ids] * 2.0) ** 2).sum()),
    "scan": Loss(
        "fn f(x: T[N], w: T[N]) -> T { return sum(cumsum(x) * w); }",
        lambda t, r: [normal((17,), t, r), normal((17,), t, r)], (0, 1),
        lambda x, w: (torch.cumsum(x, 0) * w).sum()),
    "for loop": Loss(
        """fn f(u0: T[N], k: T) -> T {
            var u = u0;
            for t in 0..5 { u = u + k * (roll(u, 1) - 2.0 * u + roll(u, -1)); }
            return sum(u * u); }""",
        lambda t, r: [normal((13,), t, r), np.asarray(0.2, t)], (0, 1),
        lambda u, k: (heat(u, k) ** 2).sum()),
    "while loop": Loss(
        """fn f(x: T[N]) -> T {
            var y = x;
            var k = 0;
            while k < 3 { y = sin(y) + x; k = k + 1; }
            return sum(y * y); }""",
        lambda t, r: [normal((11,), t, r)], (0,),
        lambda x: (iterate_sin(x) ** 2).sum()),
}


class Compiled:
    """One loss compiled natively and for the interpreter in a 16-bit type, and natively
    in f64 (the reference)."""

    def __init__(self, name: str, dtype: str) -> None:
        self.loss = LOSSES[name]
        source = self.loss.source.replace("T", dtype)
        self.native = rv.compile(source).f
        self.interpreted = rv.compile(source, backend="interp").f
        self.wide = rv.compile(self.loss.source.replace("T", "f64")).f
        rng = np.random.default_rng(len(name))
        self.args = self.loss.arguments(STORAGE[dtype], rng)
        self.directions = [normal(self.args[i].shape, STORAGE[dtype], rng)
                           for i in self.loss.wrt]
        self.dtype = dtype

    def wide_args(self, steps: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
        """The arguments in f64 (integers as they are), plus `steps` where given."""
        steps = steps or {}
        return [a.astype(np.float64) + steps.get(k, 0.0) if a.dtype in STORAGE.values() else a
                for k, a in enumerate(self.args)]

    def central(self, f: Callable[[list[np.ndarray]], np.ndarray],
                direction: dict[int, np.ndarray]) -> np.ndarray:
        """The derivative of `f` (of the f64 arguments) along `direction`."""
        wide = {k: d.astype(np.float64) for k, d in direction.items()}
        up = f(self.wide_args({k: STEP * d for k, d in wide.items()}))
        down = f(self.wide_args({k: -STEP * d for k, d in wide.items()}))
        return (np.asarray(up, np.float64) - np.asarray(down, np.float64)) / (2 * STEP)

    def gradients_by_differences(self) -> list[np.ndarray]:
        grads = []
        for k in self.loss.wrt:
            shape = self.args[k].shape
            units = np.eye(int(np.prod(shape))).reshape(-1, *shape)
            grads.append(np.array([self.central(lambda a: self.wide(*a), {k: unit})
                                   for unit in units]).reshape(shape))
        return grads

    def assert_near(self, got: np.ndarray, want: np.ndarray) -> None:
        got = np.asarray(got).astype(np.float64)
        scale = np.max(np.abs(want), initial=1e-3)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE[self.dtype] * scale)


def as_tuple(value: object) -> tuple:
    return value if isinstance(value, tuple) else (value,)


@pytest.fixture(scope="module", params=[(n, d) for n in LOSSES for d in STORAGE],
                ids=lambda p: f"{p[0]}-{p[1]}")
def compiled(request: pytest.FixtureRequest) -> Compiled:
    return Compiled(*request.param)


def test_reverse_mode(compiled: Compiled) -> None:
    wrt = list(compiled.loss.wrt)
    with np.errstate(all="ignore"):
        native = as_tuple(compiled.native.grad(wrt)(*compiled.args))
        interpreted = as_tuple(compiled.interpreted.grad(wrt)(*compiled.args))
    for k, (g, i) in enumerate(zip(native, interpreted, strict=True)):
        assert g.dtype == STORAGE[compiled.dtype]
        assert_close_in_ulps(g, i, 1, k)
    for g, want in zip(native, compiled.gradients_by_differences(), strict=True):
        compiled.assert_near(g, want)


def test_forward_mode(compiled: Compiled) -> None:
    wrt = list(compiled.loss.wrt)
    tangents = tuple(compiled.directions)
    with np.errstate(all="ignore"):
        value, tangent = compiled.native.jvp(wrt)(*compiled.args, tangents)
        value_i, tangent_i = compiled.interpreted.jvp(wrt)(*compiled.args, tangents)
    assert_close_in_ulps(value, value_i, 1, "value")
    assert_close_in_ulps(tangent, tangent_i, 1, "tangent")
    direction = dict(zip(wrt, compiled.directions, strict=True))
    compiled.assert_near(tangent, compiled.central(lambda a: compiled.wide(*a), direction))


def test_second_order(compiled: Compiled) -> None:
    wrt = list(compiled.loss.wrt)
    vectors = tuple(compiled.directions)
    with np.errstate(all="ignore"):
        native = as_tuple(compiled.native.hvp(wrt)(*compiled.args, vectors))
        interpreted = as_tuple(compiled.interpreted.hvp(wrt)(*compiled.args, vectors))
    for k, (h, i) in enumerate(zip(native, interpreted, strict=True)):
        assert_close_in_ulps(h, i, 1, k)
    wide_grad = compiled.wide.grad(wrt)
    direction = dict(zip(wrt, compiled.directions, strict=True))
    for k, h in enumerate(native):
        want = compiled.central(lambda a, k=k: as_tuple(wide_grad(*a))[k], direction)
        compiled.assert_near(h, want)


def test_torch_autograd_agrees(compiled: Compiled) -> None:
    wrt = list(compiled.loss.wrt)
    tensors = [torch.from_numpy(a.astype(np.float32)).to(TORCH[compiled.dtype])
               .requires_grad_(k in wrt) if a.dtype == STORAGE[compiled.dtype]
               else torch.from_numpy(a) for k, a in enumerate(compiled.args)]
    grads = torch.autograd.grad(compiled.loss.torch(*tensors), [tensors[k] for k in wrt])
    native = as_tuple(compiled.native.grad(wrt)(*compiled.args))
    for g, t in zip(native, grads, strict=True):
        compiled.assert_near(g, t.float().numpy().astype(np.float64))
