"""Train a model compiled by Reverie beside its eager twin and compare them at every step.

A `Case` is one canonical model with the training pattern its authors use: how to build
it, the batch of each step, the body of the training loop (`train_step`: forward, loss,
backward, optimiser step, as written in the original) and of the evaluation loop. The
harness builds the model once, deep-copies it into an eager twin, and runs both loops from
the same initial state, the same batches and the same random stream (the global seed is
reset before each step on each side, so dropout masks, `randn_like` noise and the like are
the same draws). After every step it compares

- every named result the step returns (outputs, losses, second-order results such as a
  gradient penalty's input gradient or a Hessian-vector product),
- every parameter's `.grad`, every parameter after the optimiser's step, every buffer
  (BatchNorm's running statistics and `num_batches_tracked`),

then puts both models in eval mode and compares the evaluation results and the state again.
Values must agree to `TOLERANCES[dtype]` and have torch's dtypes exactly (a compiled model
that computes in f32 where eager autocast gives bf16 fails).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._dynamo.utils import counters

Results = dict[str, Any]
Batch = dict[str, torch.Tensor]

STEPS = 3  # training steps: the first call compiles, the later ones reuse it
EVAL_STEPS = 2

ROUTES = ("fullgraph", "fallback")
DTYPES = {"f32": torch.float32, "f64": torch.float64}
TOLERANCES = {torch.float32: {"rtol": 1e-4, "atol": 1e-5},
              torch.float64: {"rtol": 1e-10, "atol": 1e-12}}


@dataclass
class Loop:
    """One side of the comparison: the model, the callables the loop calls (`nets[""]` is
    the whole model, other keys name its compiled submodules), its optimisers, and the
    state a training loop carries between steps (an RNN's hidden state)."""

    model: nn.Module
    nets: dict[str, Callable[..., Any]]
    optimizers: list[torch.optim.Optimizer]
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def net(self) -> Callable[..., Any]:
        return self.nets[""]


@dataclass(frozen=True)
class Case:
    """A canonical model and its training pattern.

    `parts` names the submodules the user compiles (`""`: the model itself); `batch(step,
    dtype)` gives the data of a step; `train_step(loop, batch)` runs the loop body and
    returns its named results; `evaluate(loop, batch)` runs an evaluation under no_grad.
    `rnn`: the model holds an LSTM/GRU, compiled through the route Dynamo offers for them
    (`torch._dynamo.config.allow_rnn`). `tolerances`: per dtype, where the pattern computes
    in lower precision (autocast)."""

    name: str
    model: Callable[[], nn.Module]
    batch: Callable[[int, torch.dtype], Batch]
    train_step: Callable[[Loop, Batch], Results]
    evaluate: Callable[[Loop, Batch], Results]
    optimizers: Callable[[nn.Module], list[torch.optim.Optimizer]]
    parts: tuple[str, ...] = ("",)
    rnn: bool = False
    tolerances: dict[torch.dtype, dict[str, float]] = field(default_factory=dict)


def compile_module(module: nn.Module, route: str) -> Callable[..., Any]:
    """`module` as a user compiles it with Reverie: whole graphs only, or with the fallback
    (unmapped nodes run by eager PyTorch, Dynamo's own graph breaks allowed)."""
    if route == "fullgraph":
        return torch.compile(module, backend="reverie", fullgraph=True)
    if route == "fallback":
        return torch.compile(module, backend="reverie", options={"fallback": True})
    if route == "eager":
        return module
    raise ValueError(f"unknown route {route!r}")


Compile = Callable[[nn.Module, str], Callable[..., Any]]


def make_loop(case: Case, model: nn.Module, route: str,
              compile_with: Compile = compile_module) -> Loop:
    nets = {part: compile_with(model.get_submodule(part), route) for part in case.parts}
    return Loop(model, nets, case.optimizers(model))


@contextmanager
def dynamo_for(case: Case) -> Iterator[None]:
    """A fresh Dynamo (no graphs or counters of earlier cases), with RNNs traced for the
    RNN models (the route Dynamo offers for them)."""
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(allow_rnn=case.rnn):
        yield
    torch._dynamo.reset()


def train_side_by_side(case: Case, dtype: torch.dtype, route: str, steps: int = STEPS,
                       compile_with: Compile = compile_module,
                       eval_steps: int = EVAL_STEPS) -> None:
    """Train `case` compiled by `route` and eagerly from one initial state; compare every
    step, then evaluation; raises AssertionError at the first difference, or if Dynamo
    gave the backend no graph (the comparison would be eager against eager)."""
    tolerance = case.tolerances.get(dtype, TOLERANCES[dtype])
    torch.manual_seed(0)
    model = case.model().to(dtype)
    twin = copy.deepcopy(model)
    with dynamo_for(case):
        compiled = make_loop(case, model, route, compile_with)
        eager = make_loop(case, twin, "eager")
        for step in range(steps):
            got, want = (_seeded(case.train_step, loop, case.batch(step, dtype), 1000 + step)
                         for loop in (compiled, eager))
            where = f"{case.name} {dtype} {route}, training step {step}"
            assert_same_results(got, want, tolerance, where)
            assert_same_state(model, twin, tolerance, where)
        model.eval(), twin.eval()
        for step in range(eval_steps):
            with torch.no_grad():
                got, want = (_seeded(case.evaluate, loop, case.batch(steps + step, dtype),
                                     2000 + step) for loop in (compiled, eager))
            where = f"{case.name} {dtype} {route}, eval step {step}"
            assert_same_results(got, want, tolerance, where)
            assert_same_state(model, twin, tolerance, where)
        if route in ROUTES:
            assert counters["stats"]["unique_graphs"] > 0, f"{case.name}: no graph compiled"


def _seeded(run: Callable[[Loop, Batch], Results], loop: Loop, batch: Batch,
            seed: int) -> Results:
    torch.manual_seed(seed)
    return run(loop, batch)


def assert_same_results(got: Results, want: Results, tolerance: dict[str, float],
                        where: str) -> None:
    """The named results of a step agree (tensors, or tuples of them: an RNN's state)."""
    assert got.keys() == want.keys(), where
    for name in want:
        torch.testing.assert_close(_detached(got[name]), _detached(want[name]), **tolerance,
                                   msg=lambda text, name=name: f"{where}, {name}: {text}")


def assert_same_state(model: nn.Module, twin: nn.Module, tolerance: dict[str, float],
                      where: str) -> None:
    """Every parameter, its gradient, and every buffer agree."""
    params, twin_params = dict(model.named_parameters()), dict(twin.named_parameters())
    assert params.keys() == twin_params.keys(), where
    for name, param in twin_params.items():
        _close(params[name], param, tolerance, f"{where}, parameter {name}")
        _close(params[name].grad, param.grad, tolerance, f"{where}, gradient of {name}")
    buffers, twin_buffers = dict(model.named_buffers()), dict(twin.named_buffers())
    assert buffers.keys() == twin_buffers.keys(), where
    for name, buffer in twin_buffers.items():
        _close(buffers[name], buffer, tolerance, f"{where}, buffer {name}")


def _close(got: Any, want: Any, tolerance: dict[str, float], where: str) -> None:
    torch.testing.assert_close(_detached(got), _detached(want), **tolerance,
                               msg=lambda text: f"{where}: {text}")


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple | list):
        return type(value)(_detached(v) for v in value)
    return value
