"""The compiler as one ladder of named stages, from source text to native code.

    source text --parse--> AST --lower--> tensor Function --reverse | forward | batch
    | jacobian--> Function --fuse--> Fused --to_loops--> loop Program --codegen--> LLVM IR text
    --llvm-opt--> LlvmModule --jit--> JitModule (native code in this process)

`climb(value, request, start=..., stop=...)` runs the stages from `start` to `stop` on
`value` (what `start` takes), with the garbage collector paused (`compiler/collector.py`),
and returns every stage's result by name; `compile_source` and `compile_function` return
the last one. A `Request` says what to build: which
function, at which float dtype, through which transform (at most one of reverse, forward,
batch, jacobian: the others are skipped) and for which backend. The MLIR backend's ladder has the
same front and `mlir` (export), `mlir-to-llvm` (the upstream tools) where the native one
has `fuse`, `to_loops` and `codegen`; it loads the LLVM IR without optimising it.

    fn = compile_source(text, "lower", Request(function="loss"))           # tensor IR
    program = compile_function(fn, "to_loops")                             # no LLVM runs
    stages = climb(fn, start="fuse")               # every stage from fuse to jit, by name

Each stage is a row of `Pass`es, run in order; their names are those REVERIE_PRINT_IR
knows (`compiler/print_ir.py`), and `start` and `stop` may name a pass as well as a stage
(`climb(fn, start="fuse", stop="interchange")`: the loop program after that pass). After
every loop pass the ladder runs the loop-IR verifier when REVERIE_VERIFY_LOOPS=1 (the
tests set it; the product does not) and the printing hook. Lowering and every transform
end with the pass `simplify`; what a transform hands to simplify is visible only through
the printing hook (`capture("reverse")`: "grad-raw"). The jit stage consults the disk
cache, keyed on the unoptimised IR, so `llvm-opt` only names the optimisation pipeline and
optimises when its text is asked for (see `runtime/native/jit.py`): a kernel's cold
compile optimises once, a cache hit not at all.

One vocabulary names the IR everywhere: the passes and the user's views
(`compiler/print_ir.py`'s `PASSES` and `VIEWS`: "tensor", "grad", "loops", "llvm", ...,
each printed after one pass). `IR_NAMES` are the names `module.ir(name)` and `reverie emit
--stage name` accept: every view, and every pass a module's IR goes through, which shows
the IR as REVERIE_PRINT_IR prints it after that pass (`module.ir("interchange")`);
REVERIE_PRINT_IR accepts the passes and the views (a view: its pass). `IR_VIEWS` says what
each view shows and which ladder stage it stops at.

`rv.Module` climbs from its lowering (`module_lowering`, which keeps the specialisations),
the kernel transforms climb the transform stages (`transform`), and the runtime backends
(`runtime/native/native_kernel.py`, `runtime/native/mlir_backend.py`) climb from a tensor
Function.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reverie.compiler.collector import collector_paused
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.types import TensorType
from reverie.compiler.lazy import lazy
from reverie.compiler.print_ir import PASSES, VIEWS, show
from reverie.dsl.ast import Module as SyntaxTree
from reverie.dsl.diagnostics import did_you_mean

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import MlirFunction
    from reverie.compiler.loops.ir import Program
    from reverie.compiler.lower import ModuleLowering
    from reverie.compiler.to_loops.fusion_plan import Plan
    from reverie.dsl import ast
    from reverie.runtime.native.jit import JitModule, LlvmModule


# What the stages call beyond the front end, each imported when first needed so that
# `rv.compile` loads no transform or back end it does not use (tests/runtime/test_startup.py).
_parse_text = lazy("reverie.dsl.parser:parse")  # the parser tables: only when parsing
_format_ast = lazy("reverie.dsl.source_printer:format_ast")
_module_lowering = lazy("reverie.compiler.lower:ModuleLowering")
_grad_function = lazy("reverie.compiler.transforms.reverse:grad_function")
_vjp_function = lazy("reverie.compiler.transforms.reverse:vjp_function")
_jvp_function = lazy("reverie.compiler.transforms.forward:jvp_function")
_batch_function = lazy("reverie.compiler.transforms.batch:batch_function")
_jacobian_function = lazy("reverie.compiler.transforms.jacobian:jacobian_function")
_split_scatters = lazy(
    "reverie.compiler.transforms.scatter_contractions:split_scatter_contractions")
_contract_function = lazy("reverie.compiler.transforms.contractions:contract_function")
_hoist_function = lazy("reverie.compiler.transforms.hoist:hoist_function")
_plan_block = lazy("reverie.compiler.to_loops.fusion_plan:plan_block")
_lower_function = lazy("reverie.compiler.to_loops.lower_blocks:lower_function")
_format_program = lazy("reverie.compiler.loops.loop_printer:format_program")
_verify_program = lazy("reverie.compiler.loops.loop_verifier:verify_program")
_inline_outer_products = lazy("reverie.compiler.loops.outer_products:inline_outer_products")
_fuse_sequential_loops = lazy("reverie.compiler.loops.loop_fusion:fuse_sequential_loops")
_split_wrapping_loops = lazy("reverie.compiler.loops.splitting:split_wrapping_loops")
_split_guarded_loops = lazy("reverie.compiler.loops.peeling:split_guarded_loops")
_interchange_reductions = lazy("reverie.compiler.loops.interchange:interchange_reductions")
_remove_dead_code = lazy("reverie.compiler.loops.dead_code:remove_dead_code")
_generate_llvm = lazy("reverie.compiler.backend.llvm:generate_llvm")
_module_name = lazy("reverie.runtime.native.jit:first_exported_symbol")
_llvm_module = lazy("reverie.runtime.native.jit:LlvmModule")
_export_function = lazy("reverie.compiler.export.mlir:export_function")
_mlir_module = lazy("reverie.compiler.export.mlir:mlir_module")
_mlir_to_llvm_ir = lazy("reverie.runtime.native.mlir_to_llvm:mlir_to_llvm_ir")

BACKENDS = ("native", "mlir")
TRANSFORMS = ("reverse", "forward", "batch", "jacobian")
DTYPES = ("f32", "f64")


@dataclass(frozen=True)
class Request:
    """What the ladder builds.

    `function`: which function of the source (None: the only one); `dtype`: what `float`
    means; `transform`: None or one of TRANSFORMS; `wrt`: the parameters (names or
    positions) it acts on (None: every float parameter; for batch, every parameter);
    `checkpoint`: O(sqrt(T)) loop states in reverse mode (docs/language.md); `vjp`: reverse
    mode as a vector-Jacobian product (a cotangent parameter per result) even where the
    function has one scalar float result, whose gradient it otherwise builds;
    `max_iterations`: a `while` loop's limit (None: REVERIE_MAX_ITERATIONS or 10^9);
    `filename`: for diagnostics and MLIR locations; `backend`: one of BACKENDS; `mode`: a
    Jacobian from one batched JVP ("forward") or VJP ("reverse"); `name`: the name of the
    function a transform makes (None: the transform's own)."""

    function: str | None = None
    dtype: str = "f32"
    transform: str | None = None
    wrt: Sequence[str | int] | None = None
    checkpoint: bool = False
    vjp: bool = False
    max_iterations: int | None = None
    filename: str = "<source>"
    backend: str = "native"
    mode: str = "forward"
    name: str | None = None

    def __post_init__(self) -> None:
        for field, value, allowed in (("dtype", self.dtype, DTYPES),
                                      ("transform", self.transform, (None, *TRANSFORMS)),
                                      ("backend", self.backend, BACKENDS)):
            if value not in allowed:
                raise ValueError(f"{field} must be one of {', '.join(map(str, allowed))}, "
                                 f"got {value!r}")


@dataclass(frozen=True)
class Fused:
    """A tensor function with the fusion plan of its body (loop bodies are planned when
    to_loops reaches them)."""

    function: Function
    plan: Plan


@dataclass(frozen=True)
class MlirExport:
    """Functions exported into one MLIR module: each one's symbol and error table, and the
    module's text."""

    parts: list[MlirFunction]
    text: str


# ---------------------------------------------------------------- the stages' work


def _parse(source: str, request: Request) -> ast.Module:
    module = _parse_text(source, request.filename)
    show("parse", request.filename, lambda: _format_ast(module))
    return module


def _function_name(module: ast.Module, request: Request) -> str:
    names = [fn.name for fn in module.functions]
    if request.function is None and len(names) == 1:
        return names[0]
    if request.function is None:
        raise ValueError(f"{module.filename} defines {len(names)} functions "
                         f"({', '.join(names) or 'none'}): name one (Request.function)")
    if request.function not in names:
        raise ValueError(f"no function '{request.function}'" + did_you_mean(request.function,
                                                                           names))
    return request.function


def module_lowering(module: ast.Module, request: Request) -> ModuleLowering:
    """The lowering of a parsed module (its names checked), which keeps each function's
    specialisations: stage `lower` starts from one as well as from the syntax tree, so a
    caller that keeps it (`rv.Module`) lowers each specialisation once."""
    return _module_lowering(module, request.max_iterations)


def _lower(source: ast.Module | ModuleLowering, request: Request) -> Function:
    lowering = module_lowering(source, request) if isinstance(source, SyntaxTree) else source
    return lowering.specialise(_function_name(lowering.module, request), request.dtype)


def _positions(fn: Function, wrt: Sequence[str | int] | None,
               default: Callable[[TensorType], bool]) -> list[int]:
    """Parameter positions for `wrt` (names or positions), in parameter order."""
    if wrt is None:
        return [i for i, p in enumerate(fn.params) if default(p.type)]
    for name in wrt:
        if isinstance(name, str) and name not in fn.param_names:
            raise ValueError(f"{fn.name} has no parameter '{name}'"
                             + did_you_mean(name, fn.param_names))
    return sorted({fn.param_names.index(w) if isinstance(w, str) else w for w in wrt})


def _is_float(type_: TensorType) -> bool:
    return type_.is_float


def _reverse(fn: Function, request: Request) -> Function:
    wrt = _positions(fn, request.wrt, _is_float)
    types = fn.result_types
    if not request.vjp and len(types) == 1 and types[0].rank == 0 and types[0].is_float:
        return _grad_function(fn, wrt, checkpoint=request.checkpoint)
    return _vjp_function(fn, wrt, checkpoint=request.checkpoint)


def _forward(fn: Function, request: Request) -> Function:
    return _jvp_function(fn, _positions(fn, request.wrt, _is_float))


def _batch(fn: Function, request: Request) -> Function:
    return _batch_function(fn, _positions(fn, request.wrt, lambda type_: True))


def _jacobian(fn: Function, request: Request) -> Function:
    return _jacobian_function(fn, _positions(fn, request.wrt, _is_float), request.mode,
                              name=request.name)


def _fuse(fn: Function, request: Request) -> Fused:
    fused = Fused(fn, _plan_block(fn.body))
    show("fuse", f"@{fn.name}", lambda: format_fusion(fused))
    return fused


def _to_loops(fused: Fused, request: Request) -> Program:
    return _lower_function(fused.function, fused.plan)


def _after_loop_pass(program: Program, pass_name: str) -> None:
    """After every loop pass: the loop-IR verifier (`compiler/loops/loop_verifier.py`) with
    REVERIE_VERIFY_LOOPS=1, which the test suite sets (tests/conftest.py), then printing."""
    if os.environ.get("REVERIE_VERIFY_LOOPS") == "1":
        _verify_program(program)
    show(pass_name, f"@{program.name}", lambda: _format_program(program))


def _codegen(program: Program, request: Request) -> str:
    text = _generate_llvm(program)
    show("codegen", f"@{program.name}", lambda: text)
    return text


def _llvm_opt(llvm_ir: str, request: Request) -> LlvmModule:
    name = _module_name(llvm_ir)
    if request.backend == "mlir":  # a cross-check: compile time matters more than speed
        return _llvm_module(llvm_ir, name=name, pipeline=None)
    return _llvm_module(llvm_ir, name=name)


def _jit(module: LlvmModule, request: Request) -> JitModule:
    return module.load()


def _export_mlir(functions: Function | Sequence[Function], request: Request) -> MlirExport:
    """One MLIR module of the function(s); a repeated name gets its position as suffix."""
    functions = [functions] if isinstance(functions, Function) else list(functions)
    names = [fn.name for fn in functions]
    symbols = [name if names.count(name) == 1 else f"{name}_{k}" for k, name in enumerate(names)]
    parts = [_export_function(fn, request.filename, symbol)
             for fn, symbol in zip(functions, symbols, strict=True)]
    export = MlirExport(parts, _mlir_module(parts))
    show("mlir", ", ".join(f"@{s}" for s in symbols), lambda: export.text)
    return export


def _mlir_to_llvm(export: MlirExport, request: Request) -> str:
    text = _mlir_to_llvm_ir(export.text)
    show("mlir-to-llvm", ", ".join(f"@{part.symbol}" for part in export.parts), lambda: text)
    return text


def format_fusion(fused: Fused) -> str:
    """The function's text with each body op's fusion decision after it (`// inline`)."""
    sibling = {op: k for k, nest in enumerate(fused.plan.siblings) for op in nest.reductions}
    ops = iter(fused.function.body.ops)
    lines = []
    for line in format_function(fused.function).splitlines():
        if line.startswith("  ") and not line.startswith(("   ", "  return ", "  }")):
            op = next(ops)  # an op of the body (region lines are indented further)
            decision = fused.plan.decisions[op].kind
            nest = f", sibling nest {sibling[op]}" if op in sibling else ""
            line = f"{line}  // {decision}{nest}"
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------- the ladder


@dataclass(frozen=True)
class Pass:
    """One pass of a stage: its name (REVERIE_PRINT_IR's), its work, the names it prints
    under (None: its own; lowering and every transform end in `simplify`), and what the
    ladder does after it (loop passes: verify and print; None: the pass printed its result
    itself, as the tensor passes do in `after_pass`)."""

    name: str
    run: Callable[[Any, Request], Any]
    prints: tuple[str, ...] | None = None
    after: Callable[[Any, str], None] | None = None

    @property
    def printed(self) -> tuple[str, ...]:
        """The REVERIE_PRINT_IR names this pass prints under."""
        return (self.name,) if self.prints is None else self.prints


def _each(rewrite: Callable[[Any], Any]) -> Callable[[Any, Request], Any]:
    """A pass from a function of the IR alone (it needs nothing of the request)."""
    return lambda value, request: rewrite(value)


def _loop_pass(name: str, rewrite: Callable[[Program], Program]) -> Pass:
    return Pass(name, _each(rewrite), after=_after_loop_pass)


def _hoist_each(functions: Function | Sequence[Function]) -> list[Function]:
    return [_hoist_function(fn) for fn in
            ([functions] if isinstance(functions, Function) else functions)]


@dataclass(frozen=True)
class Stage:
    """One rung: its name, what it returns, the passes it runs in order, and how its result
    prints. A transform stage runs only when the request asks for it."""

    name: str
    result: str
    passes: tuple[Pass, ...]
    text: Callable[[Any], str]
    transform: bool = False


PARSE = Stage("parse", "dsl.ast.Module: the syntax tree, with source spans",
              (Pass("parse", _parse),), _format_ast)
LOWER = Stage("lower", "Function: the typed tensor IR of one function at request.dtype "
              "(type checking included), from the syntax tree or a module_lowering",
              (Pass("lower", _lower, ("lower", "simplify")),), format_function)
REVERSE = Stage("reverse", "Function: its gradient (one scalar float result), else its VJP",
                (Pass("reverse", _reverse, ("reverse", "simplify")),), format_function,
                transform=True)
FORWARD = Stage("forward", "Function: its results and their tangents (JVP)",
                (Pass("forward", _forward, ("forward", "simplify")),), format_function,
                transform=True)
BATCH = Stage("batch", "Function: over a leading batch axis of the wrt parameters",
              (Pass("batch", _batch, ("batch", "simplify")),), format_function,
              transform=True)
JACOBIAN = Stage("jacobian", "Function: the Jacobian blocks of every result with respect to "
                 "each wrt parameter, shaped result.shape + parameter.shape",
                 (Pass("jacobian", _jacobian, ("jacobian", "simplify")),), format_function,
                 transform=True)
FUSE = Stage("fuse", "Fused: the function, its contractions made matrix products, "
             "expensive partial-index work hoisted, and the fusion plan of its body",
             (Pass("scatter_contract", _each(_split_scatters)),  # matrix products first
              Pass("contract", _each(_contract_function)),
              Pass("hoist", _each(_hoist_function)),
              Pass("fuse", _fuse)), format_fusion)
TO_LOOPS = Stage("to_loops", "loops.ir.Program: loop nests over buffers",
                 (Pass("to_loops", _to_loops, after=_after_loop_pass),
                  _loop_pass("outer_products", _inline_outer_products),
                  _loop_pass("fuse_loops", _fuse_sequential_loops),
                  _loop_pass("split_wrapping_loops", _split_wrapping_loops),
                  _loop_pass("split_guarded_loops", _split_guarded_loops),
                  _loop_pass("interchange", _interchange_reductions),
                  _loop_pass("dead_code", _remove_dead_code)), _format_program)
CODEGEN = Stage("codegen", "str: LLVM IR text, before LLVM's optimiser",
                (Pass("codegen", _codegen),), str)
LLVM_OPT = Stage("llvm-opt", "runtime.jit.LlvmModule: the IR and its optimisation pipeline "
                 "(optimised text on request)", (Pass("llvm-opt", _llvm_opt),),
                 lambda module: module.optimized_ir)
JIT = Stage("jit", "runtime.jit.JitModule: native code loaded into this process",
            (Pass("jit", _jit, prints=()),), lambda module: module.asm)
EXPORT_MLIR = Stage("mlir", "MlirExport: one MLIR module in upstream dialects (expensive "
                    "partial-index work hoisted)",
                    (Pass("hoist", _each(_hoist_each)), Pass("mlir", _export_mlir)),
                    lambda export: export.text)
MLIR_TO_LLVM = Stage("mlir-to-llvm", "str: LLVM IR from mlir-opt and mlir-translate",
                     (Pass("mlir-to-llvm", _mlir_to_llvm),), str)

FRONT = (PARSE, LOWER, REVERSE, FORWARD, BATCH, JACOBIAN)
LADDERS: dict[str, tuple[Stage, ...]] = {
    "native": (*FRONT, FUSE, TO_LOOPS, CODEGEN, LLVM_OPT, JIT),
    "mlir": (*FRONT, EXPORT_MLIR, MLIR_TO_LLVM, LLVM_OPT, JIT),
}


def stage(name: str, backend: str = "native") -> Stage:
    """The stage called `name` on `backend`'s ladder (ValueError naming the stages)."""
    for rung in LADDERS[backend]:
        if rung.name == name:
            return rung
    names = ", ".join(rung.name for rung in LADDERS[backend])
    raise ValueError(f"the {backend} ladder has no stage {name!r}; its stages: {names}")


def _steps(backend: str) -> list[tuple[Stage, Pass]]:
    """Every pass of `backend`'s ladder with its stage, in order."""
    return [(rung, step) for rung in LADDERS[backend] for step in rung.passes]


def _step_index(name: str, steps: list[tuple[Stage, Pass]], backend: str, first: bool) -> int:
    """Where `backend`'s ladder (its `steps`) starts (`first`) or stops for `name`: a stage
    (its first or last pass) or, where no stage has that name, a pass of one."""
    if any(rung.name == name for rung, _ in steps) or name not in {p.name for _, p in steps}:
        rung = stage(name, backend)
        found = [k for k, (other, _) in enumerate(steps) if other is rung]
        return found[0] if first else found[-1]
    return next(k for k, (_, step) in enumerate(steps) if step.name == name)


def climb(value: Any, request: Request | None = None, *, start: str = "parse",
          stop: str = "jit") -> dict[str, Any]:
    """Run `request.backend`'s ladder from `start` to `stop` (both included) on `value`,
    which is what `start` takes; each names a stage or a pass of one (`stop="interchange"`:
    the loop program after that pass). Returns every stage's result by stage name, in
    order, and the result of a pass `stop` that ends no stage under its own name."""
    request = request or Request()
    steps = _steps(request.backend)
    first = _step_index(start, steps, request.backend, first=True)
    last = _step_index(stop, steps, request.backend, first=False)
    if first > last:
        raise ValueError(f"stage {stop!r} comes before stage {start!r}")
    if steps[last][0].transform and request.transform != steps[last][0].name:
        raise ValueError(f"stage {stop!r} runs only when asked for: "
                         f"Request(transform={stop!r})")
    results: dict[str, Any] = {}
    with collector_paused():  # (see compiler/collector.py: no collections mid-compile)
        for k, (rung, step) in enumerate(steps[first:last + 1], start=first):
            if rung.transform and rung.name != request.transform:
                continue
            value = step.run(value, request)
            if step.after is not None:
                step.after(value, step.name)
            if step is rung.passes[-1]:
                results[rung.name] = value
            elif k == last:
                results[step.name] = value
    return results


# ---------------------------------------------------------------- what module.ir shows

# `shows`: the syntax tree; the program; its adjoint; the program, or its adjoint when
# `wrt` is given; the program then its adjoint, in one module (the adjoint alone with `wrt`).
SOURCE, PROGRAM, ADJOINT, EITHER, BOTH = "source", "program", "adjoint", "either", "both"


@dataclass(frozen=True)
class IrView:
    """What `module.ir(name)` shows: which tensor functions (`shows`, above), the ladder
    stage or pass whose result it prints (None: the tensor IR itself) on which backend,
    how that result prints (None: the stage's own `text`), and `captured`: the pass whose
    printed text (`print_ir.capture`) it shows instead, a module lowered afresh so that
    every pass runs."""

    shows: str
    stop: str | None = None
    backend: str = "native"
    text: Callable[[Any], str] | None = None
    captured: str | None = None


# The user's views (print_ir.VIEWS names the pass each is printed after), by what they show.
IR_VIEWS: dict[str, IrView] = {
    "ast": IrView(SOURCE),
    "tensor": IrView(PROGRAM),
    "grad-raw": IrView(ADJOINT, captured="reverse"),
    "grad": IrView(ADJOINT),
    "loops": IrView(EITHER, "to_loops"),
    "mlir": IrView(BOTH, "mlir", backend="mlir"),
    "llvm-raw": IrView(EITHER, "codegen"),
    "llvm": IrView(EITHER, "llvm-opt"),
    "asm": IrView(EITHER, "llvm-opt", text=lambda module: module.asm),
}
# Passes that run only inside a transform of their own (f.jvp, vmap, f.jacobian).
TRANSFORM_PASSES = ("forward", "batch", "jacobian")
# Every name `module.ir` and `reverie emit --stage` accept: the views, then every pass a
# module's IR goes through (a pass: the IR as REVERIE_PRINT_IR prints it after that pass).
IR_NAMES: tuple[str, ...] = (*IR_VIEWS, *(name for name in PASSES if name not in IR_VIEWS
                                          and name not in TRANSFORM_PASSES))


def _pass_view(name: str) -> IrView:
    """The view of pass `name`: the view printed after it where there is one ("codegen":
    "llvm-raw"), else the text the pass prints, for the program (and after the tensor
    level, for its adjoint when `wrt` is given)."""
    printed_after = next((IR_VIEWS[view] for view, after in VIEWS.items() if after == name),
                         None)
    if printed_after is not None:
        return printed_after
    if name in (step.name for rung in FRONT for step in rung.passes):
        return IrView(PROGRAM, captured=name)
    backend = next(b for b in BACKENDS if name in (step.name for rung, step in _steps(b)))
    return IrView(BOTH if backend == "mlir" else EITHER, name, backend, captured=name)


def ir_view(name: str) -> IrView:
    """What `module.ir(name)` shows for a view or pass `name` (ValueError naming them)."""
    if name not in IR_NAMES:
        raise ValueError(f"stage must be one of {', '.join(IR_NAMES)}, got {name!r}")
    return IR_VIEWS.get(name) or _pass_view(name)


def compile_source(source: str, stop: str = "jit", request: Request | None = None) -> Any:
    """The result of stage `stop` for source text (the whole ladder up to `stop`)."""
    return climb(source, request, start="parse", stop=stop)[stop]


def transform(fn: Function, request: Request) -> Function:
    """`fn` (a tensor Function) through the transform stage `request.transform` alone."""
    if request.transform is None:
        raise ValueError("transform needs Request(transform=...)")
    return climb(fn, request, start=request.transform, stop=request.transform)[
        request.transform]


def back_end_start(backend: str = "native") -> str:
    """The first stage after the tensor level on `backend`'s ladder."""
    return LADDERS[backend][len(FRONT)].name


def compile_function(fn: Function, stop: str = "jit", request: Request | None = None) -> Any:
    """The result of stage `stop` for a tensor Function (specialised, transforms applied)."""
    request = request or Request()
    return climb(fn, request, start=back_end_start(request.backend), stop=stop)[stop]
