"""What the tests of `rv.fx`'s row families share: the dtypes, a fresh Dynamo per test,
and the tolerance of each dtype when comparing with eager PyTorch."""

from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float64]


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
