"""`ModuleLowering`: AST → typed tensor IR for every function of one parsed module.

Consumes a parsed `ast.Module` (checked by `dsl.check` at construction, with the built-in
names in `RESERVED`, which no user function may take); produces one IR
`Function` per (function, float dtype) specialisation, cached, simplified and verified.
Calls to user functions are inlined, so each specialisation is one flat SSA graph.
`max_iterations` is the iteration limit every `while` gets (default: REVERIE_MAX_ITERATIONS).
"""

from __future__ import annotations

from reverie.compiler.collector import collector_paused
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.iteration_limit import max_iterations as resolve_max_iterations
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw
from reverie.compiler.ir.types import TensorType
from reverie.compiler.lower.base import Specialisation
from reverie.compiler.lower.builder import BlockBuilder
from reverie.compiler.lower.builtins import BINARY_BUILTINS, BUILTINS, CASTS
from reverie.compiler.lower.dim_expressions import (
    default_float_of,
    is_dim_scalar,
    return_types,
    type_of,
    unbindable_dims,
)
from reverie.compiler.lower.lowerer import Lowerer
from reverie.compiler.lower.values import ExprValue
from reverie.compiler.transforms.simplify import simplify
from reverie.dsl import ast
from reverie.dsl.check import check_module
from reverie.dsl.diagnostics import (
    Diagnostic,
    ParseError,
    TypeCheckError,
    error_at,
    in_source_order,
)

# Every built-in name, read off the built-ins the lowering implements (the elementwise ones
# come from the op table), so a new one is listed without a change here; and `bool`, a
# dtype name that is no function. A generated kernel avoids them all (`rv.trace` renames
# a kernel `exp` to `exp_`: its body may call the built-in).
RESERVED = frozenset(BUILTINS) | frozenset(BINARY_BUILTINS) | {"bool"}
# The names no user function may take: the casts and `bool`, which name dtypes. A user
# function named like any other built-in shadows it in its module, as a Python `def`
# shadows a built-in (calls reach user functions before built-ins), so a program that
# defined `norm` or `gamma` keeps working when the language gains a built-in of that name.
DTYPE_NAMES = frozenset(CASTS) | {"bool"}


def _require_bindable(fn: ast.FunctionDef, types: list[TensorType], values: list[str]) -> None:
    """A TypeCheckError at the first parameter with a dimension no call can bind."""
    for name, index, dim in unbindable_dims([t.shape for t in types], values):
        param = fn.params[index]
        raise error_at(param.span, f"dimension {name} can never be bound: it appears only in "
                                   f"'{dim}' of parameter '{param.name}', which a call "
                                   f"cannot solve for {name}; give {name} an axis of its own "
                                   f"or pass it as an i64 parameter")


def with_type_errors(error: ParseError, max_iterations: int | None = None) -> ParseError:
    """Syntax error `error` with the type errors of the functions that parsed (its
    `partial` module) beside its own, in source order, so that one compile reports both;
    a call to a function that holds a syntax error (`error.broken`) is not one of them."""
    if error.partial is None:
        return error
    try:
        ModuleLowering(error.partial, max_iterations).check_all("f32")
    except TypeCheckError as found:
        calls = tuple(f"unknown function '{name}'" for name in error.broken)
        extra = [d for d in found.diagnostics if not (calls and d.message.startswith(calls))]
        return ParseError(in_source_order(error.diagnostics + extra), error.source,
                          error.filename)
    return error


class ModuleLowering:
    """Lowers functions of one parsed module, caching specialisations by float dtype."""

    def __init__(self, module: ast.Module, max_iterations: int | None = None) -> None:
        self.module = module
        self.max_iterations = resolve_max_iterations(max_iterations)
        check_module(module, DTYPE_NAMES)
        self.functions = {f.name: f for f in module.functions}
        self._cache: dict[tuple[str, str], Function] = {}

    def uses_float(self, name: str) -> bool:
        """Whether function `name` has `float` in its signature."""
        fn = self.functions[name]
        types = [p.type for p in fn.params] + return_types(fn.ret)
        return any(t.dtype == "float" for t in types)

    def specialise(self, name: str, float_dtype: str = "f32") -> Function:
        """The typed IR of function `name` with `float` meaning `float_dtype`."""
        key = (name, float_dtype)
        if key not in self._cache:
            try:
                with collector_paused():
                    self._cache[key] = self._lower_entry(self.functions[name], float_dtype)
            except TypeCheckError as e:
                raise e.with_source(self.module.source, self.module.filename) from None
        return self._cache[key]

    def check_all(self, float_dtype: str = "f32") -> None:
        """Lower every function; raise one TypeCheckError with the diagnostics of all of
        them, in source order (a mistake in an inlined callee is reported once)."""
        diagnostics: list[Diagnostic] = []
        for name in self.functions:
            try:
                self.specialise(name, float_dtype)
            except TypeCheckError as e:
                diagnostics += [d for d in e.diagnostics if d not in diagnostics]
        if diagnostics:
            raise TypeCheckError(in_source_order(diagnostics), self.module.source,
                                 self.module.filename)

    def _lower_entry(self, fn: ast.FunctionDef, float_dtype: str) -> Function:
        """Lower entry function `fn`: its parameters become the block's, its dimensions
        the function's (an i64 scalar parameter is also a dimension)."""
        dim_map: dict[str, Dim] = {}
        param_types = [type_of(p.type, float_dtype, dim_map, allow_new=True) for p in fn.params]
        block = Block(params=[Value(t, name=p.name) for t, p in zip(param_types, fn.params,
                                                                       strict=True)])
        specialisation = Specialisation(self.functions, self.max_iterations)
        lowerer = Lowerer(fn, specialisation, default_float_of([t.dtype for t in param_types]),
                          dim_map, BlockBuilder(block))
        value_dims = []
        for index, (param, value) in enumerate(zip(fn.params, block.params, strict=True)):
            if is_dim_scalar(value.type):
                value_dims.append((param.name, index))
                dim_map.setdefault(param.name, Dim.sym(param.name))
                lowerer.define_dim_scalar(param.name, dim_map[param.name], param.span)
            else:
                lowerer.define(param.name, ExprValue(value), param.span)
        _require_bindable(fn, param_types, [name for name, _ in value_dims])
        results = lowerer.coerce_return(lowerer.lower_body(), float_dtype)
        block.results = [val.value for val in results]
        function = Function(fn.name, block, [p.name for p in fn.params], list(dim_map), fn.span,
                            specialisation.constraints, value_dims)
        return after_pass(simplify(show_raw(function, "lower")), "simplify")
