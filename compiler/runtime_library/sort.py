"""A stable merge sort in LLVM IR: the run-time helper behind the loop IR's `Sort`.

Like the matrix product (`gemm.py`), the helper is its own small module, compiled once per
process when a kernel first calls it (`runtime/native/native_kernel.py`), and kernels call
it through the helper table (`backend/llvm.py`):

    void @rv_argsort(i64 n, ptr x, i64 stride, i64 dtype, i64 descending,
                     ptr out, i64 out_stride, ptr scratch)

writes to out[r * out_stride] (i64) the index of the element of the line x[i * stride]
that lands at position r once the line is sorted, in the order of `ir/ops_sort.py`
(torch.sort(stable=True)). `dtype` is the keys' element type, its position in
`abi.SORT_DTYPES`; `scratch` holds 4·n i64 (`loops/ir.py`'s SORT_SCRATCH_PER_KEY).

1. Every value becomes an i64 key whose signed order is the sort order, so one integer
   merge sort serves every dtype. A float's bits read as a signed integer are in order for
   positive values and reversed for negative ones, so the 63 bits after the sign are
   flipped when the sign is set; -0.0 becomes the key of +0.0 and every NaN the largest
   key (NaN after every number, all NaNs tied). Integers are their own keys. Descending
   takes ~key (= -key - 1: the reverse order, without overflow), so NaN comes first.
2. The (key, index) pairs are sorted by insertion sort in runs of RUN, then merged bottom
   up, runs of width w into runs of 2w, between two halves of the scratch. A merge takes
   the right element only when its key is strictly smaller, so ties keep their original
   order (stable). The merge step is branch-free: both candidates are loaded at clamped
   positions (never outside their runs) and one is selected.

n log₂(n / RUN) merge steps and at most n·RUN/2 insertion moves: O(n log n).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from llvmlite import ir

from reverie.compiler.backend.irutil import I32, I64, MEMORY, PTR, alloca, counted_loop, i64
from reverie.compiler.call_boundary.abi import SORT_DTYPES, SORT_HELPERS

RUN = 16  # the length of the runs sorted by insertion before the merges
SORT_TYPE = ir.FunctionType(ir.VoidType(), [I64, PTR, I64, I64, I64, PTR, I64, PTR])


def helper_module(name: str) -> str:
    """LLVM IR of the module defining the sort helper `name` (one of SORT_HELPERS)."""
    if name not in SORT_HELPERS:
        raise ValueError(f"no sort helper named {name!r}; expected one of {SORT_HELPERS}")
    module = ir.Module(name=name)
    function = ir.Function(module, SORT_TYPE, name=name)
    function.attributes.add("nounwind")
    _SortBuilder(function).build()
    return str(module)


def order_key(b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    """The i64 key of `value` whose signed order is the ascending sort order (step 1)."""
    if dtype in ("i32", "i64"):
        return b.sext(value, I64) if dtype == "i32" else value
    width = I32 if dtype == "f32" else I64
    bits = b.bitcast(value, width)
    sign_fill = b.ashr(bits, ir.Constant(width, width.width - 1))
    key = b.xor(bits, b.lshr(sign_fill, ir.Constant(width, 1)))
    key = b.select(b.fcmp_ordered("==", value, ir.Constant(value.type, 0.0)),
                   ir.Constant(width, 0), key)
    largest = ir.Constant(width, (1 << (width.width - 1)) - 1)
    key = b.select(b.fcmp_unordered("uno", value, value), largest, key)
    return b.sext(key, I64) if dtype == "f32" else key


class _SortBuilder:
    """Emits the body of the sort helper."""

    def __init__(self, function: ir.Function) -> None:
        self.allocas = ir.IRBuilder(function.append_basic_block("entry"))
        start = function.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        (self.n, self.x, self.stride, self.dtype, self.descending, self.out,
         self.out_stride, scratch) = function.args
        self.keys = [self.at(scratch, i64(0)), self.at(scratch, self.b.mul(self.n, i64(2)))]
        self.indices = [self.at(scratch, self.n), self.at(scratch, self.b.mul(self.n, i64(3)))]
        self.start = start

    # ------------------------------------------------------------ small pieces

    def at(self, base: ir.Value, offset: ir.Value, type_: ir.Type = I64) -> ir.Value:
        return self.b.gep(base, [offset], source_etype=type_, inbounds=True)

    def load(self, base: ir.Value, offset: ir.Value) -> ir.Value:
        return self.b.load(self.at(base, offset), typ=I64)

    def store(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        self.b.store(value, self.at(base, offset))

    def variable(self, initial: ir.Value, name: str, type_: ir.Type = I64) -> ir.Value:
        """A mutable stack slot (promoted to registers by LLVM's mem2reg)."""
        slot = alloca(self.allocas, type_, name)
        self.b.store(initial, slot)
        return slot

    def get(self, slot: ir.Value, type_: ir.Type = I64) -> ir.Value:
        return self.b.load(slot, typ=type_)

    def smin(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", a, c), a, c)

    @contextmanager
    def while_(self, condition: Callable[[], ir.Value]) -> Iterator[None]:
        """`while (condition()) { body }`; the body is what the with-block emits."""
        b = self.b
        header = b.function.append_basic_block("while")
        body = b.function.append_basic_block("while.body")
        done = b.function.append_basic_block("while.done")
        b.branch(header)
        b.position_at_end(header)
        b.cbranch(condition(), body, done)
        b.position_at_end(body)
        yield
        b.branch(header)
        b.position_at_end(done)

    # ------------------------------------------------------------ the sort

    def build(self) -> None:
        self.fill_keys()
        self.insertion_sort_runs()
        source = self.merge_passes()
        b = self.b
        indices = b.select(b.icmp_signed("==", source, i64(0)), *self.indices)
        with counted_loop(b, i64(0), self.n) as r:
            self.store(self.load(indices, r), self.out, b.mul(r, self.out_stride))
        b.ret_void()
        self.allocas.branch(self.start)

    def fill_keys(self) -> None:
        """keys[0][i] = key(x[i·stride]) (~key when descending), indices[0][i] = i."""
        b = self.b
        flip = b.select(b.icmp_signed("!=", self.descending, i64(0)), i64(-1), i64(0))
        done = b.function.append_basic_block("keys.done")
        switch = b.switch(self.dtype, done)
        for code, dtype in enumerate(SORT_DTYPES):
            block = b.function.append_basic_block(f"keys.{dtype}")
            switch.add_case(i64(code), block)
            b.position_at_end(block)
            with counted_loop(b, i64(0), self.n) as i:
                place = self.at(self.x, b.mul(i, self.stride), MEMORY[dtype])
                key = order_key(b, b.load(place, typ=MEMORY[dtype]), dtype)
                self.store(b.xor(key, flip), self.keys[0], i)
                self.store(i, self.indices[0], i)
            b.branch(done)
        b.position_at_end(done)

    def insertion_sort_runs(self) -> None:
        """Sort each run [lo, lo + RUN) of the first half in place (stable: a pair moves
        only past strictly larger keys)."""
        b = self.b
        keys, indices = self.keys[0], self.indices[0]
        with counted_loop(b, i64(0), self.n, step=RUN) as lo:
            hi = self.smin(b.add(lo, i64(RUN)), self.n)
            with counted_loop(b, b.add(lo, i64(1)), hi) as i:
                key, index = self.load(keys, i), self.load(indices, i)
                j = self.variable(i, "j")

                def larger_before() -> ir.Value:
                    at = self.get(j)
                    inside = b.icmp_signed(">", at, lo)
                    before = self.load(keys, b.select(inside, b.sub(at, i64(1)), lo))
                    return b.and_(inside, b.icmp_signed(">", before, key))

                with self.while_(larger_before):
                    at = self.get(j)
                    previous = b.sub(at, i64(1))
                    self.store(self.load(keys, previous), keys, at)
                    self.store(self.load(indices, previous), indices, at)
                    b.store(previous, j)
                self.store(key, keys, self.get(j))
                self.store(index, indices, self.get(j))

    def merge_passes(self) -> ir.Value:
        """Merge runs of width RUN, 2·RUN, ... until one run remains; the half (0 or 1)
        that then holds the sorted pairs."""
        b = self.b
        width = self.variable(i64(RUN), "width")
        source = self.variable(i64(0), "source")
        with self.while_(lambda: b.icmp_signed("<", self.get(width), self.n)):
            w, first = self.get(width), b.icmp_signed("==", self.get(source), i64(0))
            halves = [(b.select(first, self.keys[0], self.keys[1]),
                       b.select(first, self.indices[0], self.indices[1])),
                      (b.select(first, self.keys[1], self.keys[0]),
                       b.select(first, self.indices[1], self.indices[0]))]
            lo = self.variable(i64(0), "lo")
            with self.while_(lambda: b.icmp_signed("<", self.get(lo), self.n)):
                start = self.get(lo)
                mid = self.smin(b.add(start, w), self.n)
                end = self.smin(b.add(mid, w), self.n)
                self.merge(start, mid, end, *halves)
                b.store(end, lo)
            b.store(b.shl(w, i64(1)), width)
            b.store(b.xor(self.get(source), i64(1)), source)
        return self.get(source)

    def merge(self, lo: ir.Value, mid: ir.Value, hi: ir.Value,
              source: tuple[ir.Value, ir.Value], target: tuple[ir.Value, ir.Value]) -> None:
        """target[lo, hi) = the merge of the sorted runs source[lo, mid) and [mid, hi)."""
        b = self.b
        (keys, indices), (out_keys, out_indices) = source, target
        left, right = self.variable(lo, "left"), self.variable(mid, "right")
        last_left, last_right = b.sub(mid, i64(1)), b.sub(hi, i64(1))
        with counted_loop(b, lo, hi) as k:
            i, j = self.get(left), self.get(right)
            at_i, at_j = self.smin(i, last_left), self.smin(j, last_right)
            key_i, key_j = self.load(keys, at_i), self.load(keys, at_j)
            left_done = b.icmp_signed(">=", i, mid)
            take_right = b.and_(b.icmp_signed("<", j, hi),
                                b.or_(left_done, b.icmp_signed("<", key_j, key_i)))
            self.store(b.select(take_right, key_j, key_i), out_keys, k)
            self.store(b.select(take_right, self.load(indices, at_j), self.load(indices, at_i)),
                       out_indices, k)
            step = b.zext(take_right, I64)
            b.store(b.add(j, step), right)
            b.store(b.add(i, b.sub(i64(1), step)), left)
