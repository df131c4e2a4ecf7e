"""Ports of PyTorch's anomaly-detection tests (`test/test_autograd.py`, issue 32 item 6).

torch makes its NaN in custom Functions' backward; these ports make it with plain ops, the
same for both libraries: `sqrt(x)` at x = 0 back-propagates 0 / 0 = NaN (its node's 0th
output), and `c * y` with c = inf and no grad on c gives y the gradient 0 * inf = NaN (the
node's 1th output). Node names differ between the libraries (`SqrtBackward0`,
`sqrt_op_backward`), so each test reads them from `grad_fn.name()`.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.tensors import anomaly
from tests.autograd.conftest import ReverieLib, torch
from tests.autograd.parity import assert_close

ENABLED = "Anomaly Detection has been enabled"
REVERIE = ReverieLib()  # for the tests of Reverie alone


def mode(lib: object) -> tuple[bool, bool]:
    """(anomaly detection on, NaN checked) in `lib`."""
    if lib is torch:
        return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()
    return rv.autograd.is_anomaly_enabled(), anomaly.is_anomaly_check_nan_enabled()


@pytest.fixture(autouse=True)
def restore_mode() -> Iterator[None]:
    """Each test leaves the process-wide modes of both libraries as it found them."""
    saved = mode(torch), mode(rv)
    yield
    torch.autograd.set_detect_anomaly(*saved[0])
    rv.autograd.set_detect_anomaly(*saved[1])


@contextlib.contextmanager
def recorded_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def nan_message(name: str, index: int) -> str:
    return re.escape(f"Function '{name}' returned nan values in its {index}th output.")


def zero_and_one(lib: object) -> object:
    return lib.tensor([0.0, 1.0], dtype=lib.float64, requires_grad=True)


def test_anomaly_detect_nan(lib):
    x = zero_and_one(lib)
    y = lib.sqrt(x)
    (y * 0).sum().backward()  # should not fail: the mode is off
    assert_close(x.grad, [np.nan, 0.0])

    y = lib.sqrt(zero_and_one(lib))
    with recorded_warnings() as caught, pytest.raises(RuntimeError,
                                                      match=nan_message(y.grad_fn.name(), 0)):
        with lib.autograd.detect_anomaly():
            (y * 0).sum().backward()
    assert "No forward pass information" in str(caught[1].message)

    inf = lib.tensor([np.inf, 1.0], dtype=lib.float64)  # needs no grad: the node's 1th output
    with recorded_warnings() as caught:
        with lib.autograd.detect_anomaly():
            y = inf * lib.sqrt(zero_and_one(lib) + 1)
            with pytest.raises(RuntimeError, match=nan_message(y.grad_fn.name(), 1)):
                (y * 0).sum().backward()
    assert "y = inf * lib.sqrt(zero_and_one(lib) + 1)" in str(caught[1].message)


def test_anomaly_mode_no_check_nan(lib):
    with recorded_warnings():
        with lib.autograd.detect_anomaly(check_nan=False):
            y = lib.sqrt(zero_and_one(lib))
            out = (y * 0).sum()
            out.backward(retain_graph=True)

            with lib.autograd.detect_anomaly(check_nan=True):
                with pytest.raises(RuntimeError, match=nan_message(y.grad_fn.name(), 0)):
                    out.backward(retain_graph=True)

            out.backward()
    assert mode(lib) == (False, True)


def test_nested_anomaly_detect_nan(lib):
    """A NaN in the backward of a node recorded by a backward (`create_graph=True`); torch's
    index and node differ from Reverie's (its DivBackward0, Reverie's VJP kernel call), so
    the index is not compared."""
    x = zero_and_one(lib)
    (g,) = lib.autograd.grad(lib.sqrt(x).sum(), x, create_graph=True)  # [inf, 0.5]
    (g * 0).sum().backward()  # should not fail

    x = zero_and_one(lib)
    (g,) = lib.autograd.grad(lib.sqrt(x).sum(), x, create_graph=True)
    message = f"Function '{re.escape(g.grad_fn.name())}' returned nan values in its [0-9]+th"
    with recorded_warnings() as caught, pytest.raises(RuntimeError, match=message):
        with lib.autograd.detect_anomaly():
            (g * 0).sum().backward()
    assert "No forward pass information" in str(caught[1].message)

    with recorded_warnings() as caught, pytest.raises(RuntimeError, match=message):
        with lib.autograd.detect_anomaly():
            x = zero_and_one(lib)
            (g,) = lib.autograd.grad(lib.sqrt(x).sum(), x, create_graph=True)
            (g * 0).sum().backward()
    assert "(g,) = lib.autograd.grad(lib.sqrt(x).sum(), x, create_graph=True)" in str(
        caught[1].message)


def test_anomaly_grad_warnings(lib):
    """torch's test makes its backward error with an in-place write; this port, with NaN.
    A warnings filter that turns the warning into an error prints it to stderr instead, and
    the backward's error is the one raised."""
    with recorded_warnings() as caught, pytest.raises(RuntimeError, match="returned nan"):
        with lib.autograd.detect_anomaly():
            y = lib.sqrt(zero_and_one(lib))
            (y * 0).sum().backward()
    assert len(caught) == 2
    assert ENABLED in str(caught[0].message)
    assert f"Error detected in {y.grad_fn.name()}" in str(caught[1].message)

    stderr = io.StringIO()
    with recorded_warnings() as caught, pytest.raises(RuntimeError, match="returned nan"):
        with lib.autograd.detect_anomaly():
            warnings.simplefilter("error")
            with contextlib.redirect_stderr(stderr):
                y = lib.sqrt(zero_and_one(lib))
                (y * 0).sum().backward()
    assert len(caught) == 1
    assert ENABLED in str(caught[0].message)
    assert f"UserWarning: Error detected in {y.grad_fn.name()}" in stderr.getvalue()


def metadata_freed_with_output(lib: object, make_output: object) -> None:
    """An object kept in the output's `grad_fn.metadata` dies with the output: anomaly
    detection's traces hold nothing that keeps the node alive."""
    class Foo:
        pass

    output = make_output()
    my_obj = Foo()
    output.grad_fn.metadata[0] = my_obj
    ref = weakref.ref(my_obj)
    del my_obj
    assert ref() is not None
    del output
    assert ref() is None


def test_anomaly_assign_parent_cleanup(lib):
    def exp_differentiated_in_anomaly_mode() -> object:
        x = lib.tensor([[0.5, 1.0], [1.5, 2.0]], dtype=lib.float64, requires_grad=True)
        t = x.exp()
        with recorded_warnings(), lib.autograd.detect_anomaly():
            lib.autograd.grad(t.sum(), x, create_graph=True)
        return t

    metadata_freed_with_output(lib, exp_differentiated_in_anomaly_mode)


def test_nested_anomaly_printstack_cleanup(lib):
    """torch's test uses two custom Functions; here the NaN comes from differentiating
    `sqrt` twice at 0, the error's warning printed as in torch's."""
    def output_after_nan_error() -> object:
        x = zero_and_one(lib)
        out = lib.sqrt(x)
        (g,) = lib.autograd.grad(out.sum(), x, create_graph=True)
        with recorded_warnings(), pytest.raises(RuntimeError, match="returned nan values"):
            with lib.autograd.detect_anomaly():
                (g * 0).sum().backward()
        return out

    metadata_freed_with_output(lib, output_after_nan_error)


# ---------------------------------------------------------------- the API, as torch 2.13


def test_detect_anomaly_warns_when_made_and_restores_nested_modes(lib):
    with recorded_warnings() as caught:
        outer = lib.autograd.detect_anomaly()
    assert [str(w.message)[:len(ENABLED)] for w in caught] == [ENABLED]
    assert caught[0].filename == __file__ and caught[0].category is UserWarning
    assert mode(lib) == (False, True)
    with recorded_warnings(), outer:
        assert mode(lib) == (True, True)
        with lib.autograd.detect_anomaly(check_nan=False):
            assert mode(lib) == (True, False)
            with lib.autograd.set_detect_anomaly(False):
                assert mode(lib) == (False, True)
            assert mode(lib) == (True, False)
        assert mode(lib) == (True, True)
    assert mode(lib) == (False, True)


def test_set_detect_anomaly_sets_when_called(lib):
    lib.autograd.set_detect_anomaly(True, check_nan=False)
    assert mode(lib) == (True, False)
    with lib.autograd.set_detect_anomaly(False):
        assert mode(lib) == (False, True)
    assert mode(lib) == (True, False)
    lib.autograd.set_detect_anomaly(False)
    assert mode(lib) == (False, True)


def test_anomaly_mode_is_process_wide(lib):
    lib.autograd.set_detect_anomaly(True, check_nan=False)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(mode(lib)))
    thread.start()
    thread.join()
    assert seen == [(True, False)]


@pytest.mark.parametrize("call", [lambda lib: lib.autograd.set_detect_anomaly("yes"),
                                  lambda lib: lib.autograd.set_detect_anomaly(True, check_nan=1),
                                  lambda lib: lib.autograd.detect_anomaly(check_nan=1).__enter__()])
def test_mode_arguments_must_be_bools(lib, call):
    with recorded_warnings(), pytest.raises(TypeError, match="must be (a )?bool"):
        call(lib)
    assert mode(lib) == (False, True)


def test_trace_names_the_users_forward_line(lib):
    """The error's warning shows the traceback of the forward call down to the user's line
    that made the node, located at the user's backward call; Reverie's error also names the
    forward line (torch's names the node only)."""
    def forward(x: object) -> object:
        return lib.sqrt(x)  # the forward line

    with recorded_warnings() as caught, lib.autograd.detect_anomaly():
        y = forward(zero_and_one(lib))
        with pytest.raises(RuntimeError, match=nan_message(y.grad_fn.name(), 0)) as error:
            (y * 0).sum().backward()
    warning = str(caught[1].message)
    line = forward.__code__.co_firstlineno + 1
    assert f'File "{__file__}", line {line}, in forward\n    return lib.sqrt(x)' in warning
    assert "y = forward(zero_and_one(lib))" in warning
    if lib is not torch:  # torch's warning is located in torch, its error names no line
        assert caught[1].filename == __file__
        assert f"{__file__}:{line}, in forward: return lib.sqrt(x)" in str(error.value)


# ---------------------------------------------------------------- beyond torch 2.13


def test_detect_anomaly_decorates_a_function():
    with recorded_warnings():
        @rv.autograd.detect_anomaly(check_nan=False)
        def modes() -> tuple[bool, bool]:
            return mode(rv)

    assert modes() == (True, False)
    assert mode(rv) == (False, True)
    with pytest.raises(TypeError, match="decorates plain functions"), recorded_warnings():
        @rv.autograd.detect_anomaly()
        def generator() -> Iterator[int]:
            yield 1


def test_nodes_recorded_with_the_mode_off_keep_no_trace():
    x = zero_and_one(REVERIE)
    assert rv.sqrt(x).grad_fn.extras is None
    with recorded_warnings(), rv.autograd.detect_anomaly():
        y = rv.sqrt(x)
    trace = y.grad_fn.extras.trace
    assert trace[-1].line == "y = rv.sqrt(x)" and trace[-1].filename == __file__
    reverie_files = {getattr(module, "__file__", None) for name, module in sys.modules.items()
                     if name == "reverie" or name.startswith("reverie.")}
    assert not reverie_files & {frame.filename for frame in trace}


def test_integer_and_missing_gradients_are_not_checked():
    node = rv.sqrt(zero_and_one(REVERIE)).grad_fn
    anomaly.check_gradients(node, [None])
    anomaly.check_gradients(node, [np.array([1, 2])])
    with recorded_warnings(), pytest.raises(RuntimeError, match=nan_message(node.name(), 0)):
        anomaly.check_gradients(node, [rv.tensor([np.nan])])
