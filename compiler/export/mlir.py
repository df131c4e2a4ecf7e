"""Export a tensor-IR `Function` as MLIR text in upstream dialects (docs/api.md §11, stage "mlir").

Consumes a typed `Function` (any specialisation, including adjoints); produces text that
`mlir-opt` parses and lowers to LLVM with the pipeline in `runtime/native/mlir_backend.py`.
Dialects: `func`, `arith`, `math`, `memref`, `scf` and `linalg` (generic form only, which
reads the same in MLIR 19 and 22).

Calling convention (destination passing, `llvm.emit_c_interface`):

    func.func @f(%x: memref<?xf32, strided<[?], offset: ?>>,   // inputs, any NumPy layout
                 %result0: memref<f32>,                        // one buffer per result
                 %status: memref<4xi64>,                       // {failed, value, bound, site}
                 %trips: memref<2xi64>)                        // only with trip dimensions

Inputs of rank 0 are rank-0 memrefs too. Dimension sizes are read from the arguments
(`memref.dim`); the caller has checked that they agree (`runtime/native/call.py`). Run-time
errors (an integer subscript out of range, `argmax` of an empty tensor) never touch
memory outside a buffer: the faulty access is skipped and the first error is written to
`%status`; `MlirFunction.errors[site]` is its message, with `{value}` and `{bound}` to fill.
A function with trip dimensions (`ir/capacity.py`) reads their capacities from `%trips`,
in sorted order; a count past its capacity is one of those errors.

Inside, rank-0 values are SSA scalars and every other value is a buffer that one op
allocates and the block frees after its last use (see `Exporter.block`). The per-op rules
are the `RuleTable` `LOWERINGS` of `mlir_ops.py`, filled by it and by the modules this one
imports for them (`mlir_regions.py`, `mlir_control.py`, `mlir_scan.py`, `mlir_sort.py`,
`mlir_linalg.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# With mlir_ops.py, these modules fill LOWERINGS: importing this one gives the whole table
from reverie.compiler.export import (  # noqa: F401
    mlir_control,
    mlir_linalg,
    mlir_regions,
    mlir_scan,
    mlir_sort,
)
from reverie.compiler.export.mlir_ops import LOWERINGS, identity_map
from reverie.compiler.export.mlir_writer import MlirWriter, Tensor, memref_type
from reverie.compiler.ir.capacity import trip_symbols
from reverie.compiler.ir.core import Block, Function, Op
from reverie.compiler.ir.dims import Dim

STATUS_TYPE = "memref<4xi64>"

FAIL_FUNCTION = """\
// Records the first run-time error of a call: {1, value, bound, site} in %status.
func.func private @reverie_fail(%status: memref<4xi64>, %value: i64, %bound: i64, %site: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %failed = memref.load %status[%c0] : memref<4xi64>
  %first = arith.cmpi eq, %failed, %zero : i64
  scf.if %first {
    memref.store %one, %status[%c0] : memref<4xi64>
    memref.store %value, %status[%c1] : memref<4xi64>
    memref.store %bound, %status[%c2] : memref<4xi64>
    memref.store %site, %status[%c3] : memref<4xi64>
  }
  return
}
"""


@dataclass
class MlirFunction:
    """One exported `func.func`: its symbol, its text, and the message of each run-time
    error site (with `{value}` and `{bound}` to fill from the status buffer)."""

    symbol: str
    text: str
    errors: list[str]


class Exporter:
    """Exports one function: binds IR values to MLIR values and applies the op rules."""

    def __init__(self, fn: Function, filename: str) -> None:
        self.fn = fn
        self.w = MlirWriter(filename)
        self.errors: list[str] = []
        self.status = "%status"

    def lower(self, op: Op, args: list[Tensor]) -> list[Tensor]:
        """The results of `op` (a CompileError names an op without an MLIR rule)."""
        return LOWERINGS.lookup(op.name, op.span)(self, op, args)

    def block(self, block: Block, args: Sequence[Tensor]) -> list[Tensor]:
        """Export `block` with its parameters bound to `args`; return its results.

        Buffers the block allocates are freed right after their last use, except the
        block's results, which the caller owns. Parameters are borrowed, never freed here.
        """
        env = {param: Tensor(arg.ssa, arg.type, arg.memref)
               for param, arg in zip(block.params, args, strict=True)}
        last_use = {v: i for i, op in enumerate(block.ops) for v in op.operands}
        returned = set(block.results)
        outer_span = self.w.span
        for i, op in enumerate(block.ops):
            self.w.span = op.span or outer_span
            results = self.lower(op, [env[v] for v in op.operands])
            env.update(zip(op.results, results, strict=True))
            finished = [v for v in dict.fromkeys(op.operands) if last_use[v] == i]
            unused = [v for v in op.results if v not in last_use]
            self.release([env[v] for v in finished + unused if v not in returned])
        self.w.span = outer_span
        return [env[v] for v in block.results]

    def release(self, tensors: Sequence[Tensor]) -> None:
        """Free the owned buffers among `tensors` (each once)."""
        freed: set[str] = set()
        for t in tensors:
            if t.owned and t.ssa not in freed:
                self.w.dealloc(t)
                freed.add(t.ssa)

    def copy_into(self, source: Tensor, target: Tensor) -> None:
        """Write the elements of `source` into buffer `target` of the same shape."""
        if not source.is_buffer:
            self.w.store(source.ssa, target, [])
            return
        self.w.parallel(target, [(source, identity_map(source.type.rank))],
                        lambda _, elements: elements[0])

    def copy(self, source: Tensor) -> Tensor:
        """A new owned buffer holding the elements of `source`."""
        target = self.w.alloc(source.type)
        self.copy_into(source, target)
        return target

    def fail_unless(self, ok: str, value: str, bound: str, message: str) -> None:
        """Record error `message` in the status buffer when i1 `ok` is false."""
        site = len(self.errors)
        self.errors.append(message)
        w = self.w
        failed = w.assign(f"arith.xori {ok}, {w.const(True, 'i1')} : i1")
        w.if_then(failed, lambda: w.line(
            f"func.call @reverie_fail({self.status}, {value}, {bound}, "
            f"{w.const(site, 'i64')}) : ({STATUS_TYPE}, i64, i64, i64) -> ()"))

    # ------------------------------------------------------------ the function

    def function(self, symbol: str) -> str:
        """The text of the whole function as `func.func @symbol`."""
        fn, w = self.fn, self.w
        w.span = fn.span
        names = _argument_names(fn)
        w.taken.update(name[1:] for name in names)
        trips = trip_symbols(fn.body)
        trips_arg, trips_type = f"{names[-1]}_trips", f"memref<{len(trips)}xi64>"
        self.status = names[-1]
        inputs = [Tensor(name, v.type, memref_type(v.type, strided=True))
                  for name, v in zip(names, fn.params, strict=False)]
        outputs = [Tensor(name, t, memref_type(t))
                   for name, t in zip(names[len(inputs):-1], fn.result_types, strict=True)]
        _bind_dimensions(w, inputs, fn.value_dims)
        for k, trip in enumerate(trips):
            w.bind_symbol(trip, w.prologue_op(
                f"memref.load {trips_arg}[{w.index(k)}] : {trips_type}", "trip"))
        args = [Tensor(w.load(t, []), t.type) if t.type.rank == 0 else t for t in inputs]
        results = self.block(fn.body, args)
        w.span = fn.span
        for result, output in zip(results, outputs, strict=True):
            self.copy_into(result, output)
        self.release(results)
        signature = ", ".join(f"{t.ssa}: {t.memref}" for t in inputs + outputs)
        signature += f", {self.status}: {STATUS_TYPE}"
        signature += f", {trips_arg}: {trips_type}" if trips else ""
        head = f"func.func @{symbol}({signature}) attributes {{llvm.emit_c_interface}} {{"
        return "\n".join([head, *w.prologue, *w.lines, "  return", "}" + w.loc()])


def _argument_names(fn: Function) -> list[str]:
    """SSA names: the parameters' own, then `%result<k>` per result, then `%status`."""
    taken: set[str] = set()

    def unique(name: str) -> str:
        name = re.sub(r"[^A-Za-z0-9_$.]", "_", name)
        while name in taken or name.isdigit():
            name += "_"
        taken.add(name)
        return "%" + name

    names = [unique(name) for name in fn.param_names]
    names += [unique(f"result{k}") for k in range(len(fn.result_types))]
    return names + [unique("status")]


def _bind_dimensions(w: MlirWriter, inputs: Sequence[Tensor],
                     value_dims: Sequence[tuple[str, int]]) -> None:
    """Read every dimension symbol's size from the arguments, in the prologue.

    A symbol bound by an i64 scalar parameter is that parameter's value; one that is a
    whole axis (`x: f32[N]`) is that axis's size; one that only appears in linear
    expressions (`y: f32[N + 1]`) is solved from one, as the call boundary does.
    """
    for symbol, index in value_dims:
        t = inputs[index]
        w.bind_symbol(symbol, w.prologue_op(f"memref.load {t.ssa}[] : {t.memref}", symbol))
    axes = [(t, axis, d) for t in inputs for axis, d in enumerate(t.type.shape)]

    def size(t: Tensor, axis: int, symbol: str | None = None) -> str:
        extent = w.prologue_op(f"memref.dim {t.ssa}, {w.index(axis)} : {t.memref}")
        return w.prologue_op(f"arith.index_cast {extent} : index to i64", symbol)

    for t, axis, d in axes:
        name = str(d)
        if d == Dim.sym(name) and name not in w.symbols:
            w.bind_symbol(name, size(t, axis, name))
    progress = True
    while progress:
        progress = False
        for t, axis, d in axes:
            unknown = d.symbols() - set(w.symbols)
            line = _linear(d, unknown.pop(), set(w.symbols)) if len(unknown) == 1 else None
            if line:
                symbol, at_zero, slope = line
                rest = w.prologue_op(f"arith.subi {size(t, axis)}, {w.dim(at_zero)} : i64")
                w.bind_symbol(symbol, w.prologue_op(f"arith.divsi {rest}, {w.dim(slope)} : i64",
                                                    symbol))
                progress = True


def _linear(d: Dim, symbol: str, known: set[str]) -> tuple[str, Dim, Dim] | None:
    """(symbol, d at symbol = 0, slope) when `d` is linear in `symbol` over `known` symbols."""
    at_zero = d.substitute({symbol: Dim.const(0)})
    slope = d.substitute({symbol: Dim.const(1)}) - at_zero
    if slope == Dim.const(0) or d.substitute({symbol: Dim.const(2)}) - at_zero != slope * 2:
        return None
    if (slope.symbols() | at_zero.symbols()) - known:
        return None
    return symbol, at_zero, slope


def export_function(fn: Function, filename: str = "<source>",
                    symbol: str | None = None) -> MlirFunction:
    """`fn` as one `func.func @symbol` (default: its own name); locations name `filename`."""
    exporter = Exporter(fn, filename)
    name = symbol or fn.name
    return MlirFunction(name, exporter.function(name), exporter.errors)


def mlir_module(parts: Sequence[MlirFunction]) -> str:
    """The text of one MLIR module holding the exported functions `parts`."""
    names = ", ".join(f"@{part.symbol}" for part in parts)
    header = f"// {names}: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).\n"
    return header + "\n\n".join(part.text for part in parts) + "\n\n" + FAIL_FUNCTION


def export_mlir(fn: Function, filename: str = "<source>") -> str:
    """The MLIR module text of `fn` (stage "mlir"); locations name `filename`."""
    return mlir_module([export_function(fn, filename)])


def export_mlir_module(functions: Sequence[Function], filename: str = "<source>") -> str:
    """One MLIR module holding `functions` (their names must differ)."""
    return mlir_module([export_function(fn, filename) for fn in functions])
