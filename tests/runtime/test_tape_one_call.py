"""The tape's short paths: `rv.grad` of one recorded call without a Pass, and what a
released node keeps (stand-ins only when its VJP reads no saved argument)."""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.tensors import tape

SOURCE = """
fn dot(x: f64[N], y: f64[N]) -> f64 { return sum(x * y); }
fn lin(x: f64[N], y: f64[N]) -> f64 { return sum(3.0 * x + y); }
fn pair(x: f64[N]) -> (f64, f64) { return (sum(x * x), sum(x)); }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def test_one_call_sums_a_tensor_passed_twice(m: rv.Module) -> None:
    x = rv.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (g,) = rv.grad(m.dot(x, x), x)
    np.testing.assert_array_equal(g.numpy(), [2.0, -4.0, 6.0])


def test_one_call_matches_a_full_pass(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    y = rv.tensor([5.0, 7.0], requires_grad=True)
    out = m.dot(x, y)
    seed = np.array(1.0)
    walked = tape.Pass([out], [seed], [y, x])
    walked.run(retain_graph=True, create_graph=False)
    short = tape.one_call_gradients(out, seed, (y, x), True, False)
    assert short is not None
    for fast, full in zip(short, [walked.gradient(y), walked.gradient(x)], strict=True):
        np.testing.assert_array_equal(fast, full)


def test_one_call_picks_the_output_of_a_tuple_result(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    squares, total = m.pair(x)
    (g,) = rv.grad(total, x, retain_graph=True)
    np.testing.assert_array_equal(g.numpy(), [1.0, 1.0])
    (g,) = rv.grad(squares, x)
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])


def test_one_call_leaves_larger_graphs_and_non_leaf_inputs_to_the_pass(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    out = m.dot(x, x)
    assert tape.one_call_gradients(out, np.array(1.0), (x, out), True, False) is None
    gx, gout = rv.grad(out, [x, out])
    np.testing.assert_array_equal(gx.numpy(), [2.0, 4.0])
    assert gout.item() == 1.0
    assert tape.one_call_gradients(out * 2.0, np.array(1.0), (x,), True, False) is None


def test_unused_input_is_none_without_running_the_call(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    other = rv.tensor([1.0, 2.0], requires_grad=True)
    out = m.dot(x, x)
    assert rv.grad(out, other, allow_unused=True) == (None,)
    assert not out.grad_fn.freed
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        rv.grad(out, other)


def test_released_node_keeps_nothing_when_its_vjp_reads_the_arguments(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0], requires_grad=True)
    out = m.dot(x, np.array([3.0, 4.0]))
    rv.grad(out, x)
    assert out.grad_fn.freed and out.grad_fn.args == () and out.grad_fn.arrays == ()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        rv.grad(out, x)


def test_released_linear_node_keeps_read_only_stand_ins_and_runs_again(m: rv.Module) -> None:
    x = rv.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = m.lin(x, np.arange(3.0))
    (first,) = rv.grad(out, x)
    node = out.grad_fn
    assert node.freed
    for stand_in in node.arrays:
        assert stand_in.shape == (3,) and stand_in.strides == (0,)
        assert not stand_in.flags.writeable and not stand_in.any()
    (second,) = rv.grad(out, x)
    np.testing.assert_array_equal(first.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(second.numpy(), first.numpy())
