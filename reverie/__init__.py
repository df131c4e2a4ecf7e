"""Reverie: a small tensor language whose kernels and gradients compile to native code.

    import reverie as rv
    m = rv.compile("fn f(x: f64[N]) -> f64 { return sum(x * x); }")
    m.f(np.arange(3.0))          # 5.0
"""

from reverie.dsl.diagnostics import CompileError, Diagnostic, ParseError, TypeCheckError
from reverie.runtime.call import ArgumentTypeError, ShapeMismatchError

from .module import Kernel, Module, compile, load

__all__ = [
    "ArgumentTypeError",
    "CompileError",
    "Diagnostic",
    "Kernel",
    "Module",
    "ParseError",
    "ShapeMismatchError",
    "TypeCheckError",
    "compile",
    "load",
]
__version__ = "0.1.0"
