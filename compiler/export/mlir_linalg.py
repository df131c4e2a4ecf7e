"""MLIR export of the linear-algebra ops (`ir/ops_linalg.py`): not lowered.

The upstream dialects the export targets (`linalg`, `scf`, `arith`, `math`, `memref`) have
no factorisation, solve or eigensolver, and the export calls no library, so a function
using `cholesky`, `triangular_solve`, `solve` (also behind `inv`), `slogdet` (also behind
`det`), `eigh`, `svd` (also behind `pinv` and the spectral and nuclear norms) or `qr`
is a CompileError at the op that names it; the native back end runs them through LAPACK
(`runtime_library/lapack.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.export.mlir_ops import LOWERINGS
from reverie.compiler.export.mlir_writer import Tensor
from reverie.compiler.ir.core import Op
from reverie.compiler.ir.ops_linalg import LINALG_OPS
from reverie.dsl.ast import NO_SPAN
from reverie.dsl.diagnostics import CompileError, error_at

if TYPE_CHECKING:
    from reverie.compiler.export.mlir import Exporter


@LOWERINGS.register(*LINALG_OPS)
def _not_lowered(ex: Exporter, op: Op, args: list[Tensor]) -> list[Tensor]:
    raise error_at(op.span or NO_SPAN, f"the MLIR export cannot lower '{op.name}': the "
                                       "upstream dialects have no matrix factorisations "
                                       "(use the native back end)", CompileError)
