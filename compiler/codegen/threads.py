"""Splitting a large matrix product over threads (POSIX threads, from LLVM IR).

`define_parallel_gemm` fills in `rv_gemm_own_<dtype>` of the helper module (the own
kernel, which the public `rv_gemm_<dtype>` calls when it does not call BLAS). Small
products (fewer than PARALLEL_MIN_MACS multiply-adds) or `threads <= 1` go straight to the
serial kernel. Otherwise the output is cut into `tasks` slabs (of whole NR-column panels
when N is wide enough, else of whole MR-row panels); each slab is the same product on
offset operands, run by its own thread with its own packing scratch:

    for t in 1..tasks: pthread_create(&id[t], null, @rv_gemm_task_<dtype>, &args[t])
    rv_gemm_task_<dtype>(&args[0])            # the calling thread takes slab 0
    for t in 1..tasks: pthread_join(id[t], null)

A thread that cannot be created is replaced by running its slab on the calling thread.
Threads are started per call (tens of microseconds), so only products of a few million
multiply-adds are split.
"""

from __future__ import annotations

from llvmlite import ir

from .abi import MAX_TASKS
from .irutil import I8, I32, I64, PTR, REGISTER, FunctionPointer, alloca, counted_loop, i64

PARALLEL_MIN_MACS = 1 << 22
FIELDS = 13  # M, N, K, A, sa0, sa1, B, sb0, sb1, C, sc0, sc1, pack


def _declare(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(result, args), name=name)


def _define_task(serial: ir.Function, dtype: str) -> ir.Function:
    """`ptr @rv_gemm_task_<dtype>(ptr args)`: the serial kernel on one packed argument slab."""
    task = ir.Function(serial.module, ir.FunctionType(PTR, [PTR]), name=f"rv_gemm_task_{dtype}")
    task.linkage = "internal"
    b = ir.IRBuilder(task.append_basic_block("entry"))
    args = [b.load(b.gep(task.args[0], [i64(k)], source_etype=I64), typ=type_)
            for k, type_ in enumerate(serial.function_type.args)]
    b.call(serial, args)
    b.ret(ir.Constant(PTR, None))
    return task


def define_parallel_gemm(function: ir.Function, serial: ir.Function, dtype: str, mr: int,
                         nr: int, pack_bytes: int) -> None:
    """Body of `function` (the serial kernel's arguments, then `threads`)."""
    module, element = function.module, REGISTER[dtype]
    task = _define_task(serial, dtype)
    create = _declare(module, "pthread_create", I32, [PTR, PTR, PTR, PTR])
    join = _declare(module, "pthread_join", I32, [I64, PTR])
    function.attributes.add("nounwind")
    *serial_args, threads = function.args
    m, n, k, a, sa0, sa1, bm, sb0, sb1, c, sc0, sc1, pack = serial_args
    entry = function.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    slots = alloca(b, ir.ArrayType(I64, MAX_TASKS * FIELDS), "args")
    ids = alloca(b, ir.ArrayType(I64, MAX_TASKS), "ids")
    started = alloca(b, ir.ArrayType(I8, MAX_TASKS), "started")
    tasks = b.select(b.icmp_signed("<", threads, i64(MAX_TASKS)), threads, i64(MAX_TASKS))
    small = b.icmp_signed("<", b.mul(b.mul(m, n), k), i64(PARALLEL_MIN_MACS))
    with b.if_then(b.or_(small, b.icmp_signed("<=", tasks, i64(1)))):
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
                  b.gep(a, [b.mul(row, sa0)], source_etype=element), sa0, sa1,
                  b.gep(bm, [b.mul(column, sb1)], source_etype=element), sb0, sb1,
                  b.gep(c, [b.add(b.mul(row, sc0), b.mul(column, sc1))], source_etype=element),
                  sc0, sc1, b.gep(pack, [b.mul(t, i64(pack_bytes))], source_etype=I8)]
        base = b.mul(t, i64(FIELDS))
        for index, value in enumerate(fields):
            b.store(value, b.gep(slots, [b.add(base, i64(index))], source_etype=I64))
    null = ir.Constant(PTR, None)
    with counted_loop(b, i64(1), tasks) as t:
        own = b.gep(slots, [b.mul(t, i64(FIELDS))], source_etype=I64)
        routine = FunctionPointer(task, task.function_type)
        failed = b.icmp_signed("!=", b.call(create, [b.gep(ids, [t], source_etype=I64), null,
                                                     routine, own]), ir.Constant(I32, 0))
        b.store(b.zext(b.not_(failed), I8), b.gep(started, [t], source_etype=I8))
        with b.if_then(failed):
            b.call(task, [own])
    b.call(task, [slots])
    with counted_loop(b, i64(1), tasks) as t:
        flag = b.load(b.gep(started, [t], source_etype=I8), typ=I8)
        with b.if_then(b.icmp_unsigned("!=", flag, ir.Constant(I8, 0))):
            b.call(join, [b.load(b.gep(ids, [t], source_etype=I64), typ=I64), null])
    b.ret_void()
