"""The gate of a warm start: every handle by which the run time and the public API reach
the compiler, each imported on first use.

A warm start (a new process whose disk cache holds the module: `runtime/native/fastcall.py`)
reaches its first value and gradient without importing the front end, the IR, the passes,
the ladder, the loop IR, the code generators or LLVM (tests/runtime/test_startup.py). The
modules on its path (`reverie/module.py`, `reverie/kernel.py`,
`reverie/kernel_transforms.py`, and the run time's helpers, pool, call boundary and
artifact cache) reach the compiler only through the handles below; behind them, the
compiler's modules import one another at the top. The other gate is `reverie/__init__.py`,
whose public names are imported on first use, so that `import reverie` stays light.

    from reverie.runtime.native import compiler_gate as compiler
    compiler.climb(fn, compiler.Request(transform="reverse"), start="reverse", stop="reverse")

The native back end's entry points (`native_kernel.py`, `mlir_backend.py`,
`compile_queue.py`) import the compiler at the top and the helpers below them import this
gate, so the modules that build kernels import those entry points where they compile (a
handle on them here would close an import cycle).
"""

from __future__ import annotations

from reverie.compiler.lazy import lazy

# The ladder (compiler/pipeline.py): what a module, a kernel and a transform build.
Request = lazy("reverie.compiler.pipeline:Request")
climb = lazy("reverie.compiler.pipeline:climb")
compile_source = lazy("reverie.compiler.pipeline:compile_source")
transform = lazy("reverie.compiler.pipeline:transform")
module_lowering = lazy("reverie.compiler.pipeline:module_lowering")
back_end_start = lazy("reverie.compiler.pipeline:back_end_start")
ladder_stage = lazy("reverie.compiler.pipeline:stage")
ir_view = lazy("reverie.compiler.pipeline:ir_view")

# The IR and its printers (`module.ir`, the interp backend, a kernel's cached IR).
tensor_function = lazy("reverie.compiler.ir.core:Function")  # (`.resolve()`: the class)
one_float_element = lazy("reverie.compiler.ir.types:one_float_element")  # what grad takes
evaluate_shape = lazy("reverie.compiler.ir.dims:evaluate_shape")
num_elements = lazy("reverie.compiler.ir.dims:num_elements")
python_expr = lazy("reverie.compiler.ir.dims:python_expr")
interpret = lazy("reverie.compiler.ir.tensor_interpreter:interpret")
format_function = lazy("reverie.compiler.ir.tensor_printer:format_function")
format_dot = lazy("reverie.compiler.ir.dot:format_dot")
format_ast = lazy("reverie.dsl.source_printer:format_ast")
format_ast_function = lazy("reverie.dsl.source_printer:format_function")
did_you_mean = lazy("reverie.dsl.diagnostics:did_you_mean")
capture = lazy("reverie.compiler.print_ir:capture")
observing = lazy("reverie.compiler.print_ir:observing")

# The generators of the run-time modules, for a process whose disk cache lacks one.
gemm_helper_module = lazy("reverie.compiler.runtime_library.gemm:helper_module")
bf16_gemm_helper_module = lazy("reverie.compiler.runtime_library.gemm_bf16:helper_module")
sort_helper_module = lazy("reverie.compiler.runtime_library.sort:helper_module")
linalg_helper_module = lazy("reverie.compiler.runtime_library.lapack:helper_module")
pool_runtime_module = lazy("reverie.compiler.runtime_library.pool_runtime:runtime_module")
call_entry_module = lazy("reverie.compiler.call_boundary.fastcall_entry:entry_module")
