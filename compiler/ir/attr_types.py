"""Attribute schemas: the types an op's attributes must have, and the check of one op.

Each row of the op table declares its attributes as type hints (`OpDef.attrs`):

    register("transpose", ..., attrs={"perm": Sequence[int]})
    register("read", ..., attrs={"modes": Sequence[Mode], "label": NotRequired[str]})

`NotRequired[X]` marks an attribute that may be absent. The hints understood are classes
(`int` accepts NumPy integers but never a bool; `float` accepts any real number), `X | Y`,
`None`, `Literal[...]`, `Sequence[X]` (a list or a tuple of X) and `tuple[X, Y, ...]` (a
list or tuple of that length). `attribute_errors(schema, attrs)` lists what is wrong:
missing, unexpected and ill-typed attributes; the verifier raises them as VerifyError.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, Union, get_args, get_origin

import numpy as np

from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import DTYPES

Range = tuple[str, Dim, Dim]                        # an index variable: `i in 0..N`
Mode = Literal["direct", "zero", "checked"]         # how `read` treats an index (ops_structured)
DType = Literal[DTYPES]                             # an element type name: `f32`
ReduceKind = Literal["sum", "prod", "max", "min"]   # a reduction (`reduce_kinds.py`)
Label = NotRequired[str]                            # the tensor named in index errors
Schema = Mapping[str, Any]


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` has the type `hint` (one of the hints in the module docstring)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is None or hint is type(None):
        return value is None
    if origin is None:
        if hint is int:
            return isinstance(value, int | np.integer) and not isinstance(value, bool)
        if hint is float:
            return isinstance(value, int | float | np.integer | np.floating) and \
                not isinstance(value, bool)
        return isinstance(value, hint)
    if origin is Union or origin is types.UnionType:
        return any(conforms(value, a) for a in args)
    if origin is Literal:
        return isinstance(value, str | int) and not isinstance(value, bool) and value in args
    if not isinstance(value, list | tuple):
        return False
    if origin is Sequence or (origin is tuple and args[-1:] == (...,)):
        return all(conforms(v, args[0]) for v in value)
    if origin is tuple:
        return len(value) == len(args) and all(map(conforms, value, args))
    raise TypeError(f"attribute schemas do not support the hint {hint}")


def hint_name(hint: Any) -> str:
    """A hint as written in a schema: `Sequence[int]`, not `collections.abc.Sequence[int]`."""
    return re.sub(r"[\w.]+\.(\w+)", r"\1", hint.__name__ if isinstance(hint, type) else str(hint))


def _required(hint: Any) -> tuple[Any, bool]:
    """The hint without `NotRequired`, and whether the attribute must be present."""
    if get_origin(hint) is NotRequired:
        return get_args(hint)[0], False
    return hint, True


def attribute_errors(schema: Schema, attrs: Mapping[str, Any]) -> list[str]:
    """What is wrong with `attrs` under `schema`, one message per attribute."""
    errors = [f"unexpected attribute '{name}'" for name in attrs if name not in schema]
    for name, declared in schema.items():
        hint, required = _required(declared)
        if name not in attrs:
            if required:
                errors.append(f"missing attribute '{name}' ({hint_name(hint)})")
        elif not conforms(attrs[name], hint):
            errors.append(f"attribute '{name}' = {attrs[name]!r} is not {hint_name(hint)}")
    return errors
