"""Small llvmlite helpers shared by the code generators: types, constants, counted loops.

    with counted_loop(builder, lo, hi) as i:   # for (i = lo; i < hi; i++)
        ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from reverie.compiler.backend.vector_width import vector_bits
from reverie.compiler.call_boundary.abi import ITEMSIZE
from reverie.compiler.ir.dims import CeilSqrt, Dim, FloorDiv, NonNegative
from reverie.compiler.ir.dtypes import NUMPY_DTYPES, STORAGE_DTYPES

I1, I8, I16, I32, I64 = (ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32),
                        ir.IntType(64))
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()

# register types (bool is i1; bf16 and f16 are f32s holding their values) and memory types
# (bool is one byte, as in NumPy; bf16 and f16 their 16 bits: `storage_conversions.py`)
REGISTER = {"f32": F32, "f64": F64, "bf16": F32, "f16": F32, "i32": I32, "i64": I64,
            "bool": I1}
MEMORY = {**REGISTER, "bf16": I16, "f16": I16, "bool": I8}
FLOATS = ("f32", "f64", *STORAGE_DTYPES)


VALUE_NAME_LIMIT = 64  # LLVM cuts local names at 1024 characters, which can merge two


def value_name(name: str) -> str:
    """A local value name for `name`, cut to VALUE_NAME_LIMIT characters: names only help
    reading the IR, and llvmlite numbers repeated ones (`x`, `x.1`), so they stay unique."""
    return name[:VALUE_NAME_LIMIT]


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


class Overflow:
    """Whether a checked size computation overflowed int64: `flag` is an i1, true once any
    product or sum made through `apply` overflowed (`index_value(..., overflow=...)`)."""

    def __init__(self) -> None:
        self.flag: ir.Value = ir.Constant(I1, 0)

    def apply(self, b: ir.IRBuilder, operation: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """`x op y` for `operation` "smul" or "sadd", through LLVM's overflow intrinsic."""
        pair_type = ir.LiteralStructType([I64, I1])
        checked = intrinsic(b.module, f"llvm.{operation}.with.overflow", pair_type, [I64, I64],
                            [I64])
        pair = b.call(checked, [x, y])
        self.flag = b.or_(self.flag, b.extract_value(pair, 1))
        return b.extract_value(pair, 0)


def index_value(b: ir.IRBuilder, dim: Dim, symbol: Callable[[str], ir.Value],
                overflow: Overflow | None = None) -> ir.Value:
    """A dimension expression as an i64 value; `symbol` gives the value of each name in it.
    With `overflow`, every product and sum is checked and `overflow.flag` says whether
    one overflowed (for sizes computed from a call's arguments, which may be anything)."""

    def multiply(x: ir.Value, y: ir.Value) -> ir.Value:
        return overflow.apply(b, "smul", x, y) if overflow else b.mul(x, y, flags=("nsw",))

    def add(x: ir.Value, y: ir.Value) -> ir.Value:
        return overflow.apply(b, "sadd", x, y) if overflow else b.add(x, y, flags=("nsw",))

    total = None
    for monomial, coeff in dim.terms:
        term = None if coeff == 1 and monomial else i64(coeff)
        for atom in monomial:
            value = _atom_value(b, atom, symbol, overflow)
            term = value if term is None else multiply(term, value)
        total = term if total is None else add(total, term)
    return total if total is not None else i64(0)


def _atom_value(b: ir.IRBuilder, atom: str | FloorDiv | NonNegative | CeilSqrt,
                symbol: Callable[[str], ir.Value], overflow: Overflow | None) -> ir.Value:
    """One factor of a monomial: a name, `floor(n / d)`, `max(e, 0)` or `ceil_sqrt(e)`."""
    if isinstance(atom, FloorDiv):
        numerator = index_value(b, atom.numerator, symbol, overflow)
        if atom.denominator & (atom.denominator - 1) == 0:  # 2^k: an arithmetic shift
            # floors for negative numerators too, in one instruction instead of five (the
            # workspace's 64-byte alignment emits hundreds of these per gradient module)
            return b.ashr(numerator, i64(atom.denominator.bit_length() - 1))
        divisor = i64(atom.denominator)
        quotient = b.sdiv(numerator, divisor)
        negative_rest = b.icmp_signed("<", b.srem(numerator, divisor), i64(0))
        return b.sub(quotient, b.zext(negative_rest, I64))
    if isinstance(atom, NonNegative):
        operand = index_value(b, atom.operand, symbol, overflow)
        return b.select(b.icmp_signed("<", operand, i64(0)), i64(0), operand)
    if isinstance(atom, CeilSqrt):
        return _ceil_sqrt(b, index_value(b, atom.operand, symbol, overflow))
    return symbol(atom)


def _ceil_sqrt(b: ir.IRBuilder, operand: ir.Value) -> ir.Value:
    """The least s ≥ 0 with s² ≥ max(operand, 0): ⌈√x⌉ in f64, then corrected by one either
    way so it is exact (the f64 estimate is off by at most 1 below 2⁵²). The squares are
    compared unsigned: s² < 2⁶⁴ for every x < 2⁶³, while it may pass 2⁶³ - 1."""
    x = b.select(b.icmp_signed("<", operand, i64(0)), i64(0), operand)
    sqrt = b.module.declare_intrinsic("llvm.sqrt", [F64])
    ceil = b.module.declare_intrinsic("llvm.ceil", [F64])
    s = b.fptosi(b.call(ceil, [b.call(sqrt, [b.sitofp(x, F64)])]), I64)
    below = b.sub(s, i64(1))
    too_big = b.and_(b.icmp_signed(">", s, i64(0)),
                     b.icmp_unsigned(">=", b.mul(below, below), x))
    s = b.sub(s, b.zext(too_big, I64))
    return b.add(s, b.zext(b.icmp_unsigned("<", b.mul(s, s), x), I64))


def constant(dtype: str, value: float | int | bool) -> ir.Constant:
    """A register constant of `dtype` (a bf16/f16 one rounded to the type, as NumPy does)."""
    if dtype in STORAGE_DTYPES:
        value = float(np.asarray(value, dtype=NUMPY_DTYPES[dtype]))
    if dtype in FLOATS:
        return ir.Constant(REGISTER[dtype], float(value))
    return ir.Constant(REGISTER[dtype], int(value))


@functools.cache
def vector_lanes(dtype: str) -> int:
    """Elements of `dtype` in one vector of the width kernels are generated for
    (`vector_width.vector_bits`: the host's widest, or REVERIE_VECTOR_BITS)."""
    return vector_bits(llvm.get_host_cpu_features()) // (8 * ITEMSIZE[dtype])


def vectorize_width_hint(module: ir.Module, width: int) -> ir.Value:
    """Loop metadata asking the vectoriser for `width` lanes (a fresh loop id each time)."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"),
                                ir.Constant(I32, width)])
    tag = module.add_metadata([ir.MetaDataString(module, f"rv.loop.{len(module.metadata)}")])
    loop_id = module.add_metadata([tag, hint])
    loop_id.operands = (loop_id, *loop_id.operands)
    return loop_id


def alias_scopes(module: ir.Module, names: list[str]) -> list[tuple[ir.Value, ir.Value]]:
    """Scoped-noalias metadata for memory regions known never to overlap, one per name:
    for region k, the `alias.scope` list naming its scope and the `noalias` list naming
    every other region's. Tagged loads and stores of different regions are then known to
    be independent (LLVM's vectoriser needs no run-time overlap checks between them).
    Scopes and their domain are named by strings, unique within the module."""
    domain = module.add_metadata([ir.MetaDataString(module, "rv.buffers")])
    scopes = [module.add_metadata([ir.MetaDataString(module, f"rv.{k}.{name}"), domain])
              for k, name in enumerate(names)]
    return [(module.add_metadata([scope]),
             module.add_metadata([other for other in scopes if other is not scope]))
            for scope in scopes]


def smaller(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The smaller of the signed integers x and y."""
    return builder.select(builder.icmp_signed("<", x, y), x, y)


@contextmanager
def counted_loop(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value, step: int = 1,
                 loop_id: ir.Value | None = None) -> Iterator[ir.Value]:
    """Emit `for (i = lo; i < hi; i += step)`; the body is whatever the with-block emits.
    `loop_id` is optional `llvm.loop` metadata (see `vectorize_width_hint`)."""
    function = builder.function
    before = builder.block
    header = function.append_basic_block("loop")
    body = function.append_basic_block("body")
    done = function.append_basic_block("done")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64, "i")
    index.add_incoming(lo, before)
    builder.cbranch(builder.icmp_signed("<", index, hi), body, done)
    builder.position_at_end(body)
    yield index
    following = builder.add(index, i64(step), "i.next", flags=("nsw",))
    index.add_incoming(following, builder.block)
    back_edge = builder.branch(header)
    if loop_id is not None:
        back_edge.set_metadata("llvm.loop", loop_id)
    builder.position_at_end(done)


class FunctionPointer:
    """A function used as a value, typed as an opaque `ptr` (llvmlite would print a typed
    function pointer), e.g. the chunk function given to the worker pool; also callable with
    `IRBuilder.call` when `pointer` is a loaded address."""

    def __init__(self, pointer: ir.Value, function_type: ir.FunctionType) -> None:
        self.pointer, self.function_type, self.type = pointer, function_type, PTR

    def get_reference(self) -> str:
        return self.pointer.get_reference()


def alloca(builder: ir.IRBuilder, type_: ir.Type, name: str = "") -> ir.Value:
    """A stack slot typed as an opaque `ptr` (llvmlite would print a typed `double*`)."""
    slot = builder.alloca(type_, name=value_name(name))
    slot.type = PTR
    return slot


def type_suffix(type_: ir.Type) -> str:
    """The mangling of a type in intrinsic names: `f32`, `i64`, `v8f32`."""
    if isinstance(type_, ir.VectorType):
        return f"v{type_.count}{type_suffix(type_.element)}"
    if isinstance(type_, ir.IntType):
        return f"i{type_.width}"
    return "f32" if isinstance(type_, ir.FloatType) else "f64"


def intrinsic(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type],
              overloads: list[ir.Type] | None = None) -> ir.Function:
    """Declare (once) an LLVM intrinsic, mangled on `overloads` (default: the result type):
    `intrinsic(m, "llvm.smax", I64, [I64, I64])` is `@llvm.smax.i64`."""
    full = ".".join([name] + [type_suffix(t) for t in (overloads or [result])])
    if full in module.globals:
        return module.globals[full]
    return ir.Function(module, ir.FunctionType(result, args), name=full)


class ProductBuilder:
    """What a matrix kernel's body builder needs (gemm.py's `_GemmBuilder`): the element
    type and its vector, an `entry` block for stack slots and a `start` block where the body
    begins, the product's 13 arguments by name (`M, N, K, A, sa0, sa1, B, sb0, sb1, C, sc0,
    sc1, pack`: C = A @ B, strides in elements), and typed element access."""

    def __init__(self, function: ir.Function, dtype: str) -> None:
        self.function = function
        self.t = REGISTER[dtype]
        self.lanes = vector_lanes(dtype)
        self.vec = ir.VectorType(self.t, self.lanes)
        self.size = ITEMSIZE[dtype]
        self.module = function.module
        self.allocas = ir.IRBuilder(function.append_basic_block("entry"))
        self.start = function.append_basic_block("start")
        self.b = ir.IRBuilder(self.start)
        (self.m, self.n, self.k, self.a, self.sa0, self.sa1, self.bm, self.sb0, self.sb1,
         self.c, self.sc0, self.sc1, self.pack) = function.args

    def at(self, base: ir.Value, offset: ir.Value) -> ir.Value:
        """The address of element `offset` of `base`."""
        return self.b.gep(base, [offset], source_etype=self.t, inbounds=True)

    def load(self, base: ir.Value, offset: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        """Element `offset` of `base` (or a `type_` value there), aligned to the element."""
        value = self.b.load(self.at(base, offset), typ=type_ or self.t)
        value.align = self.size
        return value

    def store(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        self.b.store(value, self.at(base, offset)).align = self.size
