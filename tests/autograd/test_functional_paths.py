"""`rv.autograd.functional` against torch.autograd.functional on every argument combination,
and its two paths: the compiled one (the function traced into one kernel) and the tape.

For each function (exp/sin/sum/matmul compositions, one that traces and one with a Python
`if` on a value, which does not) and each combination of `create_graph`, `strict`,
`vectorize`, strategy and `v`, Reverie gives what torch gives: the same exception class, or
the same nesting (tuples, torch's lists for forward mode), shapes, values, and whether each
result requires grad; with `create_graph=True`, the gradients of the results agree too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402
import reverie.autograd.functional as F  # noqa: E402
from reverie.autograd.functional_traced import trace_function  # noqa: E402
from tests.autograd.parity import as_array, assert_close  # noqa: E402

RNG = np.random.default_rng(8)
X, Y = RNG.random((3, 4)), RNG.random((4, 2))


def two_outputs(lib, x, y):
    return (x.exp() @ y).sin(), (x * x).sum()


def one_output(lib, x):
    return (x.sin() * x).sum(1)


def branching(lib, x):  # a Python `if` on a value: rv.trace refuses it
    return x.exp() if float(x.sum()) > 0 else x.sin()


def scalar_of_two(lib, x, y):
    return ((x.exp() @ y).sin() ** 2).sum()


def scalar_of_one(lib, x):
    return (x.sin() * x.exp()).sum()


def scalar_branching(lib, x):
    return (x.exp() * x).sum() if float(x.sum()) > 0 else x.sum()


VECTOR_FUNCTIONS = [(two_outputs, (X, Y)), (one_output, (X,)), (branching, (X,))]
SCALAR_FUNCTIONS = [(scalar_of_two, (X, Y)), (scalar_of_one, (X,)), (scalar_branching, (X,))]
STRATEGIES = ["reverse-mode", "forward-mode"]
LIBS = {"torch": torch, "reverie": rv}


def run(lib_name, api, fn, arrays, tuple_inputs, v_arrays, **options):
    """`api` of library `lib_name` on `fn`: (result or exception class, inputs)."""
    lib = LIBS[lib_name]
    grad_needed = options.get("create_graph", False)
    inputs = tuple(lib.tensor(a, requires_grad=grad_needed) for a in arrays)
    args = [lambda *xs: fn(lib, *xs), inputs if tuple_inputs else inputs[0]]
    if v_arrays is not None:
        vs = tuple(lib.tensor(a) for a in v_arrays)
        args.append(vs if len(vs) > 1 else vs[0])
    try:
        return getattr(lib.autograd.functional, api)(*args, **options), inputs
    except Exception as error:  # noqa: BLE001 -- compared with torch's class below
        return type(error), inputs


def flatten(value):
    return [t for item in value for t in flatten(item)] if isinstance(value, tuple | list) \
        else [value]


def assert_same_nesting(result, expected):
    """The same tuple/list nesting (list where torch gives a list) and shapes."""
    assert type(result) is type(expected) or (
        isinstance(result, rv.Tensor) and isinstance(expected, torch.Tensor)), \
        (type(result), type(expected))
    if isinstance(expected, tuple | list):
        assert len(result) == len(expected)
        for r, e in zip(result, expected, strict=True):
            assert_same_nesting(r, e)
    else:
        assert tuple(result.shape) == tuple(expected.shape)


def compare(api, fn, arrays, tuple_inputs=True, v_arrays=None, **options):
    """Reverie's `api` gives torch's error class, or its nesting, values and graph.

    One difference is deliberate: torch's forward-mode Hessian returns results that require
    grad (its `jac_func` sets `requires_grad_` on the inputs) even with create_graph=False;
    Reverie's do not, as for every other create_graph=False result."""
    expected, torch_inputs = run("torch", api, fn, arrays, tuple_inputs, v_arrays, **options)
    result, rv_inputs = run("reverie", api, fn, arrays, tuple_inputs, v_arrays, **options)
    if isinstance(expected, type):
        assert result is expected, (result, expected)
        return
    assert not isinstance(result, type), result
    assert_same_nesting(result, expected)
    for r, e in zip(flatten(result), flatten(expected), strict=True):
        assert_close(r, e, rtol=1e-10)
        torch_leaks_graph = options.get("outer_jacobian_strategy") == "forward-mode"
        assert r.requires_grad == e.requires_grad or torch_leaks_graph
    if options.get("create_graph"):
        assert_second_order(result, expected, rv_inputs, torch_inputs)


def assert_second_order(result, expected, rv_inputs, torch_inputs):
    """The results of create_graph=True differentiate again, to torch's gradients."""
    pairs = [(r, e) for r, e in zip(flatten(result), flatten(expected), strict=True)
             if e.requires_grad]
    if not pairs:
        return
    weights = [RNG.random(tuple(e.shape)) for _, e in pairs]
    rv_loss = sum((r * w).sum() for (r, _), w in zip(pairs, weights, strict=True))
    torch_loss = sum((e * torch.tensor(w)).sum() for (_, e), w in zip(pairs, weights,
                                                                       strict=True))
    got = rv.grad(rv_loss, rv_inputs, materialize_grads=True)
    want = torch.autograd.grad(torch_loss, torch_inputs, materialize_grads=True)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, rtol=1e-10)


def name_of(value):
    return getattr(value, "__name__", "")


GRID = list(itertools.product([False, True], [False, True], [False, True], STRATEGIES))


@pytest.mark.parametrize(("fn", "arrays"), VECTOR_FUNCTIONS, ids=name_of)
@pytest.mark.parametrize(("create_graph", "strict", "vectorize", "strategy"), GRID)
def test_jacobian_as_torch(fn, arrays, create_graph, strict, vectorize, strategy):
    compare("jacobian", fn, arrays, tuple_inputs=len(arrays) > 1, create_graph=create_graph,
            strict=strict, vectorize=vectorize, strategy=strategy)


@pytest.mark.parametrize(("fn", "arrays"), SCALAR_FUNCTIONS, ids=name_of)
@pytest.mark.parametrize(("create_graph", "strict", "vectorize", "strategy"), GRID)
def test_hessian_as_torch(fn, arrays, create_graph, strict, vectorize, strategy):
    compare("hessian", fn, arrays, tuple_inputs=len(arrays) > 1, create_graph=create_graph,
            strict=strict, vectorize=vectorize, outer_jacobian_strategy=strategy)


PRODUCT_GRID = list(itertools.product([False, True], [False, True], [True, False]))


def output_shapes(fn, arrays):
    values = fn(torch, *(torch.tensor(a) for a in arrays))
    return [tuple(v.shape) for v in (values if isinstance(values, tuple) else (values,))]


@pytest.mark.parametrize(("fn", "arrays"), VECTOR_FUNCTIONS, ids=name_of)
@pytest.mark.parametrize(("create_graph", "strict", "give_v"), PRODUCT_GRID)
def test_vjp_as_torch(fn, arrays, create_graph, strict, give_v):
    v = [RNG.random(s) for s in output_shapes(fn, arrays)] if give_v else None
    compare("vjp", fn, arrays, len(arrays) > 1, v, create_graph=create_graph, strict=strict)


@pytest.mark.parametrize(("fn", "arrays"), VECTOR_FUNCTIONS + SCALAR_FUNCTIONS,
                         ids=name_of)
@pytest.mark.parametrize(("create_graph", "strict", "give_v"), PRODUCT_GRID)
@pytest.mark.parametrize("api", ["jvp", "hvp", "vhp"])
def test_products_as_torch(api, fn, arrays, create_graph, strict, give_v):
    v = [RNG.random(a.shape) for a in arrays] if give_v else None
    compare(api, fn, arrays, len(arrays) > 1, v, create_graph=create_graph, strict=strict)


def test_implicit_v_of_one_element():
    """v=None where torch allows it: one one-element output (vjp) or input (jvp, hvp)."""
    one = (np.array([0.7]),)
    compare("vjp", scalar_of_one, (X,), False)
    for api in ("jvp", "hvp", "vhp"):
        compare(api, scalar_of_one, one, False)


# ---------------------------------------------------------------- the two paths


@pytest.fixture
def tape_calls(monkeypatch):
    """How many times `rv.grad` (the tape) runs."""
    calls = []
    grad = rv.grad

    def counting(*args, **kwargs):
        calls.append(1)
        return grad(*args, **kwargs)

    monkeypatch.setattr(rv, "grad", counting)
    return calls


def test_traced_function_runs_compiled(tape_calls):
    """A function that traces: every result from compiled kernels, the tape untouched."""
    for api in ("jacobian", "hessian"):
        fn = two_outputs if api == "jacobian" else scalar_of_two
        compare(api, fn, (X, Y))
    compare("vjp", two_outputs, (X, Y), True, [RNG.random((3, 2)), RNG.random(())])
    for api in ("jvp", "hvp", "vhp"):
        compare(api, scalar_of_two, (X, Y), True, [RNG.random(X.shape), RNG.random(Y.shape)])
    assert tape_calls == []


@pytest.mark.parametrize("api", ["jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"])
def test_untraceable_function_runs_on_the_tape(tape_calls, api):
    """A Python `if` on a value (rv.TraceError): the same results, from the tape."""
    fn = branching if api in ("jacobian", "vjp", "jvp") else scalar_branching
    v = [RNG.random(X.shape)]
    compare(api, fn, (X,), False, None if api in ("jacobian", "hessian") else v)
    assert tape_calls


def test_a_method_the_stand_ins_lack_runs_on_the_tape(tape_calls):
    """`x.detach()` is a refusal to trace too."""
    def half_detached(lib, x):
        return x.exp() * x.detach()

    compare("jacobian", half_detached, (X,), False)
    assert tape_calls


@pytest.mark.parametrize("option", ["create_graph", "strict"])
def test_create_graph_and_strict_use_the_tape(tape_calls, option):
    compare("jacobian", one_output, (X,), False, **{option: True})
    assert tape_calls


def test_other_errors_while_tracing_propagate():
    """Only a refusal to trace falls back: another error raised by the function on the
    stand-ins is the caller's to see."""
    def tensors_only(x):
        if not isinstance(x, rv.Tensor):
            raise ValueError("tensors only")
        return x.exp()

    with pytest.raises(ValueError, match="tensors only"):
        F.jacobian(tensors_only, rv.tensor(X))


def test_compiled_and_tape_paths_agree():
    """The same Jacobian and Hessian from the compiled path and from the tape (strict=True
    takes the tape), for a function that traces."""
    x, y = rv.tensor(X), rv.tensor(Y)

    def vector(a, b):
        return two_outputs(rv, a, b)

    def scalar(a, b):
        return scalar_of_two(rv, a, b)

    compiled, tape = F.jacobian(vector, (x, y)), F.jacobian(vector, (x, y), create_graph=True)
    for c, t in zip(flatten(compiled), flatten(tape), strict=True):
        assert_close(c, as_array(t), rtol=1e-10)
    compiled, tape = F.hessian(scalar, (x, y)), F.hessian(scalar, (x, y), strict=True)
    for c, t in zip(flatten(compiled), flatten(tape), strict=True):
        assert_close(c, t, rtol=1e-10)


def test_a_function_traced_again_reuses_its_kernels():
    """The same program traced twice: the second call runs the kernels (and transforms)
    compiled for the first, not a new compilation."""
    x = (rv.tensor(X),)

    def fn(a):
        return one_output(rv, a)

    first, second = trace_function(fn, x), trace_function(fn, x)
    assert first.kernel is second.kernel
    assert trace_function(lambda a: one_output(rv, a) * 2.0, x).kernel is not first.kernel
