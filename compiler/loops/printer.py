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

from .ir import (
    Accumulate,
    Accumulator,
    ArgUpdate,
    Buffer,
    Check,
    Const,
    ForLoop,
    Guarded,
    If,
    Let,
    Load,
    Loop,
    Matmul,
    Operand,
    Program,
    Stmt,
    Store,
    Var,
    View,
)


def format_operand(operand: Operand) -> str:
    """A variable, literal or index expression."""
    if isinstance(operand, Var):
        return operand.name
    if isinstance(operand, Const):
        value = operand.value
        if operand.dtype == "bool":
            return "true" if value else "false"
        return repr(float(value)) if operand.dtype in ("f32", "f64") else str(int(value))
    return str(operand)


def format_access(view: View, index: tuple[Dim, ...]) -> str:
    """`name[i, j]` for a whole buffer, `name[flat offset]` for a strided view."""
    if view.covers(view.buffer):
        return f"{view.buffer.name}[{', '.join(str(i) for i in index)}]"
    return f"{view.buffer.name}[{view.flat(index)}]"


def format_view(view: View) -> str:
    """A view given whole to a statement (matmul operands)."""
    if view.covers(view.buffer):
        return view.buffer.name
    strides = ", ".join(str(s) for s in view.strides)
    return f"{view.buffer.name}{{offset = {view.offset}, strides = [{strides}]}}"


def _statement(stmt: Stmt, program: Program, indent: str, lines: list[str]) -> None:
    if isinstance(stmt, Let):
        args = ", ".join(format_operand(a) for a in stmt.args)
        lines.append(f"{indent}{stmt.var.name} = {stmt.op} {args} : {stmt.var.dtype}")
    elif isinstance(stmt, Load):
        guard = f" if {stmt.guard.name} else 0" if stmt.guard else ""
        lines.append(f"{indent}{stmt.var.name} = load {format_access(stmt.view, stmt.index)}"
                     f"{guard}")
    elif isinstance(stmt, Store):
        lines.append(f"{indent}store {format_access(stmt.view, stmt.index)} = "
                     f"{format_operand(stmt.value)}")
    elif isinstance(stmt, Accumulator):
        lines.append(f"{indent}{stmt.var.name}: {stmt.var.dtype} = {format_operand(stmt.init)}")
    elif isinstance(stmt, Accumulate):
        lines.append(f"{indent}{stmt.var.name} = {stmt.kind} {stmt.var.name}, "
                     f"{format_operand(stmt.value)}")
    elif isinstance(stmt, ArgUpdate):
        lines.append(f"{indent}{stmt.best.name}, {stmt.best_index.name} = {stmt.kind} "
                     f"({stmt.best.name}, {stmt.best_index.name}), "
                     f"({format_operand(stmt.value)}, {stmt.index})")
    elif isinstance(stmt, Check):
        site = program.sites[stmt.site]
        what = f"'{site.label}' axis {site.axis}" if site.kind == "index" else \
            f"{site.kind} {site.label}"
        lines.append(f"{indent}check 0 <= {stmt.index} < {stmt.size} else error {stmt.site}"
                     f"  # {what}")
    elif isinstance(stmt, If):
        lines.append(f"{indent}if {stmt.cond.name} {{")
        for inner in stmt.body:
            _statement(inner, program, indent + "  ", lines)
        lines.append(f"{indent}}}")
    elif isinstance(stmt, Guarded):
        lines.append(f"{indent}{stmt.var.name} = if {stmt.cond.name} {{")
        for inner in stmt.body:
            _statement(inner, program, indent + "  ", lines)
        lines.append(f"{indent}  yield {format_operand(stmt.value)}")
        lines.append(f"{indent}}} else 0")
    elif isinstance(stmt, Loop):
        lines.append(f"{indent}for {stmt.var} in {stmt.lo}..{stmt.hi} {{")
        for inner in stmt.body:
            _statement(inner, program, indent + "  ", lines)
        lines.append(f"{indent}}}")
    elif isinstance(stmt, ForLoop):
        states = ", ".join(f"{s.current.name}/{s.next.name} in ({s.first.name}, {s.second.name})"
                           for s in stmt.states)
        lines.append(f"{indent}for {stmt.var} in {stmt.lo}..{stmt.hi} carry {states} {{")
        for inner in stmt.body:
            _statement(inner, program, indent + "  ", lines)
        names = ", ".join(f"{s.current.name} <-> {s.next.name}" for s in stmt.states)
        lines.append(f"{indent}  swap {names}")
        lines.append(f"{indent}}}")
    elif isinstance(stmt, Matmul):
        lines.append(f"{indent}matmul {format_view(stmt.out)} = {format_view(stmt.a)} @ "
                     f"{format_view(stmt.b)}  # packing in {stmt.pack.name}")
    else:
        raise TypeError(f"unknown loop statement {stmt!r}")


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
