"""Reverie: a small tensor language whose kernels and gradients compile to native code.

    import reverie as rv
    m = rv.compile("fn f(x: f64[N]) -> f64 { return sum(x * x); }")
    m.f(np.arange(3.0))          # 5.0
"""

from reverie.dsl.diagnostics import CompileError, Diagnostic, ParseError, TypeCheckError
from reverie.runtime.autograd import backward, grad
from reverie.runtime.call import ArgumentTypeError, ArgumentValueError, ShapeMismatchError
from reverie.runtime.gradcheck import gradcheck, gradgradcheck
from reverie.runtime.tensor import Tensor, tensor

from .module import Kernel, Module, compile, load

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
    "TypeCheckError",
    "backward",
    "compile",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "load",
    "tensor",
]
__version__ = "0.1.0"

INTEROP_MODULES = {"torch": "reverie.interop_torch", "jax": "reverie.interop_jax"}


def __getattr__(name: str) -> object:
    """`rv.torch` and `rv.jax` (SPEC §3.5), imported on first use so that `import reverie`
    never imports torch or jax."""
    if name in INTEROP_MODULES:
        import importlib

        module = importlib.import_module(INTEROP_MODULES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'reverie' has no attribute '{name}'")
