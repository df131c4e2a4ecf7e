"""What the run time needs of a compiled kernel, and the one function the public layer hands it.

The run time (tensors, the tape, autograd, gradcheck) lies below the public API
(`reverie.kernel`, `reverie.module`, `reverie.kernel_transforms`, `reverie/__init__.py`) and never
imports it, not even for type hints (tests/architecture/test_layering.py checks). What it needs
from above is written down here instead:

- `CompiledKernel`: what a kernel must offer the run time — calling it, its IR per dtype,
  running one specialisation, its compiled VJP (one cotangent, or a batch of them), and a
  cache for what the tape derives from it. `reverie.kernel.Kernel` is one.
- `compile_function`: how Reverie source becomes such a kernel. The Tensor operators
  (`operator_kernels.py`) generate small Reverie functions and need them compiled; the public
  layer hands the compiler in once, with `use_compiler`. `reverie/__init__.py` does so, and
  Python runs it before any module under `reverie` is imported, so it is always in place.

    use_compiler(_compile_source)     # reverie/__init__.py: _compile_source(source, function,
                                      #     module_name, backend) -> a CompiledKernel
    kernel = compile_function("fn neg_op(a: f64) -> f64 { return -a; }", "neg_op",
                              "<tensor op neg_op>", "native")

This module imports only the standard library, so `import reverie` stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:

    from reverie.compiler.ir.core import Function
    from reverie.runtime.native.lru import LruCache


@runtime_checkable
class CompiledKernel(Protocol):
    """A compiled function as the run time uses it (`reverie.kernel.Kernel` is one)."""

    name: str
    param_names: list[str]
    declared_dtypes: list[str]  # one per parameter: "f32", "f64", "float", "i32", ...
    autograd_cache: LruCache[object, object]  # what the tape derives from the kernel
    # runs a call on arrays (one per parameter, ungrouped, never recorded) by the fastest
    # path, as `run_arrays` does, but called with the arrays themselves: `array_call(*arrays)`
    array_call: Callable[..., object]

    def __call__(self, *args: object) -> object:
        """Run on arrays (NumPy results), or record the call when a Tensor requires grad."""

    def float_dtype_for(self, args: Sequence[object]) -> str:
        """What `float` means for a call with `args` ("f32" or "f64")."""

    def ir_for(self, float_dtype: str = "f32") -> Function:
        """The typed IR with `float` meaning `float_dtype`."""

    def specialisation_for(self, args: Sequence[object]) -> Function:
        """The IR matching the arguments of one call."""

    def execute(self, fn: Function, args: Sequence[object]) -> object:
        """Run specialisation `fn` on `args` (arrays, never recorded)."""

    def run_arrays(self, args: Sequence[object]) -> object:
        """Run on `args` (arrays, never recorded; one per parameter) by the fastest path:
        the native entry of the matching specialisation when it has one."""

    def vjp(self, wrt: Sequence[int]) -> CompiledKernel:
        """The kernel `(*args, cotangent)` of the vector-Jacobian product for parameters
        `wrt` (the same kernel each time it is asked)."""

    def batched_vjp(self, wrt: Sequence[int], args: Sequence[object],
                    batched_cotangents: Sequence[object | None], recorded: bool = False
                    ) -> tuple[object, ...]:
        """All VJPs at `args` for cotangents with a leading batch axis (None: no cotangent
        for that result), in one compiled call; one `(B, *param.shape)` array per `wrt`
        (a Tensor recording the call, when `recorded` and a Tensor argument requires
        grad: `create_graph=True`)."""


FunctionCompiler = Callable[[str, str, str, str], CompiledKernel]
_compiler: FunctionCompiler | None = None


def use_compiler(compiler: FunctionCompiler) -> None:
    """Hand the run time its compiler: `compiler(source, function, module_name, backend)`
    compiles Reverie `source` as a module named `module_name` and returns its `function`."""
    global _compiler
    _compiler = compiler


def compile_function(source: str, function: str, module_name: str,
                     backend: str) -> CompiledKernel:
    """Function `function` of Reverie `source`, compiled by the compiler `use_compiler`
    was given."""
    if _compiler is None:
        raise RuntimeError("no Reverie compiler was handed to the run time; "
                           "reverie/__init__.py does it with use_compiler(...)")
    return _compiler(source, function, module_name, backend)
