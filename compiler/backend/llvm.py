"""Loop IR → LLVM IR text (via llvmlite.ir), one entry function per program.

ABI of the entry function (what `runtime/native/native_kernel.py` calls through ctypes):

    i32 @<name>(ptr %buffers, ptr %dims)

- `buffers[k]` is the data pointer of input k (k < n_in), then of output k, then of the
  workspace holding every temporary (at the 64-byte aligned offsets of
  `workspace_offsets`), then of the helper table (addresses of the functions named in
  `abi.HELPERS`, then the native run time's slots: the signal count and re-arming, the
  number of threads, the worker pool's entry; see `abi.py`). Pointers are stored as
  8-byte integers.
- `dims[k]` is the size of dimension `program.symbols[k]`; the three i64 slots after the
  last dimension receive error details: site number, offending index, size.
- It returns 0, or 1 after a failed bounds check (nothing else is reported; outputs may be
  partly written and must be discarded), or `abi.INTERRUPTED` when a signal arrived while
  it ran (`poll`: at the back-edge of every outer loop, after every `for` or `while`
  iteration, between chunks of a split loop; outputs unfinished, to be discarded).

A second entry, `i32 @<name>_objects(ptr frame)`, takes the ndarray objects themselves (see
`_define_object_entry`); `runtime/native/native_kernel.py` uses it when the NumPy layout
allows. A third, `i32 @<name>_bind(...)`, binds and checks the sizes of a call for the
native call entry (`fastcall_bind.py`; the entry itself, shared by every kernel, is
`fastcall.py`).

Loops are emitted in canonical form so LLVM's loop vectoriser handles the inner ones;
accumulators are allocas that mem2reg turns into registers, and reductions carry
`reassoc nsz contract` so they vectorise. Guarded loads (`zero` mode reads) and guarded
values (a fused `pad`'s source) branch around their code, so nothing outside a buffer is ever
touched. Every load and store names its buffer's alias scope (`_alias_scopes`), so
the vectoriser needs no run-time checks that one buffer overlaps another. Top-level loops
whose iterations are independent (`loops/parallel_plan.py`) are split into chunks for the
worker pool when they are large (`parallel.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    FLOATS,
    I8,
    I32,
    I64,
    ITEMSIZE,
    MEMORY,
    PTR,
    REGISTER,
    FunctionPointer,
    alias_scopes,
    alloca,
    constant,
    counted_loop,
    i64,
    index_value,
    intrinsic,
    value_name,
    vector_lanes,
    vectorize_width_hint,
)
from reverie.compiler.backend.mathlib import MathLib
from reverie.compiler.backend.parallel_loops import emit_parallel_loop
from reverie.compiler.backend.scalar_ops import ScalarOps
from reverie.compiler.call_boundary.abi import (
    ARM_AT_SLOT,
    ARM_SLOT,
    ARRAY_DATA_OFFSET,
    HELPERS,
    INTERRUPTED,
    POOL_SLOT,
    SIGNALS_SLOT,
    SORT_DTYPES,
    THREADS_SLOT,
    entry_symbol,
    matmul_helper,
)
from reverie.compiler.call_boundary.fastcall_bind import define_bind_function
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.dtypes import STORAGE_DTYPES
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.loops.effects import alias_regions
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
    straight_line,
    walk,
    workspace_offsets,
)
from reverie.compiler.loops.parallel_plan import parallel_plans
from reverie.compiler.runtime_library.gemm import GEMM_TYPE
from reverie.compiler.runtime_library.lapack import LINALG_TYPE
from reverie.compiler.runtime_library.sort import SORT_TYPE

REDUCE_FLAGS = ("reassoc", "nsz", "contract")
ARM_EVERY = 1024  # a `for`/`while` loop's iterations between looks at the re-arming time
WORKSPACE = object()  # `pointers[WORKSPACE]`: the workspace's base address
# Lanes of a table-lookup loop (`_looks_up`). Widened to a register of f32, its lookups are
# 16 gathers or 16 inserts per vector: W9 on Zen 4, one thread, took 4.2-4.6 ms at the
# hint's 16 lanes (gathers), 3.6 at 1 and 2.7-3.4 at 4 (3.0-3.7 generating AVX2 code).
LOOKUP_LANES = 4


class _OnFirstUse(dict):
    """A dict whose missing entries `make(key)` makes (once: they are kept)."""

    def __init__(self, make: Callable[[object], ir.Value]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: object) -> ir.Value:
        value = self[key] = self._make(key)
        return value
def generate_llvm(program: Program) -> str:
    """The LLVM IR module (text) implementing `program`, with both entry points, and the
    `bind` function of the native call entry (`fastcall_bind.py`) when the program has a
    call boundary for one. The entry is kept out of line (inlined into `_objects`, it would
    double the code LLVM optimises and emits)."""
    codegen = ProgramCodegen(program)
    codegen.function.attributes.add("noinline")
    _define_object_entry(codegen.module, codegen.function, program)
    if program.boundary is not None:
        define_bind_function(codegen.module, codegen.function.name, program, program.boundary)
    return str(codegen.module)


def _define_object_entry(module: ir.Module, entry: ir.Function, program: Program) -> None:
    """`i32 @<name>_objects(ptr frame)`: the same kernel called with a single frame holding
    the addresses of the NumPy array *objects* (CPython ids), then the dimension sizes and
    error slots. It reads each array's data pointer (the field after the object header,
    at ARRAY_DATA_OFFSET) and calls the plain entry: one small ctypes call per kernel
    call, with no per-array conversions in Python. The copy is a loop (LLVM unrolls it
    when there are few arrays), so a program with thousands of outputs stays small."""
    count = len(program.inputs) + len(program.outputs) + 2
    function = ir.Function(module, ir.FunctionType(I32, [PTR]), name=entry.name + "_objects")
    (frame,) = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    table = alloca(b, ir.ArrayType(PTR, count), "buffers")
    with counted_loop(b, i64(0), i64(count)) as k:
        array = b.load(b.gep(frame, [k], source_etype=PTR), typ=PTR)
        data = b.load(b.gep(array, [i64(ARRAY_DATA_OFFSET)], source_etype=I8), typ=PTR)
        b.store(data, b.gep(table, [k], source_etype=PTR))
    b.ret(b.call(entry, [table, b.gep(frame, [i64(count)], source_etype=I64)]))


class ProgramCodegen:
    """Builds the module for one program, statement by statement."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.module = ir.Module(name=program.name)
        self.ops = ScalarOps(self.module, MathLib(self.module))
        self.function = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR]),
                                    name=entry_symbol(program))
        self.buffers_arg, self.dims_arg = self.function.args
        self.buffers_arg.name, self.dims_arg.name = "buffers", "dims"
        self.function.attributes.add("nounwind")
        self.allocas = ir.IRBuilder(self.function.append_basic_block("entry"))
        start = self.function.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self.values: dict[str, ir.Value] = {}
        self.accumulators: dict[str, ir.Value] = {}
        self.dims: dict[str, ir.Value] = {}
        self.pointers: dict[Buffer, ir.Value] = {}
        self.slots: dict[Buffer, ir.Value] = {}
        self.exits: list[ir.Block] = []  # where `ExitUnless` leaves each enclosing WhileLoop
        self.regions = alias_regions(program) or {}
        self.scopes = _alias_scopes(self.module, program, self.regions)
        self.parallel = parallel_plans(program)
        self._prologue()
        self.emit(program.body)
        self.b.ret(ir.Constant(I32, 0))
        self.allocas.branch(start)

    # ------------------------------------------------------------ prologue and helpers

    def _prologue(self) -> None:
        """Make `dims`, `pointers` and `helpers` for the function being emitted. The
        helper table is read at once; a dimension or buffer pointer is read from the
        arguments when first used, at the end of this prologue (before its jump to the
        `body` block, so it dominates every use): a parallel loop's chunk function reads
        only what its loop touches, and LLVM gets no dead prologue code to delete."""
        b, program = self.b, self.program
        n_io = len(program.inputs) + len(program.outputs)
        body = self.function.append_basic_block("body")
        at_prologue = ir.IRBuilder(b.block)
        at_prologue.position_before(b.branch(body))
        b.position_at_end(body)
        buffers_arg, dims_arg = self.buffers_arg, self.dims_arg
        symbols = {symbol: k for k, symbol in enumerate(program.symbols)}
        slots = {buffer: buffer.slot + (len(program.inputs) if buffer.role == "output" else 0)
                 for buffer in program.inputs + program.outputs}
        temps = {temp: k for k, temp in enumerate(program.temps)}
        offsets: list[ir.Value] = []  # where temporary k starts in the workspace

        def table_entry(slot: int, name: str) -> ir.Value:
            entry = at_prologue.gep(buffers_arg, [i64(slot)], source_etype=PTR)
            return at_prologue.load(entry, typ=PTR, name=value_name(name))

        self.helpers = table_entry(n_io + 1, "helpers")
        self.at_prologue = at_prologue
        self.signals_seen: ir.Value | None = None  # read when first polled (`seen`)
        self.interrupt_exit: ir.Block | None = None

        def dim(symbol: str) -> ir.Value:
            entry = at_prologue.gep(dims_arg, [i64(symbols[symbol])], source_etype=I64)
            return at_prologue.load(entry, typ=I64, name=value_name(symbol))

        def pointer(buffer: Buffer) -> ir.Value:
            if buffer in slots:
                return table_entry(slots[buffer], buffer.name)
            k = temps[buffer]
            # each temporary starts where the previous one ends (`workspace_offsets'
            # layout), one add per temporary rather than each offset's whole sum again
            while len(offsets) <= k:
                previous = len(offsets) - 1
                offsets.append(i64(0) if previous < 0 else at_prologue.add(
                    offsets[previous], index_value(at_prologue, workspace_offsets(
                        [program.temps[previous]], ITEMSIZE)[1], dims.__getitem__)))
            return at_prologue.gep(pointers[WORKSPACE], [offsets[k]], source_etype=I8,
                                   inbounds=True, name=value_name(buffer.name))

        dims = self.dims = _OnFirstUse(dim)
        pointers = self.pointers = _OnFirstUse(
            lambda buffer: table_entry(n_io, "workspace") if buffer is WORKSPACE
            else pointer(buffer))

    def seen(self) -> ir.Value:
        """The signal count when the kernel started (read in the prologue on first use)."""
        if self.signals_seen is None:
            self.signals_seen = self._signal_count(self.at_prologue)
        return self.signals_seen

    def _signal_count(self, b: ir.IRBuilder) -> ir.Value:
        slot = b.gep(self.helpers, [i64(SIGNALS_SLOT)], source_etype=I64)
        return b.load_atomic(slot, "monotonic", 8, typ=I64)

    def stop_unless(self, going_on: ir.Value) -> None:
        """Return INTERRUPTED unless `going_on` (outputs are then left unfinished)."""
        if self.interrupt_exit is None:
            self.interrupt_exit = self.function.append_basic_block("interrupted")
            ir.IRBuilder(self.interrupt_exit).ret(ir.Constant(I32, INTERRUPTED))
        following = self.function.append_basic_block("not_interrupted")
        self.b.cbranch(going_on, following, self.interrupt_exit)
        self.b.position_at_end(following)

    def poll(self, arm: ir.Value | bool = False) -> None:
        """Stop when a signal arrived since the kernel started (`pool_runtime.py`); with
        `arm` (true, or an i1 that is true), first re-arm the signal handler when the
        table's re-arming time has passed."""
        b = self.b
        if arm is not False:
            arm_at = b.load_atomic(b.gep(self.helpers, [i64(ARM_AT_SLOT)], source_etype=I64),
                                   "monotonic", 8, typ=I64)
            due = b.icmp_unsigned(">", b.call(_cycle_counter(self.module), []), arm_at)
            if arm is not True:
                due = b.and_(arm, due)
            with b.if_then(due, likely=False):
                b.call(self._helper_at(ARM_SLOT, ir.FunctionType(ir.VoidType(), [])), [])
        self.stop_unless(b.icmp_signed("==", self._signal_count(b), self.seen()))

    def _alloca(self, type_: ir.Type, name: str) -> ir.Value:
        """A stack slot in the entry block (where mem2reg promotes it to registers)."""
        return alloca(self.allocas, type_, name)

    def index(self, dim: Dim) -> ir.Value:
        """An index expression as an i64 value."""
        return index_value(self.b, dim, self._symbol)

    def _symbol(self, name: str) -> ir.Value:
        """A dimension size, or (named `%...`) an index variable of the loop IR."""
        return self.operand(Var(name, "i64")) if name.startswith("%") else self.dims[name]

    def operand(self, operand: Operand) -> ir.Value:
        """The llvmlite value of a loop-IR operand."""
        if isinstance(operand, Const):
            return constant(operand.dtype, operand.value)
        if isinstance(operand, Dim):
            return self.index(operand)
        if operand.name in self.accumulators:
            return self.b.load(self.accumulators[operand.name], typ=REGISTER[operand.dtype])
        return self.values[operand.name]

    def base(self, buffer: Buffer) -> ir.Value:
        """Address of `buffer`'s first element (a loop state's: the buffer current now)."""
        if buffer in self.slots:  # a loop state's current or next buffer
            return self.b.load(self.slots[buffer], typ=PTR, name=value_name(buffer.name))
        return self.pointers[buffer]

    def pointer(self, view: View, index: tuple[Dim, ...]) -> ir.Value:
        """Address of `view[index]`."""
        return self.b.gep(self.base(view.buffer), [self.index(view.flat(index))],
                          source_etype=MEMORY[view.buffer.dtype], inbounds=True)

    def _read(self, view: View, index: tuple[Dim, ...]) -> ir.Value:
        """The element `view[index]` as a register value (bools become i1, bf16 and f16
        f32s: `storage_conversions.py`)."""
        dtype = view.buffer.dtype
        value = self.b.load(self.pointer(view, index), typ=MEMORY[dtype])
        value.align = ITEMSIZE[dtype]
        self._tag(value, view.buffer)
        if dtype in STORAGE_DTYPES:
            return self.ops.storage.load(self.b, value, dtype)
        return self.b.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if dtype == "bool" else value

    # ------------------------------------------------------------ statements

    def emit(self, stmts: list[Stmt]) -> None:
        """Emit statements in order; `Loop` goes to `_loop`, `ForLoop` to `_forloop`, ..."""
        for stmt in stmts:
            getattr(self, "_" + type(stmt).__name__.lower())(stmt)

    def _let(self, stmt: Let) -> None:
        args = [self.operand(a) for a in stmt.args]
        dtypes = ["i64" if isinstance(a, Dim) else a.dtype for a in stmt.args]
        self.values[stmt.var.name] = self.ops.emit(self.b, stmt.op, args, dtypes,
                                                   stmt.var.dtype)

    def _load(self, stmt: Load) -> None:
        if stmt.guard is None:
            self.values[stmt.var.name] = self._read(stmt.view, stmt.index)
            return
        self.values[stmt.var.name] = self._when(
            stmt.guard, stmt.var.dtype, lambda: self._read(stmt.view, stmt.index))

    def _guarded(self, stmt: Guarded) -> None:
        def value() -> ir.Value:
            self.emit(stmt.body)
            return self.operand(stmt.value)

        self.values[stmt.var.name] = self._when(stmt.cond, stmt.var.dtype, value)

    def _when(self, cond: Var, dtype: str, compute: Callable[[], ir.Value]) -> ir.Value:
        """`compute()` if `cond` holds (its code runs only then), else the zero of `dtype`."""
        b = self.b
        before = b.block
        then = self.function.append_basic_block("guarded")
        join = self.function.append_basic_block("joined")
        b.cbranch(self.values[cond.name], then, join)
        b.position_at_end(then)
        computed = compute()
        after = b.block
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(REGISTER[dtype])
        phi.add_incoming(constant(dtype, 0), before)
        phi.add_incoming(computed, after)
        return phi

    def _store(self, stmt: Store) -> None:
        value = self.operand(stmt.value)
        dtype = stmt.view.buffer.dtype
        if dtype == "bool":
            value = self.b.zext(value, I8)
        elif dtype in STORAGE_DTYPES:
            value = self.ops.storage.store(self.b, value, dtype)
        store = self.b.store(value, self.pointer(stmt.view, stmt.index))
        store.align = ITEMSIZE[dtype]
        self._tag(store, stmt.view.buffer)

    def _tag(self, access: ir.Instruction, buffer: Buffer) -> None:
        """Mark a load or store of `buffer` as independent of other regions' accesses."""
        region = self.regions.get(id(buffer))
        if region is not None:
            scope, others = self.scopes[region]
            access.set_metadata("alias.scope", scope)
            access.set_metadata("noalias", others)

    def _accumulator(self, stmt: Accumulator) -> None:
        slot = self._alloca(REGISTER[stmt.var.dtype], stmt.var.name.lstrip("%"))
        self.accumulators[stmt.var.name] = slot
        self.b.store(self.operand(stmt.init), slot)

    def _accumulate(self, stmt: Accumulate) -> None:
        """acc = combine(acc, value), the reduction's combining op (`ir/reduce_kinds.py`).
        Float sums and products may reassociate (REDUCE_FLAGS) and float max and min are
        LLVM's NaN-propagating intrinsics, so that LLVM vectorises the loop; any other
        combination is the op's scalar code (a bf16/f16 accumulator's, which the widening
        pass never leaves, rounds at every step)."""
        b, dtype = self.b, stmt.var.dtype
        slot = self.accumulators[stmt.var.name]
        old, value = b.load(slot, typ=REGISTER[dtype]), self.operand(stmt.value)
        combine = REDUCE_KINDS[stmt.kind].combine
        float_register = dtype in FLOATS and dtype not in STORAGE_DTYPES
        if float_register and combine in ("add", "mul"):
            new = (b.fadd if combine == "add" else b.fmul)(old, value, flags=REDUCE_FLAGS)
        elif float_register and combine in ("maximum", "minimum"):
            type_ = REGISTER[dtype]
            new = b.call(intrinsic(self.module, f"llvm.{combine}", type_, [type_, type_]),
                         [old, value], fastmath=("nsz",))
        else:
            new = self.ops.emit(b, combine, [old, value], [dtype, dtype], dtype)
        b.store(new, slot)

    def _argupdate(self, stmt: ArgUpdate) -> None:
        b, dtype = self.b, stmt.best.dtype
        best_slot = self.accumulators[stmt.best.name]
        index_slot = self.accumulators[stmt.best_index.name]
        best = b.load(best_slot, typ=REGISTER[dtype])
        value = self.operand(stmt.value)
        order = ">" if stmt.kind == "argmax" else "<"
        if dtype in FLOATS:
            first_nan = b.and_(b.fcmp_unordered("uno", value, value),
                               b.fcmp_ordered("ord", best, best))
            better = b.or_(b.fcmp_ordered(order, value, best), first_nan)
        else:
            better = b.icmp_signed(order, value, best)
        b.store(b.select(better, value, best), best_slot)
        old_index = b.load(index_slot, typ=I64)
        b.store(b.select(better, self.index(stmt.index), old_index), index_slot)

    def _check(self, stmt: Check) -> None:
        b = self.b
        index, size = self.index(stmt.index), self.index(stmt.size)
        passed = self.function.append_basic_block("checked")
        failed = self.function.append_basic_block("out_of_bounds")
        b.cbranch(b.icmp_unsigned("<", index, size), passed, failed)
        b.position_at_end(failed)
        errors = len(self.program.symbols)
        for k, value in enumerate((i64(stmt.site), index, size)):
            b.store(value, b.gep(self.dims_arg, [i64(errors + k)], source_etype=I64))
        b.ret(ir.Constant(I32, 1))
        b.position_at_end(passed)

    def _if(self, stmt: If) -> None:
        with self.b.if_then(self.values[stmt.cond.name]):
            self.emit(stmt.body)

    def _loop(self, stmt: Loop) -> None:
        plan = self.parallel.get(id(stmt))
        if plan is None:
            self.serial_loop(stmt, self.index(stmt.lo), self.index(stmt.hi))
        else:
            emit_parallel_loop(self, plan)

    def serial_loop(self, stmt: Loop, lo: ir.Value, hi: ir.Value) -> None:
        """`for var in lo..hi { body }` on this thread; an outer loop (one holding a loop)
        polls for signals at its back-edge."""
        loop_id = None
        if _looks_up(stmt):
            loop_id = vectorize_width_hint(self.module, LOOKUP_LANES)
        elif _widens_f32(stmt):
            loop_id = vectorize_width_hint(self.module, vector_lanes("f32"))
        outer = any(isinstance(inner, Loop) for inner in walk(stmt.body))
        with counted_loop(self.b, lo, hi, loop_id=loop_id) as i, \
                self.ops.storage.vector_loop(_contiguous(stmt)):
            self.values[stmt.var] = i
            self.emit(stmt.body)
            if outer:
                self.poll()

    def _forloop(self, stmt: ForLoop) -> None:
        self._bind_states(stmt.states)
        with counted_loop(self.b, self.index(stmt.lo), self.index(stmt.hi)) as t:
            self.values[stmt.var] = t
            self.emit(stmt.body)
            self._swap_states(stmt.states)
            self._poll_step(t)

    def _whileloop(self, stmt: WhileLoop) -> None:
        """`for (count = 0; ; count++) { body }`, left by the body's `ExitUnless`."""
        b = self.b
        self._bind_states(stmt.states)
        before = b.block
        header = self.function.append_basic_block("while")
        done = self.function.append_basic_block("while_done")
        b.branch(header)
        b.position_at_end(header)
        count = b.phi(I64, "count")
        count.add_incoming(i64(0), before)
        self.values[stmt.var] = count
        self.exits.append(done)
        self.emit(stmt.body)
        self.exits.pop()
        self._swap_states(stmt.states)
        self._poll_step(count)
        count.add_incoming(b.add(count, i64(1)), b.block)
        b.branch(header)
        b.position_at_end(done)

    def _poll_step(self, step: ir.Value) -> None:
        """Poll at the end of a `for`/`while` iteration; every ARM_EVERY-th, re-arm too."""
        self.poll(arm=self.b.icmp_unsigned(
            "==", self.b.and_(step, i64(ARM_EVERY - 1)), i64(ARM_EVERY - 1)))

    def _exitunless(self, stmt: ExitUnless) -> None:
        stay = self.function.append_basic_block("while_body")
        self.b.cbranch(self.values[stmt.cond.name], stay, self.exits[-1])
        self.b.position_at_end(stay)

    def _bind_states(self, states: list[LoopState]) -> None:
        """Pointer slots for each state's current and next buffers (first and second)."""
        for state in states:
            for buffer, initial in ((state.current, state.first), (state.next, state.second)):
                self.slots[buffer] = self._alloca(PTR, buffer.name)
                self.b.store(self.pointers[initial], self.slots[buffer])

    def _swap_states(self, states: list[LoopState]) -> None:
        for state in states:
            current = self.b.load(self.slots[state.current], typ=PTR)
            following = self.b.load(self.slots[state.next], typ=PTR)
            self.b.store(following, self.slots[state.current])
            self.b.store(current, self.slots[state.next])

    def _helper(self, name: str, type_: ir.FunctionType) -> FunctionPointer:
        """The run-time helper `name`, read from the helper table (`abi.HELPERS` order)."""
        return self._helper_at(HELPERS.index(name), type_)

    def _helper_at(self, slot: int, type_: ir.FunctionType) -> FunctionPointer:
        """The function whose address is in slot `slot` of the helper table."""
        entry = self.b.gep(self.helpers, [i64(slot)], source_etype=PTR)
        return FunctionPointer(self.b.load(entry, typ=PTR), type_)

    def _matmul(self, stmt: Matmul) -> None:
        """One call of the helper: a batch of one for 2-D views, else of the batch axis."""
        gemm = self._helper(matmul_helper(stmt), GEMM_TYPE)
        batched = len(stmt.out.shape) == 3
        *_, m, k = stmt.a.shape
        n = stmt.b.shape[-1]
        batch = stmt.out.shape[0] if batched else Dim.const(1)
        args = [self.index(d) for d in (batch, m, n, k)]
        for view in (stmt.a, stmt.b, stmt.out):
            strides = view.strides if batched else (Dim.const(0), *view.strides)
            origin = self.pointer(view, (Dim.const(0),) * len(view.shape))
            args += [origin, *(self.index(stride) for stride in strides)]
        threads, pool = (self.b.load(self.b.gep(self.helpers, [i64(slot)], source_etype=I64),
                                     typ=I64) for slot in (THREADS_SLOT, POOL_SLOT))
        self.b.call(gemm, [*args, self.pointers[stmt.pack], threads, pool])

    def _sort(self, stmt: Sort) -> None:
        sort = self._helper("rv_argsort", SORT_TYPE)
        (n,) = stmt.keys.shape
        start = (Dim.const(0),)
        self.b.call(sort, [self.index(n), self.pointer(stmt.keys, start),
                           self.index(stmt.keys.strides[0]),
                           i64(SORT_DTYPES.index(stmt.keys.buffer.dtype)),
                           i64(int(stmt.descending)), self.pointer(stmt.out, start),
                           self.index(stmt.out.strides[0]),
                           self.pointer(View.of(stmt.scratch), start)])

    def _linalgcall(self, stmt: LinalgCall) -> None:
        """One call of the op's helper on its whole buffers (`runtime_library/lapack.py`)."""
        helper = self._helper(stmt.helper, LINALG_TYPE)
        pointers = [self.pointer(View.of(b), (Dim.const(0),) * len(b.shape))
                    for b in stmt.buffers]
        pointers += [ir.Constant(PTR, None)] * (4 - len(pointers))
        self.b.call(helper, [*(self.index(d) for d in stmt.sizes), i64(stmt.flags), *pointers])


def _cycle_counter(module: ir.Module) -> ir.Function:
    """`@llvm.readcyclecounter` (x86's `rdtsc`), declared once."""
    name = "llvm.readcyclecounter"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(I64, []), name=name)


def _alias_scopes(module: ir.Module, program: Program,
                  regions: dict[int, int]) -> dict[int, tuple[ir.Value, ir.Value]]:
    """By memory region (`loops/effects.py`, `alias_regions`), its `alias.scope` and
    `noalias` metadata: a scope of its own, independent of every other region's."""
    keys = list(dict.fromkeys(regions.values()))
    names = {id(b): b.name for b in [*program.inputs, *program.outputs, *program.temps]}
    return dict(zip(keys, alias_scopes(module, [names[k] for k in keys]), strict=True))


def _simple(loop: Loop) -> bool:
    """Whether `loop` is innermost and straight-line: lets, stores, accumulations and
    unguarded loads (what LLVM's vectoriser takes as it is)."""
    return straight_line(loop.body)


def _contiguous(loop: Loop) -> bool:
    """Whether `loop` is simple and every access in it moves by one element or none per
    iteration: a loop LLVM vectorises with plain vector loads and stores (a strided one it
    may leave scalar, where a call per element would cost more than inline code)."""
    return _simple(loop) and all(
        s.view.step(s.index, loop.var) in (Dim.const(0), Dim.const(1))
        for s in loop.body if isinstance(s, Load | Store))


def _looks_up(loop: Loop) -> bool:
    """Whether a simple innermost loop reads tables at its elements' bits (the lookups of
    `loops/tabulation.py`)."""
    bits = {s.var.name for s in loop.body if isinstance(s, Let) and s.op == "bits"}
    return _simple(loop) and any(isinstance(s, Load) and any(bits & d.symbols() for d in s.index)
                                 for s in loop.body)


def _widens_f32(loop: Loop) -> bool:
    """Whether a simple innermost loop sums f32 values in f64. LLVM would pick its vector
    width from f64 and run the f32 work at half width; such loops get a width hint sized
    for f32 instead. (Only loops LLVM surely vectorises: a hint it cannot honour makes it
    print a warning; a running value the loop reads back, a scan's, is no reduction.)"""
    accumulators = [s for s in loop.body if isinstance(s, Accumulate)]
    read = {a for s in loop.body if isinstance(s, Let | Store)
            for a in (s.args if isinstance(s, Let) else (s.value,))}
    sums = bool(accumulators) and all(s.kind in ("sum", "prod") and s.var.dtype == "f64"
                                      and s.var not in read for s in accumulators)
    widens = any(isinstance(s, Let) and s.op == "cast" and s.var.dtype == "f64" and
                 isinstance(s.args[0], Var) and s.args[0].dtype == "f32" for s in loop.body)
    return _simple(loop) and sums and widens
