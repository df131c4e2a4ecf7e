"""Chapter 7, exercise 2: a tensor pass that folds `pow(x, 1)` to `x`.

`simplify` knows x * 1 = x (`compiler/transforms/simplify.py:_identity`) but not x ** 1.
The pass below copies the function (a pass never changes its input), replaces every use
of such a `pow` by its base, lets `simplify` remove what became dead, and ends like every
tensor pass with `after_pass` (the verifier). The rule it applies:

    x^1 = x   (for every x, including 0, negative values, inf and nan)
"""

from __future__ import annotations

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.scope import copy_block
from reverie.compiler.ir.tensor_verifier import after_pass
from reverie.compiler.transforms.simplify import constant_value, simplify


def _replace_uses(block: Block, replaced: dict[Value, Value]) -> None:
    for op in block.ops:
        op.operands = [replaced.get(v, v) for v in op.operands]
    block.results = [replaced.get(v, v) for v in block.results]


def fold_pow_one(fn: Function) -> Function:
    """A copy of `fn` with every `pow(x, 1)` of its body replaced by `x`."""
    folded = fn.derive(fn.name, copy_block(fn.body))
    replaced = {op.result: op.operands[0] for op in folded.body.ops
                if op.name == "pow" and constant_value(op.operands[1]) == 1}
    _replace_uses(folded.body, replaced)
    return after_pass(simplify(folded), "simplify")
