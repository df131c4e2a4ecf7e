"""Matrix products in the loop IR: a 2-D product is one `Matmul` statement, a batched one
(3-D views [B, M, K] @ [B, K, N], made by the contraction pass) a loop over the batch axis
whose body multiplies the 2-D slices in place, so every batch row runs in the matrix kernel.

    loop %b in 0..B { matmul out[b] = a[b] @ b[b] }
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Dim

from .emitter import Emitter
from .ir import Buffer, Matmul, View


def emit_matmul(em: Emitter, out: View, a: View, b: View, pack: Buffer) -> None:
    """`out = a @ b` for float views of rank 2, or of rank 3 with a shared batch axis."""
    if len(out.shape) == 2:
        em.stmts.append(Matmul(out, a, b, pack))
        return
    (row,), body = em.nest([(Dim.const(0), out.shape[0])])
    body.stmts.append(Matmul(*(_slice(view, row) for view in (out, a, b)), pack))


def _slice(view: View, row: Dim) -> View:
    """The 2-D view `view[row]` of a 3-D view."""
    return View(view.buffer, view.shape[1:], view.offset + row * view.strides[0],
                view.strides[1:])
