"""`rv.exp`, `rv.tanh`, ..., `rv.clamp`, and torch's `rv.where`, `rv.pow`, `rv.maximum`,
`rv.minimum`, `rv.max`, `rv.min` (`torch_functions.py`): the Tensor functions (docs/api.md §4).

The elementwise built-ins of docs/language.md §8 come from the op table
(`ops_kernels.UNARY_BUILTINS`, the rows flagged `builtin`): each is a function of
`FUNCTIONS`, which `reverie/__init__.py` serves as `rv.exp`, `rv.tanh`, ..., and a Tensor
method (`tensor.py`):

    t.exp(), rv.exp(t), np.exp(t)        # the same recorded kernel `exp_op`

Each takes a Tensor, a NumPy array or a number and returns a Tensor, from the `Tensor`
of `tensor.py` (the complete class: this module may be the first a program imports), and
on `rv.trace`'s stand-ins it records the built-in instead (their `__reverie_builtin__`).
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.runtime.tensors import operator_kernels as ops_kernels
from reverie.runtime.tensors import recorded_ops, torch_functions
from reverie.runtime.tensors.tensor import Tensor


def _elementwise_function(op: str) -> Callable[[object], Tensor]:
    """`rv.<op>(x)`: the built-in applied to a Tensor (or array, or number), recorded."""
    def function(x: object) -> Tensor:
        recorder = getattr(type(x), "__reverie_builtin__", None)  # rv.trace's stand-ins
        if recorder is not None:
            return recorder(x, op)
        return recorded_ops.unary(op, x)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = recorded_ops.builtin_doc(op)
    return function


FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    op: _elementwise_function(op) for op in ops_kernels.UNARY_BUILTINS}
FUNCTIONS.update(torch_functions.FUNCTIONS, clamp=recorded_ops.clamp)
