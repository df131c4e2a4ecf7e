"""Batching: `batch_function` on whole programs and `batched_vjp` (is_grads_batched).

A batched function must equal a Python loop of unbatched runs, for any batch size and any
choice of batched parameters: a hypothesis property test draws them over a fixed pool of
small programs, and every example program is batched over all its parameters at once.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from forward_helpers import EXAMPLE_SIZES, batch_error, example_args, run
from hypothesis import given, settings
from hypothesis import strategies as st

import reverie as rv
from reverie import kernel_transforms as tf
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.transforms import batch_rules
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.reverse import vjp_function

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.rv"))
DIMS = {"N": 4, "M": 3, "K": 2}

POOL = [
    "fn f(x: f64[N], w: f64[N]) -> f64 { return sum(tanh(x * w)); }",
    "fn f(A: f64[N, M], x: f64[M], b: f64[N]) -> f64[N] { return relu(A @ x + b); }",
    "fn f(A: f64[N, K], B: f64[K, M]) -> (f64[N, M], f64[M, N]) "
    "{ let C = A @ B; return (C, C.T * 2.0); }",
    "fn f(x: f64[N, M], k: i64) -> (f64[M], i64[N]) { return (x[k] * x[0], argmax(x, axis=1)); }",
    "fn f(x: f64[N], k: f64[K]) -> f64[N] { let y[i in 0..N] = sum[j](x[i + j - 1] * k[j]); "
    "return y; }",
    "fn f(z: f64[N, M], labels: i64[N]) -> f64 { let p[n] = z[n, labels[n]]; "
    "return logsumexp(p) - max(z); }",
    "fn f(x: f64[N], w: f64[N], steps: i64) -> f64[N] { var u = x; "
    "for t in 0..steps { u = sin(u) * w + roll(u, 1); } return u; }",
    "fn f(x: f64[N, M], c: f64) -> f64[N, M + 1] "
    "{ return concat((softmax(x * c, axis=1), reshape(mean(x, axis=1), (N, 1))), axis=1); }",
    "fn f(x: f64[N, M]) -> f64[M] { let m[j] = prod[i](x[i, j]) + min[r](x[r, j]); "
    "return m + x[1:, :][0]; }",
    "fn f(x: f64[N], y: f64[N]) -> (f64, f64[N]) { return (sum(where(x > y, x, y ** 2)), "
    "max(x, y) - min(x, 0.5)); }",
]


@functools.cache
def program(index: int):  # noqa: ANN201 - a Function
    return rv.compile(POOL[index], backend="interp").lowering.specialise("f", "f64")


def draw_args(index: int, seed: int) -> list[np.ndarray]:
    """Arguments for program `index`: normal floats, valid indices for integers."""
    fn = program(index)
    rng = np.random.default_rng(seed)
    args = []
    for p, name in zip(fn.params, fn.param_names, strict=True):
        shape = tuple(d.evaluate(DIMS) for d in p.type.shape)
        if name == "labels":
            args.append(rng.integers(0, DIMS["M"], shape))
        elif p.type.is_int:
            args.append(np.int64(rng.integers(0, DIMS["N"])))
        else:
            args.append(rng.standard_normal(shape))
    return args


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, len(POOL) - 1), size=st.integers(1, 4),
       choice=st.integers(1, 2 ** 8), seed=st.integers(0, 2 ** 16))
def test_batching_random_programs_matches_a_loop(index: int, size: int, choice: int,
                                                 seed: int) -> None:
    fn = program(index)
    count = len(fn.params)
    batched = [i for i in range(count) if choice >> i & 1] or [choice % count]
    arg_sets = [draw_args(index, seed + b) for b in range(size)]
    for got, want in batch_error(fn, arg_sets, DIMS, batched):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _example_functions() -> list[tuple[str, str]]:
    return [(path.name, fn.name) for path in EXAMPLES
            for fn in rv.load(path, backend="interp").lowering.module.functions]


@pytest.mark.parametrize(("path", "name"), _example_functions())
def test_examples_batched_over_every_parameter_match_a_loop(path: str, name: str) -> None:
    fn = rv.load(Path(EXAMPLES[0].parent, path), backend="interp").lowering.specialise(
        name, "f64")
    arg_sets = [example_args(fn, seed) for seed in range(3)]
    for got, want in batch_error(fn, arg_sets, EXAMPLE_SIZES, list(range(len(fn.params)))):
        np.testing.assert_allclose(got, want, rtol=1e-5 if got.dtype == np.float32 else 1e-12,
                                   atol=1e-6 if got.dtype == np.float32 else 1e-12)


# ---------------------------------------------------------------- the IR pass


def test_batched_signature_and_broadcast_results() -> None:
    fn = program(9)
    batched = batch_function(fn, [0])
    assert batched.name == "f_batched" and batched.param_names == ["x", "y"]
    assert [str(p.type) for p in batched.params] == ["f64[B, N]", "f64[N]"]
    assert [str(t) for t in batched.result_types] == ["f64[B]", "f64[B, N]"]
    constant = rv.compile("fn f(x: f64[N], y: f64) -> (f64[N], f64) { return (x, y * 2.0); }",
                          backend="interp").lowering.specialise("f", "f64")
    x, y = run(batch_function(constant, [0]), [np.ones((3, 4)), 1.5], {"N": 4, "B": 3})
    np.testing.assert_array_equal(y, [3.0, 3.0, 3.0])
    assert format_function(batched) == format_function(batch_function(fn, [0]))


def test_batch_dimension_name_avoids_the_functions_own() -> None:
    fn = rv.compile("fn f(x: f64[B, N]) -> f64[B] { return sum(x, axis=1); }",
                    backend="interp").lowering.specialise("f", "f64")
    once = batch_function(fn, [0])
    twice = batch_function(once, [0])
    assert str(once.params[0].type) == "f64[B1, B, N]"
    assert str(twice.params[0].type) == "f64[B2, B1, B, N]"
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    (out,) = run(twice, [x], {"B2": 2, "B1": 3, "B": 4, "N": 5})
    np.testing.assert_allclose(out, x.sum(axis=3))


def test_batch_size_may_be_an_expression() -> None:
    fn = program(0)
    batched = batch_function(fn, [0], size=Dim.sym("N") * 2)
    assert str(batched.params[0].type) == "f64[2 * N, N]"


def test_the_whole_batch_runs_in_one_call_without_new_loops() -> None:
    for index in range(len(POOL)):
        fn = program(index)
        batched = batch_function(fn, list(range(len(fn.params))))
        loops = [op.name for op in batched.body.walk() if op.name == "for"]
        assert len(loops) == len([op for op in fn.body.walk() if op.name == "for"])


def test_batching_needs_a_batched_parameter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        batch_function(program(0), [])


@pytest.mark.usefixtures("uncached")
def test_a_missing_rule_is_a_compile_error_naming_the_op(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delitem(batch_rules.BATCH_RULES, "tanh")
    with pytest.raises(rv.CompileError, match="'tanh'"):
        batch_function(program(0), [0])


def test_out_of_range_batched_subscripts_still_raise() -> None:
    batched = batch_function(program(3), [1])
    x = np.zeros((4, 3))
    with pytest.raises(IndexError, match="out of bounds"):
        run(batched, [x, np.array([0, 7])], {**DIMS, "B": 2})


# ---------------------------------------------------------------- batched VJPs


SOURCE = """
fn layer(A: f64[N, M], x: f64[M]) -> f64[N] { return tanh(A @ x); }
fn pair(x: f64[N], w: f64[N]) -> (f64, f64[N]) { return (sum(sin(x) * w), x * w); }
"""


@functools.cache
def module() -> rv.Module:
    return rv.compile(SOURCE, backend="interp")


def test_batched_vjp_with_an_identity_gives_the_jacobian() -> None:
    rng = np.random.default_rng(4)
    a, x = rng.standard_normal((5, 3)), rng.standard_normal(3)
    grads = tf.batched_vjp(module().layer, [0, 1], [a, x], [np.eye(5)])
    want = torch.func.jacrev(lambda a, x: torch.tanh(a @ x), argnums=(0, 1))(
        torch.tensor(a), torch.tensor(x))
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-13)


def test_batched_vjp_matches_a_loop_of_vjps_and_accepts_missing_cotangents() -> None:
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(4), rng.standard_normal(4)
    cotangents = rng.standard_normal((3, 4))
    (gx,) = tf.batched_vjp(module().pair, [0], [x, w], [None, cotangents])
    vjp = vjp_function(module().lowering.specialise("pair", "f64"), [0])
    for b in range(3):
        (want,) = run(vjp, [x, w, 0.0, cotangents[b]], {"N": 4})[2:]
        np.testing.assert_allclose(gx[b], want, atol=1e-14)


def test_batched_vjp_rejects_disagreeing_batch_sizes() -> None:
    x = np.ones(4)
    with pytest.raises(ValueError, match="B"):
        tf.batched_vjp(module().pair, [0], [x, x], [np.ones(2), np.ones((3, 4))])
