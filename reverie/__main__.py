"""The `reverie` command line (README.md): demo, check, emit, grad.

    reverie check kernel.rv
    reverie emit kernel.rv --stage tensor --fn loss      (stages: see `reverie emit -h`)
    reverie emit kernel.rv --stage grad --fn loss --format dot -o loss_grad.svg
    reverie grad kernel.rv --fn loss --dims N=1000 --check --bench
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from reverie.compiler.ir.dot import render
from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.compiler.pipeline import IR_NAMES
from reverie.dsl.diagnostics import CompileError
from reverie.module import FORMATS, load


def _check(args: argparse.Namespace) -> int:
    module = load(args.file)
    print(f"{args.file}: ok ({len(module.kernels)} function(s): {', '.join(module.kernels)})")
    return 0


def _emit(args: argparse.Namespace) -> int:
    module = load(args.file)
    wrt = args.wrt.split(",") if args.wrt else None
    text = module.ir(args.stage, fn=args.fn, wrt=wrt, dtype=args.dtype, format=args.format)
    if args.output is None:
        print(text, end="")
    elif args.format == "dot" and args.output.endswith((".svg", ".png")):
        if text.count("digraph ") > 1:
            raise ValueError("a drawing shows one function: name it with --fn")
        print(f"wrote {render(text, args.output)}")
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"wrote {args.output}")
    return 0


def _grad(args: argparse.Namespace) -> int:
    from reverie.cli_grad import run_grad

    module = load(args.file)
    return run_grad(module, args.fn, args.wrt, args.dims, args.dtype, args.check, args.bench)


def _demo(args: argparse.Namespace) -> int:
    from reverie.demo import run_demo

    return run_demo(plot=args.plot)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per README.md entry."""
    parser = argparse.ArgumentParser(prog="reverie", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="fit a bundled model with compiled gradients")
    demo.add_argument("--plot", default=None, metavar="FILE",
                      help="save the loss curve as an image (needs matplotlib)")
    check = commands.add_parser("check", help="parse and type-check a .rv file")
    check.add_argument("file")
    emit = commands.add_parser("emit", help="print the IR of a .rv file at one stage")
    emit.add_argument("file")
    emit.add_argument("--stage", choices=IR_NAMES, default="tensor", metavar="STAGE",
                      help="a view (ast, tensor, grad-raw: the adjoint before simplification, "
                           "grad, loops, mlir, llvm-raw: the LLVM IR before LLVM's optimiser, "
                           "llvm, asm) or a pass: the IR after it, as REVERIE_PRINT_IR prints "
                           "it (docs/pipeline.md)")
    emit.add_argument("--fn", default=None, help="only this function")
    emit.add_argument("--wrt", default=None,
                      help="comma-separated parameters (stages grad and grad-raw; with "
                           "loops, llvm-raw, llvm, asm or mlir: show the adjoint)")
    emit.add_argument("--dtype", choices=FLOAT_DTYPES, default="f32",
                      help="what 'float' means in the printed specialisation")
    emit.add_argument("--format", choices=FORMATS, default="text",
                      help="dot: the dataflow graph in Graphviz dot (stages tensor, grad)")
    emit.add_argument("-o", "--output", default=None, metavar="FILE",
                      help="write to FILE; with --format dot, FILE.svg or FILE.png is drawn "
                           "by Graphviz's dot program")
    grad = commands.add_parser("grad", help="run a function and its gradient on random inputs")
    grad.add_argument("file")
    grad.add_argument("--fn", required=True, help="the function to differentiate")
    grad.add_argument("--wrt", default=None, help="comma-separated parameters (default: floats)")
    grad.add_argument("--dims", default=None, help="dimension sizes, e.g. N=1000,D=8")
    grad.add_argument("--dtype", choices=FLOAT_DTYPES, default="f64")
    grad.add_argument("--check", action="store_true", help="compare with finite differences")
    grad.add_argument("--bench", action="store_true", help="time value, gradient and NumPy")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; compile errors print as diagnostics and exit with status 1."""
    args = build_parser().parse_args(argv)
    handlers = {"demo": _demo, "check": _check, "emit": _emit, "grad": _grad}
    try:
        return handlers[args.command](args)
    except CompileError as e:
        print(e, file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as e:
        print(f"reverie: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
