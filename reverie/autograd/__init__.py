"""`rv.autograd`: torch.autograd's namespace over Reverie's tape (SPEC §3.3).

    rv.autograd.grad(y, x)                      # as rv.grad
    class Exp(rv.autograd.Function): ...        # custom forward and backward
    with rv.autograd.detect_anomaly(): ...      # NaN in backward names its forward line
    rv.autograd.functional.hessian(f, x)        # Jacobians, Hessians, VJPs, JVPs

Each name is imported from its home module on first use (PEP 562), as in `reverie`.
"""

from __future__ import annotations

import importlib

EXPORTS = {
    "reverie.runtime.autograd": ("backward", "grad"),
    "reverie.runtime.grad_mode": ("enable_grad", "inference_mode", "is_grad_enabled",
                                  "is_inference_mode_enabled", "no_grad", "set_grad_enabled"),
    "reverie.runtime.custom_function": ("Function", "FunctionCtx", "once_differentiable"),
    "reverie.runtime.anomaly": ("detect_anomaly", "is_anomaly_check_nan_enabled",
                                "is_anomaly_enabled", "set_detect_anomaly"),
    "reverie.runtime.gradcheck": ("gradcheck", "gradgradcheck"),
}
HOME_MODULES = {name: module for module, names in EXPORTS.items() for name in names}
SUBMODULES = {"functional": "reverie.autograd.functional", "graph": "reverie.autograd.graph"}

__all__ = sorted([*HOME_MODULES, *SUBMODULES])


def __getattr__(name: str) -> object:
    """A public name, imported from its home module on first use."""
    if name in HOME_MODULES:
        value = getattr(importlib.import_module(HOME_MODULES[name]), name)
    elif name in SUBMODULES:
        value = importlib.import_module(SUBMODULES[name])
    else:
        raise AttributeError(f"module 'reverie.autograd' has no attribute '{name}'")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones included before their first use."""
    return sorted({*globals(), *__all__})
