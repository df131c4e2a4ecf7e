"""The recorded path's short cuts (`tape.python_call_path`, `rv.grad`'s common case) give
exactly what the general path gives: the same gradients, the same errors, the same nodes;
the grad mode is each thread's own; a kernel's Python path takes the tape's once Tensors
exist."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import reverie as rv

SOURCE = """
fn dot(x: f64[N], y: f64[N]) -> f64 { return sum(x * y); }
fn sq(x: f64[N]) -> f64[N] { return x * x; }
fn many(a: f64[N], b: f64[N], c: f64[N], d: f64[N]) -> f64 { return sum(a * b + c * d); }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def leaf(values: list[float]) -> rv.Tensor:
    return rv.tensor(values, requires_grad=True)


def test_the_common_case_matches_the_general_path(m: rv.Module) -> None:
    x, y = leaf([1.0, 2.0]), leaf([3.0, -4.0])
    (fast,) = rv.grad(m.dot(x, y), x)
    general = rv.grad([m.dot(x, y)], [x, y])
    np.testing.assert_array_equal(fast.numpy(), general[0].numpy())
    np.testing.assert_array_equal(fast.numpy(), [3.0, -4.0])


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_a_tensor_at_any_position_is_recorded_alone(m: rv.Module, position: int) -> None:
    arrays = [np.arange(3.0) + i for i in range(4)]
    t = leaf(list(arrays[position]))
    args = [t if i == position else a for i, a in enumerate(arrays)]
    out = m.many(*args)
    assert out.grad_fn is not None and out.grad_fn.wrt == (position,)
    partner = arrays[position ^ 1]  # a*b + c*d: the partner of a is b, of c is d
    np.testing.assert_array_equal(rv.grad(out, t)[0].numpy(), partner)


def test_a_tensor_that_does_not_require_grad_is_unwrapped_not_recorded(m: rv.Module) -> None:
    x, y = leaf([1.0, 2.0]), rv.tensor([5.0, 7.0])
    out = m.dot(y, x)
    assert out.grad_fn.wrt == (1,)
    plain = m.dot(y, y)  # nothing requires grad: a plain run, NumPy's result
    assert not isinstance(plain, rv.Tensor) and plain == 74.0


def test_nothing_is_recorded_under_no_grad(m: rv.Module) -> None:
    x = leaf([1.0, 2.0])
    with rv.no_grad():
        out = m.dot(x, x)
    assert not isinstance(out, rv.Tensor)  # a plain run: nothing recorded


def test_an_unused_input_gives_the_general_paths_answers(m: rv.Module) -> None:
    x, unused = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    with pytest.raises(RuntimeError, match="was not used"):
        rv.grad(m.dot(x, x), unused)
    assert rv.grad(m.dot(x, x), unused, allow_unused=True) == (None,)
    (zeros,) = rv.grad(m.dot(x, x), unused, materialize_grads=True)
    np.testing.assert_array_equal(zeros.numpy(), [0.0, 0.0])


def test_the_cases_the_short_cut_leaves_raise_as_before(m: rv.Module) -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="implicit gradient"):
        rv.grad(m.sq(x), x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        rv.grad(m.dot(x, x), rv.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="output 0 does not require grad"):
        rv.grad(rv.tensor(1.0), x)
    with pytest.raises(ValueError, match="contradicts"):
        rv.grad(m.dot(x, x), x, allow_unused=False, materialize_grads=True)


def test_a_graph_released_by_the_short_cut_says_so(m: rv.Module) -> None:
    x = leaf([1.0, 2.0])
    out = m.dot(x, x)
    rv.grad(out, x)
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        rv.grad(out, x)


def test_grad_of_a_leaf_itself_is_a_fresh_one(m: rv.Module) -> None:
    x = rv.tensor(2.0, requires_grad=True)
    (g,) = rv.grad(x, x)
    g.numpy()[()] = 5.0  # the caller's to change: it must not be a shared seed
    assert rv.grad(x, x)[0].item() == 1.0


def test_grad_mode_is_each_threads_own_while_threads_run_together(m: rv.Module) -> None:
    """`rv.no_grad` in one thread never stops another from recording (the mode is a
    ContextVar: every thread starts in its own context, recording)."""
    threads, rounds = 8, 50
    barrier = threading.Barrier(threads)
    outcomes: dict[int, set[bool]] = {}

    def work(index: int) -> None:
        x = leaf([1.0, 2.0])
        seen: set[bool] = set()
        barrier.wait()
        for _ in range(rounds):
            if index % 2:
                with rv.no_grad():
                    seen.add(isinstance(m.dot(x, x), rv.Tensor))
            else:
                seen.add(isinstance(m.dot(x, x), rv.Tensor))
        outcomes[index] = seen

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert outcomes == {i: {not i % 2} for i in range(threads)}


FIRST_CALLS_BEFORE_TENSORS = """
import sys
import numpy as np
import reverie as rv
kernel = rv.compile("fn dot(x: f64[N], y: f64[N]) -> f64 { return sum(x * y); }").dot
assert kernel(np.ones(3), np.ones(3)) == 3.0
try:
    kernel(np.ones(3), np.ones(2))
except rv.ShapeMismatchError as error:
    before = str(error)
assert "reverie.runtime.tensors.tape" not in sys.modules
x = rv.tensor([1.0, 2.0, 3.0], requires_grad=True)
out = kernel(x, np.ones(3))
assert out.grad_fn is not None and rv.grad(out, x)[0].numpy().tolist() == [1.0, 1.0, 1.0]
try:
    kernel(x, np.ones(2))
except rv.ShapeMismatchError as error:
    assert str(error) == before
print("ok")
"""


def test_a_kernel_called_before_tensors_exist_records_after(tmp_path: Path) -> None:
    """The Python path a native entry falls back to runs calls without the tape until
    Tensors exist, then records (the same entry, the same errors)."""
    result = subprocess.run([sys.executable, "-c", FIRST_CALLS_BEFORE_TENSORS],
                            capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).parents[2],
                            env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_kernel_still_has_the_signature_of_its_calls(m: rv.Module) -> None:
    """`__call__` is a property (no Python frame per call); `inspect` still sees `(*args)`."""
    assert str(inspect.signature(m.dot)) == "(*args)"
    assert str(inspect.signature(m.dot.grad("x"))) == "(*args)"  # a transform, grouped or not
