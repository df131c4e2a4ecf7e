"""A kernel's `bind` function: the part of the native call entry that differs per kernel.

The generic entry (`fastcall.py`) checks each argument's type, dtype, rank and layout
from the kernel's descriptor, then calls the kernel's `bind`, generated here from the
program's `CallBoundary` (`to_loops/boundary.py`) into the kernel's own module:

    int32_t <entry>_bind(const int64_t *const *shapes,  // shapes[k]: argument k's sizes
                         void *const *buffers,          // buffers[k]: its data
                         int64_t *dims,                 // out: the kernel's dimension sizes
                         int64_t *layout);              // out: workspace bytes, then the
                                                        //      outputs' sizes, axis by axis

It binds every dimension from the shapes (and from the values of integer parameters that
size a `for` loop), checks constant sizes, repeated names, sizes written as expressions
(`N + 1`) and the size constraints, checks that what the call allocates (each output, the
workspace: `allocation.py`) fits MAX_ALLOCATION_BYTES, computing it with every product
and sum checked for overflow, and writes the sizes the kernel and the entry need. It
returns 0, or 1 when the call must take the Python path (which explains the mismatch or
refuses the sizes). Pure integer code: no CPython call, no allocation. For
`fn f(x: f64[N], y: f64[N]) -> f64[N]` it is, in C:

    if (shapes[1][0] != shapes[0][0]) return 1;   // N bound by x, checked against y
    dims[0] = shapes[0][0];                       // N
    if (overflowed(8 * N) || 8 * N > MAX_ALLOCATION_BYTES) return 1;  // the output's bytes
    layout[0] = 0;                                // no workspace
    layout[1] = shapes[0][0];                     // the output's one axis: N
    return 0;
"""

from __future__ import annotations

from llvmlite import ir

from reverie.compiler.backend.allocation import MAX_ALLOCATION_BYTES, allocations
from reverie.compiler.backend.irutil import I32, I64, MEMORY, PTR, Overflow, i64, index_value
from reverie.compiler.call_boundary.fastcall_descriptor import BIND_SUFFIX
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import Program
from reverie.compiler.to_loops.boundary import CallBoundary

BIND_TYPE = ir.FunctionType(I32, [PTR, PTR, PTR, PTR])


def define_bind_function(module: ir.Module, entry_name: str, program: Program,
                         boundary: CallBoundary) -> None:
    """Add `@<entry_name>_bind` (see the module docstring) for `program`."""
    function = ir.Function(module, BIND_TYPE, name=entry_name + BIND_SUFFIX)
    function.attributes.add("nounwind")
    _BindBuilder(function, program, boundary).build()


class _BindBuilder:
    """Builds one `bind`: sizes from the shapes and values, checks, then the layout."""

    def __init__(self, function: ir.Function, program: Program,
                 boundary: CallBoundary) -> None:
        self.function, self.program, self.boundary = function, program, boundary
        self.shapes, self.buffers, self.dims, self.layout = function.args
        self.b = ir.IRBuilder(function.append_basic_block("entry"))
        self.mismatch = function.append_basic_block("mismatch")
        self.sizes: dict[str, ir.Value] = {}

    def _item(self, array: ir.Value, k: int, type_: ir.Type) -> ir.Value:
        """The address of item `k` of an array of `type_`."""
        return self.b.gep(array, [i64(k)], source_etype=type_)

    def _require(self, condition: ir.Value) -> None:
        """Go on if `condition` holds, else return 1 (fall back)."""
        ok = self.function.append_basic_block("ok")
        self.b.cbranch(condition, ok, self.mismatch)
        self.b.position_at_end(ok)

    def _bind(self, name: str, size: ir.Value) -> None:
        """Bind dimension `name`, or require it to have the size bound before."""
        if name in self.sizes:
            self._require(self.b.icmp_unsigned("==", self.sizes[name], size))
        else:
            self.sizes[name] = size

    def _size(self, dim: Dim) -> ir.Value:
        return index_value(self.b, dim, self.sizes.__getitem__)

    def build(self) -> None:
        b, boundary = self.b, self.boundary
        derived: list[tuple[ir.Value, Dim]] = []  # (size, expression): checked last
        for k, shape in enumerate(boundary.shapes):
            sizes = b.load(self._item(self.shapes, k, PTR), typ=PTR) if shape else None
            for axis, dim in enumerate(shape):
                size = b.load(self._item(sizes, axis, I64), typ=I64)
                if dim.is_const:
                    self._require(b.icmp_unsigned("==", size, i64(dim.value)))
                elif str(dim) in dim.symbols():
                    self._bind(str(dim), size)
                else:
                    derived.append((size, dim))
        for name, k in boundary.value_dims:
            dtype = boundary.dtypes[k]
            data = b.load(self._item(self.buffers, k, PTR), typ=PTR)
            value = b.load(data, typ=MEMORY[dtype])
            self._bind(name, value if dtype == "i64" else b.sext(value, I64))
        for size, dim in derived:
            self._require(b.icmp_unsigned("==", size, self._size(dim)))
        for dim in boundary.constraints:
            self._require(b.icmp_signed(">=", self._size(dim), i64(0)))
        self._write_layout()
        b.ret(ir.Constant(I32, 0))
        b.position_at_end(self.mismatch)
        b.ret(ir.Constant(I32, 1))

    def _write_layout(self) -> None:
        """The kernel's dimension sizes, the workspace bytes and the outputs' sizes, once
        each output and the workspace is known to need at most MAX_ALLOCATION_BYTES (every
        product and sum checked for overflow: the Python path explains a refusal)."""
        b, program = self.b, self.program
        for k, symbol in enumerate(program.symbols):
            b.store(self.sizes[symbol], self._item(self.dims, k, I64))
        overflow = Overflow()
        needed = [index_value(b, allocation.nbytes, self.sizes.__getitem__, overflow)
                  for allocation in allocations(program)]  # the outputs, then the workspace
        allowed = b.not_(overflow.flag)
        for nbytes in needed:
            allowed = b.and_(allowed, b.icmp_unsigned("<=", nbytes, i64(MAX_ALLOCATION_BYTES)))
        self._require(allowed)
        b.store(needed[-1], self._item(self.layout, 0, I64))
        shapes = [dim for buffer in program.outputs for dim in buffer.shape]
        for k, dim in enumerate(shapes, start=1):
            b.store(self._size(dim), self._item(self.layout, k, I64))
