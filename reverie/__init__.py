"""Reverie: a small tensor language whose kernels and gradients compile to native code.

    import reverie as rv
    m = rv.compile("fn f(x: f64[N]) -> f64 { return sum(x * x); }")
    m.f(np.arange(3.0))          # 5.0

`import reverie` imports none of its modules: each public name is imported from its home
module on first use (PEP 562), so a program pays for the front end (Lark), the compiler
and the run time only when it uses them, and never for torch or jax unless it asks.

The run time (`reverie.runtime`) lies below the public modules and never imports them;
this file hands it the one thing it needs from above, the compiler behind the Tensor
operators (`_compile_source`, given to `runtime/native/kernel_protocol.py`), before any module
under `reverie` is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from reverie.runtime.native import kernel_protocol as _kernel_protocol
from reverie.runtime.native.version import VERSION as __version__  # noqa: F401 (public)

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from reverie.dsl.diagnostics import CompileError, Diagnostic, ParseError, TypeCheckError
    from reverie.kernel import Kernel
    from reverie.module import Module, compile, load
    from reverie.runtime.native.call import (
        ArgumentTypeError,
        ArgumentValueError,
        ShapeMismatchError,
    )
    from reverie.runtime.tensors.anomaly import is_anomaly_check_nan_enabled, is_anomaly_enabled
    from reverie.runtime.tensors.autograd_api import backward, grad
    from reverie.runtime.tensors.grad_mode import (
        enable_grad,
        inference_mode,
        is_grad_enabled,
        is_inference_mode_enabled,
        no_grad,
        set_grad_enabled,
    )
    from reverie.runtime.tensors.gradcheck import gradcheck, gradgradcheck
    from reverie.runtime.tensors.tensor import Tensor, tensor
    from reverie.tracing import TraceError, trace

EXPORTS = {
    "reverie.dsl.diagnostics": ("CompileError", "Diagnostic", "ParseError", "TypeCheckError"),
    "reverie.kernel": ("Kernel",),
    "reverie.module": ("Module", "compile", "load"),
    "reverie.runtime.tensors.autograd_api": ("backward", "grad"),
    "reverie.runtime.tensors.anomaly": ("is_anomaly_check_nan_enabled", "is_anomaly_enabled"),
    "reverie.runtime.native.call": (
        "ArgumentTypeError", "ArgumentValueError", "ShapeMismatchError"),
    "reverie.runtime.tensors.gradcheck": ("gradcheck", "gradgradcheck"),
    "reverie.runtime.tensors.tensor": ("Tensor", "tensor"),
    "reverie.runtime.tensors.grad_mode": ("enable_grad", "inference_mode", "is_grad_enabled",
                                  "is_inference_mode_enabled", "no_grad", "set_grad_enabled"),
    "reverie.tracing": ("TraceError", "trace"),
}
HOME_MODULES = {name: module for module, names in EXPORTS.items() for name in names}
SUBMODULES = {"torch": "reverie.interop_torch", "jax": "reverie.interop_jax",
                   "fx": "reverie.fx", "dask": "reverie.dask", "autograd": "reverie.autograd",
              "amp": "reverie.amp"}
# `rv.exp`, `rv.tanh`, ...: the elementwise built-ins on Tensors, named by the op table
# (runtime/tensors/tensor_ops.py FUNCTIONS), looked up there for any other public-looking name
ELEMENTWISE_FUNCTIONS_MODULE = "reverie.runtime.tensors.tensor_ops"

# what `from reverie import *` binds: every name of EXPORTS (a test checks that they agree);
# not the Tensor functions, whose `abs`, `max`, `min`, `pow` would shadow Python's built-ins
__all__ = [
    "ArgumentTypeError",
    "ArgumentValueError",
    "CompileError",
    "Diagnostic",
    "Kernel",
    "Module",
    "ParseError",
    "ShapeMismatchError",
    "Tensor",
    "TraceError",
    "TypeCheckError",
    "backward",
    "compile",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "load",
    "no_grad",
    "set_grad_enabled",
    "tensor",
    "trace",
]


def _compile_source(source: str, function: str, module_name: str, backend: str) -> Kernel:
    """Function `function` of Reverie `source`, compiled as module `module_name` on
    `backend`: how the run time compiles the kernels behind Tensor operators (it imports
    the compiler on its first call)."""
    from reverie.module import Module

    return Module(source, name=module_name, backend=backend)[function]


_kernel_protocol.use_compiler(_compile_source)


def __getattr__(name: str) -> object:
    """A public name, imported from its home module on first use; `rv.torch` and `rv.jax`
    (docs/api.md §6–7), `rv.fx` (§3.7) and `rv.dask` (§3.6) likewise, so that `import reverie`
    never imports torch, jax or dask; and the elementwise built-ins on Tensors (`rv.exp`,
    docs/api.md §4)."""
    if name in HOME_MODULES:
        value = getattr(importlib.import_module(HOME_MODULES[name]), name)
    elif name in SUBMODULES:
        value = importlib.import_module(SUBMODULES[name])
    elif not name.startswith("_") and name in _elementwise_functions():
        value = _elementwise_functions()[name]
    else:
        raise AttributeError(f"module 'reverie' has no attribute '{name}'")
    globals()[name] = value
    return value


def _elementwise_functions() -> dict[str, object]:
    """`rv.exp`-style functions by name (imports the run time's Tensor operations)."""
    return importlib.import_module(ELEMENTWISE_FUNCTIONS_MODULE).FUNCTIONS


def __dir__() -> list[str]:
    """The public names (what tab completion offers), before their first use too: those
    of `__all__`, the submodules `rv.torch`-style, the Tensor functions `rv.exp`-style and
    `__version__`; not the machinery of this file (`importlib`, `EXPORTS`, ...)."""
    return sorted({*__all__, *SUBMODULES, *_elementwise_functions(), "__version__"})
