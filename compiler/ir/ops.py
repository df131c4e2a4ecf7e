"""The op table: every tensor IR op, one row each, and the shape of those rows.

Each `OpDef` says what an op is once: `attrs` declares its attributes and their types
(`attr_types.py`; the verifier checks every op against it), `infer` types its results from
its operand types and attributes (raising `ShapeError` when they do not fit), `evaluate`
runs it on NumPy arrays (the reference interpreter is a loop over this table), and its
attributes say how the other levels treat it: its `fusion` class (a loop nest of its own, a
strided view, or fused into its consumer's loop), whether it is `cheap` enough to recompute
in every nest, and which per-op rule tables it needs no entry in (`exempt`, with the
reason). The rules themselves live with the level that applies them, each level in one
`RuleTable` (`rule_table.py`) keyed by op name: reverse and forward mode and batching
(`transforms/*_rules.py`), loop lowering (`to_loops/emitter.py`,
`to_loops/lower_blocks.py`), scalar code (`backend/scalar_ops.py`) and the MLIR export
(`export/mlir_ops.py`). Elementwise ops are declared once in `elementwise.py`, reductions in
`reduce_kinds.py`, and those tables take their entries from the declarations.
`tests/tensor_ir/test_op_table.py` walks this table and fails when a table lacks an op that
is not exempt from it; at compile time a missing rule is a `CompileError` naming the op and
the table.

Groups, with an IR example each:
- constants         `%0 = const {value = 2.0} : f32`, `%1 = dim {dim = N} : i64`
- elementwise       in `elementwise.py`: `%2 = tanh %x : f32[N]`, `%3 = add %a, %b : f32[N]`
- broadcast         `%4 = broadcast %b {shape = [N, D]} : f32[N, D]`
- reductions        `%5 = reduce_sum %x {axes = [1]} : f32[N]`, `argmax {axis = 0}`
- linear algebra    `%6 = matmul %a, %b : f32[N, M]` (2-D, or 3-D batched; the front end
                    reshapes NumPy's 1-D and N-D operands to these)
- shape ops         in `ops_shape.py`: transpose, reshape, slice, pad, concat, roll, ...
- structured/loops  in `ops_structured.py`: generic (index notation), read, for
- adjoint-only      in `ops_adjoint.py`: generic_scatter, for_history, trip_dim
- control flow      in `ops_control.py`: if, while
- scans             in `ops_scan.py`: scan (cumulative sum and product)
- orderings         in `ops_sort.py`: argsort (stable, O(n log n))
- factorisations    in `ops_linalg.py`: cholesky, triangular_solve, solve, slogdet, eigh,
                    svd, qr (batched over leading axes)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Every group registers its ops into OPS when imported: this list is the whole op table.
from reverie.compiler.ir import (  # noqa: F401
    elementwise,
    ops_adjoint,
    ops_control,
    ops_core,
    ops_linalg,
    ops_scan,
    ops_shape,
    ops_sort,
    ops_structured,
)
from reverie.compiler.ir.op_defs import OPS
from reverie.compiler.ir.types import ShapeError, TensorType

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Block


def unary_builtins() -> tuple[str, ...]:
    """The elementwise ops users call by name, `f(x)` (`builtin` in their declaration)."""
    return tuple(name for name, op in OPS.items() if op.elementwise and op.elementwise.builtin)


def infer_types(
    name: str, operands: list[TensorType], attrs: dict[str, Any], regions: list[Block]
) -> list[TensorType]:
    """Result types of op `name` applied to `operands` (ShapeError if ill-typed)."""
    if name not in OPS:
        raise ShapeError(f"unknown op '{name}'")
    return OPS[name].infer(operands, attrs, regions)
