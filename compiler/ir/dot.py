"""The tensor IR as a dataflow graph, in Graphviz dot text (`module.ir(stage, format="dot")`).

`format_dot(fn, program)` draws one function: a node per parameter (an ellipse), per
top-level op (a box labelled like the text printer's line: `%x_bar = mul : f32[N]`) and one
`return` node; an edge runs from each value's definition to every op that uses it, labelled
with the value's name. Values are named exactly as `printer.format_function` names them, so
the picture and the text can be read side by side. An op with regions (`for`, `generic`) is
one node; its body is not drawn (print the text to read it).

An adjoint (`grad`, `vjp`) is drawn in two colours. Its first results are the program's
own; the **primal half** is every op those results depend on, and every other op (what
only the gradients need) is the **adjoint half**:

    primal   light blue  (the forward computation, copied from the program)
    adjoint  salmon      (the reverse sweep, the seed and the cotangent parameters)

and a `legend` note says which colour is which.

`render(dot_text, path)` turns the text into an SVG or PNG file with Graphviz's `dot`
program, raising a ValueError that says so when `dot` is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from reverie.compiler.ir.core import Function, Op, Value
from reverie.compiler.ir.tensor_printer import Namer, format_attr

PRIMAL_COLOUR, ADJOINT_COLOUR = "lightblue", "salmon"
RENDERED_SUFFIXES = (".svg", ".png")
LEGEND = f"{PRIMAL_COLOUR}: primal half\n{ADJOINT_COLOUR}: adjoint half"
LONGEST_ATTRS = 40  # characters of an op's attributes shown in its node; longer ones end "…"


def primal_half(fn: Function, primal_results: int) -> set[Op]:
    """The top-level ops that the first `primal_results` results of `fn` depend on."""
    needed: set[Op] = set()
    pending = [v.op for v in fn.body.results[:primal_results] if v.op is not None]
    while pending:
        op = pending.pop()
        if op in needed:
            continue
        needed.add(op)
        pending += [v.op for v in op.operands if v.op is not None]
    return needed


def _define(op: Op, namer: Namer) -> None:
    """Name `op`'s results, then the values inside its regions, in the printer's order
    (the insides are named so that later values get the printer's numbers; not drawn)."""
    for result in op.results:
        namer.define(result)
    for region in op.regions:
        for param in region.params:
            namer.define(param)
        for inner in region.ops:
            _define(inner, namer)


def _quoted(text: str) -> str:
    """A dot string: backslashes and quotes escaped, line breaks as dot's `\\n`."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _op_label(op: Op, namer: Namer) -> str:
    results = ", ".join(namer[r] for r in op.results)
    attrs = ", ".join(f"{k} = {format_attr(v)}" for k, v in op.attrs.items() if k != "label")
    if len(attrs) > LONGEST_ATTRS:
        attrs = attrs[:LONGEST_ATTRS - 1] + "…"
    head = op.name + (f" {{{attrs}}}" if attrs else "") + (" (region)" if op.regions else "")
    types = ", ".join(str(r.type) for r in op.results)
    return (f"{results} = " if results else "") + f"{head}\n{types}"


def format_dot(fn: Function, program: Function | None = None) -> str:
    """Function `fn` as a dot digraph. When `fn` is the adjoint of `program`, its primal
    half (and `program`'s parameters) is coloured apart from its adjoint half (and the
    cotangent parameters an adjoint adds); without `program` all of `fn` is primal."""
    namer = Namer()
    if program is None:
        primal, primal_params = set(fn.body.ops), len(fn.params)
    else:
        primal = primal_half(fn, len(program.body.results))
        primal_params = len(program.params)
    node: dict[Value, str] = {}
    lines = [f"digraph {_quoted(fn.name)} {{",
             '  node [shape=box, style=filled, fontname="monospace"];']

    def colour(is_primal: bool) -> str:
        return PRIMAL_COLOUR if is_primal else ADJOINT_COLOUR

    for i, param in enumerate(fn.params):
        name = namer.define(param)
        node[param] = f"p{i}"
        lines.append(f"  p{i} [shape=ellipse, fillcolor={colour(i < primal_params)}, "
                     f"label={_quoted(f'{name}: {param.type}')}];")
    for i, op in enumerate(fn.body.ops):
        _define(op, namer)
        node.update((result, f"n{i}") for result in op.results)
        lines.append(f"  n{i} [fillcolor={colour(op in primal)}, "
                     f"label={_quoted(_op_label(op, namer))}];")
        lines += [f"  {node[v]} -> n{i} [label={_quoted(namer[v])}];" for v in op.operands]
    if program is not None:
        lines.append(f"  legend [shape=note, style=solid, label={_quoted(LEGEND)}];")
    lines.append('  ret [shape=doubleoctagon, fillcolor=white, label="return"];')
    lines += [f"  {node[v]} -> ret [label={_quoted(f'{i}: {namer[v]}')}];"
              for i, v in enumerate(fn.body.results)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot_text: str, path: str | Path) -> Path:
    """Write `dot_text` drawn as an SVG or PNG file (by `path`'s suffix) with Graphviz."""
    path = Path(path)
    if path.suffix not in RENDERED_SUFFIXES:
        raise ValueError(f"a rendered graph is an {' or '.join(RENDERED_SUFFIXES)} file, "
                         f"got {path.name!r}")
    program = shutil.which("dot")
    if program is None:
        raise ValueError(f"drawing {path.name} needs Graphviz's `dot` program, which is not "
                         "installed (apt-get install graphviz); the dot text itself needs "
                         "no program: write it to a .dot file")
    drawn = subprocess.run([program, f"-T{path.suffix[1:]}"], input=dot_text.encode(),
                           capture_output=True, check=False)
    if drawn.returncode != 0:
        raise ValueError(f"dot failed on the graph: {drawn.stderr.decode().strip()}")
    path.write_bytes(drawn.stdout)
    return path
