"""IR verifier: run after every pass (`after_pass`, which then hands the IR to the printing
hook of `compiler/print_ir.py`: REVERIE_PRINT_IR).

Checks that every operand is defined before use within its own block (regions are isolated
from above), that every op is in the op table, that its attributes are those its row
declares, with their types (`attr_types.py`: none missing, none unexpected, none of another
type), that its result types are what the shape rule computes, and that block results are
defined. Raises `VerifyError` naming the op (and the attribute).
"""

from __future__ import annotations

from reverie.compiler.ir.attr_types import attribute_errors
from reverie.compiler.ir.core import Block, Function, Module, Op, Value
from reverie.compiler.ir.ops import OPS, infer_types
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.types import ShapeError
from reverie.compiler.print_ir import show


class VerifyError(Exception):
    """The IR breaks an invariant; this is a compiler bug, never a user error."""


def verify_block(block: Block, where: str) -> None:
    """Verify one block and, recursively, its regions."""
    defined: set[Value] = set(block.params)
    for op in block.ops:
        if op.name not in OPS:
            raise VerifyError(f"{where}: unknown op '{op.name}'")
        for v in op.operands:
            if v not in defined:
                raise VerifyError(f"{where}: '{op.name}' uses a value not defined before it")
        verify_attrs(op, where)
        try:
            types = infer_types(op.name, [v.type for v in op.operands], op.attrs, op.regions)
        except ShapeError as e:
            raise VerifyError(f"{where}: '{op.name}' is ill-typed: {e}") from e
        if types != [r.type for r in op.results]:
            got = ", ".join(str(r.type) for r in op.results)
            raise VerifyError(f"{where}: '{op.name}' results are {got}, the rule gives "
                              + ", ".join(map(str, types)))
        for r in op.results:
            if r.op is not op:
                raise VerifyError(f"{where}: a result of '{op.name}' points to another op")
        for region in op.regions:
            verify_block(region, f"{where}/{op.name}")
        defined.update(op.results)
    for v in block.results:
        if v not in defined:
            raise VerifyError(f"{where}: returns a value not defined in the block")


def verify_attrs(op: Op, where: str) -> None:
    """VerifyError unless `op`'s attributes match its row's schema."""
    schema = OPS[op.name].attrs
    if schema is None:
        raise VerifyError(f"{where}: '{op.name}' has no attribute schema in the op table")
    errors = attribute_errors(schema, op.attrs)
    if errors:
        raise VerifyError(f"{where}: '{op.name}' " + "; ".join(errors))


def verify_function(fn: Function) -> None:
    """Verify a function's body."""
    verify_block(fn.body, f"@{fn.name}")


def after_pass(fn: Function, pass_name: str) -> Function:
    """Verify the result of pass `pass_name`, then show it (REVERIE_PRINT_IR)."""
    verify_function(fn)
    return show_raw(fn, pass_name)


def show_raw(fn: Function, pass_name: str) -> Function:
    """Show the result of pass `pass_name` without verifying it: for a pass's raw output
    that `simplify` rewrites at once (the pass after simplify verifies)."""
    show(pass_name, f"@{fn.name}", lambda: format_function(fn))
    return fn


def verify_module(module: Module) -> None:
    """Verify every function."""
    for fn in module.functions.values():
        verify_function(fn)
