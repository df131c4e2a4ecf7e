"""A text builder for MLIR functions: SSA names, source locations, constants, loops, buffers.

Consumes calls from the exporter (`mlir.py`, `mlir_ops.py`, `mlir_regions.py`); produces
the lines of one `func.func` body. Values are SSA names (`%12`); every op line ends with
`loc("file.rv":line:col)` of the IR op being exported, so MLIR's diagnostics point at the
Reverie source.

Constants and dimension sizes go to a prologue at the top of the function, so they
dominate every use, including uses inside loops and `linalg.generic` bodies (neither is
isolated from above). Tensors of rank 0 are plain SSA scalars; others are memrefs with
dynamic sizes (`memref<?x?xf32>`). `bool` is `i1` in registers and `i8` in memory, the
layout NumPy uses. The storage types `bf16` and `f16` are MLIR's `bf16` and `f16` in memory
and in registers; after `ir/widen_storage.py` only casts, constants, loads, stores,
selects and carried values handle them (the casts are `mlir_scalar.cast`).

Loop builders, both used by the exporter:
- `parallel`: a `linalg.generic` over the shape of an output buffer, every loop parallel;
  inputs reached through affine indexing maps arrive as block arguments, others are read
  with `memref.load` at indices computed from `linalg.index`.
- `loop_nest`: nested `scf.for` loops carrying scalar accumulators (`iter_args`), for
  reductions, scatters and `for`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from reverie.compiler.ir.dims import CeilSqrt, Dim, FloorDiv, NonNegative
from reverie.compiler.ir.types import FLOAT_DTYPES, NUMPY_DTYPES, TensorType
from reverie.dsl.ast import NO_SPAN, Span
from reverie.dsl.diagnostics import CompileError, error_at

REGISTER = {"f32": "f32", "f64": "f64", "bf16": "bf16", "f16": "f16", "i32": "i32",
            "i64": "i64", "bool": "i1"}
STORAGE = {**REGISTER, "bool": "i8"}


def memref_type(t: TensorType, strided: bool = False) -> str:
    """`memref<?x?xf32>`; strided: any NumPy layout, `strided<[?, ?], offset: ?>`."""
    shape = "?x" * t.rank
    layout = ""
    if strided:
        layout = ", strided<[" + ", ".join("?" * t.rank) + "], offset: ?>"
    return f"memref<{shape}{STORAGE[t.dtype]}{layout}>"


@dataclass
class Tensor:
    """An IR value in MLIR: an SSA scalar (rank 0) or a memref (`memref` is its type)."""

    ssa: str
    type: TensorType
    memref: str | None = None
    owned: bool = False

    @property
    def is_buffer(self) -> bool:
        return self.memref is not None


def float_literal(value: float, dtype: str) -> str:
    """The exact bit pattern of `value` (rounded to float dtype `dtype`) as an MLIR hex float
    literal (covers NaN and Inf): `float_literal(1.0, "bf16") == "0x3F80"`."""
    with np.errstate(over="ignore"):
        bits = np.asarray(value, np.float64).astype(NUMPY_DTYPES[dtype]).tobytes()
    return "0x" + (bits if sys.byteorder == "big" else bits[::-1]).hex().upper()


class MlirWriter:
    """Lines of one function body, with fresh SSA names and a prologue of constants."""

    def __init__(self, filename: str) -> None:
        self.filename = filename.replace("\\", "\\\\").replace('"', '\\"')
        self.prologue: list[str] = []
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.span: Span | None = None
        self.symbols: dict[str, str] = {}
        self.taken: set[str] = set()
        self._constants: dict[tuple[str, str], str] = {}
        self.constant_values: dict[str, object] = {}
        self._dims: dict[tuple[Dim, str], str] = {}

    # ------------------------------------------------------------ text

    def fresh(self) -> str:
        """A new numbered SSA name."""
        self.counter += 1
        return f"%{self.counter - 1}"

    def named(self, hint: str) -> str:
        """A new SSA name spelled like `hint` (suffixed with `_` until unused)."""
        name = hint
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return "%" + name

    def loc(self) -> str:
        """The location suffix of the op being exported."""
        span = self.span
        if span is None or span.line <= 0:
            return ""
        return f' loc("{self.filename}":{span.line}:{span.column})'

    def line(self, text: str, located: bool = True) -> None:
        """Append one line of the body at the current depth."""
        self.lines.append("  " * self.depth + text + (self.loc() if located else ""))

    def assign(self, text: str) -> str:
        """Append `%new = text` and return `%new`."""
        name = self.fresh()
        self.line(f"{name} = {text}")
        return name

    def _prologue(self, text: str, hint: str | None = None) -> str:
        name = self.named(hint) if hint else self.fresh()
        self.prologue.append(f"  {name} = {text}")
        return name

    # ------------------------------------------------------------ constants and dims

    def const(self, value: object, mlir_type: str) -> str:
        """A constant of an MLIR scalar type (`f32`, `i64`, `i1`, `index`, ...)."""
        if mlir_type in FLOAT_DTYPES:   # (MLIR spells them as the IR does)
            literal = float_literal(float(value), mlir_type)
        elif mlir_type == "i1":
            literal = "true" if value else "false"
        else:
            literal = str(int(value))
        key = (literal, mlir_type)
        if key not in self._constants:
            typed = literal if mlir_type == "i1" else f"{literal} : {mlir_type}"
            name = self._prologue(f"arith.constant {typed}", self._constant_hint(*key))
            self._constants[key] = name
            self.constant_values[name] = value
        return self._constants[key]

    def _constant_hint(self, literal: str, mlir_type: str) -> str:
        """`%c0` (index), `%c2_i64`, `%true`, `%cst_f32_3` (numbered: floats read badly)."""
        if mlir_type == "i1":
            return literal
        if mlir_type in FLOAT_DTYPES:
            return f"cst_{mlir_type}_{len(self._constants)}"
        suffix = "" if mlir_type == "index" else f"_{mlir_type}"
        return f"c{literal.replace('-', 'm')}{suffix}"

    def typed_const(self, value: object, dtype: str) -> str:
        """A constant of IR dtype `dtype`, rounded the way NumPy rounds it."""
        return self.const(np.asarray(value).astype(NUMPY_DTYPES[dtype]).item(), REGISTER[dtype])

    def index(self, value: int) -> str:
        return self.const(value, "index")

    def bind_symbol(self, name: str, value_i64: str) -> None:
        """Record the i64 SSA value holding the run-time size of dimension `name`."""
        self.symbols[name] = value_i64

    def prologue_op(self, text: str, hint: str | None = None) -> str:
        """An op in the prologue (sizes read from the arguments), returning its result."""
        return self._prologue(text, hint)

    def dim(self, d: Dim) -> str:
        """The i64 value of a dimension expression, computed once in the prologue."""
        key = (d, "i64")
        if key in self._dims:
            return self._dims[key]
        if d.is_const:
            return self.const(d.value, "i64")
        total = None
        for monomial, coeff in d.terms:
            term = None
            for atom in monomial:
                factor = self._atom(atom)
                term = factor if term is None else self._prologue(
                    f"arith.muli {term}, {factor} : i64")
            if term is None:
                term = self.const(coeff, "i64")
            elif coeff != 1:
                term = self._prologue(f"arith.muli {term}, {self.const(coeff, 'i64')} : i64")
            total = term if total is None else self._prologue(f"arith.addi {total}, {term} : i64")
        self._dims[key] = total
        return total

    def _symbol(self, name: str) -> str:
        if name not in self.symbols:
            raise error_at(self.span or NO_SPAN, f"dimension {name} cannot be computed from "
                           "the arguments", CompileError)
        return self.symbols[name]

    def _atom(self, atom: str | FloorDiv | NonNegative | CeilSqrt) -> str:
        """The i64 value of one factor of a dimension expression."""
        if isinstance(atom, str):
            return self._symbol(atom)
        if isinstance(atom, FloorDiv):
            numerator = self.dim(atom.numerator)
            return self._prologue(
                f"arith.floordivsi {numerator}, {self.const(atom.denominator, 'i64')} : i64")
        clamped = self._prologue(
            f"arith.maxsi {self.dim(atom.operand)}, {self.const(0, 'i64')} : i64")
        return self._ceil_sqrt(clamped) if isinstance(atom, CeilSqrt) else clamped

    def _ceil_sqrt(self, x: str) -> str:
        """The least s ≥ 0 with s² ≥ x (x ≥ 0): ⌈√x⌉ in f64, corrected by one either way."""
        p, one, zero = self._prologue, self.const(1, "i64"), self.const(0, "i64")
        root = p(f"math.sqrt {p(f'arith.sitofp {x} : i64 to f64')} : f64")
        s = p(f"arith.fptosi {p(f'math.ceil {root} : f64')} : f64 to i64")
        below = p(f"arith.subi {s}, {one} : i64")
        positive = p(f"arith.cmpi sgt, {s}, {zero} : i64")
        over = p(f"arith.cmpi sge, {p(f'arith.muli {below}, {below} : i64')}, {x} : i64")
        s = p(f"arith.select {p(f'arith.andi {positive}, {over} : i1')}, {below}, {s} : i64")
        under = p(f"arith.cmpi slt, {p(f'arith.muli {s}, {s} : i64')}, {x} : i64")
        return p(f"arith.addi {s}, {p(f'arith.extui {under} : i1 to i64')} : i64")

    def dim_index(self, d: Dim) -> str:
        """A dimension expression as an `index` (for offsets; may be negative)."""
        key = (d, "index")
        if d.is_const:
            return self.index(d.value)
        if key not in self._dims:
            self._dims[key] = self._prologue(f"arith.index_cast {self.dim(d)} : i64 to index")
        return self._dims[key]

    def extent(self, d: Dim) -> str:
        """A loop or buffer extent: the dimension as an `index`, never below 0."""
        key = (d, "extent")
        if key not in self._dims:
            size = self.dim_index(d)
            if d.is_const and d.value >= 0:
                self._dims[key] = size
            else:
                self._dims[key] = self._prologue(f"arith.maxsi {size}, {self.index(0)} : index")
        return self._dims[key]

    # ------------------------------------------------------------ scalars in registers

    def to_index(self, value_i64: str) -> str:
        return self.assign(f"arith.index_cast {value_i64} : i64 to index")

    def as_i64(self, t: Tensor) -> str:
        """An integer scalar (i32 or i64) as i64."""
        if t.type.dtype == "i64":
            return t.ssa
        return self.assign(f"arith.extsi {t.ssa} : {REGISTER[t.type.dtype]} to i64")

    def to_i64(self, value_index: str) -> str:
        return self.assign(f"arith.index_cast {value_index} : index to i64")

    def from_storage(self, value: str, dtype: str) -> str:
        """A loaded element in its register type (i8 -> i1 for bool)."""
        if dtype != "bool":
            return value
        return self.assign(f"arith.cmpi ne, {value}, {self.const(0, 'i8')} : i8")

    def to_storage(self, value: str, dtype: str) -> str:
        """A register value in its memory type (i1 -> i8 for bool)."""
        return self.assign(f"arith.extui {value} : i1 to i8") if dtype == "bool" else value

    # ------------------------------------------------------------ buffers

    def alloc(self, t: TensorType) -> Tensor:
        """A new buffer of type `t`, owned by the block being emitted."""
        sizes = ", ".join(self.extent(d) for d in t.shape)
        memref = memref_type(t)
        ssa = self.assign(f"memref.alloc({sizes}) : {memref}")
        return Tensor(ssa, t, memref, owned=True)

    def dealloc(self, t: Tensor) -> None:
        self.line(f"memref.dealloc {t.ssa} : {t.memref}")

    def load(self, t: Tensor, indices: Sequence[str]) -> str:
        """The element of `t` at `index`-typed `indices`, in its register type."""
        if not t.is_buffer:
            return t.ssa
        raw = self.assign(f"memref.load {t.ssa}[{', '.join(indices)}] : {t.memref}")
        return self.from_storage(raw, t.type.dtype)

    def store(self, value: str, t: Tensor, indices: Sequence[str]) -> None:
        stored = self.to_storage(value, t.type.dtype)
        self.line(f"memref.store {stored}, {t.ssa}[{', '.join(indices)}] : {t.memref}")

    def fill(self, out: Tensor, value: str) -> None:
        """Set every element of buffer `out` to the register value `value`."""
        if out.type.rank:
            self.parallel(out, [], lambda _, __: value)
        else:
            self.store(value, out, [])

    # ------------------------------------------------------------ control flow

    def open(self, text: str) -> None:
        """Append a line ending in `{` and indent what follows."""
        self.line(text + " {", located=False)
        self.depth += 1

    def close(self, text: str = "}", located: bool = True) -> None:
        """Dedent and append the closing line of a region."""
        self.depth -= 1
        self.line(text, located)

    def scf_for(self, lo: str, hi: str, inits: Sequence[tuple[str, str]],
                body: Callable[[str, list[str]], list[str]]) -> list[str]:
        """`scf.for` from `lo` to `hi` (index) carrying `(value, type)` inits; returns results."""
        iv = self.fresh()
        header = f"scf.for {iv} = {lo} to {hi} step {self.index(1)}"
        result = ""
        carried: list[str] = []
        if inits:
            carried = [self.fresh() for _ in inits]
            pairs = ", ".join(f"{c} = {v}" for c, (v, _) in zip(carried, inits, strict=True))
            types = ", ".join(t for _, t in inits)
            result = self.fresh()
            count = f":{len(inits)}" if len(inits) > 1 else ""
            header = f"{result}{count} = {header} iter_args({pairs}) -> ({types})"
        self.open(header)
        yielded = body(iv, carried)
        if inits:
            self.line(f"scf.yield {', '.join(yielded)} : {types}", located=False)
        self.close()
        if len(inits) == 1:
            return [result]
        return [f"{result}#{k}" for k in range(len(inits))]

    def loop_nest(self, extents: Sequence[str], inits: Sequence[tuple[str, str]],
                  body: Callable[[list[str], list[str]], list[str]]) -> list[str]:
        """Nested `scf.for` loops from 0 over `extents`, threading scalar accumulators."""
        if not extents:
            return body([], [v for v, _ in inits])

        def outer(iv: str, carried: list[str]) -> list[str]:
            types = [t for _, t in inits]
            inner = list(zip(carried, types, strict=True))
            return self.loop_nest(extents[1:], inner,
                                  lambda ivs, accs: body([iv, *ivs], accs))

        return self.scf_for(self.index(0), extents[0], inits, outer)

    def if_else(self, cond: str, mlir_type: str, then: Callable[[], str],
                otherwise: Callable[[], str]) -> str:
        """`scf.if` yielding one value of `mlir_type` from whichever branch runs."""
        result = self.fresh()
        self.open(f"{result} = scf.if {cond} -> ({mlir_type})")
        self.line(f"scf.yield {then()} : {mlir_type}", located=False)
        self.depth -= 1
        self.open("} else")
        self.line(f"scf.yield {otherwise()} : {mlir_type}", located=False)
        self.close()
        return result

    def scf_if(self, cond: str, types: Sequence[str], then: Callable[[], list[str]],
               otherwise: Callable[[], list[str]]) -> list[str]:
        """`scf.if` with an else branch, yielding values of `types` (maybe none) from
        whichever branch runs; returns the results."""
        result = self.fresh() if types else ""
        listed = ", ".join(types)
        count = f":{len(types)}" if len(types) > 1 else ""
        self.open(f"{result}{count} = scf.if {cond} -> ({listed})" if types else f"scf.if {cond}")
        for number, branch in enumerate((then, otherwise)):
            if number:
                self.depth -= 1
                self.open("} else")
            yielded = branch()
            if types:
                self.line(f"scf.yield {', '.join(yielded)} : {listed}", located=False)
        self.close()
        return [result] if len(types) == 1 else [f"{result}#{k}" for k in range(len(types))]

    def scf_while(self, inits: Sequence[tuple[str, str]], forwarded: Sequence[str],
                  before: Callable[[list[str]], tuple[str, list[str]]],
                  body: Callable[[list[str]], list[str]]) -> list[str]:
        """`scf.while` carrying `(value, type)` inits: `before(values)` gives the condition
        and the values it forwards (of types `forwarded`) to `body` and to the results;
        `body(values)` yields the next iteration's values. Returns the results."""
        types = [t for _, t in inits]
        args = [self.fresh() for _ in inits]
        result = self.fresh()
        pairs = ", ".join(f"{a} = {v}" for a, (v, _) in zip(args, inits, strict=True))
        count = f":{len(forwarded)}" if len(forwarded) > 1 else ""
        self.open(f"{result}{count} = scf.while ({pairs}) : ({', '.join(types)}) -> "
                  f"({', '.join(forwarded)})")
        cond, values = before(args)
        self.line(f"scf.condition({cond}) {', '.join(values)} : {', '.join(forwarded)}",
                  located=False)
        self.depth -= 1
        params = [self.fresh() for _ in forwarded]
        self.open("} do")
        self.line("^bb0(" + ", ".join(f"{p}: {t}" for p, t in zip(params, forwarded,
                                                                  strict=True)) + "):",
                  located=False)
        self.line(f"scf.yield {', '.join(body(params))} : {', '.join(types)}", located=False)
        self.close()
        return [result] if len(forwarded) == 1 else [f"{result}#{k}"
                                                     for k in range(len(forwarded))]

    def if_then(self, cond: str, then: Callable[[], None]) -> None:
        """`scf.if` without results."""
        self.open(f"scf.if {cond}")
        then()
        self.close()

    def parallel(self, out: Tensor, inputs: Sequence[tuple[Tensor, Sequence[str]]],
                 body: Callable[[list[str], list[str]], str], indexed: bool = False) -> None:
        """Fill `out` with a `linalg.generic` over its shape, every loop parallel.

        `inputs` are buffers with the affine expressions (over `d0, d1, ...`) that index
        them; `body(indices, elements)` gets the loop indices (`linalg.index`, only when
        `indexed`) and the input elements in register types, and returns the element.
        """
        rank = out.type.rank
        loops = ", ".join(f"d{k}" for k in range(rank))
        maps = [f"affine_map<({loops}) -> ({', '.join(exprs)})>" for _, exprs in inputs]
        maps.append(f"affine_map<({loops}) -> ({loops})>")
        iterators = ", ".join(['"parallel"'] * rank)
        header = (f"linalg.generic {{indexing_maps = [{', '.join(maps)}], "
                  f"iterator_types = [{iterators}]}}")
        if inputs:
            names = ", ".join(t.ssa for t, _ in inputs)
            types = ", ".join(t.memref for t, _ in inputs)
            header += f" ins({names} : {types})"
        self.open(f"{header} outs({out.ssa} : {out.memref})")
        args = [self.fresh() for _ in range(len(inputs) + 1)]
        storage = [STORAGE[t.type.dtype] for t, _ in inputs] + [STORAGE[out.type.dtype]]
        block_args = ", ".join(f"{a}: {s}" for a, s in zip(args, storage, strict=True))
        self.lines.append("  " * (self.depth - 1) + f"^bb0({block_args}):")
        elements = [self.from_storage(a, t.type.dtype)
                    for a, (t, _) in zip(args, inputs, strict=False)]
        indices = [self.assign(f"linalg.index {k} : index") for k in range(rank)] if indexed \
            else []
        value = body(indices, elements)
        self.line(f"linalg.yield {self.to_storage(value, out.type.dtype)} : {storage[-1]}",
                  located=False)
        self.close()

