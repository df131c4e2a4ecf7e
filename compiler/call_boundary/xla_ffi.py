"""An XLA FFI handler per kernel, written in LLVM IR: the kernel as an XLA CPU custom call.

XLA's typed FFI (xla/ffi/api/c_api.h) calls a handler `XLA_FFI_Error *h(XLA_FFI_CallFrame *)`
with the call's buffers, which XLA has allocated (the results too) and keeps alive for the
call. The handler generated here, `@<entry>_xla_ffi`,

1. answers XLA's metadata query (a call frame whose first extension is the metadata one):
   it writes the FFI API version it was written against (FFI_API_VERSION) and no traits;
2. on the execute stage, reads each argument's data pointer and binds every dimension of
   the kernel from the argument shapes (`dims` of XLA_FFI_Buffer) and, for an integer
   parameter that sizes a loop, from its value; checks the size constraints;
3. computes the workspace's size with every product and sum checked for overflow, refuses
   it above `allocation.MAX_ALLOCATION_BYTES`, allocates it with `malloc`, and for each
   argument or result that XLA holds in a narrower dtype than the kernel's (JAX without
   x64: f32 for f64, i32 for i64) a buffer of the kernel's dtype, widening arguments into
   it before the call and narrowing results out of it after; calls the kernel's C entry
   `i32 @<entry>(ptr buffers, ptr dims)` (ABI in `llvm.py`) and frees what it allocated;
4. returns NULL, or an XLA_FFI_Error made by the API's `XLA_FFI_Error_Create`: OUT_OF_RANGE
   with the interpreter's IndexError text (formatted with `snprintf`) when a bounds check
   failed, INVALID_ARGUMENT for a negative size or a workspace size that overflows int64,
   RESOURCE_EXHAUSTED for one too large or when `malloc` fails (the workspace's errors name
   the kernel and the sizes that made it, as the Python path's do: `allocation.py`).

The handler holds no process addresses, so its object code caches like a kernel's: the
kernel entry and the helper table arrive as the call's one attribute, an i64 array
`[entry address, helper table address]` (XLA_FFI_Array). The caller (`reverie/interop_jax`)
passes row-major buffers of the kernel's dtypes (or the narrower ones the handler was made
for), with shapes it checked at trace time; only what a traced value decides (a loop count)
is checked here.

The struct offsets below are those of c_api.h on a 64-bit host (FFI API 0.x): every field is
8 bytes but the enums (4 bytes, padded to 8 where a pointer follows).
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.allocation import (
    MAX_ALLOCATION_BYTES,
    Allocation,
    allocations,
    memory_message,
    overflow_message,
)
from reverie.compiler.backend.irutil import (
    I1,
    I8,
    I32,
    I64,
    ITEMSIZE,
    MEMORY,
    PTR,
    FunctionPointer,
    Overflow,
    alloca,
    counted_loop,
    i64,
    index_value,
)
from reverie.compiler.call_boundary.abi import entry_symbol
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import ErrorSite, Program
from reverie.compiler.to_loops.boundary import CallBoundary

FFI_API_VERSION = (0, 3)  # the (major, minor) FFI API whose structs this file reads
# XLA_FFI_CallFrame: extension_start, api, stage, args.args, rets.rets, attrs.attrs
FRAME_EXTENSION, FRAME_API, FRAME_STAGE = 8, 16, 32
FRAME_ARGS, FRAME_RETS, FRAME_ATTRS = 72, 112, 160
EXTENSION_TYPE, METADATA_EXTENSION, EXTENSION_METADATA = 8, 1, 24  # XLA_FFI_Extension_Base
# XLA_FFI_Metadata: api_version (an XLA_FFI_Api_Version at 8: struct_size, extension, major,
# minor), then traits
METADATA_VERSION, VERSION_STRUCT_SIZE, METADATA_TRAITS = 8, 28, 32
EXECUTE_STAGE = 3
BUFFER_DATA, BUFFER_DIMS = 24, 40  # XLA_FFI_Buffer
ARRAY_DATA = 16  # XLA_FFI_Array: dtype, size, data
API_ERROR_CREATE = 48  # XLA_FFI_Api: struct_size, extension, api_version (24 bytes), internal
ERROR_ARGS_SIZE = 28  # XLA_FFI_Error_Create_Args: struct_size, extension, message, errc
OUT_OF_RANGE, INVALID_ARGUMENT, RESOURCE_EXHAUSTED = 11, 3, 8  # XLA_FFI_Error_Code
MESSAGE_BYTES = 512
ERROR_SLOTS = 3  # after the sizes: site number, offending index, size (ABI in `llvm.py`)
KERNEL_TYPE = ir.FunctionType(I32, [PTR, PTR])  # the kernel's C entry
ERROR_CREATE_TYPE = ir.FunctionType(PTR, [PTR])  # XLA_FFI_Error_Create
NARROWER = {"f64": "f32", "i64": "i32"}  # what JAX without x64 holds a 64-bit value in
LIBC = {"malloc": (PTR, [I64]), "free": (ir.VoidType(), [PTR])}
MARK = "\x01"  # in a message: where a value is printed (`%lld`)


def _mark(symbol: str) -> str:
    """Where an error message prints the value of a size (`_Handler._report_in`)."""
    return MARK


def handler_symbol(program: Program) -> str:
    """The exported name of a program's XLA FFI handler."""
    return entry_symbol(program) + "_xla_ffi"


def handler_module(program: Program, boundary: CallBoundary,
                   narrowed: tuple[bool, ...]) -> str:
    """LLVM IR text of a module defining the handler of `program` (see the module
    docstring). `narrowed` says, for each input then each output, whether XLA holds it in
    the narrower dtype of NARROWER (JAX without x64) rather than the kernel's."""
    module = ir.Module(name=handler_symbol(program))
    _Handler(module, program, boundary, narrowed)
    return str(module)


def error_format(site: ErrorSite) -> tuple[str, tuple[int, ...]]:
    """A `printf` format of `site`'s message and which error slots (1: index, 2: size) it
    prints, in order."""
    text = site.message("\x01", "\x02").replace("%", "%%")  # type: ignore[arg-type]
    order = tuple(1 if c == "\x01" else 2 for c in text if c in "\x01\x02")
    return text.replace("\x01", "%lld").replace("\x02", "%lld"), order


class _Handler:
    """Builds the handler: metadata, binding, workspace, the kernel call, errors."""

    def __init__(self, module: ir.Module, program: Program, boundary: CallBoundary,
                 narrowed: tuple[bool, ...]) -> None:
        self.module, self.program, self.boundary = module, program, boundary
        self.narrowed = narrowed
        self.allocated: list[ir.Value] = []  # malloc'd here, freed after the call
        function = ir.Function(module, ir.FunctionType(PTR, [PTR]), name=handler_symbol(program))
        self.function, (self.frame,) = function, function.args
        self.b = ir.IRBuilder(function.append_basic_block("entry"))
        self.sizes: dict[str, ir.Value] = {}
        self._build()

    def _field(self, pointer: ir.Value, offset: int, type_: ir.Type) -> ir.Value:
        """The `type_` value `offset` bytes into the struct at `pointer`."""
        return self.b.load(self._address(pointer, offset), typ=type_)

    def _address(self, pointer: ir.Value, offset: int) -> ir.Value:
        return self.b.gep(pointer, [i64(offset)], source_etype=I8)

    def _item(self, array: ir.Value, k: int, type_: ir.Type = PTR) -> ir.Value:
        """Entry `k` of the C array `array` of `type_`."""
        return self.b.load(self.b.gep(array, [i64(k)], source_etype=type_), typ=type_)

    def _libc(self, name: str, *args: ir.Value) -> ir.Value:
        function = self.module.globals.get(name)
        if function is None:
            result, params = LIBC[name]
            function = ir.Function(self.module, ir.FunctionType(result, params), name=name)
        return self.b.call(function, list(args))

    def _split(self, condition: ir.Value, name: str) -> ir.Block:
        """Branch to a new block `name` when `condition` holds; go on in another."""
        taken = self.function.append_basic_block(name)
        rest = self.function.append_basic_block(name + "_not")
        self.b.cbranch(condition, taken, rest)
        self.b.position_at_end(rest)
        return taken

    # ------------------------------------------------------------ the handler

    def _build(self) -> None:
        b, program = self.b, self.program
        metadata = self._split(self._is_metadata_query(), "metadata")
        other_stage = self._split(b.icmp_unsigned("!=", self._field(self.frame, FRAME_STAGE, I32),
                                                  ir.Constant(I32, EXECUTE_STAGE)), "other_stage")
        args = self._field(self.frame, FRAME_ARGS, PTR)
        rets = self._field(self.frame, FRAME_RETS, PTR)
        attribute = self._item(self._field(self.frame, FRAME_ATTRS, PTR), 0)
        addresses = self._field(attribute, ARRAY_DATA, PTR)
        inputs = [self._item(args, k) for k in range(len(program.inputs))]
        given = [self._field(buffer, BUFFER_DATA, PTR) for buffer in inputs]
        self._bind_sizes(inputs, given)
        self._check_sizes()
        workspace_bytes = self._workspace_bytes()
        data = [self._widened(buffer, pointer, self.boundary.dtypes[k],
                              len(self.boundary.shapes[k])) if self.narrowed[k] else pointer
                for k, (buffer, pointer) in enumerate(zip(inputs, given, strict=True))]
        returned = [self._item(rets, k) for k in range(len(program.outputs))]
        outputs = [self._field(buffer, BUFFER_DATA, PTR) for buffer in returned]
        wide_outputs = {k: self._malloc(self._elements(returned[k], len(buffer.shape)),
                                        buffer.dtype)
                        for k, buffer in enumerate(program.outputs)
                        if self.narrowed[len(inputs) + k]}
        workspace = ir.Constant(PTR, None)
        if workspace_bytes is not None:
            workspace = self._malloc(workspace_bytes, "bool")
        out_of_memory = self._any_allocation_failed()
        buffers = alloca(b, ir.ArrayType(I64, len(data) + len(outputs) + 2), "buffers")
        kernel_outputs = [wide_outputs.get(k, pointer) for k, pointer in enumerate(outputs)]
        words = [b.ptrtoint(p, I64) for p in (*data, *kernel_outputs, workspace)]
        for k, word in enumerate([*words, self._item(addresses, 1, I64)]):  # helper table last
            b.store(word, b.gep(buffers, [i64(k)], source_etype=I64))
        count = len(program.symbols)
        dims = alloca(b, ir.ArrayType(I64, count + ERROR_SLOTS), "dims")
        for k, symbol in enumerate(program.symbols):
            b.store(self.sizes[symbol], b.gep(dims, [i64(k)], source_etype=I64))
        kernel = b.inttoptr(self._item(addresses, 0, I64), PTR)
        status = b.call(FunctionPointer(kernel, KERNEL_TYPE), [buffers, dims])
        for k, wide in wide_outputs.items():
            self._convert(wide, outputs[k], self._elements(returned[k], len(
                program.outputs[k].shape)), program.outputs[k].dtype, narrow=True)
        self._free_allocations()
        failed = self._split(b.icmp_signed("!=", status, ir.Constant(I32, 0)), "failed")
        b.ret(ir.Constant(PTR, None))
        self._answer_metadata(metadata)
        b.position_at_end(other_stage)
        b.ret(ir.Constant(PTR, None))
        self._report_index_error(failed, dims, count)
        if out_of_memory is not None:
            self._report_out_of_memory(out_of_memory, workspace, workspace_bytes)

    def _check_sizes(self) -> None:
        """Return an INVALID_ARGUMENT error when a size constraint fails (a negative size)."""
        b = self.b
        negative = ir.Constant(I1, 0)
        for dim in self.boundary.constraints:
            negative = b.or_(negative, b.icmp_signed("<", self._size(dim), i64(0)))
        bad_size = self._split(negative, "negative_size")
        self._report_in(bad_size, INVALID_ARGUMENT,
                        f"negative size in a call of {self.program.name}", [])

    def _workspace_bytes(self) -> ir.Value | None:
        """The workspace's size in bytes (None: the kernel has none), computed with every
        product and sum checked: an INVALID_ARGUMENT error when it overflows, and
        RESOURCE_EXHAUSTED when it is above MAX_ALLOCATION_BYTES (`allocation.py`)."""
        workspace = allocations(self.program)[-1]
        if workspace.nbytes.is_const and workspace.nbytes.value == 0:
            return None
        b, overflow = self.b, Overflow()
        nbytes = index_value(b, workspace.nbytes, self.sizes.__getitem__, overflow)
        overflowed = self._split(overflow.flag, "size_overflow")
        symbols = self._message_symbols(workspace)
        self._report_in(overflowed, INVALID_ARGUMENT,
                        overflow_message(self.program, workspace, _mark), symbols)
        too_large = self._split(b.icmp_signed(">", nbytes, i64(MAX_ALLOCATION_BYTES)),
                                "too_large")
        self._report_in(too_large, RESOURCE_EXHAUSTED,
                        memory_message(self.program, workspace, MARK, _mark),
                        [nbytes, *symbols])
        return nbytes

    def _message_symbols(self, allocation: Allocation) -> list[ir.Value]:
        """The sizes a message about `allocation` prints, in the order of `sizes_text`."""
        return [self.sizes[s] for s in self.program.symbols if s in allocation.nbytes.symbols()]

    def _report_out_of_memory(self, block: ir.Block, workspace: ir.Value,
                              workspace_bytes: ir.Value | None) -> None:
        """In `block` (a malloc failed): free what was allocated, then return
        RESOURCE_EXHAUSTED naming the workspace when that was what failed."""
        b = self.b
        b.position_at_end(block)
        self._free_allocations()
        if workspace_bytes is not None:
            failed = self._split(b.icmp_unsigned("==", workspace, ir.Constant(PTR, None)),
                                 "no_workspace")
            allocation = allocations(self.program)[-1]
            self._report_in(failed, RESOURCE_EXHAUSTED,
                            memory_message(self.program, allocation, MARK, _mark),
                            [workspace_bytes, *self._message_symbols(allocation)])
        self._report(b.block, RESOURCE_EXHAUSTED,
                     self._text(f"out of memory in a call of {self.program.name}"), [])

    # ------------------------------------------------------------ memory and dtypes

    def _malloc(self, elements: ir.Value, dtype: str) -> ir.Value:
        """`elements` items of `dtype` from malloc (one byte more: malloc(0) may be NULL)."""
        size = self.b.add(self.b.mul(elements, i64(ITEMSIZE[dtype])), i64(1))
        pointer = self._libc("malloc", size)
        self.allocated.append(pointer)
        return pointer

    def _any_allocation_failed(self) -> ir.Block | None:
        """A block taken when any malloc so far returned NULL (None: there were none)."""
        if not self.allocated:
            return None
        null = ir.Constant(PTR, None)
        failed = ir.Constant(I1, 0)
        for pointer in self.allocated:
            failed = self.b.or_(failed, self.b.icmp_unsigned("==", pointer, null))
        return self._split(failed, "out_of_memory")

    def _free_allocations(self) -> None:
        for pointer in self.allocated:
            self._libc("free", pointer)

    def _elements(self, buffer: ir.Value, rank: int) -> ir.Value:
        """The number of elements of an XLA_FFI_Buffer of rank `rank`."""
        dims = self._field(buffer, BUFFER_DIMS, PTR)
        count = i64(1)
        for axis in range(rank):
            count = self.b.mul(count, self._item(dims, axis, I64))
        return count

    def _widened(self, buffer: ir.Value, data: ir.Value, dtype: str, rank: int) -> ir.Value:
        """A malloc'd copy of an input held in NARROWER[dtype], converted to `dtype`."""
        elements = self._elements(buffer, rank)
        wide = self._malloc(elements, dtype)
        # a failed malloc is reported after all of them; convert nothing into NULL
        copy = self._split(self.b.icmp_unsigned("!=", wide, ir.Constant(PTR, None)), "widen")
        join = self.function.append_basic_block("widened")
        self.b.branch(join)
        self.b.position_at_end(copy)
        self._convert(data, wide, elements, dtype, narrow=False)
        self.b.branch(join)
        self.b.position_at_end(join)
        return wide

    def _convert(self, source: ir.Value, target: ir.Value, elements: ir.Value, dtype: str,
                 narrow: bool) -> None:
        """Copy `elements` values from `source` to `target`: from `dtype` to NARROWER[dtype]
        (`narrow`) or back. i64 → i32 keeps the low bits and f64 → f32 rounds, as JAX's
        canonicalisation of 64-bit values does."""
        b = self.b
        wide, small = MEMORY[dtype], MEMORY[NARROWER[dtype]]
        source_type, target_type = (wide, small) if narrow else (small, wide)
        with counted_loop(b, i64(0), elements) as i:
            value = b.load(b.gep(source, [i], source_etype=source_type), typ=source_type)
            if dtype == "f64":
                value = (b.fptrunc if narrow else b.fpext)(value, target_type)
            else:
                value = (b.trunc if narrow else b.sext)(value, target_type)
            b.store(value, b.gep(target, [i], source_etype=target_type))

    def _is_metadata_query(self) -> ir.Value:
        """Whether the frame's first extension is XLA's metadata query."""
        b = self.b
        extension = self._field(self.frame, FRAME_EXTENSION, PTR)
        present = self._split(b.icmp_unsigned("!=", extension, ir.Constant(PTR, None)),
                              "has_extension")
        absent = b.block
        join = self.function.append_basic_block("extension_known")
        b.branch(join)
        b.position_at_end(present)
        is_metadata = b.icmp_unsigned("==", self._field(extension, EXTENSION_TYPE, I32),
                                      ir.Constant(I32, METADATA_EXTENSION))
        b.branch(join)
        b.position_at_end(join)
        query = b.phi(I1)
        query.add_incoming(ir.Constant(I1, 0), absent)
        query.add_incoming(is_metadata, present)
        return query

    def _answer_metadata(self, block: ir.Block) -> None:
        """Fill XLA_FFI_Metadata: the API version, no traits."""
        b = self.b
        b.position_at_end(block)
        extension = self._field(self.frame, FRAME_EXTENSION, PTR)
        metadata = self._field(extension, EXTENSION_METADATA, PTR)
        version = self._address(metadata, METADATA_VERSION)
        major, minor = FFI_API_VERSION
        b.store(i64(VERSION_STRUCT_SIZE), version)
        b.store(ir.Constant(PTR, None), self._address(version, 8))
        b.store(ir.Constant(I32, major), self._address(version, 16))
        b.store(ir.Constant(I32, minor), self._address(version, 20))
        b.store(ir.Constant(I32, 0), self._address(metadata, METADATA_TRAITS))
        b.ret(ir.Constant(PTR, None))

    def _bind_sizes(self, buffers: list[ir.Value], data: list[ir.Value]) -> None:
        """Bind each dimension from the first axis named by it alone, or from the value (in
        XLA's buffer `data`) of the integer parameter that sizes it (the shapes were
        checked at trace time)."""
        for k, shape in enumerate(self.boundary.shapes):
            for axis, dim in enumerate(shape):
                name = str(dim)
                if not dim.is_const and name in dim.symbols() and name not in self.sizes:
                    sizes = self._field(buffers[k], BUFFER_DIMS, PTR)
                    self.sizes[name] = self._item(sizes, axis, I64)
        for name, k in self.boundary.value_dims:
            dtype = self.boundary.dtypes[k]
            dtype = NARROWER[dtype] if self.narrowed[k] else dtype
            value = self.b.load(data[k], typ=MEMORY[dtype])
            if name not in self.sizes:
                self.sizes[name] = value if dtype == "i64" else self.b.sext(value, I64)

    def _size(self, dim: Dim) -> ir.Value:
        return index_value(self.b, dim, self.sizes.__getitem__)

    # ------------------------------------------------------------ errors

    def _text(self, text: str) -> ir.Value:
        """A pointer to the NUL-terminated constant `text`."""
        encoded = bytearray(text.encode() + b"\0")
        name = f"text{len(self.module.globals)}"
        constant = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(encoded)), name=name)
        constant.global_constant, constant.linkage = True, "private"
        constant.initializer = ir.Constant(ir.ArrayType(I8, len(encoded)), encoded)
        return constant.bitcast(PTR)

    def _report_index_error(self, block: ir.Block, dims: ir.Value, count: int) -> None:
        """Return an OUT_OF_RANGE error with the failed check's message (one per site)."""
        b = self.b
        b.position_at_end(block)
        site = self._item(dims, count, I64)
        unknown = self.function.append_basic_block("unknown_site")
        switch = b.switch(site, unknown)
        for number, error_site in enumerate(self.program.sites):
            case = self.function.append_basic_block(f"site{number}")
            switch.add_case(i64(number), case)
            b.position_at_end(case)
            text, order = error_format(error_site)
            self._report(b.block, OUT_OF_RANGE, self._text(text),
                         [self._item(dims, count + slot, I64) for slot in order])
        unknown_text = self._text(f"index out of range in {self.program.name}")
        self._report(unknown, OUT_OF_RANGE, unknown_text, [])

    def _report_in(self, block: ir.Block, code: int, message: str,
                   values: list[ir.Value]) -> None:
        """Return the error `message` (each MARK in it printing the next of `values`) in
        `block`, then go on where the builder was."""
        here = self.b.block
        text = message.replace("%", "%%").replace(MARK, "%lld")
        self._report(block, code, self._text(text), values)
        self.b.position_at_end(here)

    def _report(self, block: ir.Block, code: int, text: ir.Value, values: list[ir.Value]) -> None:
        """In `block`: format `text` with `values`, return the API's error for it."""
        b = self.b
        b.position_at_end(block)
        message = alloca(b, ir.ArrayType(I8, MESSAGE_BYTES), "message")
        snprintf = self.module.globals.get("snprintf") or ir.Function(
            self.module, ir.FunctionType(I32, [PTR, I64, PTR], var_arg=True), name="snprintf")
        b.call(snprintf, [message, i64(MESSAGE_BYTES), text, *values])
        error_args = alloca(b, ir.ArrayType(I64, 4), "error_args")
        b.store(i64(ERROR_ARGS_SIZE), error_args)
        b.store(ir.Constant(PTR, None), self._address(error_args, 8))
        b.store(message, self._address(error_args, 16))
        b.store(ir.Constant(I32, code), self._address(error_args, 24))
        api = self._field(self.frame, FRAME_API, PTR)
        create = self._field(api, API_ERROR_CREATE, PTR)
        b.ret(b.call(FunctionPointer(create, ERROR_CREATE_TYPE), [error_args]))
