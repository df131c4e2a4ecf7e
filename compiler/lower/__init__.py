"""AST → typed tensor IR, checking names, dtypes and shapes on the way.

Consumes a parsed `ast.Module`; `ModuleLowering.specialise` produces one IR `Function` per
(function, float dtype). Type checking happens here: every op is typed by the op table's
shape rule, and a `ShapeError` becomes a `TypeCheckError` pointing at the expression that
caused it (docs/language.md §3–8 for the typing rules, §2.5 for index notation).

Organisation (like MLIR Toy's MLIRGen): one `Lowerer` per function body being lowered
(the entry function, and each inlined callee) holds the environment (names, dimensions,
index variables) and the current `BlockBuilder`, into which it emits ops; a nested block
(a loop body, a `generic` body) is filled by switching the builder for a `with` block.

Its parts are classes (mixins), one per file, and each extends exactly the parts it calls,
so the inheritance graph is the dependency graph drawn below and every part reads its
state the same way (`self.builder`, `self.lookup(name)`, `self.tensor(node)`). No part
calls upward except through `lower_expr`, the expression dispatch they all recurse
through: declared abstract in `LowererBase`, defined by `Lowerer`, which combines the
parts. Methods that lower one kind of AST node are named `lower_<node>`.

Each file imports only from the files below it (no import sits inside a function:
`tests/architecture/test_layering.py`; the graph has no cycle:
`tests/architecture/test_import_cycles.py`):

    module_lowering.py ModuleLowering: one Lowerer per specialisation; cache, simplify
       │
    lowerer.py         Lowerer: the lower_expr dispatch; user calls, inlined
       ├─────────────────────┬────────────────────────┐
    statements.py          expressions.py           builtins.py ── arguments.py
    let, var, =, for,      names, operators,        built-ins and casts
    return, let (a, b)     @, .T, subscripts          │
       │   └──► updates.py: h[t] = e ──┐              │
       │                 ┌───┴─────────│─────┐        │
       └──► index_notation.py          └─► slices.py  scans.py
            let y[i] = ..., sum[k](...)  x[1:], xs[t] cumsum, sort, topk
                    │                        │        │  (as generics)
               triangular.py                 │        │
               sum[j in 0..i + 1]            │        │
                    │                        │        │
                    └────────────► dtypes.py ◄────────┘
                                   literals, weak dtypes, unify, broadcast
                                      │
                                   base.py: LowererBase (names, dimensions, current block)
                                      │
                       builder.py · dims.py · values.py
                       BlockBuilder · static dimensions, annotations · ExprValue, VarBinding
"""

from reverie.compiler.lower.lowerer import Lowerer
from reverie.compiler.lower.module_lowering import ModuleLowering

__all__ = ["Lowerer", "ModuleLowering"]
