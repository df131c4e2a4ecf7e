"""Splitting a large matrix product over the worker pool's threads (from LLVM IR).

`define_parallel_gemm` fills in `rv_gemm_own_<dtype>` of the helper module (the own
kernel, which the public `rv_gemm_<dtype>` calls when it does not call BLAS, `gemm_blas.py`);
its last two arguments are the thread count and the pool's entry (`runtime/native/pool.py`:
`rv_pool_run` of `pool_runtime.py`, or 0 when there is none). Small products (fewer than
PARALLEL_MIN_MACS multiply-adds), `threads <= 1` or no pool go straight to the serial kernel.
Otherwise the output is cut into `tasks` slabs (of whole NR-column panels when N is wide
enough, else of whole MR-row panels); each slab is the same product on offset operands, with
its own packing scratch, and the pool's threads (the caller among them) claim slabs until
none is left (a product is never stopped by a signal: the kernel polls after it):

    context = {slab 0's arguments, slab 1's, ...}
    pool(@rv_gemm_task_<dtype>, &context, tasks, NO_SIGNAL_CHECK)  # every slab done
    i32 rv_gemm_task_<dtype>(ptr context, i64 t): serial kernel on slab t's arguments

The pool's threads are parked between calls (not started per call), so the cost of a split
is waking them (microseconds; tens when they sleep, see `runtime/native/pool.py`).
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    I8,
    I32,
    I64,
    MEMORY,
    PTR,
    REGISTER,
    FunctionPointer,
    alloca,
    counted_loop,
    i64,
)
from reverie.compiler.call_boundary.abi import MAX_TASKS, NO_SIGNAL_CHECK
from reverie.compiler.runtime_library.pool_runtime import CHUNK_TYPE, RUN_TYPE

PARALLEL_MIN_MACS = 1 << 22
FIELDS = 13  # M, N, K, A, sa0, sa1, B, sb0, sb1, C, sc0, sc1, pack


def _define_task(serial: ir.Function, dtype: str) -> ir.Function:
    """`i32 @rv_gemm_task_<dtype>(ptr context, i64 t)`: the serial kernel on slab t."""
    task = ir.Function(serial.module, CHUNK_TYPE, name=f"rv_gemm_task_{dtype}")
    task.linkage = "internal"
    context, t = task.args
    b = ir.IRBuilder(task.append_basic_block("entry"))
    base = b.mul(t, i64(FIELDS))
    args = [b.load(b.gep(context, [b.add(base, i64(k))], source_etype=I64), typ=type_)
            for k, type_ in enumerate(serial.function_type.args)]
    b.call(serial, args)
    b.ret(ir.Constant(I32, 0))
    return task


def define_parallel_gemm(function: ir.Function, serial: ir.Function, dtype: str, mr: int,
                         nr: int, pack_bytes: int, operand_dtype: str | None = None) -> None:
    """Body of `function` (the serial kernel's arguments, then `threads` and `pool`); the
    operands A and B hold `operand_dtype` (default: `dtype`, that of C)."""
    element = REGISTER[dtype]
    operand = MEMORY[operand_dtype or dtype]
    task = _define_task(serial, dtype)
    function.attributes.add("nounwind")
    *serial_args, threads, pool = function.args
    m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1, pack = serial_args
    entry = function.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    context = alloca(b, ir.ArrayType(I64, MAX_TASKS * FIELDS), "context")
    tasks = b.select(b.icmp_signed("<", threads, i64(MAX_TASKS)), threads, i64(MAX_TASKS))
    small = b.icmp_signed("<", b.mul(b.mul(m, n), k), i64(PARALLEL_MIN_MACS))
    alone = b.or_(b.icmp_signed("<=", tasks, i64(1)), b.icmp_unsigned("==", pool, i64(0)))
    with b.if_then(b.or_(small, alone)):
        b.call(serial, serial_args)
        b.ret_void()

    def ceil_div(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.sdiv(b.add(x, b.sub(y, i64(1))), y)

    by_columns = b.icmp_signed(">=", n, b.mul(tasks, i64(nr)))
    unit = b.select(by_columns, i64(nr), i64(mr))
    extent = b.select(by_columns, n, m)
    per_task = b.mul(ceil_div(ceil_div(extent, tasks), unit), unit)
    with counted_loop(b, i64(0), tasks) as t:
        start = b.mul(t, per_task)
        start = b.select(b.icmp_signed("<", start, extent), start, extent)
        stop = b.add(start, per_task)
        size = b.sub(b.select(b.icmp_signed("<", stop, extent), stop, extent), start)
        column, row = b.select(by_columns, start, i64(0)), b.select(by_columns, i64(0), start)
        fields = [b.select(by_columns, m, size), b.select(by_columns, size, n), k,
                  b.gep(a, [b.mul(row, sa0)], source_etype=operand), sa0, sa1,
                  b.gep(bm, [b.mul(column, sb1)], source_etype=operand), sb0, sb1,
                  b.gep(c, [b.add(b.mul(row, sc0), b.mul(column, sc1))], source_etype=element),
                  sc0, sc1, b.gep(pack, [b.mul(t, i64(pack_bytes))], source_etype=I8)]
        base = b.mul(t, i64(FIELDS))
        for index, value in enumerate(fields):
            b.store(value, b.gep(context, [b.add(base, i64(index))], source_etype=I64))
    entry = FunctionPointer(b.inttoptr(pool, PTR), RUN_TYPE)
    b.call(entry, [FunctionPointer(task, task.function_type), context, tasks,
                   i64(NO_SIGNAL_CHECK)])
    b.ret_void()
