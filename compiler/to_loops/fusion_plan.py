"""Fusion planning: which tensor-IR ops get their own loop nest and which are inlined.

Consumes one `Block` of the tensor IR; produces a `Decision` per op. Which ops are views,
roots or cheap is each op's `fusion` class and `cheap` flag in the op table (`ir/ops.py`):

- `scalar`: a rank-0 value, computed once at block level (outside every loop nest);
- `view`:   a data-movement op (transpose, slice, broadcast, reshape, stop_gradient,
            dynamic_index). Over a buffer it becomes a strided view (free); over a computed
            value it is an index mapping inside the consumer's loop nest;
- `root`:   the op gets its own loop nest(s) writing a buffer. Reductions, argmax/argmin,
            matmul, concat, reducing `generic`s, `generic_scatter` and `for`/`for_history`
            loops always do;
- `inline`: an elementwise/select/cast/non-reducing-generic/dynamic_scatter/roll/pad op
            evaluated inside its consumers' loop nest, so chains fuse into one loop with no
            temporaries (`sum(tanh(x) * sin(x))` is one loop over x; a roll reads its
            source at a wrapped index, a pad selects its source inside its window or 0);
- `dead`:   an unused op.

The rules, decided from the last op to the first (users before producers), looking through
view ops to the "sites" where a value is consumed:

1. A computed value is inlined when every site is in the same loop nest (the nest of its
   consumer, of a root that consumes it, or the final copy of a block result).
2. It is materialised (`root`) when its sites are in several nests, or when a site needs
   memory: a matmul/argsort operand, a generic operand not read once per element, a `for`
   invariant, a general reshape; or when a site would recompute it many times: an
   expanding broadcast, the value of a dynamic_scatter.
3. Sites in several nests over the same shape that do not depend on each other (a loss
   `sum(f(x))` and its gradient `g(x)`, two results of one shape) are merged into one
   sibling nest instead, so shared producers are computed once (`SiblingNest`).
4. Cheap ops (one arithmetic op over buffers) are recomputed in every nest instead.
5. Chains of more than MAX_INLINE_DEPTH inlined ops are cut by materialising.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import ROOT as ROOT_CLASS
from reverie.compiler.ir.op_defs import ROOT_WHEN_REDUCING
from reverie.compiler.ir.op_defs import VIEW as VIEW_CLASS
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.views import ForOp, GenericOp, ReadOp, WhileOp

# The groups, from each op's row in the op table (`fusion`, `cheap`, its kind):
VIEW_OPS = frozenset(name for name, op in OPS.items() if op.fusion == VIEW_CLASS)
CHEAP_OPS = frozenset(name for name, op in OPS.items() if op.cheap)
ARITHMETIC = frozenset(ELEMENTWISE)
ONE = Dim.const(1)
MAX_INLINE_DEPTH = 64


@dataclass(frozen=True)
class Decision:
    """What happens to one op (see the module docstring)."""

    kind: str


SCALAR, VIEW, ROOT, INLINE, DEAD = (Decision(k) for k in
                                    ("scalar", "view", "root", "inline", "dead"))
_FORCE = object()  # a site that needs the value in memory


def is_root_kind(op: Op) -> bool:
    """Ops that always get their own loop nest (a `generic` when it reduces)."""
    fusion = OPS[op.name].fusion
    return fusion == ROOT_CLASS or (fusion == ROOT_WHEN_REDUCING and bool(GenericOp(op).reduce))


def is_unit_reshape(source: tuple[Dim, ...], target: tuple[Dim, ...]) -> bool:
    """Whether a reshape only inserts or removes size-1 axes (an index mapping)."""
    return [d for d in source if d != ONE] == [d for d in target if d != ONE]


def is_expanding_broadcast(op: Op) -> bool:
    """Whether a broadcast repeats elements (adds axes or stretches size-1 axes)."""
    source, target = op.operands[0].type.shape, op.result.type.shape
    return len(target) > len(source) or any(
        s == ONE and t != ONE for s, t in zip(source, target[len(target) - len(source):],
                                              strict=True))


def reads_memory(user: Op, position: int) -> bool:
    """Whether `user` reads its tensor operand `position` by address (so it must be a
    buffer or a strided view of one)."""
    if not user.operands[position].type.rank:
        return False
    if user.name == "generic":
        return not reads_each_element_once(user, position)
    if user.name in ("matmul", "generic_scatter", "argsort"):
        return True
    if user.name in ("for", "for_history"):
        return position >= ForOp(user).first_invariant()
    if user.name == "while":  # its initial states are copied into the state buffers
        return position >= WhileOp(user).carried
    if user.name == "if":  # its regions read the operands in place
        return position >= 1
    if user.name == "reshape":
        return not is_unit_reshape(user.operands[0].type.shape, user.result.type.shape)
    return False


def reads_each_element_once(generic: Op, position: int) -> bool:
    """Whether a `generic` reads its tensor operand `position` with one unguarded `read`
    whose subscripts are the nest's indices, each once: every element is then read at most
    once, so a computed operand is evaluated inside the generic's body instead of stored
    (`dmu = -sum[n](dxc[n, k, i])` reads `dxc = dy · e^s + dy @ Q` as it computes it)."""
    nest = GenericOp(generic)
    param = nest.operand_params[position]
    uses = [op for op in nest.body.ops if param in op.operands]
    if len(uses) != 1 or uses[0].name != "read" or any(op.regions for op in nest.body.ops):
        return False
    read = ReadOp(uses[0])
    subscripts, indices = read.subscripts, nest.index_params
    return (read.tensor is param and all(mode == "direct" for mode in read.modes)
            and len(subscripts) == len(indices) and set(subscripts) == set(indices))


def _needs_memory(user: Op, position: int) -> bool:
    """Whether a computed operand should be materialised for `user`: it is read by address,
    or it would be recomputed for many elements (expanding broadcast, scattered value)."""
    if reads_memory(user, position):
        return True
    if user.name == "dynamic_scatter":
        return position == 0
    return user.name == "broadcast" and is_expanding_broadcast(user)


@dataclass
class SiblingNest:
    """Nests over the same shape merged into one loop nest: full reductions (`reductions`)
    and block results (`results`, by position) that share producers. The nest runs where
    the block's results are written, so the shared producers are computed once, inline."""

    shape: tuple[Dim, ...]
    reductions: list[Op] = field(default_factory=list)
    results: list[int] = field(default_factory=list)


@dataclass
class Plan:
    """The decisions for a block's ops, and the sibling nests to emit merged."""

    decisions: dict[Op, Decision]
    siblings: list[SiblingNest]


class _Planner:
    """Decides from the last op to the first (see the module docstring)."""

    def __init__(self, block: Block) -> None:
        self.block = block
        self.users: dict[Value, list[tuple[Op, int]]] = defaultdict(list)
        for op in block.ops:
            for position, value in enumerate(op.operands):
                self.users[value].append((op, position))
        self.result_sites: dict[Value, list[object]] = defaultdict(list)
        for k, value in enumerate(block.results):
            self.result_sites[value].append(("result", k))
        self.decisions: dict[Op, Decision] = {}
        self.group: dict[Op, object] = {}
        self.merged: dict[object, object] = {}  # union-find parents of merged groups

    def find(self, group: object) -> object:
        while group in self.merged:
            group = self.merged[group]
        return group

    def sites(self, value: Value) -> list[object]:
        """The nests (groups) where `value` is consumed, looking through view ops."""
        found = list(self.result_sites[value])
        for user, position in self.users[value]:
            decision = self.decisions[user]
            if _needs_memory(user, position):
                found.append(_FORCE)
            elif decision is VIEW:
                found.extend(self.sites(user.result))
            elif decision is SCALAR:
                found.append("block")
            elif decision is not DEAD:
                found.append(self.group[user])
        return [self.find(g) for g in found]

    def plan(self) -> Plan:
        for op in reversed(self.block.ops):
            self.decide(op)
        self.limit_depth()
        classes: dict[object, list[object]] = defaultdict(list)
        for member in self.merged:
            classes[self.find(member)].append(member)
        siblings = []
        for root, members in classes.items():
            nest = SiblingNest(self.shape(root))
            for member in [root, *members]:
                if isinstance(member, Op):
                    nest.reductions.append(member)
                else:
                    nest.results.append(member[1])
            siblings.append(nest)
        return Plan(self.decisions, siblings)

    def decide(self, op: Op) -> None:
        if is_root_kind(op):
            self.decisions[op], self.group[op] = ROOT, op
        elif op.result.type.rank == 0:
            self.decisions[op] = SCALAR
        elif op.name in VIEW_OPS:
            self.decisions[op] = VIEW
        else:
            found = self.sites(op.result)
            distinct = list(dict.fromkeys(found))
            if not found:
                self.decisions[op] = DEAD
            elif _FORCE in distinct:
                self.decisions[op], self.group[op] = ROOT, op
            elif len(distinct) == 1 or self.try_merge(distinct):
                self.decisions[op], self.group[op] = INLINE, self.find(distinct[0])
            elif _is_cheap(op):
                self.decisions[op], self.group[op] = INLINE, None
            else:
                self.decisions[op], self.group[op] = ROOT, op

    def limit_depth(self) -> None:
        """Materialise every MAX_INLINE_DEPTH-th op of very long inlined chains (the code
        generator recurses once per inlined op)."""
        depth: dict[Value, int] = {}
        for op in self.block.ops:
            if self.decisions[op] not in (INLINE, VIEW):
                continue
            deepest = 1 + max((depth.get(v, 0) for v in op.operands), default=0)
            if deepest > MAX_INLINE_DEPTH and self.decisions[op] is INLINE:
                self.decisions[op], self.group[op] = ROOT, op
                continue
            depth[op.result] = deepest

    # ------------------------------------------------------------ sibling nests

    def shape(self, group: object) -> tuple[Dim, ...] | None:
        """The iteration shape of a group that may join a sibling nest, else None: a block
        result of rank > 0, or a full reduction whose value only flows (through scalars)
        into block results (so it may be computed late, where the results are written)."""
        if isinstance(group, tuple) and group[0] == "result":
            shape = self.block.results[group[1]].type.shape
            return shape or None
        if isinstance(group, Op) and group.name.startswith("reduce_") and \
                not group.result.type.rank and self.only_feeds_results(group.result):
            return group.operands[0].type.shape
        return None

    def only_feeds_results(self, value: Value) -> bool:
        """Whether `value` is used only by scalar arithmetic leading to block results."""
        return all(user.name in ARITHMETIC and not user.result.type.rank and
                   self.only_feeds_results(user.result) for user, _ in self.users[value])

    def try_merge(self, groups: list[object]) -> bool:
        """Merge `groups` (and the classes they head) into one sibling nest if they iterate
        over the same shape and none depends on another's result."""
        members = [m for g in groups for m in [g, *[k for k in self.merged if
                                                    self.find(k) == g]]]
        shapes = {self.shape(m) for m in members}
        if None in shapes or len(shapes) != 1:
            return False
        values = [self.block.results[m[1]] if isinstance(m, tuple) else m.result
                  for m in members]
        if any(a is not b and _depends(a, b) for a in values for b in values):
            return False
        for g in groups[1:]:
            self.merged[g] = groups[0]
        return True


def _depends(value: Value, on: Value) -> bool:
    """Whether `value` is computed from `on` (through operands, in one block)."""
    pending, seen = [value], set()
    while pending:
        current = pending.pop()
        if current is on:
            return True
        if current in seen or current.op is None:
            continue
        seen.add(current)
        pending.extend(current.op.operands)
    return False


def plan_block(block: Block) -> Plan:
    """Decide, for every op of `block` (not its regions), how it is lowered."""
    return _Planner(block).plan()


def _is_cheap(op: Op) -> bool:
    """One cheap op whose tensor operands are (views of) parameters or root results."""
    if op.name not in CHEAP_OPS:
        return False
    for value in op.operands:
        while value.op is not None and value.op.name in VIEW_OPS:
            value = value.op.operands[0]
        if value.type.rank and value.op is not None and not is_root_kind(value.op):
            return False
    return True
