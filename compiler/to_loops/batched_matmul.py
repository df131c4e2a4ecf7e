"""Matrix products in the loop IR: one `Matmul` statement each, 2-D or batched.

A 2-D product's views are [M, K] @ [K, N]; a batched one's (3-D views [B, M, K] @ [B, K, N],
made by the contraction pass) keep the batch axis first, and the one statement stands for
the B products `out[b] = a[b] @ b[b]`, which the matrix helper runs as one batch
(`runtime_library/gemm_batch.py`: a single `?gemm_batch` call of the BLAS, whose threads take whole
products, rather than B calls each split over the threads).

    matmul out = a @ b          # out: [B, M, N], a: [B, M, K], b: [B, K, N]
"""

from __future__ import annotations

from reverie.compiler.loops.ir import Buffer, Matmul, View
from reverie.compiler.to_loops.emitter import Emitter


def emit_matmul(em: Emitter, out: View, a: View, b: View, pack: Buffer) -> None:
    """`out = a @ b` for float views of rank 2, or of rank 3 with a shared batch axis."""
    em.stmts.append(Matmul(out, a, b, pack))
