"""The loop pass `bf16_products`: matrix products of bf16 values read their bf16 buffers.

After `widen_storage` a bf16 `a @ b` is `matmul(cast(a → f32), cast(b → f32))`, and to_loops
stores each cast into an f32 temporary for an f32 `Matmul` (BLAS's sgemm or the own kernel).
Where the host has AVX512_BF16 and kernels use 512-bit vectors (`vdpbf16ps`, twice the f32
FMA rate: `runtime_library/gemm_bf16.py`), this pass points such a product at the bf16
buffers instead, so it calls `rv_gemm_bf16` and the conversion nests and their temporaries
are left unread (the `dead_code` pass after it removes them):

    for %i0 in 0..K { for %i1 in 0..N {          matmul t2 = a @ b{...}   # bf16 @ bf16 -> f32
      %0 = load b[%i0, %i1]                 =>
      %1 = cast %0 : f32
      store t0[%i0, %i1] = %1 } }
    matmul t2 = t1 @ t0{...}

A value computed in the kernel and rounded for a product (`widen_storage` rounds a product's
operands: the MLP's hidden layer, an adjoint) reaches the product through an f32 temporary
whose every store is `cast(cast(v → bf16) → f32)`; where such a temporary is read by
products only, it becomes a bf16 temporary storing the rounded value itself (the same
values, half the memory), so those products read bf16 too.

A product is rewritten only when both operands are views of such temporaries: a whole f32
temporary written once, by a nest of loops 0..size over its axes storing the cast of a load
of a bf16 view at a permutation of the same indices (or casts to bf16 and back of it, which
change no value: a transposed operand is rounded where to_loops stores it), from a buffer
no statement writes (or writes only in top-level statements before the nest); the operand's
view of the temporary must be a selection of its row-major axes, which then maps onto the
bf16 view.
Anything else keeps the f32 path, as do hosts without the instruction (or with
REVERIE_VECTOR_BITS=256) unless AMX tiles are emulated (REVERIE_AMX=emulate), and f16. The
choice follows the host features, vector width and tile setting that every cache key's host
description holds (`runtime/native/remembered.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from reverie.compiler.backend.matrix_tiles import matrix_tiles
from reverie.compiler.backend.storage_hardware import BF16_FEATURE
from reverie.compiler.backend.vector_width import AVX512, vector_bits
from reverie.compiler.ir.dims import Dim
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Buffer,
    ForLoop,
    Let,
    LinalgCall,
    Load,
    Loop,
    Matmul,
    Program,
    Sort,
    Stmt,
    Store,
    Var,
    View,
    WhileLoop,
    row_major_strides,
)


def bf16_products(host_features: Mapping[str, bool]) -> bool:
    """Whether a host with `host_features` runs bf16 products by `vdpbf16ps` or on AMX
    tiles (or their emulation: `matrix_tiles.py`)."""
    return bool(host_features.get(BF16_FEATURE) and host_features.get(AVX512)
                and vector_bits(host_features) >= 512) or matrix_tiles(host_features) != "off"


@functools.cache
def _host_has_bf16_products() -> bool:
    import llvmlite.binding as llvm

    return bf16_products(llvm.get_host_cpu_features())


def narrow_bf16_products(program: Program) -> Program:
    """`program` with its products of widened bf16 operands reading the bf16 buffers
    (unchanged on hosts without AVX512_BF16 at 512 bits)."""
    if not _host_has_bf16_products():
        return program
    sources = _widened_temporaries(program)
    narrowed = _narrowed_temporaries(program, sources)
    if not sources and not narrowed:
        return program
    body = _rewritten(program.body, sources, narrowed)
    if narrowed:
        replaced = {id(old): new for old, new, _ in narrowed.values()}
        program = dataclasses.replace(program, temps=[replaced.get(id(t), t)
                                                      for t in program.temps])
    return dataclasses.replace(program, body=body)


@dataclasses.dataclass(frozen=True)
class _Widened:
    """An f32 temporary holding the f32 values of a bf16 view: axis d of the temporary is
    axis `axes[d]` of `source`."""

    source: View
    axes: tuple[int, ...]

    def narrowed(self, view: View) -> View | None:
        """The bf16 view reading what `view` (of the temporary) reads, if it maps."""
        temporary_shape = tuple(self.source.shape[a] for a in self.axes)
        row_major = row_major_strides(temporary_shape)
        if view.offset != Dim.const(0):
            return None
        strides, used = [], set()
        for size, stride in zip(view.shape, view.strides, strict=True):
            if size == Dim.const(1):
                strides.append(Dim.const(0))
                continue
            axis = next((d for d, (r, s) in enumerate(zip(row_major, temporary_shape,
                                                          strict=True))
                         if d not in used and r == stride and s == size), None)
            if axis is None:
                return None
            used.add(axis)
            strides.append(self.source.strides[self.axes[axis]])
        return View(self.source.buffer, view.shape, self.source.offset, tuple(strides))


def _widened_temporaries(program: Program) -> dict[int, _Widened]:
    """By id of the temporary, the f32 temporaries that hold widened bf16 views."""
    writes = _writers(program.body)
    definitions = {s.var.name: s for s in program.walk() if isinstance(s, Let | Load)}
    found = {}
    for position, top in enumerate(program.body):
        for store, loops in _stores_in_nest(top, []):
            widened = _widening(store, loops, definitions)
            if widened is None:
                continue
            temporary, source = store.view.buffer, widened.source.buffer
            if writes.get(id(temporary)) != [position] or \
                    any(p is None or p >= position for p in writes.get(id(source), [])):
                continue
            found[id(temporary)] = widened
    return found


Narrowing = tuple[Buffer, Buffer, dict[str, Var]]  # the f32 temporary, its bf16 twin, and
# by the name of each f32 value stored into it, the bf16 value it widens


def _narrowed_temporaries(program: Program, sources: dict[int, _Widened]
                          ) -> dict[int, Narrowing]:
    """By id, the f32 temporaries holding only rounded bf16 values and read only as the
    operands of products whose other operand is bf16 too (or narrowed alike)."""
    definitions = {s.var.name: s for s in program.walk() if isinstance(s, Let)}
    candidates: dict[int, Narrowing] = {}
    for temporary in program.temps:
        if temporary.dtype == "f32" and id(temporary) not in sources:
            candidates[id(temporary)] = (temporary, Buffer(temporary.name, "bf16",
                                                           temporary.shape, "temp"), {})
    for stmt in program.walk():
        if isinstance(stmt, Store) and id(stmt.view.buffer) in candidates:
            rounded = _rounded_value(stmt.value, definitions)
            if rounded is None:
                candidates.pop(id(stmt.view.buffer))
            else:
                candidates[id(stmt.view.buffer)][2][stmt.value.name] = rounded
        elif not isinstance(stmt, Store | Matmul):
            for buffer in _read(stmt):
                candidates.pop(id(buffer), None)
    products = [s for s in program.walk() if isinstance(s, Matmul)]
    changed = True
    while changed:  # a product whose other operand stays f32 keeps its operands f32
        changed = False
        for product in products:
            views = (product.a, product.b)
            if any(id(v.buffer) in candidates for v in views) and \
                    any(_bf16_view(v, sources, candidates) is None for v in views):
                for v in views:
                    changed |= candidates.pop(id(v.buffer), None) is not None
        for product in products:  # and one written by a product is no rounded value
            changed |= candidates.pop(id(product.out.buffer), None) is not None
    operands = {id(v.buffer) for product in products for v in (product.a, product.b)}
    return {k: c for k, c in candidates.items() if k in operands and c[2]}


def _rounded_value(value: object, definitions: dict[str, Let]) -> Var | None:
    """The bf16 value that `value` widens, where `value` is `cast(v: bf16 → f32)`."""
    widening = definitions.get(value.name) if isinstance(value, Var) else None
    if widening is None or widening.op != "cast" or widening.var.dtype != "f32" or \
            not isinstance(widening.args[0], Var) or widening.args[0].dtype != "bf16":
        return None
    return widening.args[0]


def _read(stmt: Stmt) -> list[Buffer]:
    """The buffers a statement other than a store or a product reads (or may read)."""
    if isinstance(stmt, Load):
        return [stmt.view.buffer]
    if isinstance(stmt, Sort):
        return [stmt.out.buffer, stmt.keys.buffer, stmt.scratch]
    if isinstance(stmt, LinalgCall):
        return list(stmt.buffers)
    if isinstance(stmt, ForLoop | WhileLoop):
        return [b for state in stmt.states for b in (state.current, state.next, state.first,
                                                     state.second)]
    return []


def _stores_in_nest(stmt: Stmt, loops: list[Loop]) -> list[tuple[Store, list[Loop]]]:
    """The stores of a top-level nest of plain loops, each with the loops around it."""
    if isinstance(stmt, Store):
        return [(stmt, loops)]
    if isinstance(stmt, Loop):
        return [found for inner in stmt.body for found in _stores_in_nest(inner, [*loops, stmt])]
    return []


def _widening(store: Store, loops: list[Loop], definitions: dict[str, Stmt]) -> _Widened | None:
    """The widened bf16 view `store` copies whole into its f32 temporary, if it does."""
    temporary = store.view.buffer
    if temporary.role != "temp" or temporary.dtype != "f32" or not store.view.covers(temporary) \
            or len(temporary.shape) not in (2, 3) or not isinstance(store.value, Var):
        return None
    load, casts = definitions.get(store.value.name), 0
    while isinstance(load, Let) and load.op == "cast" and load.var.dtype in ("f32", "bf16") \
            and len(load.args) == 1 and isinstance(load.args[0], Var):
        load, casts = definitions.get(load.args[0].name), casts + 1
    if not (casts and isinstance(load, Load) and load.guard is None
            and load.view.buffer.dtype == "bf16"):
        return None
    variables = [Dim.sym(loop.var) for loop in loops]
    if len(loops) != len(temporary.shape) or list(store.index) != variables or any(
            loop.lo != Dim.const(0) or loop.hi != size
            for loop, size in zip(loops, temporary.shape, strict=True)):
        return None
    if sorted(map(str, load.index)) != sorted(map(str, variables)):
        return None
    return _Widened(load.view, tuple(list(load.index).index(v) for v in variables))


def _writers(stmts: list[Stmt]) -> dict[int, list[int | None]]:
    """By id of each buffer written, the top-level positions of the statements writing it
    (None for a write inside a `for` or `while` loop, or as loop state)."""
    writes: dict[int, list[int | None]] = {}
    for position, top in enumerate(stmts):
        repeated = isinstance(top, ForLoop | WhileLoop)
        for stmt in [top, *_nested(top)]:
            for buffer in _written(stmt):
                writes.setdefault(id(buffer), []).append(None if repeated else position)
    return writes


def _nested(stmt: Stmt) -> list[Stmt]:
    if not isinstance(stmt, BLOCK_STMTS):
        return []
    return [s for inner in stmt.body for s in [inner, *_nested(inner)]]


def _written(stmt: Stmt) -> list:
    if isinstance(stmt, Store):
        return [stmt.view.buffer]
    if isinstance(stmt, Matmul | Sort):
        return [stmt.out.buffer]
    if isinstance(stmt, LinalgCall):
        return list(stmt.written)
    if isinstance(stmt, ForLoop | WhileLoop):
        return [b for state in stmt.states for b in (state.current, state.next, state.first,
                                                     state.second)]
    return []


def _bf16_view(view: View, sources: dict[int, _Widened],
               narrowed: dict[int, Narrowing]) -> View | None:
    """The bf16 view a product reads for `view` of an f32 temporary, if there is one."""
    if id(view.buffer) in narrowed:  # the same layout, in bf16
        return dataclasses.replace(view, buffer=narrowed[id(view.buffer)][1])
    if id(view.buffer) in sources:
        return sources[id(view.buffer)].narrowed(view)
    return None


def _rewritten(stmts: list[Stmt], sources: dict[int, _Widened],
               narrowed: dict[int, Narrowing]) -> list[Stmt]:
    """`stmts` with each product whose operands both have bf16 views reading those, and
    each store into a narrowed temporary storing the bf16 value."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Matmul) and stmt.out.buffer.dtype == "f32":
            a, b = (_bf16_view(v, sources, narrowed) for v in (stmt.a, stmt.b))
            if a is not None and b is not None:
                stmt = dataclasses.replace(stmt, a=a, b=b)
        elif isinstance(stmt, Store) and id(stmt.view.buffer) in narrowed:
            _, new, rounded = narrowed[id(stmt.view.buffer)]
            stmt = Store(dataclasses.replace(stmt.view, buffer=new), stmt.index,
                         rounded[stmt.value.name])
        elif isinstance(stmt, BLOCK_STMTS):
            stmt = dataclasses.replace(stmt, body=_rewritten(stmt.body, sources, narrowed))
        out.append(stmt)
    return out
