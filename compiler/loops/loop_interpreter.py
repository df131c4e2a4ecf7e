"""A NumPy interpreter of the loop IR: runs a `Program` statement by statement.

Consumes a program, its input arrays (in parameter order) and the sizes of its dimension
symbols; produces its outputs, as the native kernel would:

    outputs = run_program(compile_function(fn, "to_loops"), bound.arrays, bound.dims)

It is slow (one Python step per scalar statement) and meant to be read and to test the
lowering: the same program runs at the tensor level (`compiler/ir/tensor_interpreter.py`), here,
and natively, and the three must agree.

- Scalars are NumPy scalars of the statement's dtype, so f32 arithmetic rounds to f32.
  Each op runs the tensor op table's NumPy semantics (`OPS[op].evaluate`) on 0-d arrays
  (bf16/f16 ones read as f32, as the tensor interpreter reads them, and the result rounded);
  only the loop IR's own ops are defined here: `in_bounds` (`0 <= i < n`), and `bits` and
  `from_bits` (a bf16/f16 value's 16 bits as an i64, and back: `loops/tabulation.py`).
- Every buffer is one flat array; a `View` reads element `offset + sum(i_k * stride_k)`.
  Temporaries start unwritten, and reading an element never written, or touching one
  outside its buffer, raises `LoopMemoryError` (a compiler bug the native kernel would
  only show as garbage). Outputs must be written completely.
- A failed `Check` raises the `IndexError` the native kernel raises (same message), or its
  RuntimeError for a `while` past its iteration limit.
- A `ForLoop` or `WhileLoop` state is two buffers whose roles (current, next) swap after
  each iteration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reverie.compiler.ir.capacity import is_trip_symbol, run_with_capacity
from reverie.compiler.ir.core import Op
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.dtypes import computable
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.ops_linalg import IN_PLACE, attrs_of, linalg_arrays
from reverie.compiler.ir.ops_sort import stable_argsort
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.loops.ir import (
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

Scalar = np.generic


class LoopMemoryError(Exception):
    """The program read an element it never wrote, or one outside its buffer, or left
    part of an output unwritten (a compiler bug)."""


def run_program(program: Program, arrays: Sequence[np.ndarray],
                dims: Mapping[str, int]) -> list[np.ndarray]:
    """The outputs of `program` on `arrays` with dimension symbols sized by `dims` (trip
    dimensions grown until every count fits, `ir/capacity.py`)."""
    def run(sizes: dict[str, int]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return LoopInterpreter(program, sizes).run(arrays)

    return run_with_capacity(run, dims, [s for s in program.symbols if is_trip_symbol(s)])


def scalar_op(op: str, args: list[Scalar], dtype: str) -> Scalar:
    """`op(args)` as a scalar of `dtype`, with the tensor op table's NumPy semantics."""
    if op == "in_bounds":
        index, size = args
        return np.bool_(0 <= index < size)
    if op == "bits":
        return np.int64(np.asarray(args[0]).view(np.uint16))
    if op == "from_bits":
        return np.asarray(np.uint16(args[0])).view(NUMPY_DTYPES[dtype])[()]
    operation = Op(op, [], {"dtype": dtype})  # what `cast` reads its target dtype from
    (result,) = OPS[op].evaluate(None, [computable(np.asarray(a)) for a in args], operation)
    return np.asarray(result).astype(NUMPY_DTYPES[dtype])[()]


def zero(dtype: str) -> Scalar:
    return NUMPY_DTYPES[dtype].type(0)


class Memory:
    """The flat elements of one buffer and which of them have been written."""

    def __init__(self, buffer: Buffer, size: int, initial: np.ndarray | None = None) -> None:
        self.name = buffer.name
        if initial is None:
            self.data = np.zeros(size, NUMPY_DTYPES[buffer.dtype])
            self.written = np.zeros(size, np.bool_)
        else:
            self.data = initial
            self.written = np.ones(size, np.bool_)

    def _check(self, flat: int | np.ndarray, action: str) -> None:
        flat_array = np.asarray(flat)
        if np.any((flat_array < 0) | (flat_array >= self.data.size)):
            raise LoopMemoryError(f"{action} {self.name} at {flat}, outside its "
                                  f"{self.data.size} elements")

    def read(self, flat: int | np.ndarray) -> Scalar | np.ndarray:
        self._check(flat, "reads")
        if not np.all(self.written[flat]):
            raise LoopMemoryError(f"reads {self.name} at {flat} before writing it")
        return self.data[flat]

    def write(self, flat: int | np.ndarray, value: Scalar | np.ndarray) -> None:
        self._check(flat, "writes")
        self.data[flat] = value
        self.written[flat] = True


class LoopInterpreter:
    """The state of one run: scalar values by name (dimension sizes included), the memory
    of each buffer, and the element offset each access computes (built once)."""

    def __init__(self, program: Program, dims: Mapping[str, int]) -> None:
        missing = [s for s in program.symbols if s not in dims]
        if missing:
            raise ValueError(f"no size given for dimension(s) {', '.join(missing)}")
        self.program = program
        self.values: dict[str, Scalar | int] = {s: int(dims[s]) for s in program.symbols}
        self.memory: dict[Buffer, Memory] = {}
        self.offsets: dict[int, Dim] = {}  # id(Load/Store) -> its flat element offset

    def index(self, dim: Dim) -> int:
        """The value of an index expression (dimension sizes and i64 variables)."""
        return int(dim.evaluate(self.values))

    def shape(self, buffer: Buffer) -> tuple[int, ...]:
        return tuple(self.index(d) for d in buffer.shape)

    def value(self, operand: Operand) -> Scalar:
        if isinstance(operand, Var):
            return self.values[operand.name]
        if isinstance(operand, Const):
            return NUMPY_DTYPES[operand.dtype].type(operand.value)
        return np.int64(self.index(operand))

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        program = self.program
        if len(arrays) != len(program.inputs):
            raise ValueError(f"@{program.name} takes {len(program.inputs)} arrays, "
                             f"got {len(arrays)}")
        for buffer, array in zip(program.inputs, arrays, strict=True):
            array = np.asarray(array, NUMPY_DTYPES[buffer.dtype])
            if array.shape != self.shape(buffer):
                raise ValueError(f"input {buffer.name} has shape {array.shape}, "
                                 f"expected {self.shape(buffer)}")
            self.memory[buffer] = Memory(buffer, array.size, array.reshape(-1).copy())
        for buffer in program.outputs + program.temps:
            self.memory[buffer] = Memory(buffer, int(np.prod(self.shape(buffer))))
        self.block(program.body)
        outputs = []
        for buffer in program.outputs:
            memory = self.memory[buffer]
            if not memory.written.all():
                raise LoopMemoryError(f"output {buffer.name} is not completely written")
            outputs.append(memory.data.reshape(self.shape(buffer)))
        return outputs

    # ------------------------------------------------------------ memory

    def flat(self, stmt: Load | Store) -> int:
        """The element offset `stmt` accesses in its buffer."""
        offset = self.offsets.get(id(stmt))
        if offset is None:
            offset = self.offsets[id(stmt)] = stmt.view.flat(stmt.index)
        return self.index(offset)

    def view_offsets(self, view: View) -> np.ndarray:
        """The element offsets of a whole view, as an array of its shape."""
        sizes = [self.index(d) for d in view.shape]
        offsets = np.full(sizes, self.index(view.offset), np.int64)
        for axis, (size, stride) in enumerate(zip(sizes, view.strides, strict=True)):
            along = np.arange(size) * self.index(stride)
            offsets += along.reshape([size if a == axis else 1 for a in range(len(sizes))])
        return offsets

    # ------------------------------------------------------------ statements

    def block(self, stmts: list[Stmt]) -> None:
        """Run statements in order; `Let` goes to `_let`, `ForLoop` to `_forloop`, ..."""
        for stmt in stmts:
            getattr(self, "_" + type(stmt).__name__.lower())(stmt)

    def _let(self, stmt: Let) -> None:
        args = [self.value(a) for a in stmt.args]
        self.values[stmt.var.name] = scalar_op(stmt.op, args, stmt.var.dtype)

    def _load(self, stmt: Load) -> None:
        if stmt.guard is not None and not self.values[stmt.guard.name]:
            self.values[stmt.var.name] = zero(stmt.var.dtype)
            return
        self.values[stmt.var.name] = self.memory[stmt.view.buffer].read(self.flat(stmt))

    def _store(self, stmt: Store) -> None:
        self.memory[stmt.view.buffer].write(self.flat(stmt), self.value(stmt.value))

    def _accumulator(self, stmt: Accumulator) -> None:
        self.values[stmt.var.name] = self.value(stmt.init)

    def _accumulate(self, stmt: Accumulate) -> None:
        old, new = self.values[stmt.var.name], self.value(stmt.value)
        combine = REDUCE_KINDS[stmt.kind].combine
        self.values[stmt.var.name] = scalar_op(combine, [old, new], stmt.var.dtype)

    def _argupdate(self, stmt: ArgUpdate) -> None:
        """Keep the first best value; the first NaN beats any number."""
        best, value = self.values[stmt.best.name], self.value(stmt.value)
        better = value > best if stmt.kind == "argmax" else value < best
        if np.isnan(value) and not np.isnan(best):
            better = True
        if better:
            self.values[stmt.best.name] = value
            self.values[stmt.best_index.name] = np.int64(self.index(stmt.index))

    def _check(self, stmt: Check) -> None:
        index, size = self.index(stmt.index), self.index(stmt.size)
        if not 0 <= index < size:
            raise self.program.sites[stmt.site].error(index, size)

    def _if(self, stmt: If) -> None:
        if self.values[stmt.cond.name]:
            self.block(stmt.body)

    def _guarded(self, stmt: Guarded) -> None:
        if self.values[stmt.cond.name]:
            self.block(stmt.body)
            self.values[stmt.var.name] = self.value(stmt.value)
        else:
            self.values[stmt.var.name] = zero(stmt.var.dtype)

    def _loop(self, stmt: Loop) -> None:
        for i in range(self.index(stmt.lo), self.index(stmt.hi)):
            self.values[stmt.var] = i
            self.block(stmt.body)

    def _forloop(self, stmt: ForLoop) -> None:
        self._bind_states(stmt.states)
        for t in range(self.index(stmt.lo), self.index(stmt.hi)):
            self.values[stmt.var] = t
            self.block(stmt.body)
            self._swap_states(stmt.states)

    def _whileloop(self, stmt: WhileLoop) -> None:
        """Run the body until a top-level `ExitUnless` finds its condition false."""
        self._bind_states(stmt.states)
        count = 0
        while True:
            self.values[stmt.var] = count
            for inner in stmt.body:
                if isinstance(inner, ExitUnless):
                    if not self.values[inner.cond.name]:
                        return
                else:
                    self.block([inner])
            self._swap_states(stmt.states)
            count += 1

    def _exitunless(self, stmt: ExitUnless) -> None:
        raise LoopMemoryError("'exit unless' outside the top level of a while loop")

    def _bind_states(self, states: list[LoopState]) -> None:
        """Point each state's current and next buffers at its first and second."""
        for state in states:
            self.memory[state.current] = self.memory[state.first]
            self.memory[state.next] = self.memory[state.second]

    def _swap_states(self, states: list[LoopState]) -> None:
        for state in states:
            self.memory[state.current], self.memory[state.next] = \
                self.memory[state.next], self.memory[state.current]

    def _matmul(self, stmt: Matmul) -> None:
        """`out = a @ b` in the result's dtype (bf16 operands of an f32 product read as f32)."""
        dtype = self.memory[stmt.out.buffer].data.dtype
        a, b = (self.memory[v.buffer].read(self.view_offsets(v)).astype(dtype)
                for v in (stmt.a, stmt.b))
        self.memory[stmt.out.buffer].write(self.view_offsets(stmt.out), np.matmul(a, b))

    def _linalgcall(self, stmt: LinalgCall) -> None:
        """The op on the whole buffers, by NumPy (`ir/ops_linalg.py`), in place."""
        operands, results = IN_PLACE[stmt.op]
        views = [View.of(b) for b in stmt.buffers]
        args = [self.memory[views[i].buffer].read(self.view_offsets(views[i])) for i in operands]
        for i, value in zip(results, linalg_arrays(stmt.op, args, attrs_of(stmt.flags)),
                            strict=True):
            self.memory[views[i].buffer].write(self.view_offsets(views[i]), value)

    def _sort(self, stmt: Sort) -> None:
        keys = self.memory[stmt.keys.buffer].read(self.view_offsets(stmt.keys))
        order = stable_argsort(keys, 0, stmt.descending)
        self.memory[stmt.out.buffer].write(self.view_offsets(stmt.out), order)
