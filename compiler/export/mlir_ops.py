"""MLIR export rules for the tensor ops without regions: one function per op group.

Consumes an IR `Op` and its operands as `Tensor`s (SSA scalars or memrefs); emits MLIR
through the exporter's writer and returns the results. Every result of rank > 0 is a new
buffer filled by one `linalg.generic` whose loops run over the result's shape:

- elementwise ops, `broadcast` and `transpose` reach their operands through affine
  indexing maps (`(d0, d1) -> (d1, d0)`), so the body only sees elements;
- the other shape ops compute source positions from `linalg.index` and `memref.load`
  them, guarded by `scf.if` wherever a position may fall outside (`pad`, `concat`,
  `dynamic_index`);
- reductions, `argmax`/`argmin` and `matmul` run an `scf.for` nest over the reduced
  axes inside the body, accumulating in registers (f32 sums and products in f64, bf16/f16
  ones as f32's: the rule of `ir/reduce_kinds.py`), rounded once to the result's dtype.

Rank-0 results skip the loops: the body's scalar is the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_scalar import Scalars, cast, scalar_op
from reverie.compiler.export.mlir_writer import REGISTER, MlirWriter, Tensor
from reverie.compiler.ir.core import Op
from reverie.compiler.ir.dims import num_elements
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import dtype_class
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS, REDUCE_OPS
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.types import TensorType
from reverie.compiler.ir.views import ArgReduceOp, ReduceOp, WindowOp

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter

Lowering = Callable[["Exporter", Op, list[Tensor]], list[Tensor]]
LOWERINGS: RuleTable[str, Lowering] = RuleTable(
    "the MLIR export", "the MLIR export has no rule for op '{op}'")

INDEX_ERROR = "index {value} is out of bounds for axis %d of '%s' with size {bound}"


def generate(w: MlirWriter, result: TensorType,
             element: Callable[[list[str]], str]) -> Tensor:
    """A tensor whose element at each position (index values) is `element(position)`."""
    if result.rank == 0:
        return Tensor(element([]), result)
    out = w.alloc(result)
    w.parallel(out, [], lambda indices, _: element(indices), indexed=True)
    return out


def identity_map(rank: int) -> list[str]:
    return [f"d{k}" for k in range(rank)]


def in_range(w: MlirWriter, index: str, size: str) -> str:
    """i1: 0 <= index < size, both `index` typed."""
    low = w.assign(f"arith.cmpi sge, {index}, {w.index(0)} : index")
    high = w.assign(f"arith.cmpi slt, {index}, {size} : index")
    return w.assign(f"arith.andi {low}, {high} : i1")


def all_of(w: MlirWriter, conditions: Sequence[str]) -> str:
    """The conjunction of i1 values (true when there are none)."""
    if not conditions:
        return w.const(True, "i1")
    result = conditions[0]
    for cond in conditions[1:]:
        result = w.assign(f"arith.andi {result}, {cond} : i1")
    return result


def guarded_load(w: MlirWriter, t: Tensor, indices: Sequence[str], ok: str) -> str:
    """The element at `indices` when `ok`, else 0; never reads when not `ok`."""
    return w.if_else(ok, REGISTER[t.type.dtype], lambda: w.load(t, indices),
                     lambda: w.typed_const(0, t.type.dtype))


def index_arith(w: MlirWriter, op: str, a: str, b: str) -> str:
    return w.assign(f"arith.{op} {a}, {b} : index")


# ---------------------------------------------------------------- constants


@LOWERINGS.register("const")
def _const(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    return [Tensor(ex.w.typed_const(op.attrs["value"], op.attrs["dtype"]), op.result.type)]


@LOWERINGS.register("dim")
def _dim(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    return [Tensor(ex.w.dim(op.attrs["dim"]), op.result.type)]


# ---------------------------------------------------------------- elementwise


def _elementwise(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """Scalars directly; tensors by a linalg.generic with identity maps."""
    w = ex.w
    dtype = op.operands[-1].type.dtype
    result = op.result.type
    if result.rank == 0:
        return [Tensor(scalar_op(w, op.name, [a.ssa for a in args], dtype, op.attrs), result)]
    out = w.alloc(result)
    maps = [(a, identity_map(result.rank)) for a in args]
    w.parallel(out, maps, lambda _, elements: scalar_op(w, op.name, elements, dtype, op.attrs))
    return [out]


LOWERINGS.register(*ELEMENTWISE)(_elementwise)


@LOWERINGS.register("broadcast")
def _broadcast(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    (x,) = args
    result = op.result.type
    if not x.is_buffer:
        if result.rank == 0:
            return [x]
        out = ex.w.alloc(result)
        ex.w.fill(out, x.ssa)
        return [out]
    offset = result.rank - x.type.rank
    exprs = []
    for axis, size in enumerate(x.type.shape):
        target = result.shape[axis + offset]
        stretched = size.is_const and size.value == 1 and not (target.is_const and
                                                               target.value == 1)
        exprs.append("0" if stretched else f"d{axis + offset}")
    out = ex.w.alloc(result)
    ex.w.parallel(out, [(x, exprs)], lambda _, elements: elements[0])
    return [out]


@LOWERINGS.register("transpose")
def _transpose(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    (x,) = args
    perm = op.attrs["perm"]
    exprs = [""] * len(perm)
    for out_axis, in_axis in enumerate(perm):
        exprs[in_axis] = f"d{out_axis}"
    out = ex.w.alloc(op.result.type)
    ex.w.parallel(out, [(x, exprs)], lambda _, elements: elements[0])
    return [out]


# ---------------------------------------------------------------- data movement


@LOWERINGS.register("reshape")
def _reshape(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """Row-major: flatten the result position, unflatten it in the operand's shape."""
    w = ex.w
    (x,) = args
    result = op.result.type

    def element(position: list[str]) -> str:
        flat = position[0] if position else w.index(0)
        for index, size in zip(position[1:], result.shape[1:], strict=True):
            flat = index_arith(w, "addi", index_arith(w, "muli", flat, w.extent(size)), index)
        source = []
        for size in reversed(x.type.shape[1:]):
            source.append(index_arith(w, "remui", flat, w.extent(size)))
            flat = index_arith(w, "divui", flat, w.extent(size))
        source = ([flat] + source[::-1]) if x.type.rank else []
        return w.load(x, source)

    return [generate(w, result, element)]


@LOWERINGS.register("slice")
def _slice(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w = ex.w
    (x,) = args

    def element(position: list[str]) -> str:
        source = []
        for index, start, step in zip(position, WindowOp(op).starts, WindowOp(op).steps,
                                      strict=True):
            scaled = index if step == 1 else index_arith(w, "muli", index, w.index(step))
            source.append(index_arith(w, "addi", scaled, w.dim_index(start)))
        return w.load(x, source)

    return [generate(w, op.result.type, element)]


@LOWERINGS.register("pad")
def _pad(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """out[i] = x[(i - start) / step] where that is a whole in-range position, else 0."""
    w = ex.w
    (x,) = args

    def element(position: list[str]) -> str:
        source, conditions = [], []
        for axis, (index, start, step) in enumerate(
                zip(position, WindowOp(op).starts, WindowOp(op).steps, strict=True)):
            offset = index_arith(w, "subi", index, w.dim_index(start))
            if step != 1:
                remainder = index_arith(w, "remsi", offset, w.index(step))
                conditions.append(w.assign(f"arith.cmpi eq, {remainder}, {w.index(0)} : index"))
                offset = index_arith(w, "divsi", offset, w.index(step))
            conditions.append(in_range(w, offset, w.extent(x.type.shape[axis])))
            source.append(offset)
        return guarded_load(w, x, source, all_of(w, conditions))

    return [generate(w, op.result.type, element)]


@LOWERINGS.register("concat")
def _concat(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """Along the axis, pick the operand whose range holds the position (an `scf.if` chain)."""
    w = ex.w
    axis = op.attrs["axis"]
    starts = [w.index(0)]
    for part in args[:-1]:
        starts.append(index_arith(w, "addi", starts[-1], w.extent(part.type.shape[axis])))

    def element(position: list[str]) -> str:
        def pick(k: int) -> str:
            source = list(position)
            source[axis] = index_arith(w, "subi", position[axis], starts[k])
            if k == len(args) - 1:
                return w.load(args[k], source)
            before_next = w.assign(f"arith.cmpi slt, {position[axis]}, {starts[k + 1]} : index")
            return w.if_else(before_next, REGISTER[op.result.type.dtype],
                             lambda: w.load(args[k], source), lambda: pick(k + 1))

        return pick(0)

    return [generate(w, op.result.type, element)]


@LOWERINGS.register("roll")
def _roll(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """out[i] = x[(i - shift) mod n] along the axis."""
    w = ex.w
    (x,) = args
    axis = op.attrs["axis"]
    size = w.extent(x.type.shape[axis])

    def element(position: list[str]) -> str:
        shifted = index_arith(w, "subi", position[axis], w.dim_index(op.attrs["shift"]))
        remainder = index_arith(w, "remsi", shifted, size)
        negative = w.assign(f"arith.cmpi slt, {remainder}, {w.index(0)} : index")
        wrapped = index_arith(w, "addi", remainder, size)
        source = list(position)
        source[axis] = w.assign(f"arith.select {negative}, {wrapped}, {remainder} : index")
        return w.load(x, source)

    return [generate(w, op.result.type, element)]


def checked_position(ex: Exporter, index: Tensor, size: TensorType, axis: int,
                     label: str) -> tuple[str, str]:
    """(index as `index`, i1 in range) for an integer subscript; reports it when outside."""
    w = ex.w
    as_i64 = w.as_i64(index)
    position = w.to_index(as_i64)
    ok = in_range(w, position, w.extent(size.shape[axis]))
    ex.fail_unless(ok, as_i64, w.dim(size.shape[axis]), INDEX_ERROR % (axis, label))
    return position, ok


@LOWERINGS.register("dynamic_index")
def _dynamic_index(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w = ex.w
    x, index = args
    axis = op.attrs["axis"]
    position, ok = checked_position(ex, index, x.type, axis, op.attrs["label"])

    def element(rest: list[str]) -> str:
        return guarded_load(w, x, rest[:axis] + [position] + rest[axis:], ok)

    return [generate(w, op.result.type, element)]


@LOWERINGS.register("dynamic_scatter")
def _dynamic_scatter(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w = ex.w
    g, index = args
    axis = op.attrs["axis"]
    position, _ = checked_position(ex, index, op.result.type, axis, op.attrs["label"])

    def element(target: list[str]) -> str:
        hit = w.assign(f"arith.cmpi eq, {target[axis]}, {position} : index")
        return guarded_load(w, g, target[:axis] + target[axis + 1:], hit)

    return [generate(w, op.result.type, element)]


# ---------------------------------------------------------------- reductions


def reduce_value(w: MlirWriter, kind: str, dtype: str, extents: Sequence[str],
                 element: Callable[[list[str]], str]) -> str:
    """Combine `element(indices)` over a loop nest with `kind` (sum, prod, max, min)."""
    reduction = REDUCE_KINDS[kind]
    acc_dtype = reduction.accumulator_dtype(dtype)
    s = Scalars(w, acc_dtype)

    def step(indices: list[str], accs: list[str]) -> list[str]:
        value = cast(w, element(indices), dtype, acc_dtype)
        return [scalar_op(w, reduction.combine, [accs[0], value], acc_dtype)]

    (total,) = w.loop_nest(extents, [(s.const(reduction.identity(acc_dtype)), s.type)], step)
    return cast(w, total, acc_dtype, dtype)


def split_position(kept: Sequence[int], rank: int, outer: list[str],
                   inner: list[str]) -> list[str]:
    """A full position from the kept axes' indices and the reduced axes' indices."""
    outer_it, inner_it = iter(outer), iter(inner)
    return [next(outer_it) if axis in kept else next(inner_it) for axis in range(rank)]


@LOWERINGS.register(*REDUCE_OPS)
def _reduce(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w = ex.w
    (x,) = args
    axes = op.attrs["axes"]
    kept = [a for a in range(x.type.rank) if a not in axes]
    extents = [w.extent(x.type.shape[a]) for a in range(x.type.rank) if a in axes]

    def element(outer: list[str]) -> str:
        return reduce_value(w, ReduceOp(op).kind, x.type.dtype, extents,
                            lambda inner: w.load(x, split_position(kept, x.type.rank,
                                                                    outer, inner)))

    return [generate(w, op.result.type, element)]


@LOWERINGS.register(*ArgReduceOp.NAMES)
def _arg_reduce(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """Index of the first extreme element (NaN counts as extreme, as in NumPy)."""
    w = ex.w
    (x,) = args
    axis = op.attrs["axis"]
    axes = list(range(x.type.rank)) if axis is None else [axis]
    kept = [a for a in range(x.type.rank) if a not in axes]
    extents = [w.extent(x.type.shape[a]) for a in axes]
    count = w.dim(num_elements(x.type.shape))
    nonempty = w.assign(f"arith.cmpi ne, {count}, {w.const(0, 'i64')} : i64")
    ex.fail_unless(nonempty, count, count, "argmax/argmin of an empty tensor")
    s = Scalars(w, x.type.dtype)
    counter = Scalars(w, "i64")
    is_float = dtype_class(x.type.dtype) == "float"
    predicate = {("argmax", True): "ogt", ("argmin", True): "olt",
                 ("argmax", False): "sgt", ("argmin", False): "slt"}[op.name, is_float]

    def element(outer: list[str]) -> str:
        def step(inner: list[str], accs: list[str]) -> list[str]:
            best, best_index, seen = accs
            value = w.load(x, split_position(kept, x.type.rank, outer, inner))
            better = s.cmp(predicate, value, best)
            if is_float:
                nan_first = s.logic("arith.andi", s.cmp("uno", value, value),
                                    s.cmp("ord", best, best))
                better = s.logic("arith.ori", better, nan_first)
            take = s.logic("arith.ori", better, counter.cmp("eq", seen, counter.const(0)))
            return [s.select(take, value, best), counter.select(take, seen, best_index),
                    counter.op("arith.addi", seen, counter.const(1))]

        inits = [(s.const(0), s.type), (counter.const(0), "i64"), (counter.const(0), "i64")]
        return w.loop_nest(extents, inits, step)[1]

    return [generate(w, op.result.type, element)]


@LOWERINGS.register("matmul")
def _matmul(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    """C[..., i, j] = sum over k of A[..., i, k] · B[..., k, j] (a batched product keeps its
    leading batch index in all three)"""
    w = ex.w
    a, b = args
    inner = [w.extent(a.type.shape[-1])]

    def element(position: list[str]) -> str:
        *batch, i, j = position

        def product(k: list[str]) -> str:
            return scalar_op(w, "mul", [w.load(a, [*batch, i, k[0]]),
                                        w.load(b, [*batch, k[0], j])], a.type.dtype)

        return reduce_value(w, "sum", a.type.dtype, inner, product)

    return [generate(w, op.result.type, element)]
