"""AST → tensor IR, checking names, dtypes and shapes on the way.

Consumes a parsed `ast.Module`; produces one IR `Function` per (function, float dtype)
specialisation. Type checking happens here: every op is typed by the op table's shape rule,
and a `ShapeError` becomes a `TypeCheckError` pointing at the expression that caused it.
Calls to user functions are inlined, so each specialisation is one flat SSA graph; a call
of the same callee on the same values in the same region is inlined once (`inlined`).

Typing rules (SPEC §2.1–2.3): literals, dimension names and index/loop variables are *weak*:
they take the dtype of the other operand. Mixing strong dtypes is an error with a cast
suggestion. Binary operators broadcast like NumPy, inserting explicit `broadcast` ops.

Expression lowering is in `lower_expr.py`, built-ins in `lower_builtins.py`, index notation
in `lower_index.py`; this file holds the shared context and statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reverie.dsl import ast
from reverie.dsl.diagnostics import TypeCheckError, did_you_mean, error_at

from .ir.core import Block, Function, Value
from .ir.dims import Dim
from .ir.scope import Scope
from .ir.types import FLOAT_DTYPES, ShapeError, TensorType
from .ir.verifier import after_pass, show_raw
from .transforms.simplify import simplify

# ---------------------------------------------------------------- values and scopes


@dataclass
class Val:
    """A lowered expression: an IR value, and whether its dtype is still weak."""

    value: Value
    weak: bool = False

    @property
    def type(self) -> TensorType:
        return self.value.type


@dataclass
class TupleVal:
    """A tuple expression or the result of a tuple-returning call."""

    elements: list[Val]


@dataclass
class VarSlot:
    """A `var`: its current value and fixed type."""

    current: Val
    declared_at: ast.Span


class Region(Scope):
    """A block being filled by the lowering: a `Scope` whose ops are typed at a source
    span, so an ill-typed op becomes a TypeCheckError pointing at the user's code."""

    def emit_at(self, span: ast.Span, name: str, operands: Sequence[Value],
                attrs: dict[str, Any] | None = None, regions: Sequence[Block] = ()) -> list[Value]:
        """Append an op; an ill-typed op becomes a TypeCheckError at `span`."""
        try:
            return self.emit(name, operands, attrs, regions, span).results
        except ShapeError as e:
            raise error_at(span, str(e)) from None

    def op_at(self, span: ast.Span, name: str, operands: Sequence[Value],
              attrs: dict[str, Any] | None = None, regions: Sequence[Block] = ()) -> Value:
        """`emit_at` for a one-result op."""
        (result,) = self.emit_at(span, name, operands, attrs, regions)
        return result


@dataclass
class Env:
    """Names visible while lowering one (possibly inlined) function body."""

    fn: ast.FunctionDef
    lowering: ModuleLowering
    default_float: str
    dim_map: dict[str, Dim]
    scopes: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    index_vars: dict[str, Val] = field(default_factory=dict)
    index_ctx: Any = None  # the active `IndexContext` while lowering index notation

    def lookup(self, name: str) -> Any:
        """The binding of `name` in the innermost scope that has it, else None."""
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def define(self, name: str, binding: Any, span: ast.Span) -> None:
        """Bind `name` in the innermost scope; rebinding a visible name is an error."""
        if self.lookup(name) is not None or name in self.dim_map:
            raise error_at(span, f"'{name}' is already defined; use 'var' for a value that "
                                 "changes, or choose another name")
        self.scopes[-1][name] = binding

    def visible_names(self) -> list[str]:
        """Every name a user could have meant (for did-you-mean)."""
        names = [n for scope in self.scopes for n in scope] + list(self.dim_map)
        return names + list(self.index_vars) + list(self.lowering.functions)

    def dim(self, name: str, span: ast.Span) -> Dim:
        """The entry function's Dim for this body's dimension `name`."""
        if name not in self.dim_map:
            raise error_at(span, f"unknown dimension '{name}'"
                                 + did_you_mean(name, self.dim_map))
        return self.dim_map[name]


# ---------------------------------------------------------------- dtype helpers


def is_dim_scalar(t: TensorType) -> bool:
    """An i64 scalar parameter is also a dimension: its value can size loops and slices."""
    return t.rank == 0 and t.dtype == "i64"


def define_dim_scalar(env: Env, region: Region, name: str, dim: Dim, span: ast.Span) -> None:
    """Bind parameter `name` as the value of dimension `dim` (a `dim` op)."""
    if env.lookup(name) is not None:
        raise error_at(span, f"'{name}' is already defined; choose another name")
    env.dim_map[name] = dim
    env.scopes[-1][name] = Val(region.op_at(span, "dim", [], {"dim": dim}))


def dim_of(val: Val) -> Dim | None:
    """The Dim an integer value statically equals (a `dim` or integer `const` op), if any."""
    op = val.value.op
    if op is not None and op.name == "dim":
        return op.attrs["dim"]
    if op is not None and op.name == "const" and val.type.is_int:
        return Dim.const(op.attrs["value"])
    return None


def default_float_of(dtypes: Sequence[str]) -> str:
    """The dtype a weak float literal takes: the function's float dtype if unique, else f32."""
    floats = {d for d in dtypes if d in FLOAT_DTYPES}
    return floats.pop() if len(floats) == 1 else "f32"


def type_of(type_expr: ast.TensorTypeExpr, float_dtype: str, dims: dict[str, Dim],
            allow_new: bool = False) -> TensorType:
    """The IR type of an annotation; `allow_new` binds unseen dimension names (parameters
    of the called function); elsewhere an unknown dimension is an error."""
    from .lower_expr import static_dim

    dtype = float_dtype if type_expr.dtype == "float" else type_expr.dtype
    shape = tuple(static_dim(d, dims, allow_new) for d in (type_expr.dims or []))
    return TensorType(dtype, shape)


# ---------------------------------------------------------------- module lowering


class ModuleLowering:
    """Lowers functions of one parsed module, caching specialisations by float dtype."""

    def __init__(self, module: ast.Module) -> None:
        from reverie.dsl.check import check_module

        self.module = module
        check_module(module)
        self.functions = {f.name: f for f in module.functions}
        self._cache: dict[tuple[str, str], Function] = {}

    def uses_float(self, name: str) -> bool:
        """Whether function `name` has `float` in its signature."""
        fn = self.functions[name]
        types = [p.type for p in fn.params] + _return_types(fn.ret)
        return any(t.dtype == "float" for t in types)

    def specialise(self, name: str, float_dtype: str = "f32") -> Function:
        """The typed IR of function `name` with `float` meaning `float_dtype`."""
        key = (name, float_dtype)
        if key not in self._cache:
            try:
                self._cache[key] = self._lower_entry(self.functions[name], float_dtype)
            except TypeCheckError as e:
                raise e.with_source(self.module.source, self.module.filename) from None
        return self._cache[key]

    def _lower_entry(self, fn: ast.FunctionDef, float_dtype: str) -> Function:
        from .lower_stmt import lower_body

        dim_map: dict[str, Dim] = {}
        param_types = [type_of(p.type, float_dtype, dim_map, allow_new=True) for p in fn.params]
        block = Block(params=[Value(t, name=p.name) for t, p in zip(param_types, fn.params,
                                                                       strict=True)])
        env = Env(fn, self, default_float_of([t.dtype for t in param_types]), dim_map)
        region = Region(block)
        value_dims = []
        for index, (param, value) in enumerate(zip(fn.params, block.params, strict=True)):
            if is_dim_scalar(value.type):
                value_dims.append((param.name, index))
                dim_map.setdefault(param.name, Dim.sym(param.name))
                define_dim_scalar(env, region, param.name, dim_map[param.name], param.span)
            else:
                env.define(param.name, Val(value), param.span)
        self.constraints: list[tuple[Dim, str]] = []
        self.inlined: dict[tuple, list[Val]] = {}
        results = lower_body(env, region, fn.body, fn)
        coerced = self.coerce_return(env, region, fn, results, float_dtype)
        block.results = [val.value for val in coerced]
        self.inlined = {}
        function = Function(fn.name, block, [p.name for p in fn.params], list(dim_map), fn.span,
                            self.constraints, value_dims)
        return after_pass(simplify(show_raw(function, "lower")), "simplify")

    def coerce_return(self, env: Env, region: Region, fn: ast.FunctionDef, results: list[Val],
                      float_dtype: str) -> list[Val]:
        """Check the returned values against the declared return type; settle weak dtypes."""
        from .lower_expr import convert_weak

        declared = _return_types(fn.ret)
        span = fn.ret.span if fn.ret is not None else fn.span
        if fn.ret is not None and len(declared) != len(results):
            raise error_at(span, f"'{fn.name}' declares {len(declared)} result(s) but "
                                 f"returns {len(results)}")
        out = []
        for i, val in enumerate(results):
            if fn.ret is None:
                out.append(convert_weak(env, region, val, None, span))
                continue
            want = type_of(declared[i], float_dtype, dict(env.dim_map))
            got = convert_weak(env, region, val, want.dtype, span)
            if got.type != want:
                raise error_at(span, f"'{fn.name}' returns {got.type} where its signature "
                                     f"says {want}")
            out.append(got)
        return out


def _return_types(ret: ast.TypeExpr | None) -> list[ast.TensorTypeExpr]:
    if ret is None:
        return []
    return list(ret.elements) if isinstance(ret, ast.TupleTypeExpr) else [ret]
