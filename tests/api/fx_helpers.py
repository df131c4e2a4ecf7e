"""What the tests of `rv.fx`'s row families share: the dtypes, a fresh Dynamo per test,
the tolerance of each dtype when comparing with eager PyTorch, and the comparison itself
(value, gradient and gradient of the gradient, compiled whole against eager)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = [torch.float32, torch.float64]


def normal(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """Standard normal draws of `shape` in `dtype` (of the seed `fresh_dynamo` sets)."""
    return torch.randn(*shape, dtype=dtype)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    """Each test compiles afresh (Dynamo stops recompiling one function after 8 graphs)."""
    torch._dynamo.reset()
    torch.manual_seed(0)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """`torch.testing.assert_close` tolerances against eager for `dtype`."""
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else \
        {"rtol": 1e-9, "atol": 1e-11}


def compiled_as_modules(model: torch.nn.Module):
    """`model` traced by `torch.fx.symbolic_trace` (its modules kept as `call_module`
    nodes) and compiled by rv.fx, once per mode (train, eval)."""
    import reverie as rv

    plans = {}

    def run(x):
        if model.training not in plans:
            plans[model.training] = rv.fx.compile(torch.fx.symbolic_trace(model), [x])
        return plans[model.training](x)

    return run


def derivatives(fn, inputs, parameters=(), second=True, frozen=()):
    """Value, first derivatives of Σ out² and (with `second`) the derivatives of Σ of
    those, with respect to the float inputs (save those numbered in `frozen`) and
    `parameters`."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point() and i not in frozen)
              for i, t in enumerate(inputs)]
    wrt = [t for t in inputs if t.requires_grad] + list(parameters)
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    first = torch.autograd.grad(sum((o * o).sum() for o in outs), wrt, create_graph=second)
    if not second:
        return [*outs, *first]
    again = torch.autograd.grad(sum(g.sum() for g in first), wrt, allow_unused=True,
                                materialize_grads=True)
    return [*outs, *first, *again]


def assert_same(fn, inputs, dtype, parameters=(), second=True, frozen=()) -> None:
    """`fn` compiled whole by Reverie equals eager `fn` to every order asked."""
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    got = derivatives(compiled, inputs, parameters, second, frozen)
    with sdpa_kernel(SDPBackend.MATH):  # the CPU's flash attention has no double backward
        want = derivatives(fn, inputs, parameters, second, frozen)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), **tolerance(dtype))


def refused(fn, inputs, name: str) -> None:
    """Compiling `fn` raises an error naming the argument `name`."""
    with pytest.raises(Exception, match=name):
        torch.compile(fn, backend="reverie", fullgraph=True)(*inputs)
