"""The compiler as one ladder of named stages, from source text to native code.

    source text --parse--> AST --lower--> tensor Function --reverse | forward | batch
    | jacobian--> Function [--select--> Function] --fuse--> Fused --to_loops--> loop Program
    --codegen--> LLVM IR text --llvm-opt--> LlvmModule --jit--> JitModule (native code)

`climb(value, request, start=..., stop=...)` runs the stages from `start` to `stop` on
`value` (what `start` takes), with the garbage collector paused (`compiler/collector.py`),
and returns every stage's result by name; `compile_source` and `compile_function` return
the last one. A `Request` says what to build: which function, at which float dtype, through
which transform (at most one of reverse, forward, batch, jacobian: the others are skipped),
which part of its function (the select stage, run only when asked: the results a derived
kernel keeps, or one half of a VJP split at its residuals) and for which backend. The MLIR
backend's ladder has the same front and `mlir` (export), `mlir-to-llvm` (the upstream
tools) where the native one has `fuse`, `to_loops` and `codegen`; it loads the LLVM IR
without optimising it.

    fn = compile_source(text, "lower", Request(function="loss"))           # tensor IR
    program = compile_function(fn, "to_loops")                             # no LLVM runs
    stages = climb(fn, start="fuse")               # every stage from fuse to jit, by name

Each stage is a row of `Pass`es, run in order; their names are those REVERIE_PRINT_IR
knows (`compiler/print_ir.py`), and `start` and `stop` may name a pass as well as a stage
(`climb(fn, start="fuse", stop="interchange")`: the loop program after that pass). A name
means one thing: a stage is named after no pass but its own last one, so stopping after a
stage (`to_loops`: after `dead_code`) and after the pass of that name agree. After every
loop pass the ladder runs the loop-IR verifier when REVERIE_VERIFY_LOOPS=1 (the tests set
it; the product does not) and the printing hook. Lowering, every transform and the select
stage end with `simplify`; what a transform hands to simplify is visible only through the
printing hook (`capture("reverse")`: "grad-raw"). The jit stage consults the disk
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
the kernel transforms climb the transform and select stages (`transform`), and the runtime
backends (`runtime/native/native_kernel.py`, `runtime/native/mlir_backend.py`) climb from a
tensor Function. Every stage's work is imported here at the top: the run time and the
public API reach the ladder through the gate of a warm start
(`runtime/native/compiler_gate.py`), which a process whose disk cache holds its kernels
never opens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reverie.compiler.backend.bf16_products import narrow_bf16_products
from reverie.compiler.backend.llvm import generate_llvm
from reverie.compiler.collector import collector_paused
from reverie.compiler.export.mlir import MlirFunction, export_function, mlir_module
from reverie.compiler.ir.core import Block, Function
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw
from reverie.compiler.ir.types import FLOAT_DTYPES, TensorType, one_float_element
from reverie.compiler.ir.widen_storage import widen_storage
from reverie.compiler.loops.dead_code import remove_dead_code
from reverie.compiler.loops.interchange import interchange_reductions
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.loop_fusion import fuse_sequential_loops
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.loops.loop_verifier import verify_program
from reverie.compiler.loops.outer_products import inline_outer_products
from reverie.compiler.loops.peeling import split_guarded_loops
from reverie.compiler.loops.splitting import split_wrapping_loops
from reverie.compiler.loops.tabulation import tabulate_narrow_elements
from reverie.compiler.lower import ModuleLowering
from reverie.compiler.lower.module_lowering import with_type_errors
from reverie.compiler.print_ir import PASSES, VIEWS, show
from reverie.compiler.to_loops.fusion_plan import Plan, plan_block
from reverie.compiler.to_loops.lower_blocks import lower_function
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.contractions import contract_function
from reverie.compiler.transforms.forward import jvp_function
from reverie.compiler.transforms.hoist import hoist_function
from reverie.compiler.transforms.jacobian import jacobian_function
from reverie.compiler.transforms.residuals import split_vjp
from reverie.compiler.transforms.reverse import grad_function, vjp_function
from reverie.compiler.transforms.scatter_contractions import split_scatter_contractions
from reverie.compiler.transforms.simplify import simplify
from reverie.dsl.ast import Module as SyntaxTree
from reverie.dsl.diagnostics import ParseError, did_you_mean
from reverie.dsl.parser import parse
from reverie.dsl.source_printer import format_ast
from reverie.runtime.native.jit import JitModule, LlvmModule, first_exported_symbol
from reverie.runtime.native.mlir_to_llvm import mlir_to_llvm_ir

BACKENDS = ("native", "mlir")
TRANSFORMS = ("reverse", "forward", "batch", "jacobian")
DTYPES = FLOAT_DTYPES
VJP_HALVES = ("forward", "backward")


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
    function a Jacobian or the select stage makes (None: the transform's own).

    The select stage runs when the request asks for part of a transform's function:
    `vjp_half`, one of VJP_HALVES, cuts a VJP (whose `wrt` must be given) into a forward
    half returning the results and residuals and a backward half reading them
    (`compiler/transforms/residuals.py`) and keeps that half; `results`: the positions
    of the results kept (None: all)."""

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
    vjp_half: str | None = None
    results: Sequence[int] | None = None

    def __post_init__(self) -> None:
        for field, value, allowed in (("dtype", self.dtype, DTYPES),
                                      ("transform", self.transform, (None, *TRANSFORMS)),
                                      ("backend", self.backend, BACKENDS),
                                      ("vjp_half", self.vjp_half, (None, *VJP_HALVES))):
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


def _parse(source: str, request: Request) -> SyntaxTree:
    try:
        module = parse(source, request.filename)
    except ParseError as error:  # with the type errors of the functions that parsed
        raise with_type_errors(error, request.max_iterations) from None
    show("parse", request.filename, lambda: format_ast(module))
    return module


def _function_name(module: SyntaxTree, request: Request) -> str:
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


def module_lowering(module: SyntaxTree, request: Request) -> ModuleLowering:
    """The lowering of a parsed module (its names checked), which keeps each function's
    specialisations: stage `lower` starts from one as well as from the syntax tree, so a
    caller that keeps it (`rv.Module`) lowers each specialisation once."""
    return ModuleLowering(module, request.max_iterations)


def _lower(source: SyntaxTree | ModuleLowering, request: Request) -> Function:
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
    if not request.vjp and one_float_element(fn.result_types):
        return grad_function(fn, wrt, checkpoint=request.checkpoint)
    return vjp_function(fn, wrt, checkpoint=request.checkpoint)


def _forward(fn: Function, request: Request) -> Function:
    return jvp_function(fn, _positions(fn, request.wrt, _is_float))


def _batch(fn: Function, request: Request) -> Function:
    return batch_function(fn, _positions(fn, request.wrt, lambda type_: True))


def _jacobian(fn: Function, request: Request) -> Function:
    return jacobian_function(fn, _positions(fn, request.wrt, _is_float), request.mode,
                              name=request.name)


def _split_vjp(vjp: Function, request: Request) -> Function:
    """The half `request.vjp_half` of VJP `vjp` (unchanged when none is asked for). The
    split is made once per VJP function, so both halves cut it at the same residuals."""
    if request.vjp_half is None:
        return vjp
    if request.wrt is None:
        raise ValueError("the VJP split needs the VJP's parameters: Request(wrt=...)")
    outputs = len(vjp.result_types) - len(_positions(vjp, request.wrt, _is_float))
    split = vjp.__dict__.get("vjp_split")
    if split is None:
        split = vjp.__dict__["vjp_split"] = split_vjp(vjp, len(vjp.params) - outputs, outputs)
    return show_raw(getattr(split, request.vjp_half), "split_vjp")


def _keep_results(fn: Function, request: Request) -> Function:
    """`fn` returning only the results at `request.results`, named `request.name` (None:
    its own); unchanged when no results are named. What it no longer returns is dead
    code, which the select stage's closing `simplify` removes."""
    if request.results is None:
        return fn
    body = Block(fn.body.params, list(fn.body.ops), [fn.body.results[i] for i in request.results])
    return show_raw(fn.derive(request.name or fn.name, body), "keep_results")


def _simplify(fn: Function, request: Request) -> Function:
    return after_pass(simplify(fn), "simplify")


def _fuse(fn: Function, request: Request) -> Fused:
    fused = Fused(fn, plan_block(fn.body))
    show("fuse", f"@{fn.name}", lambda: format_fusion(fused))
    return fused


def _to_loops(fused: Fused, request: Request) -> Program:
    return lower_function(fused.function, fused.plan)


def _after_loop_pass(program: Program, pass_name: str) -> None:
    """After every loop pass: the loop-IR verifier (`compiler/loops/loop_verifier.py`) with
    REVERIE_VERIFY_LOOPS=1, which the test suite sets (tests/conftest.py), then printing."""
    if os.environ.get("REVERIE_VERIFY_LOOPS") == "1":
        verify_program(program)
    show(pass_name, f"@{program.name}", lambda: format_program(program))


def _codegen(program: Program, request: Request) -> str:
    text = generate_llvm(program)
    show("codegen", f"@{program.name}", lambda: text)
    return text


def _llvm_opt(llvm_ir: str, request: Request) -> LlvmModule:
    name = first_exported_symbol(llvm_ir)
    if request.backend == "mlir":  # a cross-check: compile time matters more than speed
        return LlvmModule(llvm_ir, name=name, pipeline=None)
    return LlvmModule(llvm_ir, name=name)


def _jit(module: LlvmModule, request: Request) -> JitModule:
    return module.load()


def _export_mlir(functions: Function | Sequence[Function], request: Request) -> MlirExport:
    """One MLIR module of the function(s); a repeated name gets its position as suffix."""
    functions = [functions] if isinstance(functions, Function) else list(functions)
    names = [fn.name for fn in functions]
    symbols = [name if names.count(name) == 1 else f"{name}_{k}" for k, name in enumerate(names)]
    parts = [export_function(fn, request.filename, symbol)
             for fn, symbol in zip(functions, symbols, strict=True)]
    export = MlirExport(parts, mlir_module(parts))
    show("mlir", ", ".join(f"@{s}" for s in symbols), lambda: export.text)
    return export


def _mlir_to_llvm(export: MlirExport, request: Request) -> str:
    text = mlir_to_llvm_ir(export.text)
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


def _for_each(rewrite: Callable[[Function], Function]) -> Callable[[Any, Request], Any]:
    """A pass over one function or a list of them (the MLIR export takes several)."""
    return _each(lambda functions: rewrite(functions) if isinstance(functions, Function)
                 else [rewrite(fn) for fn in functions])


def _always(request: Request) -> bool:
    return True


def _asks_for_part(request: Request) -> bool:
    """Whether `request` asks for part of a transform's function (the select stage)."""
    return request.vjp_half is not None or request.results is not None


@dataclass(frozen=True)
class Stage:
    """One rung: its name, what it returns, the passes it runs in order, and how its result
    prints. A transform stage runs only when the request asks for it (`transform`), the
    select stage only when it asks for part of a function: `runs` says whether a request
    climbs through the stage, `asked_by` how a request asks for one that does not always
    run."""

    name: str
    result: str
    passes: tuple[Pass, ...]
    text: Callable[[Any], str]
    transform: bool = False
    runs_for: Callable[[Request], bool] = _always
    asked_by: str = ""

    def runs(self, request: Request) -> bool:
        """Whether `request` climbs through this stage."""
        if self.transform:
            return request.transform == self.name
        return self.runs_for(request)

    def asking(self) -> str:
        """How a request asks for this stage."""
        return f"Request(transform={self.name!r})" if self.transform else self.asked_by


PARSE = Stage("parse", "dsl.SyntaxTree: the syntax tree, with source spans",
              (Pass("parse", _parse),), format_ast)
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
SELECT = Stage("select", "Function: the half of a VJP or the results asked for, simplified",
               (Pass("split_vjp", _split_vjp), Pass("keep_results", _keep_results),
                Pass("simplify", _simplify)), format_function,
               runs_for=_asks_for_part, asked_by="Request(vjp_half=...) or Request(results=...)")
FUSE = Stage("fuse", "Fused: the function, its bf16/f16 arithmetic widened to f32, its "
             "contractions made matrix products, expensive partial-index work hoisted, and the "
             "fusion plan of its body",
             (Pass("widen_storage", _each(widen_storage)),
              Pass("scatter_contract", _each(split_scatter_contractions)),  # matrix products first
              Pass("contract", _each(contract_function)),
              Pass("hoist", _each(hoist_function)),
              Pass("fuse", _fuse)), format_fusion)
TO_LOOPS = Stage("to_loops", "loops.ir.Program: loop nests over buffers",
                 (Pass("loop_nests", _to_loops, after=_after_loop_pass),
                  _loop_pass("outer_products", inline_outer_products),
                  _loop_pass("fuse_loops", fuse_sequential_loops),
                  _loop_pass("split_wrapping_loops", split_wrapping_loops),
                  _loop_pass("split_guarded_loops", split_guarded_loops),
                  _loop_pass("interchange", interchange_reductions),
                  _loop_pass("bf16_products", narrow_bf16_products),
                  _loop_pass("tabulate", tabulate_narrow_elements),
                  _loop_pass("dead_code", remove_dead_code)), format_program)
CODEGEN = Stage("codegen", "str: LLVM IR text, before LLVM's optimiser",
                (Pass("codegen", _codegen),), str)
LLVM_OPT = Stage("llvm-opt", "runtime.jit.LlvmModule: the IR and its optimisation pipeline "
                 "(optimised text on request)", (Pass("llvm-opt", _llvm_opt),),
                 lambda module: module.optimized_ir)
JIT = Stage("jit", "runtime.jit.JitModule: native code loaded into this process",
            (Pass("jit", _jit, prints=()),), lambda module: module.asm)
EXPORT_MLIR = Stage("mlir", "MlirExport: one MLIR module in upstream dialects (bf16/f16 "
                    "arithmetic widened, expensive partial-index work hoisted)",
                    (Pass("widen_storage", _for_each(widen_storage)),
                     Pass("hoist", _for_each(hoist_function)), Pass("mlir", _export_mlir)),
                    lambda export: export.text)
MLIR_TO_LLVM = Stage("mlir-to-llvm", "str: LLVM IR from mlir-opt and mlir-translate",
                     (Pass("mlir-to-llvm", _mlir_to_llvm),), str)

FRONT = (PARSE, LOWER, REVERSE, FORWARD, BATCH, JACOBIAN, SELECT)
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
    if not steps[last][0].runs(request):
        raise ValueError(f"stage {stop!r} runs only when asked for: "
                         f"{steps[last][0].asking()}")
    results: dict[str, Any] = {}
    with collector_paused():  # (see compiler/collector.py: no collections mid-compile)
        for k, (rung, step) in enumerate(steps[first:last + 1], start=first):
            if not rung.runs(request):
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

    @property
    def shows_source(self) -> bool:
        """Whether the view shows the syntax tree."""
        return self.shows == SOURCE

    @property
    def in_one_module(self) -> bool:
        """Whether the view shows the program then its adjoint, as one module."""
        return self.shows == BOTH

    def shows_adjoint(self, wrt_given: bool) -> bool:
        """Whether the view shows the adjoint (`wrt_given`: `module.ir` was given `wrt`)."""
        return self.shows == ADJOINT or (wrt_given and self.shows in (EITHER, BOTH))


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
# Passes that run only inside a transform of their own (f.jvp, vmap, f.jacobian, and the
# select stage's: a derived kernel's half of a VJP or the results it keeps).
TRANSFORM_PASSES = ("forward", "batch", "jacobian", "split_vjp", "keep_results")
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
    """`fn` (a tensor Function) through the transform stage `request.transform` alone, then
    the select stage when the request asks for part of the result."""
    if request.transform is None:
        raise ValueError("transform needs Request(transform=...)")
    stop = SELECT.name if SELECT.runs(request) else request.transform
    return climb(fn, request, start=request.transform, stop=stop)[stop]


def back_end_start(backend: str = "native") -> str:
    """The first stage after the tensor level on `backend`'s ladder."""
    return LADDERS[backend][len(FRONT)].name


def compile_function(fn: Function, stop: str = "jit", request: Request | None = None) -> Any:
    """The result of stage `stop` for a tensor Function (specialised, transforms applied)."""
    request = request or Request()
    return climb(fn, request, start=back_end_start(request.backend), stop=stop)[stop]
