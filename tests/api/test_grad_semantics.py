"""Differential tests of `rv.grad` / `rv.backward` against `torch.autograd`.

Each scenario is one row (or one case of a row) of torch.autograd's behaviour (docs/api.md §4,
"torch.autograd parity"), written once against a small library interface
and run twice: with torch and with Reverie (operators and compiled kernels). The two runs
must agree on the result (structure, shapes, dtypes, requires_grad, values), on the
exception class when one is raised, and on the warning categories.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")

SOURCE = """
fn sin_(x: float[N]) -> float[N] { return sin(x); }
fn first(x: float[N], w: float) -> float { return sum(x); }
fn sqrt_(x: float[N]) -> float { return sum(sqrt(x)); }
fn log_(x: float[N]) -> float { return sum(log(x)); }
fn abs_(x: float[N]) -> float { return sum(abs(x)); }
fn relu_(x: float[N]) -> float { return sum(relu(x)); }
fn sign_(x: float[N]) -> float { return sum(sign(x) * x); }
fn maximum_(x: float[N], y: float[N]) -> float { return sum(max(x, y)); }
fn minimum_(x: float[N], y: float[N]) -> float { return sum(min(x, y)); }
fn max_all(x: float[N]) -> float { return max(x); }
fn where_sqrt(x: float[N]) -> float { return sum(where(x > 0, sqrt(x), 0)); }
"""

NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64}
TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64}


class TorchLib:
    """The scenario interface, implemented with torch."""

    grad = staticmethod(torch.autograd.grad)
    backward = staticmethod(torch.autograd.backward)
    functions: dict[str, Callable] = {
        "sin_": torch.sin,
        "first": lambda x, w: x.sum(),
        "sqrt_": lambda x: torch.sqrt(x).sum(),
        "log_": lambda x: torch.log(x).sum(),
        "abs_": lambda x: torch.abs(x).sum(),
        "relu_": lambda x: torch.relu(x).sum(),
        "sign_": lambda x: (torch.sign(x) * x).sum(),
        "maximum_": lambda x, y: torch.maximum(x, y).sum(),
        "minimum_": lambda x, y: torch.minimum(x, y).sum(),
        "max_all": torch.max,
        "where_sqrt": lambda x: torch.where(x > 0, torch.sqrt(x), 0.0).sum(),
    }

    @staticmethod
    def tensor(data: object, requires_grad: bool = False, dtype: str = "f64") -> object:
        return torch.tensor(np.asarray(data, NUMPY_DTYPES[dtype]), dtype=TORCH_DTYPES[dtype],
                            requires_grad=requires_grad)

    def call(self, name: str, *args: object) -> object:
        return self.functions[name](*args)


class ReverieLib:
    """The scenario interface, implemented with Reverie Tensors and compiled kernels."""

    grad = staticmethod(rv.grad)
    backward = staticmethod(rv.backward)
    module = None

    @staticmethod
    def tensor(data: object, requires_grad: bool = False, dtype: str = "f64") -> object:
        return rv.tensor(data, dtype=NUMPY_DTYPES[dtype], requires_grad=requires_grad)

    def call(self, name: str, *args: object) -> object:
        if ReverieLib.module is None:
            ReverieLib.module = rv.compile(SOURCE)
        return ReverieLib.module[name](*args)


SCENARIOS: dict[str, Callable] = {}


def row(fn: Callable) -> Callable:
    """Register a scenario."""
    SCENARIOS[fn.__name__] = fn
    return fn


def _x(L, dtype: str = "f64") -> object:
    return L.tensor([0.5, -1.5], requires_grad=True, dtype=dtype)


# ---------------------------------------------------------------- return and arguments


@row
def single_input_returns_tuple(L):
    x = _x(L)
    return L.grad((x * x).sum(), x)


@row
def outputs_and_inputs_as_lists(L):
    x, y = _x(L), L.tensor([2.0, 3.0], requires_grad=True)
    return L.grad([(x * y).sum()], [x, y])


@row
def inputs_as_generator(L):
    x = _x(L)
    return L.grad((x * x).sum(), (t for t in [x]))


@row
def dict_inputs_give_dict(L):
    x, y = _x(L), L.tensor([2.0, 3.0], requires_grad=True)
    return L.grad((x * y).sum(), {"x": x, "y": y})


@row
def other_mapping_inputs(L):
    x = _x(L)
    return L.grad((x * x).sum(), OrderedDict(x=x))


@row
def empty_inputs(L):
    x = _x(L)
    return L.grad((x * x).sum(), [])


@row
def non_tensor_input(L):
    x = _x(L)
    return L.grad((x * x).sum(), [x, 1.0])


@row
def several_outputs_are_summed(L):
    x = _x(L)
    return L.grad([(x * x).sum(), (x * 3.0).sum(), L.call("sin_", x).sum()], x)


# ---------------------------------------------------------------- grad_outputs


@row
def non_scalar_output_implicit(L):
    x = _x(L)
    return L.grad(x * 2.0, x)


@row
def non_scalar_output_none_entry(L):
    x = _x(L)
    return L.grad(x * 2.0, x, [None])


@row
def one_element_output_of_shape_1(L):
    x = L.tensor([3.0], requires_grad=True)
    return L.grad(x * x, x)


@row
def grad_outputs_shape_mismatch(L):
    x = _x(L)
    return L.grad(x * 2.0, x, L.tensor([1.0]))


@row
def grad_outputs_broadcastable_is_still_a_mismatch(L):
    x = L.tensor(np.ones((2, 3)), requires_grad=True)
    return L.grad(x * 2.0, x, L.tensor([1.0, 2.0, 3.0]))


@row
def grad_outputs_bare_tensor(L):
    x = _x(L)
    return L.grad(x * 2.0, x, L.tensor([1.0, 3.0]))


@row
def grad_outputs_python_float(L):
    x = _x(L)
    return L.grad((x * x).sum(), x, [1.0])


@row
def fewer_grad_outputs_than_outputs(L):
    x = _x(L)
    return L.grad([(x * x).sum(), (x * 2.0).sum()], x, [L.tensor(1.0)])


@row
def extra_grad_outputs_are_ignored(L):
    x = _x(L)
    return L.grad([(x * x).sum()], x, [L.tensor(2.0), L.tensor(5.0)])


@row
def grad_output_dtype_is_cast(L):
    x = _x(L)
    return L.grad((x * x).sum(), x, [L.tensor(2.0, dtype="f32")])


@row
def integer_grad_output_is_cast(L):
    x = _x(L, "f32")
    return L.grad(x * 2.0, x, L.tensor([1, 2], dtype="i64"))


@row
def each_grad_has_its_input_dtype(L):
    x32, x64 = _x(L, "f32"), L.tensor([2.0, 4.0], requires_grad=True)
    return L.grad((x32 * x64).sum(), [x32, x64])


# ---------------------------------------------------------------- unused inputs


@row
def unused_input(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad((x * x).sum(), [x, w])


@row
def unused_input_allowed(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad((x * x).sum(), [x, w], allow_unused=True)


@row
def unused_input_materialized(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad((x * x).sum(), [x, w], materialize_grads=True)


@row
def unused_input_materialized_with_create_graph(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad((x * x).sum(), [x, w], materialize_grads=True, create_graph=True)


@row
def materialize_with_allow_unused_false(L):
    x = _x(L)
    return L.grad((x * x).sum(), [x], materialize_grads=True, allow_unused=False)


@row
def materialize_with_allow_unused_false_checked_first(L):
    x = _x(L)
    return L.grad((x * x).sum(), [], materialize_grads=True, allow_unused=False)


@row
def input_the_compiled_code_ignores(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad(L.call("first", x, w), [x, w])


@row
def input_the_compiled_code_ignores_allowed(L):
    x, w = _x(L), L.tensor(1.0, requires_grad=True)
    return L.grad(L.call("first", x, w), [x, w], allow_unused=True)


@row
def recomputed_intermediate_is_unused(L):
    x = _x(L)
    return L.grad((x * 2.0).sum(), x * 2.0)


# ---------------------------------------------------------------- requires_grad


@row
def output_not_requiring_grad(L):
    x, c = _x(L), L.tensor([1.0, 2.0])
    return L.grad((c * c).sum(), x)


@row
def output_not_requiring_grad_with_none_grad_output(L):
    x, c = _x(L), L.tensor([1.0, 2.0])
    return L.grad([(x * x).sum(), (c * c).sum()], x, [None, None])


@row
def input_not_requiring_grad(L):
    x, c = _x(L), L.tensor([1.0, 2.0])
    return L.grad((x * c).sum(), [x, c])


@row
def non_leaf_input(L):
    x = _x(L)
    z = L.call("sin_", x)
    return L.grad((z * z).sum(), z)


@row
def output_is_input(L):
    x = _x(L)
    return L.grad(x, x, L.tensor([1.0, 2.0]))


@row
def requires_grad_on_integers(L):
    return L.tensor([1, 2], requires_grad=True, dtype="i64")


# ---------------------------------------------------------------- graph lifetime


@row
def second_pass_over_freed_graph(L):
    x = _x(L)
    y = L.call("sin_", x).sum()
    L.grad(y, x)
    return L.grad(y, x)


@row
def second_pass_over_freed_product(L):
    x = _x(L)
    y = (x * x).sum()
    L.grad(y, x)
    return L.grad(y, x)


@row
def second_pass_with_retained_graph(L):
    x = _x(L)
    y = L.call("sin_", x).sum()
    L.grad(y, x, retain_graph=True)
    return L.grad(y, x)


@row
def second_pass_over_nodes_that_saved_nothing(L):
    x = _x(L)
    y = (x + 1.0).sum()
    L.grad(y, x)
    return L.grad(y, x)


@row
def create_graph_retains_by_default(L):
    x = _x(L)
    y = L.call("sin_", x).sum()
    L.grad(y, x, create_graph=True)
    return L.grad(y, x)


@row
def explicit_retain_false_wins_over_create_graph(L):
    x = _x(L)
    y = L.call("sin_", x).sum()
    L.grad(y, x, create_graph=True, retain_graph=False)
    return L.grad(y, x)


@row
def create_graph_results_require_grad(L):
    x = _x(L)
    (g,) = L.grad(L.call("sin_", x).sum(), x, create_graph=True)
    return g, L.grad(g.sum(), x)


@row
def create_graph_constant_gradient_does_not_require_grad(L):
    x = _x(L)
    return L.grad((x * 2.0).sum(), x, create_graph=True)


@row
def grad_outputs_requiring_grad_without_create_graph(L):
    x = _x(L)
    return L.grad(x * 2.0, x, L.tensor([1.0, 1.0], requires_grad=True))


@row
def grad_outputs_requiring_grad_with_create_graph(L):
    x = _x(L)
    return L.grad(x * 2.0, x, L.tensor([1.0, 1.0], requires_grad=True), create_graph=True)


# ---------------------------------------------------------------- is_grads_batched


@row
def batched_identity_gives_eye(L):
    x = _x(L)
    return L.grad(x, x, L.tensor(np.eye(2)), is_grads_batched=True)


@row
def batched_materialized_zeros_have_no_batch_dim(L):
    x, w = _x(L), L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    return L.grad(x, [x, w], L.tensor(np.eye(2)), is_grads_batched=True,
                  materialize_grads=True)


@row
def batched_grad_output_without_batch_dim(L):
    x = _x(L)
    return L.grad(x * 2.0, x, L.tensor([1.0, 1.0]), is_grads_batched=True)


@row
def batched_none_grad_output_scalar(L):
    x = _x(L)
    return L.grad((x * x).sum(), x, is_grads_batched=True)


@row
def batched_none_grad_output_non_scalar(L):
    x = _x(L)
    return L.grad(x * 2.0, x, is_grads_batched=True)


@row
def batched_sizes_disagree(L):
    x = _x(L)
    return L.grad([x, x], x, [L.tensor(np.eye(2)), L.tensor(np.ones((3, 2)))],
                  is_grads_batched=True)


# ---------------------------------------------------------------- other rows


@row
def only_inputs_false_warns(L):
    x = _x(L)
    return L.grad((x * x).sum(), x, only_inputs=False)


@row
def same_tensor_twice(L):
    x = _x(L)
    return L.grad((x * x).sum(), [x, x])


@row
def grad_does_not_touch_dot_grad(L):
    x = _x(L)
    L.grad((x * x).sum(), x)
    return x.grad


@row
def empty_tensor(L):
    e = L.tensor(np.zeros(0), requires_grad=True)
    return L.grad((e * 2.0).sum(), e)


@row
def zero_d_tensor(L):
    s = L.tensor(2.0, requires_grad=True)
    return L.grad(s * s, s)


@row
def detach_leaves_the_graph(L):
    x = _x(L)
    d = (x * 2.0).detach()
    return d, d.requires_grad, d.is_leaf, d.grad_fn is None


# ---------------------------------------------------------------- backward


@row
def backward_accumulates_in_place(L):
    x = _x(L)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    first = x.grad
    y.backward()
    return x.grad, first is x.grad


@row
def backward_with_gradient(L):
    x = _x(L)
    (x * 2.0).backward(L.tensor([1.0, 3.0]))
    return x.grad


@row
def backward_function_several_tensors(L):
    x = _x(L)
    L.backward([(x * x).sum(), L.call("sin_", x).sum()])
    return x.grad


@row
def backward_function_grad_tensors(L):
    x = _x(L)
    L.backward(x * 2.0, grad_tensors=L.tensor([1.0, 3.0]))
    return x.grad


@row
def backward_inputs_restricts_and_fills_non_leaves(L):
    x, y = _x(L), L.tensor([2.0, 3.0], requires_grad=True)
    z = x * y
    (z * z).sum().backward(inputs=[z, y])
    return z.grad, y.grad, x.grad


@row
def backward_inputs_empty(L):
    x = _x(L)
    return (x * x).sum().backward(inputs=[])


@row
def backward_non_scalar(L):
    x = _x(L)
    return (x * 2.0).backward()


@row
def backward_not_requiring_grad(L):
    return L.tensor(1.0).backward()


@row
def backward_create_graph(L):
    x = _x(L)
    L.call("sin_", x).sum().backward(create_graph=True)
    g = x.grad
    return g, L.grad(g.sum(), x)


@row
def backward_freed_graph(L):
    x = _x(L)
    y = L.call("sin_", x).sum()
    y.backward()
    return y.backward()


@row
def non_leaf_grad_read_warns(L):
    x = _x(L)
    return (x * 2.0).grad


@row
def leaf_grad_read_does_not_warn(L):
    return _x(L).grad


# ---------------------------------------------------------------- non-differentiable points


def _at_zero(name: str, values: list[float]) -> Callable:
    def scenario(L):
        x = L.tensor(values, requires_grad=True)
        return L.grad(L.call(name, x), x)
    scenario.__name__ = f"{name}at_non_differentiable_point"
    return row(scenario)


for _name, _values in [("sqrt_", [0.0, 4.0]), ("log_", [0.0, 1.0]), ("abs_", [0.0, -2.0]),
                       ("relu_", [0.0, 1.0]), ("sign_", [0.0, -3.0]),
                       ("max_all", [1.0, 3.0, 3.0]), ("where_sqrt", [0.0, 4.0])]:
    _at_zero(_name, _values)


@row
def reciprocal_at_zero(L):
    x = L.tensor([0.0, 2.0], requires_grad=True)
    return L.grad((1.0 / x).sum(), x)


@row
def maximum_ties_split(L):
    x, y = L.tensor([1.0, 2.0], requires_grad=True), L.tensor([1.0, 0.0], requires_grad=True)
    return L.grad(L.call("maximum_", x, y), [x, y])


@row
def minimum_ties_split(L):
    x, y = L.tensor([1.0, 2.0], requires_grad=True), L.tensor([1.0, 0.0], requires_grad=True)
    return L.grad(L.call("minimum_", x, y), [x, y])


# ---------------------------------------------------------------- the comparison


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor | rv.Tensor)


def summary(value: object) -> object:
    """A library-neutral description of a scenario's result."""
    if _is_tensor(value):
        array = np.asarray(value.detach())
        return ("tensor", array.shape, str(array.dtype), value.requires_grad, array)
    if isinstance(value, tuple | list):
        return tuple(summary(v) for v in value)
    if isinstance(value, dict):
        return {k: summary(v) for k, v in value.items()}
    return value


def outcome(scenario: Callable, lib: object) -> tuple[str, object, set[str]]:
    """('ok', summary) or ('raises', exception), plus the warning categories seen."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: tuple[str, object] = ("ok", summary(scenario(lib)))
        except Exception as error:  # noqa: BLE001 - the class is what is compared
            result = ("raises", error)
    categories = {w.category.__name__ for w in caught
                  if "reference cycle" not in str(w.message)}
    return (*result, categories)


def assert_same(expected: object, actual: object, where: str = "result") -> None:
    """Equal structure and metadata, values equal up to rounding (NaN equals NaN)."""
    if isinstance(expected, tuple) and expected and expected[0] == "tensor":
        assert isinstance(actual, tuple) and actual[0] == "tensor", f"{where}: {actual}"
        assert expected[1:4] == actual[1:4], f"{where}: (shape, dtype, requires_grad) " \
                                             f"{actual[1:4]} != torch {expected[1:4]}"
        np.testing.assert_allclose(actual[4], expected[4], rtol=1e-6, atol=1e-7,
                                   err_msg=where)
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), \
            f"{where}: {actual} != torch {expected}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != torch {expected!r}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_as_torch(name: str) -> None:
    scenario = SCENARIOS[name]
    kind, torch_value, torch_warnings = outcome(scenario, TorchLib())
    rv_kind, rv_value, rv_warnings = outcome(scenario, ReverieLib())
    if kind == "raises":
        assert rv_kind == "raises", f"torch raised {torch_value!r}; Reverie returned {rv_value}"
        assert isinstance(rv_value, type(torch_value)), \
            f"torch raised {type(torch_value).__name__}, Reverie {rv_value!r}"
        assert len(str(rv_value)) > 20, "messages should say what to do"
    else:
        if rv_kind == "raises":
            raise AssertionError(f"Reverie raised {rv_value!r}") from rv_value
        assert_same(torch_value, rv_value)
    assert rv_warnings == torch_warnings


# ---------------------------------------------------------------- batched routing (Reverie only)


def test_batched_grads_use_one_compiled_batched_vjp_and_match_torch() -> None:
    values, seeds = np.array([0.5, 1.0, -2.0]), np.eye(3)
    x = rv.tensor(values, requires_grad=True)
    (ours,) = rv.grad(ReverieLib().call("sin_", x) * x, x, rv.tensor(seeds),
                      is_grads_batched=True)
    tx = torch.tensor(values, requires_grad=True)
    (theirs,) = torch.autograd.grad(torch.sin(tx) * tx, tx, torch.tensor(seeds),
                                    is_grads_batched=True)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_batched_grads_make_one_batched_call_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from reverie.runtime.tensors import tape

    batches = []

    def row_by_row(kernel, wrt, args, cotangents):  # a stand-in for the batching pass
        batches.append(cotangents[0].shape[0])
        vjp = kernel.vjp(list(wrt))
        rows = [vjp(*args, *[c[b] for c in cotangents]) for b in range(batches[-1])]
        return tuple(np.stack([r[j] for r in rows]) for j in range(len(wrt)))

    monkeypatch.setattr(tape, "batched_vjp", row_by_row)
    values, seeds = np.array([0.5, -1.0, 2.0]), np.eye(3)[:2]
    x = rv.tensor(values, requires_grad=True)
    (ours,) = rv.grad(ReverieLib().call("sin_", x) * x, x, rv.tensor(seeds),
                      is_grads_batched=True)
    tx = torch.tensor(values, requires_grad=True)
    (theirs,) = torch.autograd.grad(torch.sin(tx) * tx, tx, torch.tensor(seeds),
                                    is_grads_batched=True)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy())
    assert batches == [2, 2]
