"""The one kind of per-op rule table: op name (or op and dtype class) → the rule of a level.

Every level that treats ops one by one keeps its rules in a `RuleTable`: reverse mode
(`VJP_RULES`), forward mode (`JVP_RULES`), batching (`BATCH_RULES`), the loop lowering's
element, view and root rules (`FUSED_RULES`, `VIEW_RULES`, `ROOT_LOWERINGS`), the native scalar code
(`scalar_ops.RULES`, keyed by op and dtype class) and the MLIR export (`LOWERINGS`). A
table is a dict with three additions:

- its `name`, which says what lacks a rule in the error for an op without one;
- `register(*keys)`, the one way to add a rule (a decorator; each key once);
- `lookup(key, span)`, which returns the rule or raises that `CompileError`, naming the
  op and the table (`missing_rule`), unless the table has its own `message`.

A table is defined, with most of its rules, in one module (`reverse_rules.py`); other
modules import it and register the rest (`reverse_control.py`, `scan_rules.py`). The one
module that reads the whole table (the pass, `reverse.py`) imports each of those by name,
in one import, so importing it alone gives the whole table and no rule exists only because
some other module happened to be imported (`tests/tensor_ir/test_rule_table.py`). Rules that
several ops share register under a group derived from the op table (`ELEMENTWISE`,
`REDUCE_OPS` of `reduce_kinds.py`), never under a list of names written out again.

    JVP_RULES: RuleTable[str, JvpRule] = RuleTable("forward mode")

    @JVP_RULES.register("sub")
    def _sub(ctx: JvpContext, op: Op, dots: Dots) -> Dots: ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from reverie.dsl.ast import NO_SPAN, Span
from reverie.dsl.diagnostics import CompileError, error_at

Key = TypeVar("Key", str, tuple[str, str])
Rule = TypeVar("Rule")


def missing_rule(name: str, what: str, span: Span | None = None) -> CompileError:
    """The error for an op that a table lacks: `what` says which (raise the result)."""
    return error_at(span or NO_SPAN, f"{what} has no rule for '{name}'", CompileError)


class RuleTable(dict[Key, Rule]):
    """The rules of one level, keyed by op name (or by op name and dtype class).

    `message`, when given, replaces the standard missing-rule error: a format string with
    `{op}` for the op's name (reverse mode's says how to stop derivatives, for example).
    """

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__()
        self.name = name
        self.message = message

    def register(self, *keys: Key) -> Callable[[Rule], Rule]:
        """A decorator making its function the rule of every key in `keys`."""
        def add(rule: Rule) -> Rule:
            for key in keys:
                assert key not in self, f"{self.name}: two rules for {key}"
                self[key] = rule
            return rule

        return add

    def lookup(self, key: Key, span: Span | None = None, detail: str = "") -> Rule:
        """The rule of `key`, or the CompileError naming the op and this table (`detail`
        follows the table's name: the dtype of scalar code)."""
        rule = self.get(key)
        if rule is not None:
            return rule
        op = key if isinstance(key, str) else key[0]
        if self.message:
            raise error_at(span or NO_SPAN, self.message.format(op=op), CompileError)
        raise missing_rule(op, self.name + detail, span)
