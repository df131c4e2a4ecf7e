"""Parallel loops: a loop of `loops/parallel_plan.py`'s plans split into chunks for the pool.

The worker pool is the run time's (`runtime/native/pool.py`, `pool_runtime.py`): its entry
`rv_pool_run` sits in the helper table (slot POOL_SLOT, 0 when there is no pool). For a
planned loop the kernel emits

    total = (hi - lo) * work
    chunks = total >= PARALLEL_MIN_WORK ? clamp(total / CHUNK_WORK, 1, MAX_CHUNKS) : 1
    context = {buffers, dims, seen, chunks, lo, per, hi, partials...,
               &capture..., buffer pointer...}
    if pool != 0 and chunks > 1:
        poll; status = pool(@<entry>_chunks<k>, &context, chunks, seen)  # all claimed done
    else:
        for c in 0..chunks: status = @<entry>_chunks<k>(&context, c); poll
    if status != 0: return INTERRUPTED
    for c in 0..chunks: acc = acc <kind> partial[c]           # each reduction, in order

and the outlined chunk function, run by whichever thread claimed chunk `c`:

    i32 @<entry>_chunks<k>(ptr context, i64 c):
        (read dimension sizes from dims, as the entry does; each captured value and the
         pointer of each buffer the loop touches from the context)
        acc = identity                                      # each reduction
        for i in lo + c*per .. min(lo + (c+1)*per, hi) { body }   # outer loops poll
        partial[c] = acc
        return 0

The chunk bounds depend only on the loop's size (never on the thread count, nor on which
thread runs a chunk): the same partials are combined in the same order on every run and at
every thread count. A small loop is one chunk on the calling thread, and a reduction then
differs from an inline loop only by adding its initial value last (sums start at 0, so not
at all). The loop's code exists once, in the chunk function. `poll` (`llvm.py`) returns
INTERRUPTED when a signal arrived since the kernel started (`seen`, the signal count then).

A *nested* plan (a loop in a `for` body: one time step of a scan) runs once per step, so
when it is too small to split it runs inline, exactly as an unplanned loop, rather than
through the chunk function (a context filled and a call made every step); its code then
exists twice. Its captures (values from around it, such as the step's roll offsets) are
spilled to the caller's stack, their addresses in the context, and a loop state's
pointer is the one current at that step. Buffer pointers are passed rather than derived
again in the chunk function: a temporary's address is the sum of the sizes of the
workspace's earlier temporaries, which each chunk function would recompute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    FLOATS,
    I32,
    I64,
    PTR,
    REGISTER,
    FunctionPointer,
    constant,
    counted_loop,
    i64,
    value_name,
)
from reverie.compiler.call_boundary.abi import POOL_SLOT
from reverie.compiler.loops.ir import Accumulate, Var
from reverie.compiler.loops.parallel_plan import ParallelPlan, Reduction
from reverie.compiler.runtime_library.pool_runtime import CHUNK_TYPE, RUN_TYPE

if TYPE_CHECKING:
    from reverie.compiler.backend.llvm import ProgramCodegen

# statements a loop runs (`loops/parallel_plan.py`'s work x trips) below which it is one chunk
PARALLEL_MIN_WORK = 1 << 20
CHUNK_WORK = 1 << 18  # statements per chunk of a larger loop (at most MAX_CHUNKS chunks)
MAX_CHUNKS = 256
CHUNK_ALIGN = 64  # iterations; an innermost loop's chunk bounds stay multiples of this
BUFFERS, DIMS, SEEN, CHUNKS, LO, PER, HI, PARTIALS = range(8)
# the codegen state that belongs to one LLVM function
FUNCTION_STATE = ("function", "allocas", "b", "buffers_arg", "dims_arg", "values",
                  "accumulators", "dims", "pointers", "slots", "helpers", "at_prologue",
                  "signals_seen", "interrupt_exit")


def identity(reduction: Reduction) -> ir.Constant:
    """The value `x` with `x <kind> y == y` for every y of the accumulator's type."""
    dtype, kind = reduction.var.dtype, reduction.kind
    if kind in ("sum", "prod"):
        return constant(dtype, 0 if kind == "sum" else 1)
    if dtype in FLOATS:
        return constant(dtype, float("-inf") if kind == "max" else float("inf"))
    bits = REGISTER[dtype].width
    return constant(dtype, -(1 << (bits - 1)) if kind == "max" else (1 << (bits - 1)) - 1)


def emit_parallel_loop(codegen: ProgramCodegen, plan: ParallelPlan) -> None:
    """Emit `plan.loop` at the codegen's builder: a large loop as chunks (on the pool when
    there is one, else in order on this thread, polling for signals between them), a small
    one as one chunk (a top-level loop) or inline, as a serial loop (a nested one); then
    each reduction's partials. The chunks depend only on the loop's size, not on the
    thread count: every thread count gives the same bits."""
    b, loop = codegen.b, plan.loop
    chunk_function = _define_chunk_function(codegen, plan)
    lo, hi = codegen.index(loop.lo), codegen.index(loop.hi)
    pool = b.load(b.gep(codegen.helpers, [i64(POOL_SLOT)], source_etype=I64), typ=I64)
    total = b.mul(b.sub(hi, lo), codegen.index(plan.work))
    worth = b.icmp_signed(">=", total, i64(PARALLEL_MIN_WORK))
    chunks = b.sdiv(total, i64(CHUNK_WORK))
    chunks = b.select(b.icmp_signed("<", chunks, i64(MAX_CHUNKS)), chunks, i64(MAX_CHUNKS))
    chunks = b.select(worth, chunks, i64(1))

    def run(context: ir.Value) -> None:
        function = FunctionPointer(chunk_function, CHUNK_TYPE)
        with b.if_else(b.and_(b.icmp_unsigned("!=", pool, i64(0)),
                              b.icmp_signed(">", chunks, i64(1)))) as (on_pool, here):
            with on_pool:
                codegen.poll(arm=True)
                status = b.call(FunctionPointer(b.inttoptr(pool, PTR), RUN_TYPE),
                                [function, context, chunks, codegen.seen()])
                codegen.stop_unless(b.icmp_signed("==", status, i64(0)))
            with here:
                with counted_loop(b, i64(0), chunks) as c:
                    status = b.call(chunk_function, [context, c])
                    codegen.stop_unless(b.icmp_signed("==", status, ir.Constant(I32, 0)))
                    codegen.poll(arm=True)

    if plan.nested:  # run every step: a small loop stays inline, as if never planned
        with b.if_else(worth) as (parallel, one_thread):
            with parallel:
                _run_chunks(codegen, plan, chunks, lo, hi, run)
            with one_thread:
                codegen.serial_loop(loop, lo, hi)
        return
    _run_chunks(codegen, plan, chunks, lo, hi, run)


def _run_chunks(codegen: ProgramCodegen, plan: ParallelPlan, chunks: ir.Value, lo: ir.Value,
                hi: ir.Value, run: Callable[[ir.Value], None]) -> None:
    """Fill the chunk context of `plan` for `chunks` chunks of `lo..hi`, `run` it, then
    combine each reduction's partials in chunk order."""
    b = codegen.b
    per = b.sdiv(b.add(b.sub(hi, lo), b.sub(chunks, i64(1))), chunks)
    if plan.innermost:  # a nest's outer index moves no vector lanes: chunks of any size
        per = b.mul(b.sdiv(b.add(per, i64(CHUNK_ALIGN - 1)), i64(CHUNK_ALIGN)),
                    i64(CHUNK_ALIGN))
    partials = [codegen._alloca(ir.ArrayType(REGISTER[r.var.dtype], MAX_CHUNKS), "partials")
                for r in plan.reductions]
    captures = [codegen._alloca(REGISTER[var.dtype], "capture") for var in plan.captures]
    for var, slot in zip(plan.captures, captures, strict=True):
        b.store(codegen.operand(var), slot)
    pointers = [codegen.base(buffer) for buffer in plan.buffers]
    context = codegen._alloca(ir.ArrayType(I64, _context_size(plan)), "context")
    fields = [b.ptrtoint(codegen.buffers_arg, I64), b.ptrtoint(codegen.dims_arg, I64),
              codegen.seen(), chunks, lo, per, hi,
              *(b.ptrtoint(p, I64) for p in partials + captures + pointers)]
    for slot, value in enumerate(fields):
        b.store(value, b.gep(context, [i64(slot)], source_etype=I64))
    run(context)
    for reduction, partial in zip(plan.reductions, partials, strict=True):
        type_ = REGISTER[reduction.var.dtype]
        with counted_loop(b, i64(0), chunks) as c:
            name = f"{reduction.var.name}.partial"
            codegen.values[name] = b.load(b.gep(partial, [c], source_etype=type_), typ=type_)
            codegen._accumulate(Accumulate(reduction.var, reduction.kind,
                                           Var(name, reduction.var.dtype)))


def _context_size(plan: ParallelPlan) -> int:
    """Fields of a plan's chunk context: the fixed ones, then one per reduction's partials,
    per captured value and per buffer pointer."""
    return PARTIALS + len(plan.reductions) + len(plan.captures) + len(plan.buffers)


@contextmanager
def _own_function(codegen: ProgramCodegen, function: ir.Function) -> Iterator[None]:
    """Point the codegen at `function` for the with-block, then back at what it was on."""
    saved = {name: getattr(codegen, name) for name in FUNCTION_STATE}
    codegen.function = function
    codegen.allocas = ir.IRBuilder(function.append_basic_block("entry"))
    start = function.append_basic_block("start")
    codegen.b = ir.IRBuilder(start)
    codegen.values, codegen.accumulators, codegen.dims = {}, {}, {}
    codegen.pointers, codegen.slots = {}, {}
    codegen.interrupt_exit = None
    try:
        yield
    finally:
        codegen.allocas.branch(start)
        for name, value in saved.items():
            setattr(codegen, name, value)


def _define_chunk_function(codegen: ProgramCodegen, plan: ParallelPlan) -> ir.Function:
    """`i32 @<entry>_chunks<k>(ptr context, i64 chunk)`: run one chunk; 0, or INTERRUPTED
    when a signal arrived (its outer loops poll, as the entry's do)."""
    module = codegen.module
    prefix = codegen.function.name + "_chunks"
    number = sum(name.startswith(prefix) for name in module.globals)
    function = ir.Function(module, CHUNK_TYPE, name=f"{prefix}{number}")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")  # one copy of the loop's code, not one per call site
    context, chunk = function.args
    with _own_function(codegen, function):
        b = codegen.b

        def field(slot: int) -> ir.Value:
            return b.load(b.gep(context, [i64(slot)], source_etype=I64), typ=I64)

        codegen.buffers_arg = b.inttoptr(field(BUFFERS), PTR)
        codegen.dims_arg = b.inttoptr(field(DIMS), PTR)
        codegen._prologue()
        codegen.signals_seen = field(SEEN)
        lo, per, hi = field(LO), field(PER), field(HI)
        partials = [b.inttoptr(field(PARTIALS + k), PTR) for k in range(len(plan.reductions))]
        captured = PARTIALS + len(plan.reductions)
        for k, var in enumerate(plan.captures):
            address = b.inttoptr(field(captured + k), PTR)
            codegen.values[var.name] = b.load(address, typ=REGISTER[var.dtype])
        for k, buffer in enumerate(plan.buffers, captured + len(plan.captures)):
            # a loop state's too: it does not swap while the loop runs
            codegen.pointers[buffer] = b.inttoptr(field(k), PTR, name=value_name(buffer.name))
        slots = {r.var.name: codegen._alloca(REGISTER[r.var.dtype], "partial")
                 for r in plan.reductions}
        codegen.accumulators.update(slots)
        start = b.add(lo, b.mul(chunk, per))
        start = b.select(b.icmp_signed("<", start, hi), start, hi)
        stop = b.add(start, per)
        stop = b.select(b.icmp_signed("<", stop, hi), stop, hi)
        for reduction in plan.reductions:
            b.store(identity(reduction), slots[reduction.var.name])
        codegen.serial_loop(plan.loop, start, stop)
        for reduction, partial in zip(plan.reductions, partials, strict=True):
            type_ = REGISTER[reduction.var.dtype]
            b.store(b.load(slots[reduction.var.name], typ=type_),
                    b.gep(partial, [chunk], source_etype=type_))
        b.ret(ir.Constant(I32, 0))
    return function
