"""Text form of the tensor IR, stable enough for golden files.

    func @loss(%x: f32[N], %w: f32[N]) -> f32 {
      %0 = mul %x, %w : f32[N]
      %1 = reduce_sum %0 {axes = [0]} : f32
      return %1
    }

Values print by their hint name (parameters, index and loop variables) or by a number
assigned in order of definition; a repeated hint gets a suffix. Nothing depends on object
identity or global counters, so printing the same IR twice gives the same text.
"""

from __future__ import annotations

from typing import Any

from reverie.compiler.ir.core import Block, Function, Module, Op, Value
from reverie.compiler.ir.dims import Dim


class Namer:
    """Assigns each value its printed name on first definition."""

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, value: Value) -> str:
        if value.name:
            name, suffix = value.name, 1
            while name in self.used:
                name, suffix = f"{value.name}_{suffix}", suffix + 1
        else:
            name = str(self.counter)
            self.counter += 1
        self.used.add(name)
        self.names[value] = "%" + name
        return self.names[value]

    def __getitem__(self, value: Value) -> str:
        return self.names.get(value, "%<undefined>")


def format_attr(value: Any) -> str:
    """An attribute value: Dims as expressions, sequences in brackets, ranges as lo..hi."""
    if isinstance(value, Dim):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], str) \
            and isinstance(value[1], Dim):
        return f"{value[0]} in {value[1]}..{value[2]}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    return str(value)


def _format_block(block: Block, namer: Namer, indent: str, lines: list[str]) -> None:
    for op in block.ops:
        _format_op(op, namer, indent, lines)


def _format_op(op: Op, namer: Namer, indent: str, lines: list[str]) -> None:
    operands = ", ".join(namer[v] for v in op.operands)
    attrs = ", ".join(f"{k} = {format_attr(v)}" for k, v in op.attrs.items() if k != "label")
    head = op.name + (f" {operands}" if operands else "") + (f" {{{attrs}}}" if attrs else "")
    types = ", ".join(str(r.type) for r in op.results)
    if op.regions:
        lines.append(f"{indent}{_results(op, namer)}{head} (")
        for number, region in enumerate(op.regions):
            if number:  # `if` and `while` have a second region: `} (params) {`
                lines.append(f"{indent}}} (")
            params = ", ".join(f"{namer.define(p)}: {p.type}" for p in region.params)
            lines[-1] += f"{params}) {{"
            _format_block(region, namer, indent + "  ", lines)
            lines.append(f"{indent}  yield " + ", ".join(namer[v] for v in region.results))
        lines.append(f"{indent}}} : {types}")
        return
    lines.append(f"{indent}{_results(op, namer)}{head} : {types}")


def _results(op: Op, namer: Namer) -> str:
    if not op.results:
        return ""
    return ", ".join(namer.define(r) for r in op.results) + " = "


def format_function(fn: Function) -> str:
    """One function as text."""
    namer = Namer()
    params = ", ".join(f"{namer.define(p)}: {p.type}" for p in fn.params)
    types = ", ".join(str(t) for t in fn.result_types)
    ret = types if len(fn.result_types) == 1 else f"({types})"
    lines = [f"func @{fn.name}({params}) -> {ret} {{"]
    _format_block(fn.body, namer, "  ", lines)
    lines.append("  return " + ", ".join(namer[v] for v in fn.body.results))
    lines.append("}")
    return "\n".join(lines)


def format_module(module: Module) -> str:
    """Every function, separated by blank lines."""
    return "\n\n".join(format_function(f) for f in module.functions.values()) + "\n"
