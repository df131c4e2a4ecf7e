"""MLIR export of `argsort` (`ir/ops_sort.py`): each element stored at its rank, in O(n²).

The upstream dialects have no sort, so the export counts: within each line along the axis
(an `scf.for` nest over the other axes), element i lands at position

    rank(i) = #{ j : x[j] comes before x[i] }
            = Σ_j [ x[j] ≺ x[i]  or  (x[j] ~ x[i] and j < i) ]

(≺ the sort order: by value, NaN after every number, reversed when descending; ~ a tie:
equal values, -0.0 with +0.0, NaN with NaN), and the permutation is p[rank(i)] = i. The
ranks of a line are distinct and cover 0..n-1, so every element of p is written once.
This costs O(n²) per line, where the native code (`runtime_library/sort.py`) merge-sorts in
O(n log n); it is the one stage that keeps the quadratic form.

    %rank = scf.for %j = %c0 to %n step %c1 iter_args(%count = %zero) -> (i64) {
      ... %before = arith.ori %less, %tie_first : i1
      %one = arith.extui %before : i1 to i64
      %next = arith.addi %count, %one : i64
      scf.yield %next : i64
    }
    memref.store %i_i64, %p[%rank_index] : memref<?xi64>
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import LOWERINGS
from reverie.compiler.export.mlir_scalar import Scalars
from reverie.compiler.export.mlir_writer import Tensor
from reverie.compiler.ir.core import Op
from reverie.compiler.ir.op_defs import dtype_class
from reverie.compiler.ir.ops_sort import ArgsortOp

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter


def _comes_before(s: Scalars, p: str, q: str) -> str:
    """p ≺ q ascending: p < q, or q is NaN and p is not (i1)."""
    if dtype_class(s.dtype) != "float":
        return s.cmp("slt", p, q)
    nan_after = s.logic("arith.andi", s.cmp("uno", q, q), s.cmp("ord", p, p))
    return s.logic("arith.ori", s.cmp("olt", p, q), nan_after)


def _ties(s: Scalars, p: str, q: str) -> str:
    """p ~ q: equal (-0.0 with +0.0), or both NaN (i1)."""
    if dtype_class(s.dtype) != "float":
        return s.cmp("eq", p, q)
    both_nan = s.logic("arith.andi", s.cmp("uno", p, p), s.cmp("uno", q, q))
    return s.logic("arith.ori", s.cmp("oeq", p, q), both_nan)


@LOWERINGS.register("argsort")
def _argsort(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w, view = ex.w, ArgsortOp(op)
    (x,), axis = args, view.axis
    s, count = Scalars(w, x.type.dtype), Scalars(w, "i64")
    out = w.alloc(op.result.type)
    size = w.extent(x.type.shape[axis])
    others = [w.extent(d) for a, d in enumerate(x.type.shape) if a != axis]

    def line(ivs: list[str], _: list[str]) -> list[str]:
        def place(i: str, __: list[str]) -> list[str]:
            mine = w.load(x, [*ivs[:axis], i, *ivs[axis:]])

            def step(j: str, carried: list[str]) -> list[str]:
                theirs = w.load(x, [*ivs[:axis], j, *ivs[axis:]])
                first, second = (mine, theirs) if view.descending else (theirs, mine)
                earlier = w.assign(f"arith.cmpi ult, {j}, {i} : index")
                tie_first = s.logic("arith.andi", _ties(s, mine, theirs), earlier)
                before = s.logic("arith.ori", _comes_before(s, first, second), tie_first)
                one = w.assign(f"arith.extui {before} : i1 to i64")
                return [count.op("arith.addi", carried[0], one)]

            (rank,) = w.scf_for(w.index(0), size, [(count.const(0), "i64")], step)
            w.store(w.to_i64(i), out, [*ivs[:axis], w.to_index(rank), *ivs[axis:]])
            return []

        w.scf_for(w.index(0), size, [], place)
        return []

    w.loop_nest(others, [], line)
    return [out]
