"""Lowering of index notation (docs/language.md §10) to `generic` ops.

    let C[i, j] = sum[k](A[i, k] * B[k, j]);

becomes one `generic` over (i, j) reducing over k, whose scalar body reads A and B.
The rules, applied in this order:

1. Ranges. An index ranges over the dimension it subscripts directly (`A[i, k]` gives i the
   range 0..N); all such uses must agree, or the range is written (`i in 0..L`).
2. Hoisting. Sub-expressions that mention no index variable are computed once outside the
   loop nest; the body receives them as parameters. Tensors must be subscripted.
3. Reads. `x[e1, e2]` becomes a `read` with one mode per axis: `direct` when the subscript
   is an index whose range is exactly that axis, `checked` when it depends on a value read
   from a tensor (a gather), otherwise `zero` (out-of-range reads give 0).
4. Nested reductions become their own `generic` over the outer indices they use, read back
   directly: `x[i] * sum[j](A[i, j])` reduces A first.

While a construct is lowered, `index_ctx` is its `IndexContext` and `index_vars` binds the
indices of the body being lowered to that body's block parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from reverie.compiler.ir.core import Block, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.types import INT_DTYPES, scalar
from reverie.compiler.lower.base import IndexContext, Range
from reverie.compiler.lower.builder import BlockBuilder
from reverie.compiler.lower.dim_expressions import static_dim
from reverie.compiler.lower.triangular import TriangularMasks, bounding_range
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at

# A range bound that is a value, not a dimension or a `for` variable over a dimension range
RUN_TIME_BOUND = (
    "'{name}' is a value known only at run time, not a dimension; a range bound is a "
    "dimension expression, an index of the same construct (let c[i] = sum[{index} in 0..i + "
    "1](...)) or the variable of a 'for' over a dimension range; for this bound write a "
    "masked reduction, e.g. sum[{index}](where({index} < {name}, x[{index}], 0.0))")


def mentions(node: ast.Expr, names: set[str] | list[str]) -> bool:
    """Whether `node` refers to any of `names`."""
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def mentions_index(ctx: IndexContext, node: ast.Expr) -> bool:
    """Whether `node` mentions an index of `ctx`, computed for all of `node`'s subtree in one
    walk and remembered, so asking at every link of a long chain costs linear time."""
    known = ctx.mentioning
    if id(node) not in known:
        names = set(ctx.order)
        for n in reversed(list(ast.walk(node))):
            known[id(n)] = (isinstance(n, ast.Name) and n.id in names) or any(
                known[id(child)] for child in ast.iter_children(n))
    return known[id(node)]


def _declarations(decls: list[ast.IndexVar], node: ast.Expr) -> list[ast.IndexVar]:
    """`decls` plus every index declared by reductions inside `node`."""
    found = list(decls)
    for n in ast.walk(node):
        if isinstance(n, ast.IndexReduce):
            found.extend(n.indices)
    return found


def _bounds_mention(decl: ast.IndexVar, names: list[str]) -> bool:
    """Whether the written range of index `decl` mentions any of `names`."""
    return any(bound is not None and mentions(bound, names) for bound in (decl.lo, decl.hi))


class IndexLowering(TriangularMasks):
    """`let y[i, j] = ...`, `sum[k](...)` and the reads and hoisting inside them."""

    @contextmanager
    def _inside(self, ctx: IndexContext | None, index_vars: dict[str, ExprValue],
                builder: BlockBuilder) -> Iterator[None]:
        """Lower with `ctx`, `index_vars` and `builder` for the duration of a `with` block."""
        saved = self.index_ctx, self.index_vars, self.builder
        self.index_ctx, self.index_vars, self.builder = ctx, index_vars, builder
        try:
            yield
        finally:
            self.index_ctx, self.index_vars, self.builder = saved

    def in_index_body(self, node: ast.Expr) -> bool:
        """Whether `node` should be hoisted out of the generic body being lowered."""
        ctx = self.index_ctx
        if ctx is None or self.builder is not ctx.body:
            return False
        if isinstance(node, ast.IntLit | ast.FloatLit | ast.BoolLit):
            return False
        return not mentions_index(ctx, node) and self.try_static_dim(node) is None

    def _lower_outside(self, node: ast.Expr) -> ExprValue:
        """Lower an index-free expression once, in the statement's block."""
        ctx = self.index_ctx
        if id(node) not in ctx.hoisted:
            with self._inside(None, {}, ctx.statement):
                ctx.hoisted[id(node)] = self.tensor(node)
        return ctx.hoisted[id(node)]

    def hoisted(self, node: ast.Expr) -> ExprValue:
        """An index-free scalar computed outside the loop nest, as seen from the body."""
        val = self._lower_outside(node)
        if val.type.rank:
            raise error_at(node.span, f"this is a tensor ({val.type}); in index notation "
                                      "subscript it, e.g. x[i]")
        return ExprValue(self.builder.use(val.value), val.weak)

    def _read_mode(self, item: ast.Expr, size: Dim) -> str:
        """How a read treats one subscript (rule 3): `direct`, `checked` or `zero`."""
        ctx = self.index_ctx
        if isinstance(item, ast.Name) and item.id in ctx.ranges:
            return "direct" if ctx.ranges[item.id] == (Dim.const(0), size) else "zero"
        if any(isinstance(n, ast.Subscript) for n in ast.walk(item)):
            return "checked"
        return "zero"

    def lower_read(self, node: ast.Subscript) -> ExprValue:
        """`x[e1, ..., en]` inside a generic body: one element, by mode per axis."""
        ctx = self.index_ctx
        if mentions(node.value, ctx.order):
            raise error_at(node.value.span, "the subscripted tensor cannot depend on an index")
        base = self._lower_outside(node.value)
        if len(node.items) != base.type.rank:
            raise error_at(node.span, f"{base.type} needs {base.type.rank} subscript(s) in "
                                      f"index notation, got {len(node.items)}")
        indices, modes = [], []
        for axis, item in enumerate(node.items):
            if isinstance(item, ast.Slice):
                raise error_at(item.span, "slices are not allowed in index notation; "
                                          "use an index variable")
            index = self.tensor(item)
            if index.type.rank or index.type.dtype not in INT_DTYPES:
                raise error_at(item.span,
                               f"a subscript must be an integer scalar, got {index.type}")
            index = self.convert_weak(index, "i64", item.span)
            if index.type.dtype != "i64":
                index = ExprValue(self.builder.op_at(item.span, "cast", [index.value],
                                                     {"dtype": "i64"}))
            indices.append(index.value)
            modes.append(self._read_mode(item, base.type.shape[axis]))
        label = node.value.id if isinstance(node.value, ast.Name) else "tensor"
        value = self.builder.op_at(node.span, "read", [base.value, *indices],
                                   {"modes": tuple(modes), "label": label})
        return ExprValue(value)

    # ------------------------------------------------------------ ranges

    def infer_ranges(self, decls: list[ast.IndexVar], node: ast.Expr) -> dict[str, Range]:
        """The range of every index declared in `decls` or inside `node` (rule 1)."""
        names = [d.name for d in decls]
        uses: dict[str, list[tuple[Dim, str]]] = {name: [] for name in names}
        for n in ast.walk(node):
            if not isinstance(n, ast.Subscript) or mentions(n.value, names):
                continue
            items = [(axis, item) for axis, item in enumerate(n.items)
                     if isinstance(item, ast.Name) and item.id in uses]
            if not items:
                continue
            base = self._lower_outside(n.value)
            label = n.value.id if isinstance(n.value, ast.Name) else "a tensor"
            for axis, item in items:
                if axis < base.type.rank:
                    uses[item.id].append((base.type.shape[axis], label))
        ranges: dict[str, Range] = {}
        for decl in decls:
            known = {**ranges, **self._loop_ranges(decl)}
            outer = {name: r for name, r in known.items() if _bounds_mention(decl, [name])}
            if outer:
                ranges[decl.name] = bounding_range(decl, outer, self.dim_map, self._axis_names())
                self.index_ctx.bounded[decl.name] = decl
                continue
            if decl.hi is not None:
                lo = static_dim(decl.lo, self.dim_map) if decl.lo is not None else Dim.const(0)
                hi = static_dim(decl.hi, self.dim_map)
                reason = f"the range {lo}..{hi} of index '{decl.name}' ends before it starts"
                self.require_nonnegative(hi - lo, decl.span, reason)
                ranges[decl.name] = (lo, hi)
                continue
            found = uses[decl.name]
            if not found:
                raise error_at(decl.span, f"cannot infer the range of index '{decl.name}'; "
                                          f"write it as '{decl.name} in 0..N'")
            for size, label in found[1:]:
                if size != found[0][0]:
                    raise error_at(decl.span, f"index '{decl.name}' ranges over {found[0][0]} "
                                              f"in '{found[0][1]}' but over {size} in "
                                              f"'{label}'; write its range explicitly")
            ranges[decl.name] = (Dim.const(0), found[0][0])
        return ranges

    def _loop_ranges(self, decl: ast.IndexVar) -> dict[str, Range]:
        """The ranges of the `for` variables that the bounds of `decl` mention, as of outer
        indices (`sum[k in 0..j](x[k])` in `for j in 0..N`: k's box is 0..N - 1, and the
        reduction is masked by the value of j at run time); each is the range of the
        innermost loop of that variable around `decl`, which must be a dimension
        expression. Any other value in a bound is a CompileError that says what to write."""
        indices = set(self.index_ctx.order) if self.index_ctx is not None else set()
        found: dict[str, Range] = {}
        for bound in (b for b in (decl.lo, decl.hi) if b is not None):
            for node in ast.walk(bound):
                if (not isinstance(node, ast.Name) or node.id in indices or node.id in found
                        or self.try_static_dim(node) is not None
                        or self.lookup(node.id) is None):
                    continue
                loop = self._enclosing_loop(node.id, decl.span)
                lo, hi = ((None, None) if loop is None
                          else (self.try_static_dim(loop.lo), self.try_static_dim(loop.hi)))
                if lo is None or hi is None:
                    raise error_at(node.span, RUN_TIME_BOUND.format(name=node.id, index=decl.name))
                found[node.id] = (lo, hi)
        return found

    def _enclosing_loop(self, name: str, span: ast.Span) -> ast.For | None:
        """The innermost `for {name} in ...` of this function whose body holds `span`."""
        def holds(outer: ast.Span) -> bool:
            return ((outer.line, outer.column) <= (span.line, span.column)
                    and (span.end_line, span.end_column) <= (outer.end_line, outer.end_column))

        loops = [node for stmt in self.fn.body for node in ast.walk(stmt)
                 if isinstance(node, ast.For) and node.var == name and holds(node.span)]
        return max(loops, key=lambda loop: (loop.span.line, loop.span.column), default=None)

    def _axis_names(self) -> set[str]:
        """The dimensions that are axis lengths of this function's parameters (never
        negative, unlike an i64 parameter)."""
        names = (d.id for p in self.fn.params for d in (p.type.dims or [])
                 if isinstance(d, ast.Name) and d.id in self.dim_map)
        return {self.dim_map[n].symbol for n in names} - {None}

    def _check_index_names(self, decls: list[ast.IndexVar]) -> None:
        """Each index is declared once and shadows no visible name."""
        seen: set[str] = set()
        for decl in decls:
            taken = decl.name in seen or decl.name in self.index_vars
            if taken or self.lookup(decl.name) is not None or decl.name in self.dim_map:
                raise error_at(decl.span, f"index '{decl.name}' is already defined; "
                                          "choose another name")
            seen.add(decl.name)

    # ------------------------------------------------------------ generic ops

    def _build_generic(self, ctx: IndexContext, out: list[str], reduce: str | None,
                       over: list[str], body: ast.Expr, span: ast.Span) -> Value:
        """One generic op in the statement's block; its body lowered in a fresh block."""
        params = [Value(scalar("i64"), name=name) for name in out + over]
        block = Block(params=list(params))
        body_builder = BlockBuilder(block, parent=ctx.statement)
        body_ctx = IndexContext(ctx.order, ctx.ranges, ctx.statement, body_builder, ctx.hoisted,
                                ctx.mentioning, ctx.bounded)
        index_vars = {name: ExprValue(p, weak=True)
                      for name, p in zip(out + over, params, strict=True)}
        with self._inside(body_ctx, index_vars, body_builder):
            val = self.convert_weak(self.tensor(body), None, span)
            if val.type.rank:
                raise error_at(body.span,
                               f"an index-notation body must be a scalar, got {val.type}")
            if reduce is not None and val.type.dtype == "bool":
                raise error_at(body.span, f"cannot {reduce}-reduce bool values")
            if reduce is not None:
                bounded = [ctx.bounded[name] for name in over if name in ctx.bounded]
                val = self.mask_triangular(bounded, reduce, val, span)
        block.results = [val.value]
        attrs: dict = {"indices": tuple((n, *ctx.ranges[n]) for n in out)}
        if reduce is not None:
            attrs.update(reduce=reduce, over=tuple((n, *ctx.ranges[n]) for n in over))
        operands = [outer for outer, _ in body_builder.captures]
        return ctx.statement.op_at(span, "generic", operands, attrs, [block])

    def _start(self, decls: list[ast.IndexVar], node: ast.Expr) -> IndexContext:
        """The context of an outermost index-notation construct, with every range inferred."""
        all_decls = _declarations(decls, node)
        self._check_index_names(all_decls)
        ctx = IndexContext([d.name for d in all_decls], {}, self.builder, self.builder)
        with self._inside(ctx, self.index_vars, self.builder):
            ctx.ranges = self.infer_ranges(all_decls, node)
        return ctx

    def lower_let_indexed(self, stmt: ast.LetIndexed) -> ExprValue:
        """`let y[i, j] = body;` (a top-level reduction in the body merges into the generic)."""
        ctx = self._start(stmt.indices, stmt.value)
        out = [d.name for d in stmt.indices]
        for decl in stmt.indices:
            if decl.name in ctx.bounded:
                raise error_at(decl.span, f"the range of output index '{decl.name}' cannot "
                                          "depend on another index; bound a reduction index, "
                                          "e.g. sum[j in 0..i + 1](...)")
        value = stmt.value
        if isinstance(value, ast.IndexReduce):
            over = [d.name for d in value.indices]
            return ExprValue(self._build_generic(ctx, out, value.op, over, value.body,
                                                 stmt.span))
        return ExprValue(self._build_generic(ctx, out, None, [], value, stmt.span))

    def lower_index_reduce(self, node: ast.IndexReduce) -> ExprValue:
        """`sum[k](body)`: standalone, or nested in another construct (rule 4)."""
        outer = self.index_ctx
        over = [d.name for d in node.indices]
        if outer is None:
            ctx = self._start([], node)
            return ExprValue(self._build_generic(ctx, [], node.op, over, node.body, node.span))
        out = [name for name in outer.order if name in self.index_vars and (
            mentions(node.body, [name]) or any(_bounds_mention(d, [name]) for d in node.indices))]
        result = self._build_generic(outer, out, node.op, over, node.body, node.span)
        indices = [self.index_vars[name].value for name in out]
        modes = tuple("direct" for _ in out)
        read = self.builder.op_at(node.span, "read", [result, *indices],
                                  {"modes": modes, "label": node.op})
        return ExprValue(read)
