"""Attribute schemas and typed op views (`compiler/ir/attr_types.py`, `compiler/ir/views.py`).

Every op of the table declares its attributes; the verifier rejects an op whose attributes
are missing, unexpected or of another type, naming the op and the attribute. The views
name the parts of structured ops and refuse other ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NotRequired, get_origin

import pytest

from reverie.compiler.ir.attr_types import attribute_errors, hint_name
from reverie.compiler.ir.core import Block, Builder, Function, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.tensor_verifier import VerifyError, verify_function
from reverie.compiler.ir.types import TensorType, scalar
from reverie.compiler.ir.views import ForHistoryOp, ForOp, GenericOp, ReadOp, ReduceOp

N = Dim.sym("N")
VECTOR = TensorType("f64", (N,))
MATRIX = TensorType("f64", (N, N))


def _function(build: Callable[[Builder, list[Value]], Value], *params: TensorType) -> Function:
    values = [Value(t, name=f"p{i}") for i, t in enumerate(params)]
    block = Block(params=values)
    block.results = [build(Builder(block), values)]
    return Function("f", block, [v.name for v in values], ["N"])


def _loop(b: Builder, ps: list[Value]) -> Value:
    """for t in 0..3 carrying u (from ps[0]) with the invariant w (ps[1]): u ← u + w."""
    lo = b.op("const", [], {"value": 0, "dtype": "i64"})
    hi = b.op("const", [], {"value": 3, "dtype": "i64"})
    t, u, w = Value(scalar("i64"), name="t"), Value(VECTOR, name="u"), Value(VECTOR, name="w")
    body = Block(params=[t, u, w])
    body.results = [Builder(body).op("add", [u, w])]
    return b.op("for", [lo, hi, ps[0], ps[1]], {"carried": 1}, [body])


def _sum_of_squares(b: Builder, ps: list[Value]) -> Value:
    """generic over i in 0..N reducing sum over j in 0..N of x[i, j]²."""
    i, j, x = Value(scalar("i64"), name="i"), Value(scalar("i64"), name="j"), Value(MATRIX)
    body = Block(params=[i, j, x])
    inner = Builder(body)
    v = inner.op("read", [x, i, j], {"modes": ("direct", "direct"), "label": "x"})
    body.results = [inner.op("mul", [v, v])]
    zero = Dim.const(0)
    attrs = {"indices": (("i", zero, N),), "reduce": "sum", "over": (("j", zero, N),)}
    return b.op("generic", ps, attrs, [body])


FUNCTIONS: dict[str, tuple[Callable[[], Function], str]] = {
    "transpose": (lambda: _function(
        lambda b, ps: b.op("transpose", ps, {"perm": [1, 0]}), MATRIX), "transpose"),
    "reduce": (lambda: _function(
        lambda b, ps: b.op("reduce_sum", ps, {"axes": (1,)}), MATRIX), "reduce_sum"),
    "cast": (lambda: _function(
        lambda b, ps: b.op("cast", ps, {"dtype": "f32"}), VECTOR), "cast"),
    "for": (lambda: _function(_loop, VECTOR, VECTOR), "for"),
    "generic": (lambda: _function(_sum_of_squares, MATRIX), "generic"),
}


def _op(fn: Function, name: str) -> Op:
    return next(op for op in fn.body.walk() if op.name == name)


@pytest.mark.parametrize("case", FUNCTIONS)
def test_well_formed_ops_verify(case: str) -> None:
    build, _ = FUNCTIONS[case]
    verify_function(build())


# (case, attribute, how to spoil it, what the message says)
BAD: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("transpose", "perm", lambda a: a.pop("perm"), "missing attribute 'perm'"),
    ("transpose", "perm", lambda a: a.update(perm=["1", "0"]), "is not Sequence[int]"),
    ("transpose", "axis", lambda a: a.update(axis=0), "unexpected attribute 'axis'"),
    ("reduce", "axes", lambda a: a.update(axes=1), "is not Sequence[int]"),
    ("reduce", "axes", lambda a: a.update(axes=(True,)), "is not Sequence[int]"),
    ("cast", "dtype", lambda a: a.update(dtype="f8"), "is not Literal"),
    ("for", "carried", lambda a: a.update(carried=1.0), "is not int"),
    ("for", "carried", lambda a: a.pop("carried"), "missing attribute 'carried'"),
    ("for", "rows", lambda a: a.update(rows=N), "unexpected attribute 'rows'"),
    ("generic", "reduce", lambda a: a.update(reduce="mean"), "is not Literal"),
    ("generic", "indices", lambda a: a.update(indices=(("i", 0, N),)), "is not Sequence[tuple"),
    ("generic", "modes", lambda a: a.update(modes=("direct",)), "unexpected attribute 'modes'"),
]


@pytest.mark.parametrize("case, attribute, spoil, message", BAD,
                         ids=[f"{c}-{a}-{m.split()[0]}" for c, a, _, m in BAD])
def test_the_verifier_rejects_bad_attributes(case: str, attribute: str,
                                             spoil: Callable[[dict[str, Any]], None],
                                             message: str) -> None:
    build, name = FUNCTIONS[case]
    fn = build()
    spoil(_op(fn, name).attrs)
    with pytest.raises(VerifyError) as caught:
        verify_function(fn)
    text = str(caught.value)
    assert f"'{name}'" in text and f"'{attribute}'" in text and message in text, text


def test_a_bad_attribute_inside_a_region_is_found() -> None:
    fn = FUNCTIONS["generic"][0]()
    _op(fn, "read").attrs["modes"] = ("direct", "sideways")
    with pytest.raises(VerifyError, match=r"'read' attribute 'modes'"):
        verify_function(fn)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_a_schema_that_the_check_applies(name: str) -> None:
    """Each row declares its attributes; with none given, exactly the required ones are
    reported missing, and an attribute outside the schema is reported unexpected."""
    schema = OPS[name].attrs
    assert schema is not None, f"'{name}' declares no attribute schema"
    required = {a for a, hint in schema.items() if get_origin(hint) is not NotRequired}
    missing = attribute_errors(schema, {})
    assert len(missing) == len(required)
    assert all(any(f"'{a}'" in m for m in missing) for a in required)
    assert attribute_errors(schema, dict.fromkeys(schema) | {"bogus": 1})[0] == \
        "unexpected attribute 'bogus'"
    assert all(hint_name(hint) for hint in schema.values())


# ---------------------------------------------------------------- views


def test_for_view_names_the_loop_layout() -> None:
    fn = FUNCTIONS["for"][0]()
    op = _op(fn, "for")
    loop = ForOp(op)
    assert loop.carried == 1
    assert [loop.lo, loop.hi] == op.operands[:2]
    assert loop.inits == [fn.params[0]] and loop.invariants == [fn.params[1]]
    assert loop.index_param.name == "t"
    assert [p.name for p in loop.state_params] == ["u"]
    assert [p.name for p in loop.invariant_params] == ["w"]
    assert loop.final_states == op.results and loop.histories == []
    assert loop.split_operands("abcd") == (["a", "b"], ["c"], ["d"])
    assert loop.split_params("tuw") == ("t", ["u"], ["w"])
    with pytest.raises(TypeError, match="ForHistoryOp is a view of 'for_history', not of 'for'"):
        ForHistoryOp(op)


def test_generic_and_read_views() -> None:
    fn = FUNCTIONS["generic"][0]()
    generic = GenericOp(_op(fn, "generic"))
    assert generic.reduce == "sum"
    assert [name for name, _, _ in generic.indices] == ["i"]
    assert [name for name, _, _ in generic.ranges] == ["i", "j"]
    assert [p.name for p in generic.index_params] == ["i", "j"]
    assert generic.operand_params == generic.body.params[2:]
    read = ReadOp(_op(fn, "read"))
    assert read.tensor is generic.operand_params[0] and read.subscripts == generic.index_params
    assert read.label == "x" and tuple(read.modes) == ("direct", "direct")
    with pytest.raises(TypeError, match="ReduceOp"):
        ReduceOp(generic.op)


def test_reduce_view() -> None:
    op = _op(FUNCTIONS["reduce"][0](), "reduce_sum")
    assert ReduceOp(op).kind == "sum" and ReduceOp(op).axes == (1,)
