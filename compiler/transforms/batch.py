"""Batching as an IR → IR pass: `batch_function` (vmap over a leading batch axis).

Consumes a typed `Function` and the positions of parameters that gain a leading batch
axis of size B; produces one `Function` that runs the whole batch in a single call (never
a loop over the batch): every result gains the batch axis. It is how `is_grads_batched`
(the batch of a VJP) and Jacobians (the batch of a JVP or VJP over an identity) are built.

How a block is batched (`BlockBatch`), one op at a time in program order: an op none of
whose operands is batched is copied unchanged; otherwise its rule in `BATCH_RULES` emits
the batched form. A value is batched exactly when its rank is one more than in the
original block. Results that do not depend on a batched parameter are broadcast.

    f(x: f64[N], w: f64[N]) -> f64 = sum(x * w), batched over x
    func @f_batched(%x: f64[B, N], %w: f64[N]) -> f64[B] {
      %0 = broadcast %w {shape = [B, N]} : f64[B, N]
      %1 = mul %x, %0 : f64[B, N]
      %2 = reduce_sum %1 {axes = [1]} : f64[B]
      return %2
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw

# With batch_rules.py, these modules fill BATCH_RULES: importing this one gives the whole table
from reverie.compiler.transforms import batch_control, linalg_rules, scan_rules  # noqa: F401
from reverie.compiler.transforms.batch_rules import BATCH_RULES, BatchContext, lift
from reverie.compiler.transforms.simplify import simplify
from reverie.compiler.transforms.undim import undim_parameters


class BlockBatch:
    """The batched form of one block, emitted into `scope`; `args` bind its parameters
    (batched ones have one more leading axis, of size `size`)."""

    def __init__(self, scope: Scope, body: Block, args: Sequence[Value], size: Dim) -> None:
        self.scope = scope
        self.body = body
        self.size = size
        self.values: dict[Value, Value] = dict(zip(body.params, args, strict=True))

    def run(self) -> list[Value]:
        """Emit the batched ops; return the block's results (batched or not)."""
        for op in self.body.ops:
            self.scope.span = op.span
            operands = [self.values[v] for v in op.operands]
            flags = [new.type.rank != old.type.rank for old, new in zip(op.operands, operands,
                                                                         strict=True)]
            if not any(flags):
                new = self.scope.emit(op.name, operands, dict(op.attrs),
                                      [copy_block(r) for r in op.regions])
                results = list(new.results)
            else:
                rule = BATCH_RULES.lookup(op.name, op.span)
                ctx = BatchContext(self.scope, self.size, self.region)
                results = rule(ctx, op, operands, flags)
            for old, new in zip(op.results, results, strict=True):
                assert new.type.rank - old.type.rank in (0, 1), f"{op.name}: {new.type} for " \
                                                               f"{old.type}"
            self.values.update(zip(op.results, results, strict=True))
        return [self.values[v] for v in self.body.results]

    def region(self, body: Block, params: list[Value]) -> tuple[Scope, list[Value]]:
        """Batch region `body` into a fresh block with parameters `params`."""
        scope = Scope(Block(params=list(params)))
        return scope, BlockBatch(scope, body, params, self.size).run()


def _symbols(value: Any) -> set[str]:
    """Dimension names mentioned by an attribute value (Dims, nested in tuples/lists)."""
    if isinstance(value, Dim):
        return value.symbols()
    if isinstance(value, list | tuple):
        return set().union(*(_symbols(v) for v in value)) if value else set()
    return set()


def used_dimension_names(fn: Function) -> set[str]:
    """Every dimension name `fn` mentions: in its signature, types and attributes."""
    names = set(fn.dim_names)
    types = [p.type for p in fn.params]
    for op in fn.body.walk():
        types += [r.type for r in op.results]
        types += [p.type for region in op.regions for p in region.params]
        names |= _symbols(list(op.attrs.values()))
    names |= _symbols([d for t in types for d in t.shape])
    return names


def fresh_batch_dim(fn: Function, base: str = "B") -> Dim:
    """`B`, or `B1`, `B2`, … : the first such name `fn` does not use."""
    taken = used_dimension_names(fn)
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return Dim.sym(name)


def batch_function(fn: Function, batched: Sequence[int], *, size: Dim | None = None,
                   name: str | None = None) -> Function:
    """`fn` over a batch: parameters at `batched` and every result gain a leading axis.

    `size` is the batch size: by default a fresh dimension (`B`, or `B1`, … when `fn`
    already uses `B`), bound at call time from the batched arguments; it may also be any
    dimension expression over `fn`'s dimensions (e.g. `N * D` for a Jacobian).
    """
    if not batched:
        raise ValueError(f"batching {fn.name} needs at least one batched parameter")
    for i in batched:
        if not 0 <= i < len(fn.params):
            raise ValueError(f"{fn.name} has no parameter {i}")
    fn = undim_parameters(fn, batched)
    size = size if size is not None else fresh_batch_dim(fn)
    params = [Value(p.type.with_shape((size, *p.type.shape)) if i in batched else p.type,
                    name=n)
              for i, (p, n) in enumerate(zip(fn.params, fn.param_names, strict=True))]
    block = Block(params=params)
    scope = Scope(block, span=fn.span)
    results = BlockBatch(scope, fn.body, params, size).run()
    block.results = [lift(scope, size, new, new.type.rank != old.type.rank)
                     for new, old in zip(results, fn.body.results, strict=True)]
    new_dims = sorted(size.symbols() - set(fn.dim_names))
    out = fn.derive(name or f"{fn.name}_batched", block, new_dims=new_dims)
    simplify(show_raw(out, "batch"))
    return after_pass(out, "simplify")
