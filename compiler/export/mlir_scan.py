"""MLIR export of `scan` (cumsum and cumprod, `ir/ops_scan.py`): `scf.for` with `iter_args`.

Consumes a `scan` op and its operand (a memref); emits a new buffer filled by an `scf.for`
nest over the other axes, inside which one `scf.for` runs along the scan's axis carrying
the running value as its `iter_args` (in f64 for f32 sums and products, the rule of
`ir/reduce_kinds.py`) and stores each partial result:

    %r = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f64) {
      %v = memref.load %x[%i, %k] : memref<?x?xf64>
      %s = arith.addf %acc, %v : f64
      memref.store %s, %y[%i, %k] : memref<?x?xf64>
      scf.yield %s : f64
    }

A reverse scan reads and writes position n - 1 - k at step k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import LOWERINGS, index_arith
from reverie.compiler.export.mlir_scalar import Scalars, cast, scalar_op
from reverie.compiler.export.mlir_writer import Tensor
from reverie.compiler.ir.core import Op
from reverie.compiler.ir.ops_scan import ScanOp
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter


@LOWERINGS.register("scan")
def _scan(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    w, scan = ex.w, ScanOp(op)
    (x,), axis = args, scan.axis
    dtype, reduction = x.type.dtype, REDUCE_KINDS[scan.kind]
    acc_dtype = reduction.accumulator_dtype(dtype)
    acc = Scalars(w, acc_dtype)
    out = w.alloc(op.result.type)
    size = w.extent(x.type.shape[axis])
    others = [w.extent(d) for a, d in enumerate(x.type.shape) if a != axis]

    def line(ivs: list[str], _: list[str]) -> list[str]:
        def step(k: str, carried: list[str]) -> list[str]:
            position = k
            if scan.reverse:
                position = index_arith(w, "subi", index_arith(w, "subi", size, w.index(1)), k)
            at = [*ivs[:axis], position, *ivs[axis:]]
            value = w.load(x, at)
            value = cast(w, value, dtype, acc_dtype)
            total = scalar_op(w, reduction.combine, [carried[0], value], acc_dtype)
            w.store(cast(w, total, acc_dtype, dtype), out, at)
            return [total]

        w.scf_for(w.index(0), size, [(acc.const(reduction.identity(acc_dtype)), acc.type)],
                  step)
        return []

    w.loop_nest(others, [], line)
    return [out]
