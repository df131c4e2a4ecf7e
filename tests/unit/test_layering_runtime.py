"""Layering: each layer imports only the layers below it (docs/pipeline.md).

    dsl, compiler   <   runtime   <   public API (reverie/*.py: kernel, module, transforms, ...)

Every file of `runtime/` is parsed (not imported) and each import in it is resolved, at any
depth — inside functions, under `if TYPE_CHECKING:`, relative (`from .. import kernel`) or
through `importlib.import_module("...")` with a literal name. The run time may import the
front end, the compiler and itself, never the public API (what it needs from there is the
`CompiledKernel` protocol and the compiler handed to it: `runtime/native/kernel_protocol.py`); the
front end and the compiler import neither the run time nor the public API.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
import reverie.compiler
import reverie.dsl
import reverie.runtime
from reverie.runtime.native import kernel_protocol
from reverie.runtime.native.kernel_protocol import CompiledKernel
from reverie.runtime.native.lru import LruCache
from reverie.runtime.tensors import operator_kernels as ops_kernels

LOWER_LAYERS = {"runtime": ("reverie.compiler", "reverie.dsl", "reverie.runtime"),
                "compiler": ("reverie.compiler", "reverie.dsl"),
                "dsl": ("reverie.compiler", "reverie.dsl")}
# The ladder (compiler/pipeline.py) is the one compiler file whose last two stages,
# llvm-opt and jit, are the run time's JIT: it names them (imported on first use) so that
# every stage from source to native code is in one table. Nothing else may do so.
LADDER_IMPORTS = ("reverie.runtime.native.jit", "reverie.runtime.native.mlir_backend")
ROOTS = {"runtime": reverie.runtime, "compiler": reverie.compiler, "dsl": reverie.dsl}
DYNAMIC_IMPORTS = {"import_module", "__import__"}


def imported_names(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import anywhere in `tree`, whose file lies in
    `package`; `from reverie import x` yields `reverie.x` (a submodule or a name of
    reverie/__init__.py, both of which count as importing that)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in DYNAMIC_IMPORTS):
            yield node.lineno, node.args[0].value


def forbidden_imports(source: str, package: str, allowed: tuple[str, ...]) -> list[str]:
    """`line: module` for each import of a `reverie` module outside `allowed`."""
    found = []
    for line, name in imported_names(ast.parse(source), package):
        is_reverie = name == "reverie" or name.startswith("reverie.")
        if is_reverie and not any(name == a or name.startswith(a + ".") for a in allowed):
            found.append(f"{line}: {name}")
    return found


def layer_files(layer: str) -> list[tuple[Path, str]]:
    """Every Python file of `layer` with the package it belongs to."""
    root = Path(ROOTS[layer].__file__).parent
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        package = ".".join([ROOTS[layer].__name__, *parts[:-1]])
        files.append((path, package))
    return files


@pytest.mark.parametrize("layer", sorted(LOWER_LAYERS))
def test_layer_imports_only_the_layers_below_it(layer: str) -> None:
    files = layer_files(layer)
    assert len(files) >= 5, f"{layer}: expected its files, found {files}"
    offences = {}
    for path, package in files:
        allowed = LOWER_LAYERS[layer]
        if layer == "compiler" and path.name == "pipeline.py":
            allowed += LADDER_IMPORTS
        found = forbidden_imports(path.read_text(encoding="utf-8"), package, allowed)
        if found:
            offences[path.name] = found
    assert not offences, f"{layer} imports layers above it: {offences}"


@pytest.mark.parametrize("source", [
    "from reverie.kernel import Kernel",
    "import reverie.module",
    "import reverie",
    "from reverie import Kernel",
    "from reverie import kernel_transforms as transforms",
    "from .. import module",
    "from ..kernel import Kernel",
    "def f():\n    from reverie.kernel_transforms import batched_vjp\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reverie.kernel import Kernel\n",
    "import importlib\nimportlib.import_module('reverie.module')\n",
])
def test_the_check_sees_every_kind_of_import_of_the_public_api(source: str) -> None:
    assert forbidden_imports(source, "reverie.runtime", LOWER_LAYERS["runtime"])


@pytest.mark.parametrize("source", [
    "from reverie.compiler.ir.core import Function",
    "from . import ops_kernels",
    "from .tape import Node",
    "from reverie import runtime",
    "from ..compiler.ir import types",
    "import numpy as np",
])
def test_the_check_allows_the_layers_below(source: str) -> None:
    assert not forbidden_imports(source, "reverie.runtime", LOWER_LAYERS["runtime"])


def test_the_compiler_may_not_import_the_run_time() -> None:
    assert forbidden_imports("from reverie.runtime.native.call import bind_arguments",
                             "reverie.compiler.codegen", LOWER_LAYERS["compiler"])
    assert forbidden_imports("from ...runtime import jit", "reverie.compiler.codegen",
                             LOWER_LAYERS["compiler"])


def test_kernels_and_derived_kernels_offer_what_the_run_time_needs() -> None:
    module = rv.compile("fn f(x: f64[N], w: f64) -> f64 { return sum(x * w); }")
    for kernel in (module.f, module.f.grad("x"), module.f.vjp(), module.f.jacobian("x")):
        assert isinstance(kernel, CompiledKernel), kernel
    x = rv.tensor(np.arange(3.0), requires_grad=True)
    assert isinstance((x * 2.0).grad_fn.kernel, CompiledKernel)


def test_tensor_operators_compile_through_the_compiler_handed_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handed_in = kernel_protocol._compiler
    calls = []

    def spy(source: str, function: str, module_name: str, backend: str) -> CompiledKernel:
        calls.append((function, module_name, backend))
        return handed_in(source, function, module_name, backend)

    monkeypatch.setattr(ops_kernels, "_KERNELS", LruCache(4))  # no kernel compiled yet
    monkeypatch.setattr(kernel_protocol, "_compiler", spy)
    kernel = ops_kernels.neg_kernel.__wrapped__(np.zeros(3))  # past the operand memo
    np.testing.assert_array_equal(kernel(np.arange(3.0)), -np.arange(3.0))
    assert calls == [("neg_op", "<tensor op neg_op>", ops_kernels.BACKEND)]
    monkeypatch.setattr(ops_kernels, "_KERNELS", LruCache(4))
    monkeypatch.setattr(kernel_protocol, "_compiler", None)
    with pytest.raises(RuntimeError, match="use_compiler"):
        ops_kernels.neg_kernel.__wrapped__(np.zeros(3))
