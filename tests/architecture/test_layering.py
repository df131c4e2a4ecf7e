"""Layering: each layer imports only itself and the layers below it (CONTRIBUTING.md).

    dsl  <  compiler  <  runtime (native  <  tensors)  <  public API (reverie/*.py)

and inside the compiler, in the order its imports have:

    collector, print_ir, lazy  <  ir  <  loops  <  transforms  <  lower  <  to_loops
        <  backend, runtime_library, call_boundary (code generation)  <  export  <  pipeline

(`lower` ends every specialisation with `transforms.simplify`; the three code-generation
folders call one another, so they are one layer). Every file is parsed, not imported
(`import_graph.py`), and each import in it resolved, at any depth — inside functions,
under `if TYPE_CHECKING:`, relative, or through `importlib.import_module` or `lazy`. The
one exception is the ladder (`compiler/pipeline.py`), whose last stages are the run
time's JIT (`LADDER_IMPORTS`). The run time needs one thing of the public API, the
compiler behind the Tensor operators: `reverie/__init__.py` hands it in
(`runtime/native/kernel_protocol.py`).

Inside `compiler/lower/` no import sits in a function, and the parts of `Lowerer`
(classes combined by inheritance) each use only what they or the parts they extend
define, so they depend downward in fact, not only in their imports; a method defined by
two of them would silently shadow the other.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from import_graph import Import, import_edges, imports_in, module_files

import reverie as rv
from reverie.compiler.lower import Lowerer
from reverie.compiler.lower.base import LowererBase
from reverie.runtime.native import kernel_protocol
from reverie.runtime.native.kernel_protocol import CompiledKernel
from reverie.runtime.native.lru import LruCache
from reverie.runtime.tensors import operator_kernels as ops_kernels

# Bottom first: a module may import its own layer and those before it. A module belongs to
# the layer of the longest prefix that names it.
LAYERS = (
    ("reverie.dsl",),
    ("reverie.compiler", "reverie.compiler.collector", "reverie.compiler.print_ir",
     "reverie.compiler.lazy"),
    ("reverie.compiler.ir",),
    ("reverie.compiler.loops",),
    ("reverie.compiler.transforms",),
    ("reverie.compiler.lower",),
    ("reverie.compiler.to_loops",),
    ("reverie.compiler.backend", "reverie.compiler.runtime_library",
     "reverie.compiler.call_boundary"),
    ("reverie.compiler.export",),
    ("reverie.compiler.pipeline",),
    ("reverie.runtime", "reverie.runtime.native"),
    ("reverie.runtime.tensors",),
    ("reverie",),
)
# The ladder's last two stages, llvm-opt and jit, are the run time's JIT, and the MLIR
# ladder's mlir-to-llvm runs the upstream tools: it imports them so that every stage from
# source to native code is in one table.
LADDER_IMPORTS = {("reverie.compiler.pipeline", "reverie.runtime.native.jit"),
                  ("reverie.compiler.pipeline", "reverie.runtime.native.mlir_to_llvm")}
# Upward imports not yet removed (issue 34), each with the change that removes it; an
# entry whose import is gone must be deleted, so the list only shrinks.
UPWARD_IMPORTS = {
    ("reverie.compiler.loops.ir", "reverie.compiler.to_loops.boundary"):
        "the loop IR names to_loops' boundary type in an annotation: move that type into "
        "the loop IR (loops/ir.py), which both use",
}
LOWER_PACKAGE = Path(__file__).parents[2] / "compiler" / "lower"
LOWER_MODULES = "reverie.compiler.lower"


def layer_of(module: str) -> int:
    """The position in LAYERS of the layer `module` belongs to."""
    matches = [(len(prefix), rank) for rank, prefixes in enumerate(LAYERS)
               for prefix in prefixes if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1]


def upward(edges: list[Import]) -> list[Import]:
    """The imports of `edges` that go to a layer above the importing one."""
    return [edge for edge in edges if layer_of(edge.target) > layer_of(edge.source)
            and (edge.source, edge.target) not in LADDER_IMPORTS]


def planted(source: str, module: str) -> list[Import]:
    """The upward imports of `source` as if it were the text of `module`."""
    return upward(imports_in(source, module, set(module_files())))


@pytest.mark.parametrize("source", [
    "from reverie.kernel import Kernel",
    "import reverie.module",
    "import reverie",
    "from reverie import Kernel",
    "from reverie import kernel_transforms as transforms",
    "from ... import module",
    "from ...kernel import Kernel",
    "def f():\n    from reverie.kernel_transforms import batched_vjp\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reverie.kernel import Kernel\n",
    "import importlib\nimportlib.import_module('reverie.module')\n",
    "from reverie.compiler.lazy import lazy\nlazy('reverie.module:compile')\n",
    "from reverie.runtime.tensors.tensor import Tensor",
])
def test_the_check_sees_every_kind_of_upward_import(source: str) -> None:
    assert planted(source, "reverie.runtime.native.call")


@pytest.mark.parametrize("source, module", [
    ("from reverie.compiler.ir.core import Function", "reverie.runtime.native.call"),
    ("from . import lru", "reverie.runtime.native.call"),
    ("from ..native.lru import LruCache", "reverie.runtime.tensors.tape"),
    ("from reverie import runtime", "reverie.runtime.native.call"),
    ("import numpy as np", "reverie.dsl.check"),
    ("from reverie.compiler.transforms.simplify import simplify",
     "reverie.compiler.lower.module_lowering"),
])
def test_the_check_allows_the_layers_below(source: str, module: str) -> None:
    assert planted(source, module) == []


@pytest.mark.parametrize("source, module", [
    ("from reverie.compiler.ir.ops import unary_builtins", "reverie.dsl.check"),
    ("from reverie.runtime.native.call import bind_arguments", "reverie.compiler.backend.llvm"),
    ("from ...runtime.native import jit", "reverie.compiler.backend.llvm"),
    ("from reverie.compiler.lower import ModuleLowering", "reverie.compiler.transforms.batch"),
    ("from reverie.compiler.to_loops.lower_blocks import lower_function",
     "reverie.compiler.loops.ir"),
    ("from reverie.compiler.pipeline import climb", "reverie.compiler.export.mlir"),
    ("from reverie.runtime.native.jit import LlvmModule", "reverie.compiler.export.mlir"),
])
def test_each_layer_is_kept_from_those_above_it(source: str, module: str) -> None:
    assert planted(source, module)


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return import_edges()


def test_every_layer_imports_only_itself_and_the_layers_below(edges: list[Import]) -> None:
    modules = module_files()
    for rank, prefixes in enumerate(LAYERS):
        assert any(layer_of(module) == rank for module in modules), f"no files in {prefixes}"
    offences = [f"{edge.source}:{edge.line} imports {edge.target}" for edge in upward(edges)
                if (edge.source, edge.target) not in UPWARD_IMPORTS]
    assert offences == []


def test_every_listed_upward_import_is_still_there(edges: list[Import]) -> None:
    found = {(edge.source, edge.target) for edge in upward(edges)}
    assert set(UPWARD_IMPORTS) - found == set(), "delete these from UPWARD_IMPORTS"


def imports_inside_functions(sources: dict[str, str]) -> list[str]:
    """`module:line` of every import statement that sits inside a function."""
    found = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found += [f"{module}:{inner.lineno}" for inner in ast.walk(node)
                          if isinstance(inner, ast.Import | ast.ImportFrom)]
    return found


def test_no_import_inside_a_function_of_the_lowering() -> None:
    sources = {path.stem: path.read_text(encoding="utf-8")
               for path in sorted(LOWER_PACKAGE.glob("*.py"))}
    assert "lowerer" in sources and "module_lowering" in sources
    assert imports_inside_functions(sources) == []
    assert imports_inside_functions({"c": "import a\ndef g():\n    from .a import f\n"}) == [
        "c:3"]


def test_no_method_is_defined_by_two_parts_of_the_lowerer() -> None:
    parts = [cls for cls in Lowerer.__mro__ if cls.__module__.startswith(LOWER_MODULES)]
    assert len(parts) > 3
    owners: dict[str, list[str]] = {}
    for cls in parts:
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("__"):
                owners.setdefault(name, []).append(cls.__name__)
    abstract = LowererBase.__abstractmethods__
    shadowed = {name: owner for name, owner in owners.items()
                if len(owner) > 1 and not (name in abstract and len(owner) == 2)}
    assert shadowed == {}


def _self_attributes(cls: type) -> set[str]:
    """Every `self.NAME` that the methods of `cls` (its own body only) read or write."""
    (node,) = [n for n in ast.walk(ast.parse(inspect.getsource(inspect.getmodule(cls))))
               if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"}


def test_each_part_uses_only_itself_and_the_parts_it_extends() -> None:
    state = _self_attributes(LowererBase)  # the attributes `LowererBase.__init__` sets
    for cls in Lowerer.__mro__:
        if cls.__module__.startswith(LOWER_MODULES):
            upward = _self_attributes(cls) - set(dir(cls)) - state
            assert upward == set(), f"{cls.__name__} uses {sorted(upward)} from above it"


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
