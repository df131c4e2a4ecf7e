"""The pass `to_loops`: a specialised tensor-IR `Function` becomes a loop-IR `Program`.

The ladder (`compiler/pipeline.py`, stage `to_loops`) runs the loop passes after it:
`compile_function(fn, "to_loops")` is the program `reverie emit --stage loops` prints.

Each block is planned by `to_loops/fusion_plan.py` (which ops get a loop nest, which are inlined,
which are strided views), then walked in order:

- parameters are input buffers (rank-0 ones are loaded once into scalars);
- rank-0 values are computed at block level, outside every loop;
- view ops over buffers become strided `View`s (no copy); integer subscripts are checked
  where they occur, as in the interpreter;
- each root op emits its nest(s), writing a temporary or, when it is a result, the output
  buffer directly; inlined producers are evaluated inside that nest by `Evaluator.at`;
- block results not yet in their target buffer are copied there by a final fused nest.

Reductions are in `to_loops/reductions.py`, `for` loops in `to_loops/control.py`, scans and
sorts in `to_loops/scans.py` and `to_loops/sorts.py`; the other roots
(matmul, concat, generic_scatter, and a roll that fusion materialises) are here. A
materialised pad is an ordinary fused nest (`Evaluator` selects its source or 0).
"""

from __future__ import annotations

from collections.abc import Callable

from reverie.compiler.ir.core import Block, Function, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops_linalg import LINALG_OPS
from reverie.compiler.ir.reduce_kinds import REDUCE_OPS
from reverie.compiler.ir.rule_table import RuleTable
from reverie.compiler.ir.views import ArgReduceOp, GenericOp, GenericScatterOp
from reverie.compiler.loops.ir import (
    MATMUL_PACK_ELEMENTS,
    Accumulate,
    Accumulator,
    Buffer,
    If,
    Operand,
    Program,
    Store,
    View,
    all_dims,
    row_major_strides,
)
from reverie.compiler.to_loops.batched_matmul import emit_matmul
from reverie.compiler.to_loops.boundary import CallBoundary
from reverie.compiler.to_loops.control import lower_for, lower_if, lower_trip_dim, lower_while
from reverie.compiler.to_loops.emitter import (
    Binding,
    Context,
    Emitter,
    Evaluator,
    view_of,
    zero,
)
from reverie.compiler.to_loops.fusion_plan import (
    DEAD,
    ROOT,
    SCALAR,
    VIEW,
    Plan,
    SiblingNest,
    is_root_kind,
    plan_block,
    reads_memory,
)
from reverie.compiler.to_loops.linalg import lower_linalg
from reverie.compiler.to_loops.reductions import (
    accumulator_dtype,
    identity,
    lower_arg_reduce,
    lower_generic_reduce,
    lower_reduce,
)
from reverie.compiler.to_loops.scans import lower_scan
from reverie.compiler.to_loops.sorts import lower_argsort


def lower_function(fn: Function, plan: Plan | None = None) -> Program:
    """The loop-IR program of a specialised function, as lowered, before any loop pass
    (`plan`: the fusion plan of its body, when the caller made it already; loop bodies are
    planned as they are reached)."""
    ctx = Context()
    inputs = [Buffer(name, p.type.dtype, p.type.shape, "input", k)
              for k, (name, p) in enumerate(zip(fn.param_names, fn.params, strict=True))]
    outputs = [Buffer(f"out{k}", t.dtype, t.shape, "output", k)
               for k, t in enumerate(fn.result_types)]
    body: list = []
    em = Emitter(ctx, body)
    env: dict[Value, Binding] = {}
    for param, buffer in zip(fn.params, inputs, strict=True):
        env[param] = View.of(buffer) if param.type.rank else em.load(View.of(buffer), ())
    BlockLowering(ctx, env).lower(fn.body, outputs, em, plan)
    program = Program(fn.name, [], inputs, outputs, ctx.temps, body, ctx.sites)
    program.symbols = _size_symbols(program, fn)
    program.boundary = CallBoundary.of(fn, program)
    return program


def _size_symbols(program: Program, fn: Function) -> list[str]:
    """The dimension sizes the kernel receives: those its index expressions use, in the
    function's order (then any others, sorted)."""
    found = {s for d in all_dims(program) for s in d.symbols() if not s.startswith("%")}
    return [s for s in fn.dim_names if s in found] + sorted(found - set(fn.dim_names))


class BlockLowering:
    """Lowers the ops of one block (the function body or a loop body) in order."""

    def __init__(self, ctx: Context, env: dict[Value, Binding]) -> None:
        self.ctx = ctx
        self.env = env
        self.eval = Evaluator(ctx, env)
        self.targets: dict[Value, View] = {}

    def lower(self, block: Block, targets: list[Buffer], em: Emitter,
              plan: Plan | None = None) -> None:
        """Emit `block` into `em`, leaving its results in `targets` (`plan`: its fusion
        plan, made here when not given)."""
        self._assign_targets(block, targets)
        plan = plan or plan_block(block)
        late = {op for nest in plan.siblings for op in nest.reductions}
        pending: set[Value] = set()  # computed late: in a sibling nest, or from one
        for op in block.ops:
            decision = plan.decisions[op]
            if op in late or (decision is SCALAR and pending.intersection(op.operands)):
                pending.add(op.result)
                continue
            if decision is not DEAD:
                self._operands_in_memory(op, em)
            if op.name == "roll" and decision is not DEAD:
                shift, size = op.attrs["shift"], op.result.type.shape[op.attrs["axis"]]
                self.eval.shifts[op] = Dim.sym(em.let("mod", (shift, size), "i64").name)
            if op.name in ("dynamic_index", "dynamic_scatter"):
                self._check_position(op, em)
            if decision is SCALAR:
                self.env[op.result] = self.eval.at(op.result, (), em)
            elif decision is VIEW:
                self._bind_view(op, em)
            elif decision is ROOT:
                self._root(op, em)
        for nest in plan.siblings:
            self._sibling_nest(nest, block, targets, em)
        for value, target in zip(block.results, targets, strict=True):
            self._materialise(value, target, em)

    def _sibling_nest(self, nest: SiblingNest, block: Block, targets: list[Buffer],
                      em: Emitter) -> None:
        """One loop nest computing several full reductions and block results of one shape;
        the producers they share are computed once per element."""
        accumulators = []
        for op in nest.reductions:
            kind, dtype = op.name.removeprefix("reduce_"), op.result.type.dtype
            acc = self.ctx.var(accumulator_dtype(kind, dtype), "%acc")
            em.stmts.append(Accumulator(acc, identity(kind, acc.dtype)))
            accumulators.append(acc)
        index, inner = em.nest([(Dim.const(0), d) for d in nest.shape])
        for op, acc in zip(nest.reductions, accumulators, strict=True):
            value = self.eval.at(op.operands[0], index, inner)
            if acc.dtype != value.dtype:
                value = inner.let("cast", (value,), acc.dtype)
            inner.stmts.append(Accumulate(acc, op.name.removeprefix("reduce_"), value))
        for k in nest.results:
            value = block.results[k]
            out = self.targets.pop(value, View.of(targets[k]))
            inner.stmts.append(Store(out, index, self.eval.at(value, index, inner)))
            self.env[value] = out
        for op, acc in zip(nest.reductions, accumulators, strict=True):
            dtype = op.result.type.dtype
            self.env[op.result] = acc if acc.dtype == dtype else em.let("cast", (acc,), dtype)

    # ------------------------------------------------------------ helpers

    def _assign_targets(self, block: Block, targets: list[Buffer]) -> None:
        """Let each result's producer write straight into its target buffer: through
        reshapes of single-use values too (`reshape(a @ b)` needs no copy)."""
        uses: dict[Value, int] = {}
        for value in [v for op in block.ops for v in op.operands] + list(block.results):
            uses[value] = uses.get(value, 0) + 1
        for value, target in zip(block.results, targets, strict=True):
            while value.type.rank and value.op is not None and value not in self.targets:
                self.targets[value] = View(target, value.type.shape, Dim.const(0),
                                           row_major_strides(value.type.shape))
                if value.op.name not in ("reshape", "stop_gradient") or \
                        uses[value.op.operands[0]] != 1:
                    break
                value = value.op.operands[0]

    def nested(self, env: dict[Value, Binding]) -> BlockLowering:
        """The lowering of a region (a loop body) with its own environment."""
        lowering = BlockLowering(self.ctx, env)
        lowering.eval.shifts.update(self.eval.shifts)
        return lowering

    def buffer_for(self, value: Value) -> View:
        """Where a root writes `value`: its target, or a new temporary."""
        if value in self.targets:
            return self.targets.pop(value)
        return View.of(self.ctx.temp(value.type.dtype, value.type.shape))

    def scalar(self, value: Value, em: Emitter) -> Operand:
        """A rank-0 value as an operand (computed at block level when not yet known)."""
        return self.eval.at(value, (), em)

    def _operands_in_memory(self, op: Op, em: Emitter) -> None:
        """Copy into a temporary each operand `op` reads by address that is not in memory
        (fusion materialises computed ones; this catches views of scalars)."""
        for position, value in enumerate(op.operands):
            if reads_memory(op, position) and not isinstance(self.env.get(value), View):
                out = View.of(self.ctx.temp(value.type.dtype, value.type.shape))
                em.map_nest(out, lambda index, body, v=value: self.eval.at(v, index, body))
                self.env[value] = out

    def _check_position(self, op: Op, em: Emitter) -> None:
        """Bounds-check the integer subscript of a dynamic_index/dynamic_scatter."""
        axis = op.attrs["axis"]
        shape = op.operands[0].type.shape if op.name == "dynamic_index" else op.attrs["shape"]
        position = em.index(self.scalar(op.operands[1], em))
        em.check(position, shape[axis], self.ctx.site("index", op.attrs.get("label", "tensor"),
                                                      axis))

    def _bind_view(self, op: Op, em: Emitter) -> None:
        source = self.env.get(op.operands[0])
        if not isinstance(source, View):
            return
        position = None
        if op.name == "dynamic_index":
            position = em.index(self.scalar(op.operands[1], em))
        view = view_of(op, source, position)
        if view is None:
            copy = self.ctx.temp(source.buffer.dtype, source.shape)
            em.map_nest(View.of(copy), lambda index, body: body.load(source, index))
            view = view_of(op, View.of(copy))
        self.env[op.result] = view

    def _materialise(self, value: Value, target: Buffer, em: Emitter) -> None:
        """Make sure `target` holds `value` (a copy or a fused nest when it does not yet)."""
        bound = self.env.get(value)
        if isinstance(bound, View) and bound.covers(target):
            return
        if not value.type.rank:
            em.stmts.append(Store(View.of(target), (), self.scalar(value, em)))
            return
        em.map_nest(View.of(target), lambda index, body: self.eval.at(value, index, body))

    # ------------------------------------------------------------ roots

    def _root(self, op: Op, em: Emitter) -> None:
        """Emit the loop nest(s) of a root by its rule in `ROOT_LOWERINGS`; any other op
        that fusion materialises is one nest evaluating it element by element."""
        if op.name in ROOT_LOWERINGS or is_root_kind(op):
            ROOT_LOWERINGS.lookup(op.name, op.span)(self, op, em)
        else:
            self.materialise(op, em)

    def materialise(self, op: Op, em: Emitter) -> None:
        """Write the elements of `op`'s result into a buffer with one fused nest."""
        out = self.buffer_for(op.result)
        em.map_nest(out, lambda index, body: self.eval.at(op.result, index, body))
        self.env[op.result] = out

    def _generic(self, op: Op, em: Emitter) -> None:
        if GenericOp(op).reduce:
            lower_generic_reduce(self, op, em)
        else:
            self.materialise(op, em)

    def _generic_scatter(self, op: Op, em: Emitter) -> None:
        """out = zeros; out[positions] += value over the loop nest (out-of-range `zero`
        positions are dropped, others are checked)."""
        out = self.buffer_for(op.result)
        dtype = op.result.type.dtype
        em.map_nest(out, lambda index, body: zero(dtype))
        scatter = GenericScatterOp(op)
        ranges = scatter.ranges
        index, inner = em.nest([(Dim.const(0), hi - lo) for _, lo, hi in ranges])
        *positions, value = self.eval.generic_yields(
            op, [lo + i for (_, lo, _), i in zip(ranges, index, strict=True)], inner)
        positions = [inner.index(p) for p in positions]
        guard = None
        for axis, (position, mode) in enumerate(zip(positions, scatter.modes, strict=True)):
            size = out.shape[axis]
            if mode == "zero":
                inside = inner.let("in_bounds", (position, size), "bool")
                guard = inside if guard is None else inner.let("and", (guard, inside), "bool")
            else:
                inner.check(position, size, self.ctx.site("index", scatter.label, axis))
        if guard is not None:
            conditional = If(guard)
            inner.stmts.append(conditional)
            inner = Emitter(self.ctx, conditional.body)
        total = inner.let("add", (inner.load(out, tuple(positions)), value), dtype)
        inner.stmts.append(Store(out, tuple(positions), total))
        self.env[op.result] = out

    def _matmul(self, op: Op, em: Emitter) -> None:
        a, b = (self.env[v] for v in op.operands)
        out = self.buffer_for(op.result)
        dtype = op.result.type.dtype
        if dtype in ("f32", "f64"):
            emit_matmul(em, out, a, b, self._pack_buffer())
        else:  # integers: out[..., i, j] += a[..., i, p] · b[..., p, j] in a loop nest
            em.map_nest(out, lambda index, body: zero(dtype))
            *batch, m, k = a.shape
            n = b.shape[-1]
            (*h, i, p, j), inner = em.nest([(Dim.const(0), d) for d in (*batch, m, k, n)])
            product = inner.let("mul", (inner.load(a, (*h, i, p)), inner.load(b, (*h, p, j))),
                                dtype)
            total = inner.let("add", (inner.load(out, (*h, i, j)), product), dtype)
            inner.stmts.append(Store(out, (*h, i, j), total))
        self.env[op.result] = out

    def _pack_buffer(self) -> Buffer:
        for temp in self.ctx.temps:
            if temp.name == "pack":
                return temp
        pack = Buffer("pack", "f64", (Dim.const(MATMUL_PACK_ELEMENTS),), "temp",
                      len(self.ctx.temps))
        self.ctx.temps.append(pack)
        return pack

    def _concat(self, op: Op, em: Emitter) -> None:
        out = self.buffer_for(op.result)
        axis, offset = op.attrs["axis"], Dim.const(0)
        for x in op.operands:
            index, body = em.nest([(Dim.const(0), d) for d in x.type.shape])
            placed = index[:axis] + (index[axis] + offset,) + index[axis + 1:]
            body.stmts.append(Store(out, placed, self.eval.at(x, index, body)))
            offset = offset + x.type.shape[axis]
        self.env[op.result] = out

    def _roll(self, op: Op, em: Emitter) -> None:
        """out[(i + shift) mod n] = x[i], as two shifted copies (no modulo in the loops)."""
        x, axis = op.operands[0], op.attrs["axis"]
        shape = x.type.shape
        n, shift = shape[axis], self.eval.shifts[op]
        out = self.buffer_for(op.result)
        for lo, hi, source_offset in ((shift, n, -shift), (Dim.const(0), shift, n - shift)):
            ranges = [(Dim.const(0), d) for d in shape]
            ranges[axis] = (lo, hi)
            index, body = em.nest(ranges)
            source = index[:axis] + (index[axis] + source_offset,) + index[axis + 1:]
            body.stmts.append(Store(out, index, self.eval.at(x, source, body)))
        self.env[op.result] = out


RootLowering = Callable[[BlockLowering, Op, Emitter], None]
# The loop nests of the ops that get their own (fusion's roots, and a materialised roll)
ROOT_LOWERINGS: RuleTable[str, RootLowering] = RuleTable("the native backend's loop lowering")
register_root = ROOT_LOWERINGS.register
register_root(*REDUCE_OPS)(lower_reduce)
register_root(*ArgReduceOp.NAMES)(lower_arg_reduce)
register_root("for", "for_history")(lower_for)
register_root("if")(lower_if)
register_root("while")(lower_while)
register_root("trip_dim")(lower_trip_dim)
register_root("scan")(lower_scan)
register_root("argsort")(lower_argsort)
register_root(*LINALG_OPS)(lower_linalg)
register_root("matmul")(BlockLowering._matmul)
register_root("concat")(BlockLowering._concat)
register_root("generic")(BlockLowering._generic)
register_root("generic_scatter")(BlockLowering._generic_scatter)
register_root("roll")(BlockLowering._roll)
