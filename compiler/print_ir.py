"""`REVERIE_PRINT_IR`: the one hook that prints the IR after a pass, at every level, and the
names by which the IR is asked for everywhere (docs/pipeline.md).

Every pass of the compiler ends with `show(pass_name, subject, render)`, where `render()`
formats its result (the ladder calls it after each loop pass). Nothing is formatted
unless the pass is printed or captured, so the hook costs a compile one environment
look-up per pass.

    REVERIE_PRINT_IR=1               every pass below
    REVERIE_PRINT_IR=reverse,fuse    only the passes named (commas, spaces ignored)
    REVERIE_PRINT_IR=grad-raw,loops  a view's name means the pass it is printed after
    unset, empty or 0                nothing

Each printout goes to stderr under a header naming the pass, its level and its subject:

    // ---- after reverse (tensor IR): @loss_grad

An unknown name in the list gives one `PrintIrWarning` per setting, listing the valid
names; the names it does know still print. `capture(pass_name)` collects the same text in
a list instead of printing it.

One vocabulary names the IR in REVERIE_PRINT_IR, `module.ir(name)` and `reverie emit
--stage name`: the passes (`PASSES`) and the user's views (`VIEWS`), each view with the
pass after which REVERIE_PRINT_IR prints the same text. `compiler/pipeline.py`'s
`IR_NAMES` are the names `module.ir` accepts (every pass a module's IR goes through) and
its `IR_VIEWS` say what each view shows.

The passes, in the order a kernel meets them (the rows of `compiler/pipeline.py`'s stages):

    parse                 AST          the parsed module (dsl/parser.py)
    lower                 tensor IR    a specialisation as lowering built it (compiler/lower/)
    reverse               tensor IR    the adjoint as built (transforms/reverse.py)
    forward               tensor IR    the JVP as built (transforms/forward.py)
    batch                 tensor IR    the batched function as built (transforms/batch.py)
    jacobian              tensor IR    the Jacobian as built (transforms/jacobian.py)
    split_vjp             tensor IR    a VJP's forward or backward half (transforms/residuals.py)
    keep_results          tensor IR    a transform's function returning what a kernel keeps
    simplify              tensor IR    after simplify, which ends lowering, transforms and select
    widen_storage         tensor IR    bf16/f16 arithmetic in f32, rounded (widen_storage.py)
    scatter_contract      tensor IR    scatters of sums split (transforms/scatter_contractions.py)
    contract              tensor IR    contractions as matrix products (transforms/contractions.py)
    hoist                 tensor IR    expensive work on fewer indices hoisted (transforms/hoist.py)
    fuse                  fusion plan  each body op's fusion decision (to_loops/fusion_plan.py)
    loop_nests            loop IR      the loop nests as lowered (to_loops/lower_blocks.py)
    outer_products        loop IR      scan bodies' [M, 1] @ [1, N] products computed where read
    fuse_loops            loop IR      scan bodies' same-extent loops merged (loops/loop_fusion.py)
    split_wrapping_loops  loop IR      after splitting loops at index wrap-arounds
    split_guarded_loops   loop IR      loops' interiors split from their bounds-tested edges
    interchange           loop IR      reductions over a strided axis made outermost
    bf16_products         loop IR      bf16 products read bf16 buffers (vdpbf16ps, AMX hosts)
    tabulate              loop IR      long loops' work on one bf16/f16 element looked up in tables
    dead_code             loop IR      unread temporaries and unused scalars removed
    codegen               LLVM IR      as generated, before LLVM's optimiser (view "llvm-raw")
    llvm-opt              LLVM IR      after LLVM's optimiser (view "llvm"; runtime/native/jit.py)
    mlir                  MLIR         the MLIR backend's export (compiler/export/mlir.py)
    mlir-to-llvm          LLVM IR      what mlir-opt and mlir-translate make of it

The views, each after its pass (`module.ir` shows the program, its adjoint or both):

    ast       parse      the syntax tree, as the source printer writes it
    tensor    simplify   the program's typed tensor IR
    grad-raw  reverse    the adjoint before simplification
    grad      simplify   the adjoint
    loops     dead_code  the loop program, after every loop pass
    mlir      mlir       the program and its adjoint exported to MLIR
    llvm-raw  codegen    LLVM IR before LLVM's optimiser
    llvm      llvm-opt   LLVM IR after LLVM's optimiser
    asm       llvm-opt   the machine code of that IR

The jit stage prints nothing: it produces machine code (view "asm" shows it). A disk-cache
hit skips LLVM's optimiser; `llvm-opt` then shows the optimised IR recomputed for printing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar

ENVIRONMENT_VARIABLE = "REVERIE_PRINT_IR"

PASSES: dict[str, str] = {  # pass name -> the level its result is at
    "parse": "AST",
    "lower": "tensor IR",
    "reverse": "tensor IR",
    "forward": "tensor IR",
    "batch": "tensor IR",
    "jacobian": "tensor IR",
    "split_vjp": "tensor IR",
    "keep_results": "tensor IR",
    "simplify": "tensor IR",
    "widen_storage": "tensor IR",
    "scatter_contract": "tensor IR",
    "contract": "tensor IR",
    "hoist": "tensor IR",
    "fuse": "fusion plan",
    "loop_nests": "loop IR",
    "outer_products": "loop IR",
    "fuse_loops": "loop IR",
    "split_wrapping_loops": "loop IR",
    "split_guarded_loops": "loop IR",
    "interchange": "loop IR",
    "bf16_products": "loop IR",
    "tabulate": "loop IR",
    "dead_code": "loop IR",
    "codegen": "LLVM IR",
    "llvm-opt": "LLVM IR",
    "mlir": "MLIR",
    "mlir-to-llvm": "LLVM IR",
}

# The user's views of the IR (module.ir, reverie emit --stage), named by what they show,
# each with the pass after which REVERIE_PRINT_IR prints the same text ("asm": the machine
# code of the IR that pass prints; "grad": the simplify that ends the reverse stage).
VIEWS: dict[str, str] = {
    "ast": "parse",
    "tensor": "simplify",
    "grad-raw": "reverse",
    "grad": "simplify",
    "loops": "dead_code",
    "mlir": "mlir",
    "llvm-raw": "codegen",
    "llvm": "llvm-opt",
    "asm": "llvm-opt",
}

_CAPTURES: ContextVar[tuple[tuple[str, list[str]], ...]] = ContextVar("reverie_ir_captures",
                                                                      default=())


class PrintIrWarning(UserWarning):
    """REVERIE_PRINT_IR names a pass that does not exist."""


@functools.cache
def selected_passes(setting: str) -> frozenset[str]:
    """The passes a REVERIE_PRINT_IR value asks for (warning once about unknown names)."""
    setting = setting.strip()
    if setting in ("", "0"):
        return frozenset()
    if setting == "1":
        return frozenset(PASSES)
    names = {name.strip() for name in setting.split(",") if name.strip()}
    unknown = sorted(names - PASSES.keys() - VIEWS.keys())
    if unknown:
        warnings.warn(f"{ENVIRONMENT_VARIABLE} names unknown pass(es) {', '.join(unknown)}; "
                      f"the passes are: {', '.join(PASSES)}; the views: {', '.join(VIEWS)} "
                      "(or 1 for all)", PrintIrWarning, stacklevel=4)
    return frozenset(VIEWS.get(name, name) for name in names if name not in unknown)


def observing() -> bool:
    """Whether any pass's output is printed or captured now (a cache that would skip the
    passes must then let them run)."""
    return bool(_CAPTURES.get()) or bool(selected_passes(os.environ.get(ENVIRONMENT_VARIABLE,
                                                                        "")))


def show(pass_name: str, subject: str, render: Callable[[], str]) -> None:
    """Hand the result of pass `pass_name` to REVERIE_PRINT_IR and to active captures;
    `render()` formats it and runs only if one of them wants it."""
    captures = _CAPTURES.get()
    printing = pass_name in selected_passes(os.environ.get(ENVIRONMENT_VARIABLE, ""))
    listeners = [texts for name, texts in captures if name == pass_name]
    if not printing and not listeners:
        return
    text = render().rstrip()
    for texts in listeners:
        texts.append(text)
    if printing:
        print(f"// ---- after {pass_name} ({PASSES[pass_name]}): {subject}\n{text}",
              file=sys.stderr)


@contextlib.contextmanager
def capture(pass_name: str) -> Iterator[list[str]]:
    """Collect the text of every run of pass `pass_name` inside the `with` block."""
    if pass_name not in PASSES:
        raise ValueError(f"unknown pass {pass_name!r}; the passes are: {', '.join(PASSES)}")
    texts: list[str] = []
    token = _CAPTURES.set((*_CAPTURES.get(), (pass_name, texts)))
    try:
        yield texts
    finally:
        _CAPTURES.reset(token)
