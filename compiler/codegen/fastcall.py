"""The native call entry: a CPython vectorcall function per kernel, written in LLVM IR.

Calling a kernel from Python through ctypes costs ~10 µs; NumPy's `2 * x` costs ~1 µs.
This entry does the whole common call in native code, in the same module as the kernel:

    PyObject *@<entry>_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)

1. checks each argument exactly as `runtime/call.py`'s `FastBinder` accepts it: an
   ndarray of exactly the declared dtype (its descriptor object is the one NumPy uses for
   that dtype), rank and C-contiguity, or, for a scalar parameter, a Python `float`
   (float dtypes) or `int` (whose value the dtype holds exactly);
2. binds every dimension from the shapes (and from the values of integer parameters that
   size a `for` loop), checks constant sizes, repeated names and the size constraints;
3. allocates the outputs with `numpy.empty` (called through `PyObject_Vectorcall`; an
   output of `abi.POOLED_OUTPUT_BYTES` or more with the reuse pool's `empty` instead,
   `runtime/output_pool.py`) and the workspace (the entry's spare block from the last
   call when it fits, see `workspace_cache.py`), calls the kernel (without the GIL when
   the call moves many elements or loops), and returns the outputs as the Python path
   would: 0-d results as NumPy scalars, several results (or a kernel that always returns
   a tuple) as a tuple.

Anything else — another type, dtype or layout, keyword arguments, a size that does not
bind, a failed bounds check — goes to the *fallback*: the Python call path, called with
the same arguments, which converts them or raises its usual error. The entry decides
nothing the Python path would decide differently, so errors are identical by
construction (the tests run every bad-argument case through both).

`self` is a tuple built by `runtime/fastcall.py` (slots below): the fallback, the type
objects and dtype descriptors to compare against, `numpy.empty` and the output pool's
`empty`, the helper table, the spare-workspace cell, and whether one result is returned as
a 1-tuple. The code holds no process addresses, so it is cached on disk like the kernel;
CPython's functions resolve when the module is linked. The object layouts it reads are in
`abi.py` (CPython 3.11+, NumPy 1.x/2.x; `runtime/fastcall.py` checks them before it
installs any entry).
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.boundary import CallBoundary
from reverie.compiler.loops.ir import ForLoop, Matmul, Program, workspace_offsets

from .abi import (
    ARGUMENTS_OFFSET,
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_FLAGS,
    ARRAY_NDIM,
    ARRAY_SHAPE,
    C_CONTIGUOUS,
    EMPTY,
    FALLBACK,
    FIRST_DESCRIPTOR,
    FLOAT,
    FLOAT_VALUE,
    HELPER_TABLE,
    INT,
    NDARRAY,
    OB_TYPE,
    POOLED_EMPTY,
    POOLED_OUTPUT_BYTES,
    SPARE_WORKSPACE,
    TUPLE_ITEMS,
    TUPLE_RESULT,
)
from .irutil import (
    F32,
    F64,
    FLOATS,
    I1,
    I32,
    I64,
    ITEMSIZE,
    MEMORY,
    PTR,
    alloca,
    i64,
    index_value,
)
from .workspace_cache import give_back_workspace, take_workspace, workspace_of

GIL_FREE_ELEMENTS = 1 << 14  # calls moving at least this many elements release the GIL
# the Python ints a scalar parameter takes natively (i64: whatever fits; others exactly)
EXACT_INTEGERS = {"f32": (-(1 << 24), 1 << 24), "f64": (-(1 << 53), 1 << 53),
                  "i32": (-(1 << 31), (1 << 31) - 1)}

CPYTHON = {  # name: (result, parameters)
    "PyObject_Vectorcall": (PTR, [PTR, PTR, I64, PTR]),
    "PyTuple_New": (PTR, [I64]),
    "PyTuple_SetItem": (I32, [PTR, I64, PTR]),
    "PyLong_FromSsize_t": (PTR, [I64]),
    "PyLong_FromLongLong": (PTR, [I64]),
    "PyLong_AsLongLongAndOverflow": (I64, [PTR, PTR]),
    "PyFloat_FromDouble": (PTR, [F64]),
    "PyObject_IsTrue": (I32, [PTR]),
    "Py_DecRef": (ir.VoidType(), [PTR]),
    "PyMem_RawMalloc": (PTR, [I64]),
    "PyMem_RawFree": (ir.VoidType(), [PTR]),
    "PyEval_SaveThread": (PTR, []),
    "PyEval_RestoreThread": (ir.VoidType(), [PTR]),
}


def define_vectorcall_entry(module: ir.Module, entry: ir.Function, program: Program,
                            boundary: CallBoundary) -> None:
    """Add `@<entry>_vectorcall` (see the module docstring) calling `entry`, which is
    kept out of line (inlined, it would double the code LLVM optimises and emits)."""
    entry.attributes.add("noinline")
    _VectorcallEntry(module, entry, program, boundary)


class _VectorcallEntry:
    """Builds the entry: checks, binding, allocation, the kernel call, the results."""

    def __init__(self, module: ir.Module, entry: ir.Function, program: Program,
                 boundary: CallBoundary) -> None:
        self.module, self.program, self.boundary = module, program, boundary
        signature = ir.FunctionType(PTR, [PTR, PTR, I64, PTR])
        function = ir.Function(module, signature, name=entry.name + "_vectorcall")
        self.self_, self.args, self.nargsf, self.kwnames = function.args
        self.function = function
        self.b = ir.IRBuilder(function.append_basic_block("entry"))
        self.fallback = function.append_basic_block("fallback")
        self.failed = function.append_basic_block("failed")
        self.sizes: dict[str, ir.Value] = {}
        self.derived: list[tuple[ir.Value, Dim]] = []  # (size, expression) checked last
        self.owned = alloca(self.b, ir.ArrayType(PTR, len(program.outputs)), "owned")
        self._build(entry)

    # ------------------------------------------------------------ small pieces

    def _c(self, name: str, *args: ir.Value) -> ir.Value:
        """Call CPython's function `name` (declared once per module)."""
        function = self.module.globals.get(name)
        if function is None:
            result, params = CPYTHON[name]
            function = ir.Function(self.module, ir.FunctionType(result, params), name=name)
        return self.b.call(function, list(args))

    def _field(self, pointer: ir.Value, offset: int, type_: ir.Type) -> ir.Value:
        """The `type_` value `offset` bytes into the object at `pointer`."""
        address = self.b.gep(pointer, [i64(offset)], source_etype=ir.IntType(8))
        return self.b.load(address, typ=type_)

    def _slot(self, k: int) -> ir.Value:
        """Item `k` of the `self` tuple (borrowed)."""
        return self._field(self.self_, TUPLE_ITEMS + 8 * k, PTR)

    def _require(self, condition: ir.Value) -> None:
        """Go on if `condition` holds, else take the Python path."""
        ok = self.function.append_basic_block("ok")
        self.b.cbranch(condition, ok, self.fallback)
        self.b.position_at_end(ok)

    def _same(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.icmp_unsigned("==", a, b)

    def _bind(self, name: str, size: ir.Value) -> None:
        """Bind dimension `name`, or require it to have the size bound before."""
        if name in self.sizes:
            self._require(self._same(self.sizes[name], size))
        else:
            self.sizes[name] = size

    def _size(self, dim: Dim) -> ir.Value:
        return index_value(self.b, dim, self.sizes.__getitem__)

    # ------------------------------------------------------------ the entry

    def _build(self, entry: ir.Function) -> None:
        b, program, boundary = self.b, self.program, self.boundary
        nargs = b.and_(self.nargsf, i64(ARGUMENTS_OFFSET - 1))
        self._require(b.and_(self._same(nargs, i64(len(boundary.dtypes))),
                             b.icmp_unsigned("==", self.kwnames, ir.Constant(PTR, None))))
        data = [self._parameter(k) for k in range(len(boundary.dtypes))]
        for name, k in boundary.value_dims:
            dtype = boundary.dtypes[k]
            value = b.load(data[k], typ=MEMORY[dtype])
            self._bind(name, value if dtype == "i64" else b.sext(value, I64))
        for size, dim in self.derived:
            self._require(self._same(size, self._size(dim)))
        for dim in boundary.constraints:
            self._require(b.icmp_signed(">=", self._size(dim), i64(0)))
        for k in range(len(program.outputs)):
            b.store(ir.Constant(PTR, None), b.gep(self.owned, [i64(0), i64(k)],
                                                  source_etype=self.owned_type))
        outputs = [self._output(k) for k in range(len(program.outputs))]
        total = workspace_offsets(program.temps, ITEMSIZE)[-1]
        uses_workspace = not (total.is_const and total.value == 0)
        workspace = ir.Constant(PTR, None)
        if uses_workspace:
            cell = self._field(self._slot(SPARE_WORKSPACE), ARRAY_DATA, PTR)
            block = take_workspace(b, self._c, cell, self._size(total))
            self._fall_back_releasing(b.icmp_unsigned("==", block, i64(0)))
            workspace = workspace_of(b, block)
        helpers = self._field(self._slot(HELPER_TABLE), ARRAY_DATA, PTR)
        status = self._call_kernel(entry, data + outputs + [workspace, helpers])
        if uses_workspace:
            give_back_workspace(b, self._c, cell, block)
        self._fall_back_releasing(b.icmp_signed("!=", status, ir.Constant(I32, 0)))
        b.ret(self._results(outputs))
        self._define_exits()

    @property
    def owned_type(self) -> ir.Type:
        return ir.ArrayType(PTR, len(self.program.outputs))

    def _parameter(self, k: int) -> ir.Value:
        """Check argument `k` and return a pointer to its data."""
        b, dtype, shape = self.b, self.boundary.dtypes[k], self.boundary.shapes[k]
        arg = b.load(b.gep(self.args, [i64(k)], source_etype=PTR), typ=PTR)
        kind = self._field(arg, OB_TYPE, PTR)
        if shape:
            self._require(self._same(kind, self._slot(NDARRAY)))
            return self._array(arg, k, shape)
        # a scalar: a 0-d array, or a Python number stored in a stack slot
        slot = alloca(b, MEMORY[dtype], f"arg{k}")
        array = self.function.append_basic_block("array")
        number = self.function.append_basic_block("number")
        done = self.function.append_basic_block("scalar")
        b.cbranch(self._same(kind, self._slot(NDARRAY)), array, number)
        b.position_at_end(array)
        array_data = self._array(arg, k, ())
        array_end = b.block
        b.branch(done)
        b.position_at_end(number)
        self._number(arg, kind, dtype, slot)
        number_end = b.block
        b.branch(done)
        b.position_at_end(done)
        pointer = b.phi(PTR)
        pointer.add_incoming(array_data, array_end)
        pointer.add_incoming(slot, number_end)
        return pointer

    def _array(self, arg: ir.Value, k: int, shape: tuple[Dim, ...]) -> ir.Value:
        """Check an ndarray argument's dtype, rank and layout; bind its sizes."""
        b = self.b
        self._require(self._same(self._field(arg, ARRAY_DESCR, PTR),
                                 self._slot(FIRST_DESCRIPTOR + k)))
        self._require(self._same(self._field(arg, ARRAY_NDIM, I32), ir.Constant(I32, len(shape))))
        flags = self._field(arg, ARRAY_FLAGS, I32)
        self._require(b.icmp_unsigned("!=", b.and_(flags, ir.Constant(I32, C_CONTIGUOUS)),
                                      ir.Constant(I32, 0)))
        if shape:
            sizes = self._field(arg, ARRAY_SHAPE, PTR)
            for axis, dim in enumerate(shape):
                size = b.load(b.gep(sizes, [i64(axis)], source_etype=I64), typ=I64)
                if dim.is_const:
                    self._require(self._same(size, i64(dim.value)))
                elif str(dim) in dim.symbols():
                    self._bind(str(dim), size)
                else:
                    self.derived.append((size, dim))
        return self._field(arg, ARRAY_DATA, PTR)

    def _number(self, arg: ir.Value, kind: ir.Value, dtype: str, slot: ir.Value) -> None:
        """Store a Python number in `slot` as `dtype` when it converts exactly as NumPy
        would: a float for a float dtype (unless it overflows f32), an int whose value
        `dtype` holds exactly. Bools and anything else take the Python path."""
        b = self.b
        if dtype == "bool":
            self._require(ir.Constant(I1, 0))
            return
        stored = self.function.append_basic_block("stored")
        if dtype in FLOATS:
            as_float = self.function.append_basic_block("float")
            not_float = self.function.append_basic_block("not_float")
            b.cbranch(self._same(kind, self._slot(FLOAT)), as_float, not_float)
            b.position_at_end(as_float)
            value = self._field(arg, FLOAT_VALUE, F64)
            if dtype == "f32":
                single = b.fptrunc(value, F32)
                self._require(b.or_(b.not_(self._is_infinite(b.fpext(single, F64))),
                                    self._is_infinite(value)))
                value = single
            b.store(value, slot)
            b.branch(stored)
            b.position_at_end(not_float)
        self._require(self._same(kind, self._slot(INT)))
        overflow = alloca(b, I32, "overflow")
        value = self._c("PyLong_AsLongLongAndOverflow", arg, overflow)
        fits = self._same(b.load(overflow, typ=I32), ir.Constant(I32, 0))
        if dtype in EXACT_INTEGERS:
            low, high = EXACT_INTEGERS[dtype]
            fits = b.and_(fits, b.and_(b.icmp_signed(">=", value, i64(low)),
                                       b.icmp_signed("<=", value, i64(high))))
        self._require(fits)
        if dtype in FLOATS:
            value = b.sitofp(value, MEMORY[dtype])
        elif dtype == "i32":
            value = b.trunc(value, I32)
        b.store(value, slot)
        b.branch(stored)
        b.position_at_end(stored)

    def _is_infinite(self, value: ir.Value) -> ir.Value:
        fabs = self.module.declare_intrinsic("llvm.fabs", [F64])
        return self.b.fcmp_ordered("==", self.b.call(fabs, [value]),
                                   ir.Constant(F64, float("inf")))

    def _output(self, k: int) -> ir.Value:
        """Allocate output `k` (numpy.empty, or the output pool's `empty` from
        POOLED_OUTPUT_BYTES up; a stack slot for a 0-d one): its data."""
        b, buffer = self.b, self.program.outputs[k]
        if not buffer.shape:
            return alloca(b, MEMORY[buffer.dtype], f"out{k}")
        allocate = self._allocator(buffer.size, ITEMSIZE[buffer.dtype])
        shape = self._c("PyTuple_New", i64(len(buffer.shape)))
        self._check_new(shape)
        for axis, dim in enumerate(buffer.shape):
            size = self._c("PyLong_FromSsize_t", self._size(dim))
            self._check_new(size, releasing=(shape,))
            self._c("PyTuple_SetItem", shape, i64(axis), size)
        arguments = alloca(b, ir.ArrayType(PTR, 2), "empty_args")
        b.store(shape, b.gep(arguments, [i64(0)], source_etype=PTR))
        b.store(self._slot(self._dtype_slot(k)), b.gep(arguments, [i64(1)], source_etype=PTR))
        array = self._c("PyObject_Vectorcall", allocate, arguments, i64(2),
                        ir.Constant(PTR, None))
        self._c("Py_DecRef", shape)
        self._check_new(array)
        b.store(array, b.gep(self.owned, [i64(0), i64(k)], source_etype=self.owned_type))
        return self._field(array, ARRAY_DATA, PTR)

    def _allocator(self, elements: Dim, itemsize: int) -> ir.Value:
        """The slot allocating an output of `elements` items: POOLED_EMPTY when it has
        POOLED_OUTPUT_BYTES or more (also when the count wrapped around: the pool passes
        what it does not take to numpy.empty, which reports it), else EMPTY."""
        least = -(-POOLED_OUTPUT_BYTES // itemsize)
        pooled = self.b.icmp_unsigned(">=", self._size(elements), i64(least))
        return self.b.select(pooled, self._slot(POOLED_EMPTY), self._slot(EMPTY))

    def _dtype_slot(self, k: int) -> int:
        return FIRST_DESCRIPTOR + len(self.boundary.dtypes) + k

    def _scalar_type_slot(self, k: int) -> int:
        return self._dtype_slot(len(self.program.outputs) + k)

    def _check_new(self, obj: ir.Value, releasing: tuple[ir.Value, ...] = ()) -> None:
        """Go on if CPython returned an object, else release `releasing` and fail with
        CPython's exception set."""
        b = self.b
        ok = self.function.append_basic_block("allocated")
        missing = b.icmp_unsigned("==", obj, ir.Constant(PTR, None))
        if not releasing:
            b.cbranch(missing, self.failed, ok)
        else:
            release = self.function.append_basic_block("release")
            b.cbranch(missing, release, ok)
            b.position_at_end(release)
            for other in releasing:
                self._c("Py_DecRef", other)
            b.branch(self.failed)
        b.position_at_end(ok)

    def _call_kernel(self, entry: ir.Function, pointers: list[ir.Value]) -> ir.Value:
        """Fill the buffer table and the sizes, and call the kernel (GIL released when
        the call moves GIL_FREE_ELEMENTS elements or more, or loops or multiplies)."""
        b, program = self.b, self.program
        table = alloca(b, ir.ArrayType(PTR, len(pointers)), "buffers")
        for k, pointer in enumerate(pointers):
            b.store(pointer, b.gep(table, [i64(k)], source_etype=PTR))
        sizes = alloca(b, ir.ArrayType(I64, len(program.symbols) + 3), "sizes")
        for k, symbol in enumerate(program.symbols):
            b.store(self.sizes[symbol], b.gep(sizes, [i64(k)], source_etype=I64))
        heavy = any(isinstance(s, ForLoop | Matmul) for s in program.walk())
        elements = sum((buffer.size for buffer in program.inputs + program.outputs),
                       Dim.const(0))
        release = ir.Constant(I1, 1) if heavy else \
            b.icmp_signed(">=", self._size(elements), i64(GIL_FREE_ELEMENTS))
        thread = alloca(b, PTR, "thread")
        b.store(ir.Constant(PTR, None), thread)
        with b.if_then(release):
            b.store(self._c("PyEval_SaveThread"), thread)
        status = b.call(entry, [table, sizes])
        saved = b.load(thread, typ=PTR)
        with b.if_then(b.icmp_unsigned("!=", saved, ir.Constant(PTR, None))):
            self._c("PyEval_RestoreThread", saved)
        return status

    def _fall_back_releasing(self, condition: ir.Value) -> None:
        """If `condition` holds, release the outputs and take the Python path (which
        allocates what failed here, or reports the failed bounds check, itself)."""
        b = self.b
        release = self.function.append_basic_block("fall_back")
        ok = self.function.append_basic_block("ok")
        b.cbranch(condition, release, ok)
        b.position_at_end(release)
        self._release_outputs()
        b.branch(self.fallback)
        b.position_at_end(ok)

    def _release_outputs(self) -> None:
        for k in range(len(self.program.outputs)):
            item = self.b.gep(self.owned, [i64(0), i64(k)], source_etype=self.owned_type)
            self._c("Py_DecRef", self.b.load(item, typ=PTR))

    def _results(self, outputs: list[ir.Value]) -> ir.Value:
        """The Python result: the outputs (0-d ones boxed), one or a tuple of them."""
        b, program = self.b, self.program
        objects = []
        for k, (buffer, data) in enumerate(zip(program.outputs, outputs, strict=True)):
            if buffer.shape:
                objects.append(b.load(b.gep(self.owned, [i64(0), i64(k)],
                                            source_etype=self.owned_type), typ=PTR))
                continue
            value = b.load(data, typ=MEMORY[buffer.dtype])
            if buffer.dtype in ("f32", "f64"):
                number = self._c("PyFloat_FromDouble",
                                 value if buffer.dtype == "f64" else b.fpext(value, F64))
            else:
                number = self._c("PyLong_FromLongLong", value if buffer.dtype == "i64"
                                 else b.sext(value, I64) if buffer.dtype == "i32"
                                 else b.zext(value, I64))
            self._check_new(number)
            arguments = alloca(b, PTR, f"box{k}")
            b.store(number, arguments)
            boxed = self._c("PyObject_Vectorcall", self._slot(self._scalar_type_slot(k)),
                            arguments, i64(1), ir.Constant(PTR, None))
            self._c("Py_DecRef", number)
            self._check_new(boxed)
            b.store(boxed, b.gep(self.owned, [i64(0), i64(k)], source_etype=self.owned_type))
            objects.append(boxed)
        if len(objects) == 1:
            single = self.function.append_basic_block("single")
            wrapped = self.function.append_basic_block("wrapped")
            as_tuple = self._c("PyObject_IsTrue", self._slot(TUPLE_RESULT))
            b.cbranch(self._same(as_tuple, ir.Constant(I32, 0)), single, wrapped)
            b.position_at_end(single)
            b.ret(objects[0])
            b.position_at_end(wrapped)
        result = self._c("PyTuple_New", i64(len(objects)))
        self._check_new(result)
        for k, obj in enumerate(objects):
            self._c("PyTuple_SetItem", result, i64(k), obj)
        return result

    def _define_exits(self) -> None:
        """The fallback (the Python path, same arguments) and the failure exit (an
        allocation failed: release what was made, return NULL with the error set)."""
        b = self.b
        b.position_at_end(self.fallback)
        b.ret(self._c("PyObject_Vectorcall", self._slot(FALLBACK), self.args, self.nargsf,
                      self.kwnames))
        b.position_at_end(self.failed)
        self._release_outputs()
        b.ret(ir.Constant(PTR, None))
