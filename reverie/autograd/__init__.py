"""`rv.autograd`: torch.autograd's namespace over Reverie's tape (docs/api.md §4).

    rv.autograd.grad(y, x)                      # as rv.grad
    class Exp(rv.autograd.Function): ...        # custom forward and backward
    with rv.autograd.detect_anomaly(): ...      # NaN in backward names its forward line
    rv.autograd.functional.hessian(f, x)        # Jacobians, Hessians, VJPs, JVPs

Each name is imported from its home module on first use (PEP 562), as in `reverie`. A
torch.autograd name that Reverie does not build (`NOT_BUILT`) raises an AttributeError that
names it and says what to use instead, so `hasattr(rv.autograd, name)` is False, as for any
missing attribute. docs/api.md section 4 tabulates every torch.autograd name and its status.
"""

from __future__ import annotations

import importlib

EXPORTS = {
    "reverie.runtime.tensors.autograd_api": ("backward", "grad"),
    "reverie.runtime.tensors.grad_mode": ("enable_grad", "inference_mode", "is_grad_enabled",
                                  "is_inference_mode_enabled", "no_grad", "set_grad_enabled"),
    "reverie.runtime.tensors.custom_function": ("Function", "FunctionCtx", "once_differentiable"),
    "reverie.runtime.tensors.anomaly": ("detect_anomaly", "is_anomaly_check_nan_enabled",
                                "is_anomaly_enabled", "set_detect_anomaly"),
    "reverie.runtime.tensors.gradcheck": ("gradcheck", "gradgradcheck"),
}
HOME_MODULES = {name: module for module, names in EXPORTS.items() for name in names}
SUBMODULES = {"functional": "reverie.autograd.functional"}

_PROFILER = ("Reverie has no autograd profiler; time calls with time.perf_counter (as "
             "benchmarks/ does) and read the compiled code with module.ir()")
_THREADS = "Reverie's backward runs every node in the calling thread"
_VARIABLE = "torch deprecated it; use rv.tensor(data, requires_grad=True)"
NOT_BUILT = {  # torch.autograd's names that Reverie lacks, and what to use instead
    "DeviceType": _PROFILER,
    "NestedIOFunction": "subclass rv.autograd.Function",
    "ProfilerActivity": _PROFILER,
    "ProfilerConfig": _PROFILER,
    "ProfilerEvent": _PROFILER,
    "ProfilerState": _PROFILER,
    "SavedTensor": "Reverie's nodes do not expose what they saved; in a custom Function, "
                   "ctx.saved_tensors",
    "Variable": _VARIABLE,
    "anomaly_mode": "its names are rv.autograd.detect_anomaly and "
                    "rv.autograd.set_detect_anomaly",
    "enforce_grad_layout_policy": "Reverie's gradients are always C-contiguous NumPy arrays",
    "forward_ad": "for forward mode use rv.autograd.functional.jvp on Python functions, or "
                  "Kernel.jvp on compiled kernels",
    "function": "its Function, FunctionCtx and once_differentiable are rv.autograd.Function, "
                "rv.autograd.FunctionCtx and rv.autograd.once_differentiable; "
                "InplaceFunction, NestedIOFunction, BackwardCFunction and FunctionMeta are "
                "not built",
    "grad_mode": "its names are rv.no_grad, rv.enable_grad, rv.set_grad_enabled and "
                 "rv.inference_mode (also in rv.autograd)",
    "graph": "a tensor's grad_fn offers name(), next_functions, metadata, register_hook and "
             "register_prehook; Node, GradientEdge and the saved-tensor hooks are not built, "
             "increment_version is reverie.runtime.tensors.inplace.increment_version",
    "is_multithreading_enabled": _THREADS,
    "is_view_replay_enabled": "Reverie does not replay views",
    "kineto_available": _PROFILER,
    "profiler": _PROFILER,
    "profiler_legacy": _PROFILER,
    "profiler_util": _PROFILER,
    "set_multithreading_enabled": _THREADS,
    "variable": _VARIABLE,
}

__all__ = sorted([*HOME_MODULES, *SUBMODULES])


def __getattr__(name: str) -> object:
    """A public name, imported from its home module on first use."""
    if name in HOME_MODULES:
        value = getattr(importlib.import_module(HOME_MODULES[name]), name)
    elif name in SUBMODULES:
        value = importlib.import_module(SUBMODULES[name])
    elif name in NOT_BUILT:
        raise AttributeError(f"torch.autograd.{name} is not built in Reverie: "
                             f"{NOT_BUILT[name]} (docs/api.md, section 4)", name=name)
    else:
        raise AttributeError(f"module 'reverie.autograd' has no attribute '{name}'")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones included before their first use."""
    return sorted({*globals(), *__all__})
