"""The native run time of threads and signals, in LLVM IR: the worker pool kernels split
their loops over, and the signal handler that lets a running kernel stop.

One small module, compiled once per process (`runtime/native/pool.py` loads it; disk-cached like
the helpers). It uses only libc (`pthread_create`, `syscall` for futexes,
`sigaction`).

Why hand-written rather than OpenMP (libgomp): an OpenMP parallel region ends in a barrier
that every thread of the team must reach, whatever the schedule, so one descheduled worker
(its core lent to another process, or to torch's or OpenBLAS's threads) holds every call
up (benchmarks/README.md, "The pool beside other work"). No portable OpenMP call lets the
caller finish a job without the team, and a kernel also needs a stop point per chunk for
signals, which OpenMP has no hook for.

**The pool.** `i64 @rv_pool_run(ptr fn, ptr context, i64 chunks, i64 seen)` runs
`i32 fn(context, c)` for every chunk `c` in `0..chunks` and returns 0, or INTERRUPTED when
a signal arrived (the signal count differs from `seen`; NO_SIGNAL_CHECK: never) or a chunk
returned non-zero; then some chunks never ran. Chunks are *claimed*: one word holds the
job's sequence number (high 32 bits) and its next unclaimed chunk (low 32 bits), and a
thread claims chunk `c` by a compare-and-swap from (job, c) to (job, c + 1), which fails
once the job is over. The calling thread claims chunks like the workers, so

- a worker that is not awake yet, or descheduled (its core busy with another process),
  holds up nothing: when it comes, the chunks are gone and it goes back to sleep;
- the caller waits only for chunks that were claimed (`done` counts the finished ones),
  spinning briefly, then asleep on `done` (a worker that finishes a chunk wakes it);
- which thread runs a chunk changes run to run, never what a chunk computes: the chunk
  bounds are the kernel's (`backend/parallel_loops.py`), so results are the same bits.

Workers (started by `void @rv_pool_start(i64 workers)`, signals blocked) spin WORKER_SPIN
pauses after a job, then sleep on a futex; the caller wakes them only when one sleeps.
One job runs at a time: a caller that finds the pool taken (a kernel called from a second
Python thread) runs its chunks alone.

**Splits that pay.** Whether waking a worker pays depends on the host and on what else
runs on it (a core busy with another process, a worker preempted inside its chunk), so the
pool measures it: `rv_pool_run` times each split job and the caller's own chunks, which
estimate what the job would take on one thread. A split that did not save a tenth of that
makes the next jobs of the same chunk function (remembered by address, HISTORY_SLOTS of
them) run alone on the caller, without waking anyone, for RETRY_AFTER jobs, doubled by
each further losing split and halved by each paying one; a job of more than twice the
losing one's work (and more than SPLIT_FLOOR cycles, what waking a worker costs, so that a
tiny job measured during an interrupt does not count as grown) tries again at once. Which
thread runs a chunk never changes the results.

**Signals.** `void @rv_signals_arm()` puts `@rv_on_signal` in front of the C handler of
each signal in WATCHED that has one (CPython's, for a signal with a Python handler;
SIG_DFL and SIG_IGN are left alone): it adds one to the helper table's signal count
(slot `abi.SIGNALS_SLOT`, the table given to `@rv_signals_init`) and calls the handler it
displaced, so Python still sees the signal. CPython puts its own handler back whenever
`signal.signal` is called, so arming is repeated: kernels call it (the table's ARM_SLOT)
when the cycle counter passes the table's ARM_AT_SLOT, which arming sets ARM_INTERVAL
cycles ahead (tens of ms). A kernel reads the count when it starts and returns
INTERRUPTED when it changed (`llvm.py`'s polls; `rv_pool_run` before each claim).
"""

from __future__ import annotations

import platform
import signal

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I8,
    I32,
    I64,
    PTR,
    FunctionPointer,
    alloca,
    counted_loop,
    i64,
)
from reverie.compiler.call_boundary.abi import (
    ARM_AT_SLOT,
    INTERRUPTED,
    NO_SIGNAL_CHECK,
    SIGNALS_SLOT,
)

WATCHED = tuple(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM,
                                 signal.SIGUSR1, signal.SIGUSR2))
WORKER_SPIN = 1 << 11  # pause instructions a worker spins after a job (~50 µs) before sleeping
CALLER_SPIN = 1 << 10  # pauses the caller spins on claimed chunks (~25 µs) before sleeping
ARM_INTERVAL = 100_000_000  # cycles between re-armings (~40 ms at 2.6 GHz)
HISTORY_SLOTS = 256  # chunk functions whose last split is remembered (by address)
RETRY_AFTER = 32  # jobs of a chunk function run alone after a split that did not pay
RETRY_MOST = 1 << 12  # (doubled by each further split that did not pay, up to this)
SPLIT_FLOOR = 1 << 16  # cycles (~20 µs): no split of less work pays, so none is retried
PAYS = (9, 10)  # a split pays when it took under 9/10 of the chunks' time on one thread
# a chunk function's slot of the history: its address; the one-thread cycles of its last
# split when that did not pay (else 0); jobs run alone since, and how many to run alone;
# cycles a chunk took, last measured
HISTORY = ("address", "lost_work", "skipped", "retry", "chunk_cycles")
SIGACTION_BYTES = 152  # glibc's struct sigaction on 64-bit Linux; the handler comes first
SIG_BLOCK = 0
FUTEX = {"x86_64": 202, "aarch64": 98}  # the futex system call's number
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
CHUNK_TYPE = ir.FunctionType(I32, [PTR, I64])  # i32 chunk(ptr context, i64 chunk)
RUN_TYPE = ir.FunctionType(I64, [PTR, PTR, I64, I64])  # rv_pool_run's
HANDLER_TYPE = ir.FunctionType(ir.VoidType(), [I32, PTR, PTR])
LOW = (1 << 32) - 1


class _Runtime:
    """The module's globals, libc functions and the atomics on them."""

    def __init__(self) -> None:
        m = self.module = ir.Module(name="rv_pool")
        self.machine = platform.machine()

        def variable(name: str, type_: ir.Type) -> ir.GlobalVariable:
            g = ir.GlobalVariable(m, type_, name)
            g.linkage, g.initializer = "internal", ir.Constant(type_, None)
            return g

        self.job, self.done, self.stop, self.lock = (variable(n, I64) for n in (
            "job", "done", "stop", "lock"))
        self.fn, self.context, self.table = (variable(n, PTR) for n in ("fn", "context", "table"))
        self.chunks, self.seen = variable("chunks", I64), variable("seen", I64)
        self.wake, self.sleepers = variable("wake", I32), variable("sleepers", I32)
        self.waiting = variable("waiting", I32)  # the caller sleeps on `done`
        self.previous = variable("previous", ir.ArrayType(PTR, 65))
        self.history = variable("history", ir.ArrayType(ir.ArrayType(I64, len(HISTORY)),
                                                        HISTORY_SLOTS))

        def libc(name: str, result: ir.Type, args: list[ir.Type], var_arg: bool = False
                 ) -> ir.Function:
            return ir.Function(m, ir.FunctionType(result, args, var_arg=var_arg), name=name)

        self.syscall = libc("syscall", I64, [I64], var_arg=True)
        self.pthread_create = libc("pthread_create", I32, [PTR, PTR, PTR, PTR])
        self.pthread_detach = libc("pthread_detach", I32, [I64])
        self.pthread_sigmask = libc("pthread_sigmask", I32, [I32, PTR, PTR])
        self.sigfillset = libc("sigfillset", I32, [PTR])
        self.sigaction = libc("sigaction", I32, [I32, PTR, PTR])

    @staticmethod
    def load(b: ir.IRBuilder, pointer: ir.Value, type_: ir.Type = I64) -> ir.Value:
        return b.load_atomic(pointer, "seq_cst", type_.width // 8 if type_ != PTR else 8,
                             typ=type_)

    @staticmethod
    def store(b: ir.IRBuilder, value: ir.Value, pointer: ir.Value) -> None:
        width = 8 if value.type == PTR else value.type.width // 8
        # (IRBuilder.store_atomic asks a typed pointer for its pointee)
        b._insert(ir.instructions.StoreAtomicInstr(b.block, value, pointer, "seq_cst", width))

    def pause(self, b: ir.IRBuilder) -> None:
        """A spin-wait hint (x86's `pause`; nothing elsewhere)."""
        if self.machine in ("x86_64", "AMD64"):
            b.call(_declared(self.module, "llvm.x86.sse2.pause", ir.VoidType()), [])

    def futex(self, b: ir.IRBuilder, op: int, value: ir.Value,
              word: ir.Value | None = None) -> None:
        """FUTEX_WAIT (sleep while the 32-bit `word`, `wake` by default, holds `value`) or
        FUTEX_WAKE (wake up to `value` sleepers on it)."""
        b.call(self.syscall, [i64(FUTEX[self.machine]), word or self.wake, ir.Constant(I32, op),
                              value, ir.Constant(PTR, None)])

    def signal_count(self, b: ir.IRBuilder) -> ir.Value:
        table = self.load(b, self.table, PTR)
        return self.load(b, b.gep(table, [i64(SIGNALS_SLOT)], source_etype=I64))


def _declared(module: ir.Module, name: str, result: ir.Type) -> ir.Function:
    """The function `name` without arguments (an intrinsic), declared once."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(result, []), name=name)


def _function(rt: _Runtime, name: str, type_: ir.FunctionType, internal: bool = True
              ) -> tuple[ir.Function, ir.IRBuilder]:
    function = ir.Function(rt.module, type_, name=name)
    if internal:
        function.linkage = "internal"
    function.attributes.add("nounwind")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _define_claim(rt: _Runtime) -> ir.Function:
    """`i64 claim(i64 job)`: the next chunk of `job`, or -1 when it has none left, it is
    over, or it must stop (a chunk failed, or a signal arrived: then it stops for all)."""
    function, b = _function(rt, "claim", ir.FunctionType(I64, [I64]))
    (job,) = function.args
    look, check, take, none = (function.append_basic_block(n) for n in (
        "look", "check", "take", "none"))
    b.branch(look)
    b.position_at_end(look)
    word = rt.load(b, rt.job)
    chunk = b.and_(word, i64(LOW))
    current = b.icmp_unsigned("==", b.lshr(word, i64(32)), job)
    left = b.icmp_signed("<", chunk, rt.load(b, rt.chunks))
    b.cbranch(b.and_(current, left), check, none)
    b.position_at_end(check)
    seen = rt.load(b, rt.seen)
    signalled = b.and_(b.icmp_signed("!=", seen, i64(NO_SIGNAL_CHECK)),
                       b.icmp_signed("!=", rt.signal_count(b), seen))
    with b.if_then(signalled):
        rt.store(b, i64(1), rt.stop)
    b.cbranch(b.icmp_signed("!=", rt.load(b, rt.stop), i64(0)), none, take)
    b.position_at_end(take)
    swapped = b.extract_value(b.cmpxchg(rt.job, word, b.add(word, i64(1)), "seq_cst"), 1)
    b.cbranch(swapped, b.append_basic_block("claimed"), look)
    b.position_at_end(function.blocks[-1])
    b.ret(chunk)
    b.position_at_end(none)
    b.ret(i64(-1))
    return function


def _define_work(rt: _Runtime, claim: ir.Function, arm: ir.Function) -> ir.Function:
    """`void work(i64 job, ptr fn, ptr context, ptr spent)`: run chunks of `job` while any
    is left (re-arming the signal handler before a chunk when it is time), adding to
    `spent` (two i64) the chunks run and the cycles they took."""
    function, b = _function(rt, "work", ir.FunctionType(ir.VoidType(), [I64, PTR, PTR, PTR]))
    job, fn, context, spent = function.args
    look = function.append_basic_block("look")
    run, finished = function.append_basic_block("run"), function.append_basic_block("finished")
    b.branch(look)
    b.position_at_end(look)
    arm_at = rt.load(b, b.gep(rt.load(b, rt.table, PTR), [i64(ARM_AT_SLOT)], source_etype=I64))
    cycles = b.call(_declared(rt.module, "llvm.readcyclecounter", I64), [])
    with b.if_then(b.icmp_unsigned(">", cycles, arm_at), likely=False):
        b.call(arm, [])
    chunk = b.call(claim, [job])
    b.cbranch(b.icmp_signed(">=", chunk, i64(0)), run, finished)
    b.position_at_end(run)
    started = _cycles(rt, b)
    status = b.call(FunctionPointer(fn, CHUNK_TYPE), [context, chunk])
    cycles = b.sub(_cycles(rt, b), started)
    for field, amount in ((0, i64(1)), (1, cycles)):
        total = b.gep(spent, [i64(field)], source_etype=I64)
        b.store(b.add(b.load(total, typ=I64), amount), total)
    with b.if_then(b.icmp_signed("!=", status, ir.Constant(I32, 0))):
        rt.store(b, i64(1), rt.stop)
    b.atomic_rmw("add", rt.done, i64(1), "seq_cst")
    with b.if_then(b.icmp_signed("!=", rt.load(b, rt.waiting, I32), ir.Constant(I32, 0))):
        rt.futex(b, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1), rt.done)
    b.branch(look)
    b.position_at_end(finished)
    b.ret_void()
    return function


def _define_alone(rt: _Runtime) -> ir.Function:
    """`i64 alone(ptr fn, ptr context, i64 chunks, i64 seen)`: every chunk on this thread,
    in order (the pool is busy with another caller's job)."""
    function, b = _function(rt, "alone", RUN_TYPE)
    fn, context, chunks, seen = function.args
    stopped = function.append_basic_block("stopped")
    with counted_loop(b, i64(0), chunks) as c:
        signalled = b.and_(b.icmp_signed("!=", seen, i64(NO_SIGNAL_CHECK)),
                           b.icmp_signed("!=", rt.signal_count(b), seen))
        failed = b.icmp_signed("!=", b.call(FunctionPointer(fn, CHUNK_TYPE), [context, c]),
                               ir.Constant(I32, 0))
        after = b.append_basic_block("next")
        b.cbranch(b.or_(signalled, failed), stopped, after)
        b.position_at_end(after)
    b.ret(i64(0))
    b.position_at_end(stopped)
    b.ret(i64(INTERRUPTED))
    return function


def _define_run(rt: _Runtime, work: ir.Function, alone: ir.Function) -> None:
    """`i64 @rv_pool_run(ptr fn, ptr context, i64 chunks, i64 seen)` (the module docstring)."""
    function, b = _function(rt, "rv_pool_run", RUN_TYPE, internal=False)
    fn, context, chunks, seen = function.args
    _alone_while_splits_lose(rt, b, fn, context, chunks, seen, alone)
    taken = b.extract_value(b.cmpxchg(rt.lock, i64(0), i64(1), "seq_cst"), 1)
    with b.if_then(b.not_(taken)):
        b.ret(b.call(alone, [fn, context, chunks, seen]))
    started = _cycles(rt, b)
    spent = alloca(b, ir.ArrayType(I64, 2), "spent")
    b.store(ir.Constant(ir.ArrayType(I64, 2), None), spent)
    for value, slot in ((fn, rt.fn), (context, rt.context), (chunks, rt.chunks),
                        (seen, rt.seen), (i64(0), rt.stop), (i64(0), rt.done)):
        rt.store(b, value, slot)
    job = b.add(b.lshr(rt.load(b, rt.job), i64(32)), i64(1))
    job = b.and_(job, i64(LOW))
    rt.store(b, b.shl(job, i64(32)), rt.job)
    b.atomic_rmw("add", rt.wake, ir.Constant(I32, 1), "seq_cst")
    with b.if_then(b.icmp_signed(">", rt.load(b, rt.sleepers, I32), ir.Constant(I32, 0))):
        rt.futex(b, FUTEX_WAKE_PRIVATE, ir.Constant(I32, (1 << 31) - 1))
    b.call(work, [job, fn, context, spent])
    # close the job (no claim succeeds after this), then wait for the chunks claimed
    closed = b.atomic_rmw("xchg", rt.job, b.or_(b.shl(job, i64(32)), i64(LOW)), "seq_cst")
    claimed = b.and_(closed, i64(LOW))
    claimed = b.select(b.icmp_signed("<", claimed, chunks), claimed, chunks)
    _wait_for(rt, b, claimed)
    elapsed = b.sub(_cycles(rt, b), started)
    _judge_split(rt, b, fn, chunks, elapsed, spent)
    status = b.select(b.icmp_signed("!=", rt.load(b, rt.stop), i64(0)), i64(INTERRUPTED),
                      i64(0))
    rt.store(b, i64(0), rt.lock)
    b.ret(status)


def _history(rt: _Runtime, b: ir.IRBuilder, fn: ir.Value) -> dict[str, ir.Value]:
    """Pointers to the fields (HISTORY) of chunk function `fn`'s slot of the history."""
    slot = b.and_(b.lshr(b.ptrtoint(fn, I64), i64(4)), i64(HISTORY_SLOTS - 1))
    return {name: b.gep(rt.history, [i64(0), slot, i64(field)],
                        source_etype=rt.history.value_type)
            for field, name in enumerate(HISTORY)}


def _cycles(rt: _Runtime, b: ir.IRBuilder) -> ir.Value:
    """The cycle counter (x86's time-stamp counter)."""
    return b.call(_declared(rt.module, "llvm.readcyclecounter", I64), [])


def _alone_while_splits_lose(rt: _Runtime, b: ir.IRBuilder, fn: ir.Value, context: ir.Value,
                             chunks: ir.Value, seen: ir.Value, alone: ir.Function) -> None:
    """Return from `rv_pool_run` after running every chunk on this thread, without waking
    anyone, when the last split of `fn` did not pay (`_judge_split`), fewer than its
    `retry` jobs ran alone since, and this job's work (chunks x a chunk's cycles) is at
    most twice that split's or SPLIT_FLOOR: a larger job tries splitting again. A job
    alone measures its chunks' cycles."""
    history = _history(rt, b, fn)
    known = b.icmp_unsigned("==", rt.load(b, history["address"]), b.ptrtoint(fn, I64))
    skipped = rt.load(b, history["skipped"])
    work = b.mul(chunks, rt.load(b, history["chunk_cycles"]))
    lost_twice = b.mul(rt.load(b, history["lost_work"]), i64(2))
    small = b.or_(b.icmp_signed("<=", work, lost_twice),
                  b.icmp_signed("<=", work, i64(SPLIT_FLOOR)))
    stay = b.and_(b.icmp_signed("<", skipped, rt.load(b, history["retry"])), small)
    with b.if_then(b.and_(known, stay)):
        rt.store(b, b.add(skipped, i64(1)), history["skipped"])
        started = _cycles(rt, b)
        status = b.call(alone, [fn, context, chunks, seen])
        rt.store(b, b.sdiv(b.sub(_cycles(rt, b), started), chunks), history["chunk_cycles"])
        b.ret(status)


def _judge_split(rt: _Runtime, b: ir.IRBuilder, fn: ir.Value, chunks: ir.Value,
                 elapsed: ir.Value, spent: ir.Value) -> None:
    """Remember whether the split job of `fn` just run paid: it did when its `elapsed`
    cycles are under PAYS of the cycles its `chunks` would take on one thread, estimated
    from the caller's own chunks (`spent`: chunks run, their cycles); when a worker
    claimed every chunk before the caller could, the chunks were too short to share (the
    estimate is then `elapsed`). A split that did not pay makes the next RETRY_AFTER jobs
    of `fn` of at most twice its work run alone (`_alone_while_splits_lose`); each later
    split that does not pay doubles that count (up to RETRY_MOST), each that pays halves
    it: a split that stalls (a worker preempted in its chunk) can cost many times what
    one that pays saves."""
    ran = b.load(b.gep(spent, [i64(0)], source_etype=I64), typ=I64)
    cycles = b.load(b.gep(spent, [i64(1)], source_etype=I64), typ=I64)
    numerator, denominator = PAYS
    some = b.icmp_signed(">", ran, i64(0))
    one_thread = b.select(some, b.sdiv(b.mul(cycles, chunks), b.select(some, ran, i64(1))),
                          elapsed)
    pays = b.and_(some, b.icmp_signed("<", b.mul(elapsed, i64(denominator)),
                                      b.mul(one_thread, i64(numerator))))
    history = _history(rt, b, fn)
    known = b.icmp_unsigned("==", rt.load(b, history["address"]), b.ptrtoint(fn, I64))
    retry = b.select(known, rt.load(b, history["retry"]), i64(0))
    longer = b.mul(retry, i64(2))
    longer = b.select(b.icmp_signed("<", longer, i64(RETRY_AFTER)), i64(RETRY_AFTER), longer)
    longer = b.select(b.icmp_signed(">", longer, i64(RETRY_MOST)), i64(RETRY_MOST), longer)
    for name, value in (("address", b.ptrtoint(fn, I64)),
                        ("lost_work", b.select(pays, i64(0), one_thread)),
                        ("skipped", i64(0)),
                        ("retry", b.select(pays, b.ashr(retry, i64(1)), longer)),
                        ("chunk_cycles", b.sdiv(one_thread, chunks))):
        rt.store(b, value, history[name])


def _wait_for(rt: _Runtime, b: ir.IRBuilder, claimed: ir.Value) -> None:
    """Wait until `claimed` chunks are done: spin CALLER_SPIN pauses, then sleep on `done`
    (its low 32 bits) until a worker finishes a chunk. Sleeping leaves this core idle, so
    the system may move a worker that was preempted in its chunk onto it."""
    function = b.function
    look, spin, sleep, done = (function.append_basic_block(n) for n in (
        "wait", "spin", "sleep", "all_done"))
    b.branch(look)
    b.position_at_end(look)
    b.cbranch(b.icmp_signed(">=", rt.load(b, rt.done), claimed), done, spin)
    b.position_at_end(spin)
    with counted_loop(b, i64(0), i64(CALLER_SPIN)):
        rt.pause(b)
    b.cbranch(b.icmp_signed(">=", rt.load(b, rt.done), claimed), done, sleep)
    b.position_at_end(sleep)
    rt.store(b, ir.Constant(I32, 1), rt.waiting)
    finished = rt.load(b, rt.done)
    with b.if_then(b.icmp_signed("<", finished, claimed)):
        rt.futex(b, FUTEX_WAIT_PRIVATE, b.trunc(finished, I32), rt.done)
    rt.store(b, ir.Constant(I32, 0), rt.waiting)
    b.branch(look)
    b.position_at_end(done)


def _define_worker(rt: _Runtime, work: ir.Function) -> ir.Function:
    """`ptr worker(ptr)`: block signals, then run each new job's chunks; between jobs spin
    WORKER_SPIN pauses, then sleep on the futex until the next job."""
    function, b = _function(rt, "worker", ir.FunctionType(PTR, [PTR]))
    mask = alloca(b, ir.ArrayType(I8, 128), "mask")
    b.call(rt.sigfillset, [mask])
    b.call(rt.pthread_sigmask, [ir.Constant(I32, SIG_BLOCK), mask, ir.Constant(PTR, None)])
    mine_slot, spun = alloca(b, I64, "mine"), alloca(b, I64, "spun")
    spent = alloca(b, ir.ArrayType(I64, 2), "spent")  # (a worker's is not read)
    b.store(ir.Constant(ir.ArrayType(I64, 2), None), spent)
    b.store(i64(0), mine_slot)
    look = function.append_basic_block("look")
    new, idle = function.append_basic_block("new_job"), function.append_basic_block("idle")
    b.branch(look)
    b.position_at_end(look)
    mine = b.load(mine_slot, typ=I64)
    job = b.lshr(rt.load(b, rt.job), i64(32))
    b.cbranch(b.icmp_unsigned("!=", job, mine), new, idle)
    b.position_at_end(new)
    b.store(job, mine_slot)
    b.call(work, [job, rt.load(b, rt.fn, PTR), rt.load(b, rt.context, PTR), spent])
    b.branch(look)
    b.position_at_end(idle)
    b.store(i64(0), spun)
    spin, sleep = function.append_basic_block("spin"), function.append_basic_block("sleep")
    b.branch(spin)
    b.position_at_end(spin)
    rt.pause(b)
    count = b.add(b.load(spun, typ=I64), i64(1))
    b.store(count, spun)
    moved = b.icmp_unsigned("!=", b.lshr(rt.load(b, rt.job), i64(32)), mine)
    b.cbranch(moved, look, b.append_basic_block("spin_more"))
    b.position_at_end(function.blocks[-1])
    b.cbranch(b.icmp_signed("<", count, i64(WORKER_SPIN)), spin, sleep)
    b.position_at_end(sleep)
    wake = rt.load(b, rt.wake, I32)
    b.atomic_rmw("add", rt.sleepers, ir.Constant(I32, 1), "seq_cst")
    with b.if_then(b.icmp_unsigned("==", b.lshr(rt.load(b, rt.job), i64(32)), mine)):
        rt.futex(b, FUTEX_WAIT_PRIVATE, wake)
    b.atomic_rmw("sub", rt.sleepers, ir.Constant(I32, 1), "seq_cst")
    b.branch(look)
    return function


def _define_start(rt: _Runtime, worker: ir.Function) -> None:
    """`void @rv_pool_start(i64 workers)`: start that many detached worker threads."""
    function, b = _function(rt, "rv_pool_start", ir.FunctionType(ir.VoidType(), [I64]),
                            internal=False)
    (workers,) = function.args
    thread = alloca(b, I64, "thread")
    with counted_loop(b, i64(0), workers):
        made = b.call(rt.pthread_create, [thread, ir.Constant(PTR, None),
                                          FunctionPointer(worker, worker.function_type),
                                          ir.Constant(PTR, None)])
        with b.if_then(b.icmp_signed("==", made, ir.Constant(I32, 0))):
            b.call(rt.pthread_detach, [b.load(thread, typ=I64)])
    b.ret_void()


def _define_signals(rt: _Runtime) -> ir.Function:
    """`@rv_on_signal`, `@rv_signals_init(ptr table)` and `@rv_signals_arm()` (returned)."""
    handler, b = _function(rt, "rv_on_signal", HANDLER_TYPE, internal=False)
    number, info, context = handler.args
    table = rt.load(b, rt.table, PTR)
    with b.if_then(b.icmp_unsigned("!=", table, ir.Constant(PTR, None))):
        b.atomic_rmw("add", b.gep(table, [i64(SIGNALS_SLOT)], source_etype=I64), i64(1),
                     "seq_cst")
    slot = b.gep(rt.previous, [i64(0), b.zext(number, I64)],
                 source_etype=rt.previous.value_type)
    previous = rt.load(b, slot, PTR)
    with b.if_then(b.icmp_unsigned(">", b.ptrtoint(previous, I64), i64(1))):
        b.call(FunctionPointer(previous, HANDLER_TYPE), [number, info, context])
    b.ret_void()

    init, b = _function(rt, "rv_signals_init", ir.FunctionType(ir.VoidType(), [PTR]),
                        internal=False)
    rt.store(b, init.args[0], rt.table)
    b.ret_void()

    arm, b = _function(rt, "rv_signals_arm", ir.FunctionType(ir.VoidType(), []),
                       internal=False)
    action = alloca(b, ir.ArrayType(I64, SIGACTION_BYTES // 8), "action")
    ours = b.ptrtoint(handler, I64)
    for sig in WATCHED:
        b.call(rt.sigaction, [ir.Constant(I32, sig), ir.Constant(PTR, None), action])
        current = b.load(action, typ=I64)
        foreign = b.and_(b.icmp_unsigned(">", current, i64(1)),
                         b.icmp_unsigned("!=", current, ours))
        with b.if_then(foreign):
            rt.store(b, b.inttoptr(current, PTR),
                     b.gep(rt.previous, [i64(0), i64(sig)], source_etype=rt.previous.value_type))
            b.store(ours, action)
            b.call(rt.sigaction, [ir.Constant(I32, sig), action, ir.Constant(PTR, None)])
    table = rt.load(b, rt.table, PTR)
    cycles = b.call(_declared(rt.module, "llvm.readcyclecounter", I64), [])
    rt.store(b, b.add(cycles, i64(ARM_INTERVAL)),
             b.gep(table, [i64(ARM_AT_SLOT)], source_etype=I64))
    b.ret_void()
    return arm


def runtime_module() -> str:
    """LLVM IR of the module (`rv_pool_run`, `rv_pool_start`, `rv_signals_init`,
    `rv_signals_arm`, `rv_on_signal`)."""
    if platform.machine() not in FUTEX:
        raise NotImplementedError(f"no futex system call number for {platform.machine()}")
    rt = _Runtime()
    arm = _define_signals(rt)
    work = _define_work(rt, _define_claim(rt), arm)
    _define_run(rt, work, _define_alone(rt))
    _define_start(rt, _define_worker(rt, work))
    return str(rt.module)
