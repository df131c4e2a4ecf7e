"""The loop IR: buffers, loop nests and scalar statements, between the tensor IR and LLVM.

A `Program` is one specialised function after fusion. It owns `Buffer`s (inputs, outputs,
temporaries carved out of one workspace, and the double buffers of loop state) and a list of
statements. Statements are structured (`Loop`, `ForLoop`, `WhileLoop`, `If`), scalar
(`Let`, `Load`, `Store`, `Accumulate`, ...) or calls of a run-time helper (`Matmul`,
`Sort`, `LinalgCall`). Scalar values are SSA variables named `%0`, `%1`, ...; loop variables
are `%i0`, `%i1`, ... . Index arithmetic is carried by `Dim`s whose symbols are dimension
names (`N`) or i64 variables (`%i0`, `%3`), so `x[%i0 * D + %i1]` is one `Dim`.
`sum(tanh(x))` for an f32 `x` prints (`loops/loop_printer.py`) as

    kernel @loss(x: f32[N] input 0, out0: f32 output 0) {
      %acc0: f64 = 0.0
      for %i0 in 0..N {
        %0 = load x[%i0]
        %1 = tanh %0 : f32
        %2 = cast %1 : f64
        %acc0 = sum %acc0, %2
      }
      %3 = cast %acc0 : f32
      store out0[] = %3
    }

`loops/loop_verifier.py` checks the invariants the code generator relies on (scoping, dtypes,
ranks, declared buffers); `loops/loop_interpreter.py` runs a program with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reverie.compiler.ir.capacity import CapacityError
from reverie.compiler.ir.dims import Dim, Shape, num_elements
from reverie.compiler.ir.iteration_limit import limit_error
from reverie.compiler.ir.ops_linalg import READ_ONLY

if TYPE_CHECKING:
    from reverie.compiler.to_loops.boundary import CallBoundary


@dataclass(frozen=True)
class Var:
    """A scalar SSA variable (or an accumulator, which statements may update)."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Const:
    """A scalar literal."""

    value: float | int | bool
    dtype: str


Operand = Var | Const | Dim  # a Dim operand is an i64 value computed from indices

# Scratch (in f64 elements) that the matmul kernel may use to pack operand blocks
# (room for 4 threads; pages no thread touches cost nothing).
MATMUL_PACK_ELEMENTS = 4 * (96 * 256 + 256 * 1024)


def as_index(operand: Operand) -> Dim:
    """An i64 operand as an index expression."""
    if isinstance(operand, Dim):
        return operand
    if isinstance(operand, Const):
        return Dim.const(int(operand.value))
    return Dim.sym(operand.name)


@dataclass(eq=False)
class Buffer:
    """A row-major array. `role` says where its memory comes from:

    - `input` / `output`: entry `slot` of the buffer table passed to the kernel;
    - `temp`: a window of the workspace (the last entry of the buffer table);
    - `state`: one of the two buffers of a loop-carried value, reached through the
      loop's current/next pointers (see `ForLoop`).
    """

    name: str
    dtype: str
    shape: Shape
    role: str
    slot: int = 0

    @property
    def size(self) -> Dim:
        return num_elements(self.shape)


def row_major_strides(shape: Shape) -> tuple[Dim, ...]:
    """Element strides of a contiguous row-major array of `shape`."""
    strides, step = [], Dim.const(1)
    for d in reversed(shape):
        strides.append(step)
        step = step * d
    return tuple(reversed(strides))


@dataclass(frozen=True)
class View:
    """A strided window of a buffer: element `[i, j]` is at `offset + i*s0 + j*s1`."""

    buffer: Buffer
    shape: Shape
    offset: Dim
    strides: tuple[Dim, ...]

    @staticmethod
    def of(buffer: Buffer) -> View:
        return View(buffer, buffer.shape, Dim.const(0), row_major_strides(buffer.shape))

    def covers(self, buffer: Buffer) -> bool:
        """Whether this view is exactly `buffer` (strides of size-1 axes do not matter)."""
        return self.buffer is buffer and self.shape == buffer.shape and \
            self.offset == Dim.const(0) and all(
                s == r or d == Dim.const(1) for s, r, d in
                zip(self.strides, row_major_strides(self.shape), self.shape, strict=True))

    @property
    def is_contiguous(self) -> bool:
        """Whether the elements are row-major and adjacent (a reshape is then free)."""
        return self.strides == row_major_strides(self.shape)

    def flat(self, index: tuple[Dim, ...]) -> Dim:
        """The element offset of `index` in the underlying buffer."""
        total = self.offset
        for i, s in zip(index, self.strides, strict=True):
            total = total + i * s
        return total

    def step(self, index: tuple[Dim, ...], var: str) -> Dim:
        """How far the element offset of `index` moves when loop index `var` grows by one."""
        flat = self.flat(index)
        return flat.substitute({var: Dim.sym(var) + 1}) - flat


# ---------------------------------------------------------------- statements


@dataclass
class Let:
    """`var = op(args)`: one scalar operation (tensor-IR op names, plus the loop IR's own
    `in_bounds(i, n)`: 0 <= i < n; `bits(x)`: the 16 bits of a bf16/f16 value as an i64;
    `from_bits(k)`: the bf16/f16 value whose bits are the i64 `k`, 0 <= k < 65536)."""

    var: Var
    op: str
    args: tuple[Operand, ...]


@dataclass
class Load:
    """`var = view[index]`; with a `guard`, the load happens only if it holds (else 0)."""

    var: Var
    view: View
    index: tuple[Dim, ...]
    guard: Var | None = None


@dataclass
class Store:
    """`view[index] = value`."""

    view: View
    index: tuple[Dim, ...]
    value: Operand


@dataclass
class Accumulator:
    """Declare a mutable accumulator `var`, set to `init`."""

    var: Var
    init: Const


@dataclass
class Accumulate:
    """`var = var <kind> value` with kind sum/prod/max/min (reassociable: vectorises)."""

    var: Var
    kind: str
    value: Operand


@dataclass
class ArgUpdate:
    """Keep the first index of the largest (`argmax`) or smallest (`argmin`) value; NaN wins."""

    best: Var
    best_index: Var
    value: Operand
    index: Dim
    kind: str


@dataclass
class Check:
    """Stop with error `site` unless `0 <= index < size`."""

    index: Dim
    size: Dim
    site: int


@dataclass
class Loop:
    """`for var in lo..hi { body }` (var is an i64 named `%iK`)."""

    var: str
    lo: Dim
    hi: Dim
    body: list[Stmt] = field(default_factory=list)


@dataclass
class If:
    """`if cond { body }`."""

    cond: Var
    body: list[Stmt] = field(default_factory=list)


@dataclass
class Guarded:
    """`var = value if cond else 0`, where `body` (which computes `value`) runs only when
    `cond` holds: how a `pad` evaluates its source only inside its window."""

    var: Var
    cond: Var
    body: list[Stmt]
    value: Operand


@dataclass
class LoopState:
    """A loop-carried tensor: two buffers that swap roles (current, next) every iteration."""

    current: Buffer
    next: Buffer
    first: Buffer
    second: Buffer


@dataclass
class ForLoop:
    """A counted loop over whole-tensor state. Before it, `first` holds the initial state
    (current = first, next = second); the body reads `current` and writes `next`; after each
    iteration they swap, so `current` holds the result when the loop ends."""

    var: str
    lo: Dim
    hi: Dim
    states: list[LoopState]
    body: list[Stmt] = field(default_factory=list)


@dataclass
class WhileLoop:
    """A loop over whole-tensor state, like `ForLoop`, that runs until an `ExitUnless` at
    the top level of its body finds its condition false. `var` counts the iterations
    started before this one (0, 1, ...); the states swap at the end of every iteration."""

    var: str
    states: list[LoopState]
    body: list[Stmt] = field(default_factory=list)


@dataclass
class ExitUnless:
    """Leave the innermost `WhileLoop` now unless `cond` holds (only at its top level)."""

    cond: Var


@dataclass
class Matmul:
    """`out = a @ b` for float 2-D views (any strides), or for 3-D views the products
    `out[i] = a[i] @ b[i]` along a first, batch axis (one helper call:
    `runtime_library/gemm_batch.py`). `out` is a whole buffer."""

    out: View
    a: View
    b: View
    pack: Buffer


@dataclass
class Sort:
    """`out = argsort(keys)`: the stable sorting permutation (i64) of the 1-D view `keys`
    (the order of `ir/ops_sort.py`), into the 1-D view `out`; `scratch` is an i64
    temporary of `SORT_SCRATCH_PER_KEY` elements per key."""

    out: View
    keys: View
    descending: bool
    scratch: Buffer


SORT_SCRATCH_PER_KEY = 4  # the merge sort's keys and indices, twice (runtime_library/sort.py)


@dataclass
class LinalgCall:
    """The linear-algebra op `op` (`ir/ops_linalg.py`) on whole row-major buffers, read and
    written in place: one call of the helper `rv_linalg_<op>_<dtype>`, whose table
    (`runtime_library/lapack.py`, BUFFERS) says what each buffer holds; `sizes` are its
    (batch, m, n, k) and `flags` the op's attributes as bits."""

    op: str
    dtype: str
    buffers: list[Buffer]
    sizes: tuple[Dim, Dim, Dim, Dim]
    flags: int = 0

    @property
    def helper(self) -> str:
        return f"rv_linalg_{self.op}_{self.dtype}"

    @property
    def written(self) -> list[Buffer]:
        """The buffers the helper writes (all but those it only reads)."""
        kept = READ_ONLY.get(self.op, ())
        return [b for i, b in enumerate(self.buffers) if i not in kept]


Stmt = Let | Load | Store | Accumulator | Accumulate | ArgUpdate | Check | If | Guarded | Loop | \
    ForLoop | WhileLoop | ExitUnless | Matmul | Sort | LinalgCall
# The statements with a nested body.
BLOCK_STMTS = (Loop, ForLoop, WhileLoop, If, Guarded)


@dataclass(frozen=True)
class ErrorSite:
    """What a failing `Check` reports: an index error on `label` axis `axis`, `empty` (an
    argmax of nothing), `rows` (a loop history with too few rows), `iterations` (a
    `while` past its iteration limit, the `size` of the check) or `capacity` (a trip
    count, the `index`, past its trip dimension `label`: the caller retries)."""

    kind: str
    label: str = ""
    axis: int = 0

    def message(self, index: int, size: int) -> str:
        """The IndexError text for this failed check (the tensor interpreter's)."""
        if self.kind == "empty":
            return "argmax/argmin of an empty tensor"
        if self.kind == "rows":
            return f"for_history needs more than its {size} rows"
        if self.kind == "iterations":
            return limit_error(size)
        if self.kind == "capacity":
            return str(CapacityError(self.label, index))
        return (f"index {index} is out of bounds for axis {self.axis} of '{self.label}' "
                f"with size {size}")

    def error(self, index: int, size: int) -> Exception:
        """The exception for this failed check: RuntimeError for `iterations`, else
        IndexError (both as the tensor interpreter raises them; `CapacityError` is one)."""
        if self.kind == "capacity":
            return CapacityError(self.label, index)
        kind = RuntimeError if self.kind == "iterations" else IndexError
        return kind(self.message(index, size))


@dataclass
class Program:
    """A specialised function as loop nests over buffers.

    `symbols` orders the dimension sizes passed to the kernel; `buffers` lists inputs then
    outputs (their table slots); `temps` are laid out in the workspace in order.
    """

    name: str
    symbols: list[str]
    inputs: list[Buffer]
    outputs: list[Buffer]
    temps: list[Buffer]
    body: list[Stmt]
    sites: list[ErrorSite]
    boundary: CallBoundary | None = None  # what a native caller checks (to_loops/boundary.py)

    def walk(self) -> list[Stmt]:
        """Every statement, depth first."""
        return walk(self.body)


def walk(stmts: list[Stmt]) -> list[Stmt]:
    """Every statement of `stmts`, nested ones included, depth first."""
    out: list[Stmt] = []
    for stmt in stmts:
        out.append(stmt)
        if isinstance(stmt, BLOCK_STMTS):
            out += walk(stmt.body)
    return out


def perfect_nest(loop: Loop) -> list[Loop]:
    """`loop` and the loops nested in it while each body is exactly the next loop,
    outermost first (`for %i { for %j { body } }`: both)."""
    loops = [loop]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    return loops


def straight_line(body: list[Stmt]) -> bool:
    """Whether `body` only computes, loads (unguarded), stores and accumulates."""
    return all(isinstance(s, Let | Store | Accumulate) or
               (isinstance(s, Load) and s.guard is None) for s in body)


def statement_dims(stmt: Stmt) -> list[Dim]:
    """Every index expression a statement (not its nested body) uses."""
    def view_dims(view: View) -> list[Dim]:
        return [view.offset, *view.strides, *view.shape, *view.buffer.shape]

    if isinstance(stmt, Let):
        return [a for a in stmt.args if isinstance(a, Dim)]
    if isinstance(stmt, Load | Store):
        extra = [stmt.value] if isinstance(stmt, Store) and isinstance(stmt.value, Dim) else []
        return view_dims(stmt.view) + list(stmt.index) + extra
    if isinstance(stmt, Accumulate | Guarded):
        return [stmt.value] if isinstance(stmt.value, Dim) else []
    if isinstance(stmt, ArgUpdate):
        return [stmt.index]
    if isinstance(stmt, Check):
        return [stmt.index, stmt.size]
    if isinstance(stmt, Loop | ForLoop):
        return [stmt.lo, stmt.hi]
    if isinstance(stmt, Matmul):
        return view_dims(stmt.out) + view_dims(stmt.a) + view_dims(stmt.b)
    if isinstance(stmt, Sort):
        return view_dims(stmt.out) + view_dims(stmt.keys) + list(stmt.scratch.shape)
    if isinstance(stmt, LinalgCall):
        return [*stmt.sizes, *(d for b in stmt.buffers for d in b.shape)]
    return []


def all_dims(program: Program) -> list[Dim]:
    """Every index expression in a program, including buffer shapes."""
    dims = [d for b in program.inputs + program.outputs + program.temps for d in b.shape]
    for stmt in program.walk():
        dims += statement_dims(stmt)
        if isinstance(stmt, ForLoop | WhileLoop):
            dims += [d for s in stmt.states for d in s.current.shape]
    return dims


def workspace_offsets(temps: list[Buffer], itemsizes: dict[str, int]) -> list[Dim]:
    """Byte offset of each temporary in the workspace, then its total size (64-aligned)."""
    offsets, total = [], Dim.const(0)
    for temp in temps:
        offsets.append(total)
        total = total + (temp.size * itemsizes[temp.dtype] + 63) // 64 * 64
    return offsets + [total]
