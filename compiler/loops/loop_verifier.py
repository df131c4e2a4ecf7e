"""The loop-IR verifier: the invariants `backend/llvm.py` relies on, checked in one walk.

`verify_program(program)` returns None or raises `LoopVerifyError`, which is always a
compiler bug (a pass produced a program the code generator would mistranslate), never a
user error. It checks:

- declarations: output and temporary names unique (input names are the parameters', so
  may repeat); inputs/outputs in slot order; temporaries have shapes of dimension symbols
  only (the workspace is laid out before the kernel runs);
- scope: every scalar variable is defined once before use, and used inside the body that
  defines it (`Loop`, `ForLoop`, `WhileLoop`, `If`, `Guarded` bodies are nested scopes, as
  the LLVM values they become only dominate their body); a name is an accumulator everywhere or
  nowhere; every index symbol is a dimension symbol of the program or an i64 variable in
  scope; state buffers exist from their `ForLoop` or `WhileLoop` on; `ExitUnless` only
  at the top level of a `WhileLoop` body (which has one);
- memory: every access is to a declared buffer (or visible state buffer) with one index
  per axis; inputs are never written; every output is written somewhere;
- dtypes: each `Let` satisfies the op table's rule for its op (`infer_types` on scalars;
  the loop IR's own `in_bounds`, `bits`, `from_bits`: `LOOP_OPS`), loads and stores match
  the buffer's dtype, accumulators are declared before `Accumulate`/`ArgUpdate` with the
  dtype they update;
- `Check` sites exist; `Matmul` operands are float 2-D views of matching shapes (or 3-D, one
  batch axis first), of the result's dtype or bf16 for an f32 result; a `Sort`
  writes an i64 line as long as its numeric keys, with an i64 scratch temporary to match;
  a `LinalgCall` names declared whole buffers of its dtype (or i64 pivots) and writes no
  input.

    verify_program(compile_function(fn, "to_loops"))
    # LoopVerifyError: kernel @f: in `for %i0 ...`: ...
"""

from __future__ import annotations

from collections import ChainMap
from typing import NoReturn

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.ops import OPS, infer_types
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.types import DTYPES, FLOAT_DTYPES, ShapeError, scalar
from reverie.compiler.loops.ir import (
    MATMUL_PACK_ELEMENTS,
    SORT_SCRATCH_PER_KEY,
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
    LoopState,
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
from reverie.compiler.loops.loop_printer import format_access, format_head

ERROR_KINDS = ("index", "empty", "rows", "iterations", "capacity")
ARG_KINDS = ("argmax", "argmin")
# The loop IR's own scalar ops (`loops/ir.py`'s `Let`): whether operand and result dtypes fit.
LOOP_OPS = {
    "in_bounds": lambda args, result: args == ["i64", "i64"] and result == "bool",
    "bits": lambda args, result: len(args) == 1 and args[0] in STORAGE_DTYPES
    and result == "i64",
    "from_bits": lambda args, result: args == ["i64"] and result in STORAGE_DTYPES,
}


class LoopVerifyError(Exception):
    """A loop program breaks an invariant of the loop IR (a compiler bug)."""


def verify_program(program: Program) -> None:
    """Raise `LoopVerifyError` unless `program` is well formed (see the module docstring)."""
    _Verifier(program).run()


def describe(stmt: Stmt, program: Program) -> str:
    """A statement's head line for an error message: the printer's, or only its kind when
    the statement is too broken to print (the verifier exists to report such programs)."""
    try:
        return format_head(stmt, program)
    except (AttributeError, IndexError, KeyError, TypeError):
        return type(stmt).__name__


class _Scope:
    """What is visible at one point: scalar variables (name -> dtype), which of them are
    accumulators, and the state buffers of the `ForLoop`s seen so far."""

    def __init__(self) -> None:
        self.variables: ChainMap[str, str] = ChainMap()
        self.accumulators: ChainMap[str, str] = ChainMap()
        self.states: ChainMap[Buffer, None] = ChainMap()
        self.exit_allowed = False  # directly in a WhileLoop body (`nested` resets it)

    def nested(self) -> _Scope:
        inner = _Scope()
        inner.variables = self.variables.new_child()
        inner.accumulators = self.accumulators.new_child()
        inner.states = self.states.new_child()
        return inner


class _Verifier:
    """One walk over a program, statement by statement, carrying the scope."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.symbols = set(program.symbols)
        self.declared = set(program.inputs + program.outputs + program.temps)
        self.temps = set(program.temps)
        self.inputs = set(program.inputs)
        self.written: set[Buffer] = set()
        self.accumulator_names: dict[str, bool] = {}  # code generation keeps one name space
        self.path: list[Stmt] = []

    def fail(self, message: str) -> NoReturn:
        where = "".join(f"in `{describe(s, self.program)}`: " for s in self.path[-2:])
        raise LoopVerifyError(f"kernel @{self.program.name}: {where}{message}")

    def run(self) -> None:
        self._declarations()
        self.block(self.program.body, _Scope())
        for buffer in self.program.outputs:
            if buffer not in self.written:
                self.fail(f"output {buffer.name} is never written")

    # ------------------------------------------------------------ declarations

    def _declarations(self) -> None:
        program = self.program
        if len(self.symbols) != len(program.symbols) or \
                any(s.startswith("%") for s in program.symbols):
            self.fail(f"dimension symbols {program.symbols} are not distinct names")
        names = [b.name for b in program.outputs + program.temps]  # (inputs: user's names)
        if len(set(names)) != len(names):
            self.fail(f"output and temporary names are not unique: {names}")
        for role, buffers in (("input", program.inputs), ("output", program.outputs),
                              ("temp", program.temps)):
            for k, buffer in enumerate(buffers):
                if buffer.role != role or (role != "temp" and buffer.slot != k):
                    self.fail(f"{buffer.name} is declared as {buffer.role} {buffer.slot} "
                              f"in place of {role} {k}")
                self._buffer_type(buffer)
                for d in buffer.shape:
                    self.dim(d, None)
        for k, site in enumerate(program.sites):
            if site.kind not in ERROR_KINDS:
                self.fail(f"error site {k} has unknown kind {site.kind!r}")

    def _buffer_type(self, buffer: Buffer) -> None:
        if buffer.dtype not in DTYPES:
            self.fail(f"buffer {buffer.name} has unknown dtype {buffer.dtype!r}")

    # ------------------------------------------------------------ operands and indices

    def dim(self, dim: Dim, scope: _Scope | None) -> None:
        """Every symbol of `dim` is a dimension symbol or (given a scope) an i64 variable
        in scope; with no scope (buffer shapes) only dimension symbols are allowed."""
        for name in dim.symbols():
            if not name.startswith("%"):
                if name not in self.symbols:
                    self.fail(f"index {dim} uses {name}, which is not a dimension symbol "
                              f"of the program {sorted(self.symbols)}")
            elif scope is None:
                self.fail(f"shape {dim} uses the variable {name}")
            elif scope.variables.get(name) != "i64":
                what = "is not defined here" if name not in scope.variables else \
                    f"is {scope.variables[name]}, not i64"
                self.fail(f"index {dim} uses {name}, which {what}")

    def operand(self, operand: Operand, scope: _Scope) -> str:
        """The dtype of an operand, after checking it is usable here."""
        if isinstance(operand, Dim):
            self.dim(operand, scope)
            return "i64"
        if isinstance(operand, Const):
            if operand.dtype not in DTYPES:
                self.fail(f"constant {operand.value!r} has unknown dtype {operand.dtype!r}")
            return operand.dtype
        if not isinstance(operand, Var):
            self.fail(f"{operand!r} is not an operand")
        defined = scope.variables.get(operand.name)
        if defined is None:
            self.fail(f"{operand.name} is used before it is defined (or outside its body)")
        if defined != operand.dtype:
            self.fail(f"{operand.name} is used as {operand.dtype} but defined as {defined}")
        return operand.dtype

    def condition(self, var: Var, scope: _Scope) -> None:
        if self.operand(var, scope) != "bool":
            self.fail(f"condition {var.name} is {var.dtype}, not bool")

    def define(self, var: Var, scope: _Scope, accumulator: bool = False) -> None:
        if var.dtype not in DTYPES:
            self.fail(f"{var.name} has unknown dtype {var.dtype!r}")
        if var.name in scope.variables:
            self.fail(f"{var.name} is defined twice")
        if self.accumulator_names.setdefault(var.name, accumulator) != accumulator:
            self.fail(f"{var.name} names both an accumulator and a plain variable")
        scope.variables[var.name] = var.dtype
        if accumulator:
            scope.accumulators[var.name] = var.dtype

    def accumulator(self, var: Var, scope: _Scope) -> None:
        if scope.accumulators.get(var.name) != var.dtype:
            self.fail(f"{var.name} is not a {var.dtype} accumulator declared here")

    def view(self, view: View, scope: _Scope, index: tuple[Dim, ...] | None = None) -> None:
        """`view` is of a buffer visible here, with one index (and stride) per axis."""
        buffer = view.buffer
        if buffer not in self.declared and buffer not in scope.states:
            self.fail(f"buffer {buffer.name} is not declared (or its loop state is not "
                      f"visible here)")
        rank = len(view.shape)
        if len(view.strides) != rank or (index is not None and len(index) != rank):
            got = rank if index is None else len(index)
            self.fail(f"{buffer.name} is accessed with {got} indices and "
                      f"{len(view.strides)} strides for a view of rank {rank}")
        for d in (view.offset, *view.strides, *view.shape, *(index or ())):
            self.dim(d, scope)

    def write(self, view: View) -> None:
        if view.buffer in self.inputs:
            self.fail(f"input {view.buffer.name} is written")
        self.written.add(view.buffer)

    # ------------------------------------------------------------ statements

    def block(self, stmts: list[Stmt], scope: _Scope) -> None:
        for stmt in stmts:
            self.path.append(stmt)
            handler = getattr(self, "_" + type(stmt).__name__.lower(), None)
            if handler is None:
                self.fail(f"unknown statement {stmt!r}")
            handler(stmt, scope)
            self.path.pop()

    def _let(self, stmt: Let, scope: _Scope) -> None:
        dtypes = [self.operand(a, scope) for a in stmt.args]
        if stmt.op in LOOP_OPS:
            if not LOOP_OPS[stmt.op](dtypes, stmt.var.dtype):
                self.fail(f"{stmt.op} of {dtypes} cannot give {stmt.var.dtype}")
            result = stmt.var.dtype
        elif stmt.op not in OPS or OPS[stmt.op].kind != "elementwise":
            self.fail(f"'{stmt.op}' is not an elementwise op")
        else:
            result = self._elementwise_result(stmt, dtypes)
        if result != stmt.var.dtype:
            self.fail(f"{stmt.op} of {dtypes} gives {result}, but {stmt.var.name} is "
                      f"{stmt.var.dtype}")
        self.define(stmt.var, scope)

    def _elementwise_result(self, stmt: Let, dtypes: list[str]) -> str:
        """The result dtype of an elementwise op; its attributes arrive as trailing i64
        or f64 constants (`polygamma %x, 2`, `iv %x, 2.5`)."""
        row = ELEMENTWISE.get(stmt.op)
        arity = row.arity if row is not None and row.attrs else len(dtypes)
        attrs = dict.fromkeys(row.attrs, 0) if row is not None else {}
        for extra in stmt.args[arity:]:
            if not isinstance(extra, Const) or extra.dtype not in ("i64", "f64"):
                self.fail(f"the attributes of {stmt.op} must be i64 or f64 constants, got "
                          f"{extra}")
        try:
            (typed,) = infer_types(stmt.op, [scalar(d) for d in dtypes[:arity]],
                                   {"dtype": stmt.var.dtype, **attrs}, [])
        except ShapeError as error:
            self.fail(str(error))
        return typed.dtype

    def _load(self, stmt: Load, scope: _Scope) -> None:
        self.view(stmt.view, scope, stmt.index)
        if stmt.guard is not None:
            self.condition(stmt.guard, scope)
        if stmt.var.dtype != stmt.view.buffer.dtype:
            self.fail(f"{stmt.var.name} is {stmt.var.dtype} but loads from "
                      f"{stmt.view.buffer.dtype} buffer {stmt.view.buffer.name}")
        self.define(stmt.var, scope)

    def _store(self, stmt: Store, scope: _Scope) -> None:
        self.view(stmt.view, scope, stmt.index)
        dtype = self.operand(stmt.value, scope)
        if dtype != stmt.view.buffer.dtype:
            self.fail(f"stores a {dtype} value into {stmt.view.buffer.dtype} buffer "
                      f"{format_access(stmt.view, stmt.index)}")
        self.write(stmt.view)

    def _accumulator(self, stmt: Accumulator, scope: _Scope) -> None:
        if self.operand(stmt.init, scope) != stmt.var.dtype:
            self.fail(f"{stmt.var.name} is {stmt.var.dtype} but starts at a "
                      f"{stmt.init.dtype} constant")
        self.define(stmt.var, scope, accumulator=True)

    def _accumulate(self, stmt: Accumulate, scope: _Scope) -> None:
        if stmt.kind not in REDUCE_KINDS:
            self.fail(f"unknown accumulation {stmt.kind!r}")
        self.accumulator(stmt.var, scope)
        dtype = self.operand(stmt.value, scope)
        if dtype != stmt.var.dtype:
            self.fail(f"accumulates a {dtype} value into {stmt.var.dtype} {stmt.var.name}")

    def _argupdate(self, stmt: ArgUpdate, scope: _Scope) -> None:
        if stmt.kind not in ARG_KINDS:
            self.fail(f"unknown arg-reduction {stmt.kind!r}")
        self.accumulator(stmt.best, scope)
        self.accumulator(stmt.best_index, scope)
        if stmt.best_index.dtype != "i64":
            self.fail(f"index accumulator {stmt.best_index.name} is not i64")
        dtype = self.operand(stmt.value, scope)
        if dtype != stmt.best.dtype:
            self.fail(f"compares a {dtype} value with {stmt.best.dtype} {stmt.best.name}")
        self.dim(stmt.index, scope)

    def _check(self, stmt: Check, scope: _Scope) -> None:
        self.dim(stmt.index, scope)
        self.dim(stmt.size, scope)
        if not 0 <= stmt.site < len(self.program.sites):
            self.fail(f"error site {stmt.site} does not exist "
                      f"({len(self.program.sites)} sites)")

    def _if(self, stmt: If, scope: _Scope) -> None:
        self.condition(stmt.cond, scope)
        self.block(stmt.body, scope.nested())

    def _guarded(self, stmt: Guarded, scope: _Scope) -> None:
        self.condition(stmt.cond, scope)
        inner = scope.nested()
        self.block(stmt.body, inner)
        dtype = self.operand(stmt.value, inner)
        if dtype != stmt.var.dtype:
            self.fail(f"yields a {dtype} value for {stmt.var.dtype} {stmt.var.name}")
        self.define(stmt.var, scope)

    def _loop(self, stmt: Loop, scope: _Scope) -> None:
        self.dim(stmt.lo, scope)
        self.dim(stmt.hi, scope)
        inner = scope.nested()
        self.define(Var(stmt.var, "i64"), inner)
        self.block(stmt.body, inner)

    def _forloop(self, stmt: ForLoop, scope: _Scope) -> None:
        self.dim(stmt.lo, scope)
        self.dim(stmt.hi, scope)
        self._states(stmt.states, scope)
        inner = scope.nested()
        self.define(Var(stmt.var, "i64"), inner)
        self.block(stmt.body, inner)

    def _whileloop(self, stmt: WhileLoop, scope: _Scope) -> None:
        self._states(stmt.states, scope)
        inner = scope.nested()
        inner.exit_allowed = True
        self.define(Var(stmt.var, "i64"), inner)
        self.block(stmt.body, inner)
        if not any(isinstance(s, ExitUnless) for s in stmt.body):
            self.fail("a while loop without 'exit unless' never ends")

    def _exitunless(self, stmt: ExitUnless, scope: _Scope) -> None:
        if not scope.exit_allowed:
            self.fail("'exit unless' outside the top level of a while loop")
        self.condition(stmt.cond, scope)

    def _states(self, states: list[LoopState], scope: _Scope) -> None:
        """New state buffers, each pair living in two temporaries of its type."""
        for state in states:
            pair = (state.current, state.next)
            if any(b.role != "state" or b in self.declared or b in scope.states for b in pair):
                self.fail(f"{state.current.name}/{state.next.name} are not new state buffers")
            if state.first not in self.temps or state.second not in self.temps or \
                    state.first is state.second:
                self.fail(f"the state {state.current.name} does not live in two temporaries")
            for buffer in (*pair, state.second):
                if (buffer.dtype, buffer.shape) != (state.first.dtype, state.first.shape):
                    self.fail(f"state buffer {buffer.name} is {buffer.dtype}"
                              f"{list(map(str, buffer.shape))}, unlike {state.first.name}")
            scope.states.update(dict.fromkeys(pair))

    def _matmul(self, stmt: Matmul, scope: _Scope) -> None:
        for view in (stmt.out, stmt.a, stmt.b):
            self.view(view, scope)
            if len(view.shape) != len(stmt.out.shape) or len(view.shape) not in (2, 3):
                self.fail(f"matmul operand {view.buffer.name} has rank {len(view.shape)}")
        dtypes = {v.buffer.dtype for v in (stmt.out, stmt.a, stmt.b)}
        bf16_product = (stmt.a.buffer.dtype, stmt.b.buffer.dtype, stmt.out.buffer.dtype) == \
            ("bf16", "bf16", "f32")  # (backend/bf16_products.py)
        if not bf16_product and (len(dtypes) != 1 or not dtypes <= set(FLOAT_DTYPES)):
            self.fail(f"matmul needs one float dtype (or bf16 operands and an f32 result), "
                      f"got {sorted(dtypes)}")
        *batch, m, k = stmt.a.shape
        *batch2, k2, n = stmt.b.shape
        if k != k2 or batch != batch2 or stmt.out.shape != (*batch, m, n):
            self.fail(f"matmul shapes do not fit: [{', '.join(map(str, stmt.a.shape))}] @ "
                      f"[{', '.join(map(str, stmt.b.shape))}] into "
                      f"[{', '.join(map(str, stmt.out.shape))}]")
        pack = stmt.pack
        if pack not in self.temps or pack.dtype != "f64" or \
                pack.size != Dim.const(MATMUL_PACK_ELEMENTS):
            self.fail(f"matmul packs into {pack.name}, not the f64 packing temporary")
        self.write(stmt.out)

    def _linalgcall(self, stmt: LinalgCall, scope: _Scope) -> None:
        """Whole float buffers (integer pivots), read and (but for read-only operands)
        written in place."""
        for d in stmt.sizes:
            self.dim(d, scope)
        for buffer in stmt.buffers:
            self.view(View.of(buffer), scope)
            if buffer.dtype not in (stmt.dtype, "i64"):
                self.fail(f"linalg {stmt.op} of {stmt.dtype} given the {buffer.dtype} buffer "
                          f"{buffer.name}")
        for buffer in stmt.written:
            self.write(View.of(buffer))

    def _sort(self, stmt: Sort, scope: _Scope) -> None:
        for view in (stmt.out, stmt.keys):
            self.view(view, scope)
            if len(view.shape) != 1:
                self.fail(f"sort operand {view.buffer.name} has rank {len(view.shape)}")
        if stmt.out.buffer.dtype != "i64" or stmt.keys.buffer.dtype == "bool":
            self.fail(f"sort writes i64 indices of numeric keys, not {stmt.out.buffer.dtype} "
                      f"indices of {stmt.keys.buffer.dtype} keys")
        (n,) = stmt.keys.shape
        if stmt.out.shape != (n,):
            self.fail(f"sort of {n} keys writes {stmt.out.shape[0]} indices")
        scratch = stmt.scratch
        if scratch not in self.temps or scratch.dtype != "i64" or \
                scratch.size != n * SORT_SCRATCH_PER_KEY:
            self.fail(f"sort's scratch {scratch.name} is not an i64 temporary of "
                      f"{SORT_SCRATCH_PER_KEY} * {n} elements")
        self.write(stmt.out)
