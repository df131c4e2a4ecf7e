"""The native call entry: one CPython vectorcall function for every kernel, in LLVM IR.

A call through ctypes costs several times NumPy's `2 * x` (benchmarks/README.md, W4 call
overhead), so this entry does the whole common call in native code. It is compiled once
per process, in a small module of its own (`entry_module`; loaded from the disk cache like
the run-time helpers, `runtime/native/helpers.py`), and is table-driven: what it knows of a kernel
comes from the `self` tuple that `runtime/native/fastcall.py` builds for that kernel. In C:

    PyObject *rv_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames);

    self = (fallback, numpy.ndarray, float, int, numpy.empty, pooled_empty,
            helper_table, spare_workspace, descriptor,        # abi.py's slot numbers
            dtype of each parameter, dtype of each output,    # numpy.dtype objects
            scalar type of each output, ...)                  # numpy.float64, ...

The descriptor is an int64 array (layout in `fastcall_descriptor.py`): the numbers of
parameters, outputs and dimension sizes, flags, the addresses of the kernel and of its
`bind` function, then a (dtype code, rank) pair per parameter and per output. `bind` is
the one piece of the call each kernel brings in its own module (`fastcall_bind.py`): a
pure-integer function that binds the dimensions from the argument shapes and checks them.

The entry, step by step (methods of `_EntryBuilder`, which builds it):

1. `_take_argument`: each argument must be exactly what `runtime/native/call.py`'s `FastBinder`
   takes unconverted: an ndarray of exactly the declared dtype (its descriptor object is
   the one in `self`), rank and C-contiguity, or, for a scalar parameter, a Python
   `float` (float dtypes) or `int` (whose value the dtype holds exactly);
2. `bind(shapes, buffers, dims, layout)` binds every dimension, checks constant sizes,
   repeated names, derived sizes (`N + 1`) and constraints, checks what the call allocates
   against `allocation.MAX_ALLOCATION_BYTES` (overflow-checked), and writes the dimension
   sizes, the workspace size and the output shapes; 0 means bound, anything else: fall back;
3. `_make_outputs` makes each output with `numpy.empty`, in an LLVM function of its own
   (`rv_entry_allocate_output`, `_define_allocate_output`: the one place an output's memory
   comes from; an output of `abi.POOLED_OUTPUT_BYTES` or more comes from the reuse pool's
   `empty` instead, `runtime/native/output_pool.py`); `_take_workspace`: the spare block of this
   kernel's last call when it fits (`workspace_cache.py`);
4. `_call_kernel`: the kernel runs, without the GIL when the call moves GIL_FREE_ELEMENTS
   elements or more, or the kernel is heavy (loops or multiplies matrices);
5. `_results` returns the outputs as the Python path would: 0-d results as NumPy scalars,
   several results (or a kernel that always returns a tuple) as a tuple.

Anything else — another type, dtype or layout, keyword arguments, a size that does not
bind or that no allocation can have, an allocation that failed, a failed bounds check —
goes to the *fallback*: the Python call path, called with
the same arguments, which converts them or raises its usual error. The entry decides
nothing the Python path would decide differently, so errors are identical by
construction (the tests run every bad-argument case through both).

The code holds no process addresses, so it is cached on disk; CPython's functions resolve
when the module is linked. The object layouts it reads are in `abi.py` (CPython 3.11+,
NumPy 1.x/2.x; `runtime/native/fastcall.py` checks them before it installs any entry).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from reverie.compiler.backend.irutil import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    PTR,
    FunctionPointer,
    counted_loop,
    i64,
)
from reverie.compiler.backend.storage_conversions import bf16_to_f32, f16_to_f32
from reverie.compiler.call_boundary.abi import (
    ARGUMENTS_OFFSET,
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_FLAGS,
    ARRAY_NDIM,
    ARRAY_SHAPE,
    C_CONTIGUOUS,
    CALL_DESCRIPTOR,
    CALL_ENTRY,
    EMPTY,
    FALLBACK,
    FIRST_DTYPE,
    FLOAT,
    FLOAT_VALUE,
    HELPER_TABLE,
    INT,
    INTERRUPTED,
    ITEMSIZE,
    NDARRAY,
    OB_TYPE,
    POOLED_EMPTY,
    POOLED_OUTPUT_BYTES,
    SPARE_WORKSPACE,
    TUPLE_ITEMS,
)
from reverie.compiler.call_boundary.fastcall_bind import BIND_TYPE
from reverie.compiler.call_boundary.fastcall_descriptor import (
    BIND,
    ENTRY_DTYPES,
    FIRST_ARRAY,
    FLAGS,
    HEAVY,
    KERNEL,
    LAYOUT,
    OUTPUTS,
    PARAMETERS,
    SYMBOLS,
    TUPLE_RESULT,
)
from reverie.compiler.runtime_library.workspace_cache import (
    give_back_workspace,
    take_workspace,
    workspace_of,
)

ALLOCATE_OUTPUT = "rv_entry_allocate_output"
ERROR_SLOTS = 3  # after the dimension sizes: where the kernel reports a failed check
GIL_FREE_ELEMENTS = 1 << 14  # calls moving at least this many elements release the GIL
CODE = {dtype: code for code, dtype in enumerate(ENTRY_DTYPES)}
# the Python ints a scalar parameter takes natively, per dtype code (i64: whatever fits;
# others exactly; bool, bf16, f16: none, a Python number for those takes the Python path)
EXACT_INTEGERS = {"f32": (-(1 << 24), 1 << 24), "f64": (-(1 << 53), 1 << 53),
                  "i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1),
                  "bool": (1, 0), "bf16": (1, 0), "f16": (1, 0)}
KERNEL_TYPE = ir.FunctionType(I32, [PTR, PTR])  # i32 kernel(ptr buffers, ptr dims)
ENTRY_TYPE = ir.FunctionType(PTR, [PTR, PTR, I64, PTR])
# (self, shape, rank, dtype, nbytes)
ALLOCATE_TYPE = ir.FunctionType(PTR, [PTR, PTR, I64, PTR, I64])

CPYTHON = {  # name: (result, parameters)
    "PyObject_Vectorcall": (PTR, [PTR, PTR, I64, PTR]),
    "PyTuple_New": (PTR, [I64]),
    "PyErr_CheckSignals": (I32, []),
    "PyTuple_SetItem": (I32, [PTR, I64, PTR]),
    "PyLong_FromSsize_t": (PTR, [I64]),
    "PyLong_FromLongLong": (PTR, [I64]),
    "PyLong_AsLongLongAndOverflow": (I64, [PTR, PTR]),
    "PyFloat_FromDouble": (PTR, [F64]),
    "Py_DecRef": (ir.VoidType(), [PTR]),
    "PyMem_RawMalloc": (PTR, [I64]),
    "PyMem_RawFree": (ir.VoidType(), [PTR]),
    "PyEval_SaveThread": (PTR, []),
    "PyEval_RestoreThread": (ir.VoidType(), [PTR]),
    "PyErr_Clear": (ir.VoidType(), []),
}
NULL = ir.Constant(PTR, None)


def entry_module() -> str:
    """LLVM IR of the module defining `rv_vectorcall` (see the module docstring)."""
    module = ir.Module(name=CALL_ENTRY)
    _define_allocate_output(module)
    _EntryBuilder(module).build()
    return str(module)


class _Builder:
    """What the entry's functions share: CPython calls, object fields, the `self` tuple."""

    def __init__(self, function: ir.Function) -> None:
        self.module, self.function = function.module, function
        self.b = ir.IRBuilder(function.append_basic_block("entry"))

    def _c(self, name: str, *args: ir.Value) -> ir.Value:
        """Call CPython's function `name` (declared once per module)."""
        function = self.module.globals.get(name)
        if function is None:
            result, params = CPYTHON[name]
            function = ir.Function(self.module, ir.FunctionType(result, params), name=name)
        return self.b.call(function, list(args))

    def _at(self, pointer: ir.Value, index: ir.Value | int, type_: ir.Type) -> ir.Value:
        """The address of item `index` of an array of `type_` at `pointer`."""
        index = i64(index) if isinstance(index, int) else index
        address = self.b.gep(pointer, [index], source_etype=type_)
        address.type = PTR  # (an opaque pointer: llvmlite would type it `type_*`)
        return address

    def _stack(self, type_: ir.Type, name: str, count: ir.Value | None = None) -> ir.Value:
        """A stack slot (an array of `count` when given), typed as an opaque `ptr`."""
        slot = self.b.alloca(type_, count, name=name)
        slot.type = PTR
        return slot

    def _load(self, pointer: ir.Value, index: ir.Value | int, type_: ir.Type) -> ir.Value:
        return self.b.load(self._at(pointer, index, type_), typ=type_)

    def _field(self, pointer: ir.Value, offset: int, type_: ir.Type) -> ir.Value:
        """The `type_` value `offset` bytes into the object at `pointer`."""
        return self.b.load(self._at(pointer, offset, I8), typ=type_)

    def _slot(self, self_: ir.Value, k: ir.Value | int) -> ir.Value:
        """Item `k` of the `self` tuple (borrowed)."""
        return self._load(self._at(self_, TUPLE_ITEMS, I8), k, PTR)

    def _same(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.icmp_unsigned("==", a, b)

    def _block(self, name: str) -> ir.Block:
        return self.function.append_basic_block(name)


def _define_allocate_output(module: ir.Module) -> None:
    """`ptr rv_entry_allocate_output(self, shape, rank, dtype, nbytes)`: a new output array
    of `rank` axes sized `shape[0..rank)` and numpy.dtype `dtype` (`nbytes` long), or NULL
    with CPython's exception set. It is the one place where the entry gets an output's
    memory: `numpy.empty(shape, dtype)`, or the output pool's `empty` (slot POOLED_EMPTY)
    from POOLED_OUTPUT_BYTES up (also when the byte count wrapped around: the pool passes
    what it does not take to numpy.empty, which reports it)."""
    function = ir.Function(module, ALLOCATE_TYPE, name=ALLOCATE_OUTPUT)
    function.linkage = "internal"
    self_, shape, rank, dtype, nbytes = function.args
    builder = _Builder(function)
    b = builder.b
    arguments = builder._stack(PTR, "empty_args", i64(2))
    failed = builder._block("failed")
    sizes = builder._c("PyTuple_New", rank)
    made = builder._block("made")
    b.cbranch(b.icmp_unsigned("==", sizes, NULL), failed, made)
    b.position_at_end(made)
    with counted_loop(b, i64(0), rank) as axis:
        size = builder._c("PyLong_FromSsize_t", builder._load(shape, axis, I64))
        release = builder._block("release")
        stored = builder._block("stored")
        b.cbranch(b.icmp_unsigned("==", size, NULL), release, stored)
        b.position_at_end(release)
        builder._c("Py_DecRef", sizes)
        b.branch(failed)
        b.position_at_end(stored)
        builder._c("PyTuple_SetItem", sizes, axis, size)
    b.store(sizes, builder._at(arguments, 0, PTR))
    b.store(dtype, builder._at(arguments, 1, PTR))
    pooled = b.icmp_unsigned(">=", nbytes, i64(POOLED_OUTPUT_BYTES))
    allocate = b.select(pooled, builder._slot(self_, POOLED_EMPTY), builder._slot(self_, EMPTY))
    array = builder._c("PyObject_Vectorcall", allocate, arguments, i64(2), NULL)
    builder._c("Py_DecRef", sizes)
    b.ret(array)
    b.position_at_end(failed)
    b.ret(NULL)


class _EntryBuilder(_Builder):
    """Builds `rv_vectorcall`: arguments, binding, outputs, the kernel call, results."""

    def __init__(self, module: ir.Module) -> None:
        super().__init__(ir.Function(module, ENTRY_TYPE, name=CALL_ENTRY))
        self.self_, self.args, self.nargsf, self.kwnames = self.function.args
        self.fallback = self._block("fallback")
        self.failed = self._block("failed")
        self.release = self._block("release")  # release the outputs, then the fallback
        self.unallocated = self._block("unallocated")  # an output failed: the same, explained
        b = self.b
        self.words = self._field(self._slot(self.self_, CALL_DESCRIPTOR), ARRAY_DATA, PTR)
        self.params, self.outputs, symbols, layout = (
            self._word(w) for w in (PARAMETERS, OUTPUTS, SYMBOLS, LAYOUT))
        arrays = b.add(self.params, self.outputs)
        # the call's arrays, on the stack: sized by the descriptor
        self.shapes = self._stack(PTR, "shapes", self.params)      # each argument's shape
        self.scalars = self._stack(I64, "scalars", self.params)    # Python numbers, converted
        self.buffers = self._stack(PTR, "buffers", b.add(arrays, i64(2)))  # + workspace, helpers
        self.dims = self._stack(I64, "dims", b.add(symbols, i64(ERROR_SLOTS)))
        self.layout = self._stack(I64, "layout", layout)          # workspace bytes, shapes
        self.owned = self._stack(PTR, "owned", self.outputs)      # new references
        self.zero_d = self._stack(I64, "zero_d", self.outputs)    # 0-d outputs' values
        self.elements = self._stack(I64, "elements")              # moved by the call
        # scratch of the steps below (stack slots all in the entry block: none in a loop)
        self.product = self._stack(I64, "product")
        self.overflow = self._stack(I32, "overflow")
        self.offset = self._stack(I64, "shape_offset")
        self.block = self._stack(I64, "workspace_block")
        self.thread = self._stack(PTR, "thread")
        self.number = self._stack(PTR, "number")

    # ------------------------------------------------------------ small pieces

    def _word(self, index: ir.Value | int) -> ir.Value:
        """Word `index` of the descriptor."""
        return self._load(self.words, index, I64)

    def _array_word(self, k: ir.Value, field: int) -> ir.Value:
        """Field `field` (0: dtype code, 1: rank) of array `k` (parameters, then outputs)."""
        return self._word(self.b.add(i64(FIRST_ARRAY + field), self.b.mul(k, i64(2))))

    def _require(self, condition: ir.Value, otherwise: ir.Block | None = None) -> None:
        """Go on if `condition` holds, else take the Python path (or `otherwise`)."""
        ok = self._block("ok")
        self.b.cbranch(condition, ok, otherwise or self.fallback)
        self.b.position_at_end(ok)

    def _check_new(self, obj: ir.Value) -> None:
        """Go on if CPython returned an object, else fail with its exception set."""
        self._require(self.b.icmp_unsigned("!=", obj, NULL), self.failed)

    def _add_elements(self, count: ir.Value) -> None:
        b = self.b
        b.store(b.add(b.load(self.elements, typ=I64), count), self.elements)

    def _product(self, shape: ir.Value, rank: ir.Value) -> ir.Value:
        """The number of elements of an array of `rank` axes sized `shape[0..rank)`."""
        b = self.b
        b.store(i64(1), self.product)
        with counted_loop(b, i64(0), rank) as axis:
            b.store(b.mul(b.load(self.product, typ=I64), self._load(shape, axis, I64)),
                    self.product)
        return b.load(self.product, typ=I64)

    def _by_dtype(self, code: ir.Value, actions: dict[str, Callable[[], None]]) -> None:
        """Emit `actions[dtype]()` for the dtype whose code is `code`, one of the keys (a
        `switch`; the last key also takes any other code)."""
        b = self.b
        done = self._block("done")
        cases = {dtype: self._block(f"as_{dtype}") for dtype in actions}
        switch = b.switch(code, cases[next(reversed(cases))])
        for dtype, case in cases.items():
            switch.add_case(i64(CODE[dtype]), case)
            b.position_at_end(case)
            actions[dtype]()
            b.branch(done)
        b.position_at_end(done)

    # ------------------------------------------------------------ the entry

    def build(self) -> None:
        b = self.b
        b.store(i64(0), self.elements)
        nargs = b.and_(self.nargsf, i64(ARGUMENTS_OFFSET - 1))
        self._require(b.and_(self._same(nargs, self.params), self._same(self.kwnames, NULL)))
        with counted_loop(b, i64(0), self.params) as k:
            self._take_argument(k)
        bind = FunctionPointer(b.inttoptr(self._word(BIND), PTR), BIND_TYPE)
        status = b.call(bind, [self.shapes, self.buffers, self.dims, self.layout])
        self._require(self._same(status, ir.Constant(I32, 0)))
        with counted_loop(b, i64(0), self.outputs) as k:
            b.store(NULL, self._at(self.owned, k, PTR))
        self._make_outputs()
        self._take_workspace()
        status = self._call_kernel()
        self._give_back_workspace()
        with b.if_then(self._same(status, ir.Constant(I32, INTERRUPTED))):
            # a signal stopped it: what the Python handler raises, else the Python path
            raised = b.icmp_signed("!=", self._c("PyErr_CheckSignals"), ir.Constant(I32, 0))
            self._require(b.not_(raised), self.failed)
        self._require(self._same(status, ir.Constant(I32, 0)), self.release)
        b.ret(self._results())
        self._define_exits()

    def _take_argument(self, k: ir.Value) -> None:
        """Check argument `k`; note its shape and data pointer (a number: converted into
        its `scalars` slot) and count its elements."""
        b = self.b
        arg = self._load(self.args, k, PTR)
        kind = self._field(arg, OB_TYPE, PTR)
        code, rank = self._array_word(k, 0), self._array_word(k, 1)
        array, number, done = self._block("array"), self._block("number"), self._block("taken")
        b.cbranch(self._same(kind, self._slot(self.self_, NDARRAY)), array, number)
        b.position_at_end(array)
        dtype = self._slot(self.self_, b.add(k, i64(FIRST_DTYPE)))
        self._require(self._same(self._field(arg, ARRAY_DESCR, PTR), dtype))
        self._require(self._same(b.sext(self._field(arg, ARRAY_NDIM, I32), I64), rank))
        flags = self._field(arg, ARRAY_FLAGS, I32)
        self._require(b.icmp_unsigned("!=", b.and_(flags, ir.Constant(I32, C_CONTIGUOUS)),
                                      ir.Constant(I32, 0)))
        shape = self._field(arg, ARRAY_SHAPE, PTR)
        b.store(shape, self._at(self.shapes, k, PTR))
        b.store(self._field(arg, ARRAY_DATA, PTR), self._at(self.buffers, k, PTR))
        self._add_elements(self._product(shape, rank))
        b.branch(done)
        b.position_at_end(number)
        self._require(self._same(rank, i64(0)))
        slot = self._at(self.scalars, k, I64)
        self._store_number(arg, kind, code, slot)
        b.store(slot, self._at(self.buffers, k, PTR))
        self._add_elements(i64(1))
        b.branch(done)
        b.position_at_end(done)

    def _store_number(self, arg: ir.Value, kind: ir.Value, code: ir.Value,
                      slot: ir.Value) -> None:
        """Store a Python number in `slot` as dtype `code` when it converts exactly as
        NumPy would: a float for a float dtype (unless it overflows f32), an int whose value
        the dtype holds exactly (EXACT_INTEGERS). Anything else takes the Python path."""
        b = self.b
        as_float, not_float, stored = (self._block("float"), self._block("not_float"),
                                       self._block("stored"))
        b.cbranch(self._same(kind, self._slot(self.self_, FLOAT)), as_float, not_float)
        b.position_at_end(as_float)
        self._require(b.or_(self._same(code, i64(CODE["f32"])),
                            self._same(code, i64(CODE["f64"]))))
        value = self._field(arg, FLOAT_VALUE, F64)

        def narrowed() -> None:  # f32: unless a finite value overflows
            narrow = b.fptrunc(value, F32)
            self._require(b.or_(b.not_(self._is_infinite(b.fpext(narrow, F64))),
                                self._is_infinite(value)))
            b.store(narrow, slot)

        self._by_dtype(code, {"f32": narrowed, "f64": lambda: b.store(value, slot)})
        b.branch(stored)
        b.position_at_end(not_float)
        self._require(self._same(kind, self._slot(self.self_, INT)))
        integer = self._c("PyLong_AsLongLongAndOverflow", arg, self.overflow)
        self._require(self._same(b.load(self.overflow, typ=I32), ir.Constant(I32, 0)))
        low, high = (self._per_dtype(name, {d: EXACT_INTEGERS[d][end] for d in ENTRY_DTYPES},
                                     code)
                     for end, name in enumerate(("rv_entry_lowest", "rv_entry_highest")))
        self._require(b.and_(b.icmp_signed(">=", integer, low),
                             b.icmp_signed("<=", integer, high)))
        self._by_dtype(code, {"f32": lambda: b.store(b.sitofp(integer, F32), slot),
                              "f64": lambda: b.store(b.sitofp(integer, F64), slot),
                              "i32": lambda: b.store(b.trunc(integer, I32), slot),
                              "i64": lambda: b.store(integer, slot)})
        b.branch(stored)
        b.position_at_end(stored)

    def _per_dtype(self, name: str, values: dict[str, int], code: ir.Value) -> ir.Value:
        """`values[dtype]` for the dtype whose code is `code`, read from the module's
        constant table `name` (one i64 per dtype code, made on first use)."""
        table = self.module.globals.get(name)
        if table is None:
            array = ir.ArrayType(I64, len(ENTRY_DTYPES))
            table = ir.GlobalVariable(self.module, array, name=name)
            table.initializer = ir.Constant(array, [values[d] for d in ENTRY_DTYPES])
            table.global_constant, table.linkage = True, "internal"
        return self._load(table, code, I64)

    def _is_infinite(self, value: ir.Value) -> ir.Value:
        fabs = self.module.declare_intrinsic("llvm.fabs", [F64])
        return self.b.fcmp_ordered("==", self.b.call(fabs, [value]),
                                   ir.Constant(F64, float("inf")))

    def _make_outputs(self) -> None:
        """Each output's memory: a new array (`rv_entry_allocate_output`), or for a 0-d
        output its `zero_d` slot (boxed at the end); count their elements."""
        b = self.b
        offset = self.offset  # where output k's shape is in `layout`
        b.store(i64(1), offset)
        with counted_loop(b, i64(0), self.outputs) as k:
            array_index = b.add(k, self.params)  # output k among the call's arrays
            rank = self._array_word(array_index, 1)
            buffer = self._at(self.buffers, array_index, PTR)
            with b.if_else(self._same(rank, i64(0))) as (zero_d, shaped):
                with zero_d:
                    b.store(self._at(self.zero_d, k, I64), buffer)
                    self._add_elements(i64(1))
                with shaped:
                    shape = self._at(self.layout, b.load(offset, typ=I64), I64)
                    dtype = self._slot(self.self_, b.add(array_index, i64(FIRST_DTYPE)))
                    count = self._product(shape, rank)
                    itemsize = self._per_dtype("rv_entry_itemsize", ITEMSIZE,
                                               self._array_word(array_index, 0))
                    allocate = self.module.globals[ALLOCATE_OUTPUT]
                    array = b.call(allocate, [self.self_, shape, rank, dtype,
                                              b.mul(count, itemsize)])
                    self._require(b.icmp_unsigned("!=", array, NULL), self.unallocated)
                    b.store(array, self._at(self.owned, k, PTR))
                    b.store(self._field(array, ARRAY_DATA, PTR), buffer)
                    self._add_elements(count)
            b.store(b.add(b.load(offset, typ=I64), rank), offset)

    def _take_workspace(self) -> None:
        """The workspace (`layout[0]` bytes; none: NULL) and the helper table, after the
        outputs in the buffer table."""
        b = self.b
        needed = self._load(self.layout, 0, I64)
        arrays = b.add(self.params, self.outputs)
        slot = self._at(self.buffers, arrays, PTR)
        b.store(NULL, slot)
        b.store(i64(0), self.block)
        with b.if_then(b.icmp_unsigned("!=", needed, i64(0))):
            block = take_workspace(b, self._c, self._spare_cell(), needed)
            self._require(b.icmp_unsigned("!=", block, i64(0)), self.release)
            b.store(block, self.block)
            b.store(workspace_of(b, block), slot)
        helpers = self._field(self._slot(self.self_, HELPER_TABLE), ARRAY_DATA, PTR)
        b.store(helpers, self._at(self.buffers, b.add(arrays, i64(1)), PTR))

    def _spare_cell(self) -> ir.Value:
        return self._field(self._slot(self.self_, SPARE_WORKSPACE), ARRAY_DATA, PTR)

    def _give_back_workspace(self) -> None:
        block = self.b.load(self.block, typ=I64)
        with self.b.if_then(self.b.icmp_unsigned("!=", block, i64(0))):
            give_back_workspace(self.b, self._c, self._spare_cell(), block)

    def _call_kernel(self) -> ir.Value:
        """Call the kernel, without the GIL when it is heavy or the call moves
        GIL_FREE_ELEMENTS elements or more; its status."""
        b = self.b
        heavy = b.icmp_unsigned("!=", b.and_(self._word(FLAGS), i64(HEAVY)), i64(0))
        many = b.icmp_signed(">=", b.load(self.elements, typ=I64), i64(GIL_FREE_ELEMENTS))
        b.store(NULL, self.thread)
        with b.if_then(b.or_(heavy, many)):
            b.store(self._c("PyEval_SaveThread"), self.thread)
        kernel = FunctionPointer(b.inttoptr(self._word(KERNEL), PTR), KERNEL_TYPE)
        status = b.call(kernel, [self.buffers, self.dims])
        saved = b.load(self.thread, typ=PTR)
        with b.if_then(b.icmp_unsigned("!=", saved, NULL)):
            self._c("PyEval_RestoreThread", saved)
        return status

    def _results(self) -> ir.Value:
        """The Python result: the outputs (0-d ones boxed), one or a tuple of them."""
        b = self.b
        with counted_loop(b, i64(0), self.outputs) as k:
            with b.if_then(self._same(self._array_word(b.add(k, self.params), 1), i64(0))):
                self._box(k)
        single = b.and_(self._same(self.outputs, i64(1)), self._same(
            b.and_(self._word(FLAGS), i64(TUPLE_RESULT)), i64(0)))
        with b.if_then(single):
            b.ret(self._load(self.owned, 0, PTR))
        result = self._c("PyTuple_New", self.outputs)
        self._check_new(result)
        with counted_loop(b, i64(0), self.outputs) as k:
            self._c("PyTuple_SetItem", result, k, self._load(self.owned, k, PTR))
        return result

    def _box(self, k: ir.Value) -> None:
        """Output `k`, 0-d, as a NumPy scalar: its value as a Python float or int, passed
        to its scalar type (numpy.float64(...), numpy.bool_(...), ml_dtypes.bfloat16(...):
        exact, a bf16/f16 value is a double's)."""
        b = self.b
        slot, number = self._at(self.zero_d, k, I64), self.number

        def read(make: str, load: Callable[[], ir.Value]) -> Callable[[], None]:
            return lambda: b.store(self._c(make, load()), number)

        def storage(widen: Callable[[ir.IRBuilder, ir.Value], ir.Value]) -> ir.Value:
            return b.fpext(widen(b, b.zext(b.load(slot, typ=I16), I32)), F64)

        self._by_dtype(self._array_word(b.add(k, self.params), 0), {
            "bf16": read("PyFloat_FromDouble", lambda: storage(bf16_to_f32)),
            "f16": read("PyFloat_FromDouble", lambda: storage(f16_to_f32)),
            "f32": read("PyFloat_FromDouble", lambda: b.fpext(b.load(slot, typ=F32), F64)),
            "f64": read("PyFloat_FromDouble", lambda: b.load(slot, typ=F64)),
            "i32": read("PyLong_FromLongLong", lambda: b.sext(b.load(slot, typ=I32), I64)),
            "bool": read("PyLong_FromLongLong", lambda: b.zext(b.load(slot, typ=I8), I64)),
            "i64": read("PyLong_FromLongLong", lambda: b.load(slot, typ=I64))})
        value = b.load(number, typ=PTR)
        self._check_new(value)
        scalar_type = self._slot(self.self_, b.add(k, b.add(b.add(self.params, self.outputs),
                                                          i64(FIRST_DTYPE))))
        boxed = self._c("PyObject_Vectorcall", scalar_type, number, i64(1), NULL)
        self._c("Py_DecRef", value)
        self._check_new(boxed)
        b.store(boxed, self._at(self.owned, k, PTR))

    def _define_exits(self) -> None:
        """The fallback (the Python path, same arguments), the release of the outputs
        before it (a failed allocation of an output, whose error is cleared, or of the
        workspace, or a failed bounds check: the Python path allocates or reports itself,
        naming the kernel: `allocation.py`) and the failure exit (CPython failed to make
        an object: release what was made, return NULL with the error set)."""
        b = self.b
        b.position_at_end(self.fallback)
        b.ret(self._c("PyObject_Vectorcall", self._slot(self.self_, FALLBACK), self.args,
                      self.nargsf, self.kwnames))
        b.position_at_end(self.unallocated)
        self._c("PyErr_Clear")
        b.branch(self.release)
        b.position_at_end(self.release)
        self._release_outputs()
        b.branch(self.fallback)
        b.position_at_end(self.failed)
        self._release_outputs()
        b.ret(NULL)

    def _release_outputs(self) -> None:
        with counted_loop(self.b, i64(0), self.outputs) as k:
            self._c("Py_DecRef", self._load(self.owned, k, PTR))
