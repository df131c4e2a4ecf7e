"""Text form of the loop IR (what `module.ir("loops")` shows).

    kernel @scale(x: f32[N] input 0, y: f32[N] output 0) {
      for %i0 in 0..N {
        %0 = load x[%i0]
        %1 = mul %0, 2.0 : f32
        store y[%i0] = %1
      }
    }

Whole buffers are indexed per axis (`x[%i0, %i1]`); strided views print the element offset
they compute (`x[%i1 * N + %i0]` for a transpose).
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Dim, shape_str
from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulate,
    Accumulator,
    ArgUpdate,
    Buffer,
    Check,
    Const,
    ExitUnless,
    ForLoop,
    Guarded,
    If,
    Let,
    LinalgCall,
    Load,
    Loop,
    Matmul,
    Operand,
    Program,
    Sort,
    Stmt,
    Store,
    Var,
    View,
    WhileLoop,
)


def format_operand(operand: Operand) -> str:
    """A variable, literal or index expression."""
    if isinstance(operand, Var):
        return operand.name
    if isinstance(operand, Const):
        value = operand.value
        if operand.dtype == "bool":
            return "true" if value else "false"
        return repr(float(value)) if operand.dtype in FLOAT_DTYPES else str(int(value))
    return str(operand)


def format_access(view: View, index: tuple[Dim, ...]) -> str:
    """`name[i, j]` for a whole buffer, `name[flat offset]` for a strided view."""
    if view.covers(view.buffer):
        return f"{view.buffer.name}[{', '.join(str(i) for i in index)}]"
    return f"{view.buffer.name}[{view.flat(index)}]"


def format_view(view: View) -> str:
    """A view given whole to a statement (matmul and sort operands)."""
    if view.covers(view.buffer):
        return view.buffer.name
    strides = ", ".join(str(s) for s in view.strides)
    return f"{view.buffer.name}{{offset = {view.offset}, strides = [{strides}]}}"


def _statement(stmt: Stmt, program: Program, indent: str, lines: list[str]) -> None:
    if isinstance(stmt, BLOCK_STMTS):
        _block(stmt, program, indent, lines)
    else:
        lines.append(indent + _line(stmt, program))


def _line(stmt: Stmt, program: Program) -> str:
    """A statement without a body, as one line."""
    if isinstance(stmt, Let):
        args = ", ".join(format_operand(a) for a in stmt.args)
        return f"{stmt.var.name} = {stmt.op} {args} : {stmt.var.dtype}"
    if isinstance(stmt, Load):
        guard = f" if {stmt.guard.name} else 0" if stmt.guard else ""
        return f"{stmt.var.name} = load {format_access(stmt.view, stmt.index)}{guard}"
    if isinstance(stmt, Store):
        return f"store {format_access(stmt.view, stmt.index)} = {format_operand(stmt.value)}"
    if isinstance(stmt, Accumulator):
        return f"{stmt.var.name}: {stmt.var.dtype} = {format_operand(stmt.init)}"
    if isinstance(stmt, Accumulate):
        return f"{stmt.var.name} = {stmt.kind} {stmt.var.name}, {format_operand(stmt.value)}"
    if isinstance(stmt, ArgUpdate):
        return (f"{stmt.best.name}, {stmt.best_index.name} = {stmt.kind} "
                f"({stmt.best.name}, {stmt.best_index.name}), "
                f"({format_operand(stmt.value)}, {stmt.index})")
    if isinstance(stmt, Check):
        site = program.sites[stmt.site]
        what = f"'{site.label}' axis {site.axis}" if site.kind == "index" else \
            f"{site.kind} {site.label}"
        return f"check 0 <= {stmt.index} < {stmt.size} else error {stmt.site}  # {what}"
    if isinstance(stmt, ExitUnless):
        return f"exit unless {stmt.cond.name}"
    if isinstance(stmt, Matmul):
        return (f"matmul {format_view(stmt.out)} = {format_view(stmt.a)} @ "
                f"{format_view(stmt.b)}  # packing in {stmt.pack.name}")
    if isinstance(stmt, Sort):
        order = "descending" if stmt.descending else "ascending"
        return (f"sort {format_view(stmt.out)} = argsort {format_view(stmt.keys)} {order}"
                f"  # scratch {stmt.scratch.name}")
    if isinstance(stmt, LinalgCall):
        sizes = ", ".join(map(str, stmt.sizes))
        names = ", ".join(b.name if b in stmt.written else f"{b.name} (read)"
                          for b in stmt.buffers)
        return f"linalg {stmt.op} {names} in place  # sizes {sizes}, flags {stmt.flags}"
    raise TypeError(f"unknown loop statement {stmt!r}")


def format_head(stmt: Stmt, program: Program) -> str:
    """A statement's first line without its body (`for %i0 in 0..N`), as the verifier's
    error messages quote it."""
    if not isinstance(stmt, If | Guarded | Loop | ForLoop | WhileLoop):
        return _line(stmt, program)
    if isinstance(stmt, If):
        return f"if {stmt.cond.name}"
    if isinstance(stmt, Guarded):
        return f"{stmt.var.name} = if {stmt.cond.name}"
    if isinstance(stmt, Loop):
        return f"for {stmt.var} in {stmt.lo}..{stmt.hi}"
    states = ", ".join(f"{s.current.name}/{s.next.name} in ({s.first.name}, {s.second.name})"
                       for s in stmt.states)
    if isinstance(stmt, WhileLoop):
        return f"while carry {states} counting {stmt.var}"
    return f"for {stmt.var} in {stmt.lo}..{stmt.hi} carry {states}"


def _block(stmt: If | Guarded | Loop | ForLoop | WhileLoop, program: Program, indent: str,
           lines: list[str]) -> None:
    """A statement with a body: its opening line, the body indented, its closing lines."""
    if isinstance(stmt, Guarded):
        closing = [f"  yield {format_operand(stmt.value)}", "} else 0"]
    elif isinstance(stmt, ForLoop | WhileLoop):
        names = ", ".join(f"{s.current.name} <-> {s.next.name}" for s in stmt.states)
        closing = [f"  swap {names}", "}"]
    else:
        closing = ["}"]
    lines.append(f"{indent}{format_head(stmt, program)} {{")
    for inner in stmt.body:
        _statement(inner, program, indent + "  ", lines)
    lines.extend(indent + line for line in closing)


def _declaration(buffer: Buffer) -> str:
    shape = shape_str(buffer.shape) if buffer.shape else ""
    where = f" {buffer.role} {buffer.slot}" if buffer.role in ("input", "output") else ""
    return f"{buffer.name}: {buffer.dtype}{shape}{where}"


def format_program(program: Program) -> str:
    """The whole kernel as text."""
    params = ", ".join(_declaration(b) for b in program.inputs + program.outputs)
    lines = [f"kernel @{program.name}({params}) {{"]
    for temp in program.temps:
        lines.append(f"  {temp.role} {_declaration(temp)}")
    for stmt in program.body:
        _statement(stmt, program, "  ", lines)
    lines.append("}")
    return "\n".join(lines)
