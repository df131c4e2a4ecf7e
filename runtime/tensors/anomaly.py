"""Anomaly detection (`rv.autograd.detect_anomaly`, torch's): NaN in backward names its source.

Consumes the `with` blocks, calls and decorated functions that switch the mode
(`detect_anomaly`, `set_detect_anomaly`), the nodes the tape records while it is on, and the
gradients each node's backward produces; produces `AnomalyMode`, which the tape reads, and
torch's errors and warnings:

- while the mode is on, every node recorded (a kernel call, a custom Function, an in-place
  write) keeps where in the program it was recorded: `remember_trace` stores the call stack,
  Reverie's own frames left out, in `node.extra().trace` (a `traceback.StackSummary`);
- while it is on with `check_nan`, a gradient holding NaN that a node's backward produces
  raises torch's RuntimeError ("Function 'mul_op_backward' returned nan values in its 0th
  output."), followed by the file, line and source of the user's forward call that recorded
  the node; like torch, a UserWarning carries the whole traceback of that forward call
  ("Error detected in ...", or "No forward pass information available" for a node recorded
  with the mode off). A warnings filter that turns the warning into an error does not hide
  the RuntimeError: the warning is printed to stderr instead, as torch does.

As torch's, the mode is one for the whole process (not per thread: torch keeps it in a
static C++ flag), `check_nan` is on by default, and both arguments must be bools.

    with rv.autograd.detect_anomaly():          # warns that it slows the program down
        y = rv.sqrt(x)                          # x holds 0
        (y * 0).sum().backward()                # RuntimeError naming sqrt_op_backward and
                                                # the line `y = rv.sqrt(x)`
    rv.autograd.set_detect_anomaly(True)        # on from here on (also a `with` block)
    rv.autograd.is_anomaly_enabled(), rv.autograd.is_anomaly_check_nan_enabled()

Beyond torch 2.13, `detect_anomaly()` also decorates a function (`@detect_anomaly()`); a
generator or coroutine function is refused, since its body would run outside the mode.
"""

from __future__ import annotations

import inspect
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ContextDecorator
from types import FrameType
from typing import TypeVar

import numpy as np

from reverie.runtime.tensors.graph import GraphNode

F = TypeVar("F", bound=Callable[..., object])

ENABLED_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime "
                   "and should only be enabled for debugging.")


class AnomalyMode:
    """Whether anomaly detection is on (and whether it checks for NaN), process-wide."""

    enabled = False
    check_nan = True


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on (torch.is_anomaly_enabled)."""
    return AnomalyMode.enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection checks backward results for NaN when it is on
    (torch.is_anomaly_check_nan_enabled)."""
    return AnomalyMode.check_nan


def _checked_flag(owner: str, name: str, value: object) -> bool:
    """`value`, the argument `name` of `owner`, if it is a bool (as torch, nothing else is)."""
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be a bool, got {type(value).__name__}")
    return value


def _set_mode(enabled: bool, check_nan: bool) -> None:
    AnomalyMode.enabled = enabled
    AnomalyMode.check_nan = check_nan


class detect_anomaly(ContextDecorator):  # noqa: N801 -- spelled as torch.autograd's
    """Anomaly detection on inside (`with rv.autograd.detect_anomaly():` or as a decorator),
    checking backward results for NaN unless `check_nan=False`; the mode found on entry is
    restored on exit, so blocks nest. Warns (UserWarning) when made, as torch does."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = _checked_flag("detect_anomaly", "check_nan", check_nan)
        self._previous: list[tuple[bool, bool]] = []  # a stack: an instance may be re-entered
        warnings.warn(ENABLED_WARNING, UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        self._previous.append((AnomalyMode.enabled, AnomalyMode.check_nan))
        _set_mode(True, self.check_nan)

    def __exit__(self, *exc: object) -> None:
        _set_mode(*self._previous.pop())

    def __call__(self, function: F) -> F:
        """`function` running with anomaly detection on."""
        if (inspect.isgeneratorfunction(function) or inspect.iscoroutinefunction(function)
                or inspect.isasyncgenfunction(function)):
            raise TypeError("detect_anomaly() decorates plain functions only: the body of a "
                            f"generator or coroutine function ({function.__qualname__}) would "
                            "run outside the mode; use `with detect_anomaly():` inside it")
        return super().__call__(function)


class set_detect_anomaly:  # noqa: N801 -- spelled as torch.autograd's
    """Anomaly detection on or off (`mode`), set when called: `set_detect_anomaly(True)`
    turns it on from here on; `with set_detect_anomaly(False):` restores on exit the mode
    found when called."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        mode = _checked_flag("set_detect_anomaly", "mode", mode)
        check_nan = _checked_flag("set_detect_anomaly", "check_nan", check_nan)
        self.prev = AnomalyMode.enabled
        self.prev_check_nan = AnomalyMode.check_nan
        _set_mode(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _set_mode(self.prev, self.prev_check_nan)


# ---------------------------------------------------------------- recording


def _in_reverie(frame: FrameType) -> bool:
    """Whether `frame` runs code of the reverie package (not the user's)."""
    module = frame.f_globals.get("__name__", "")
    return module == "reverie" or module.startswith("reverie.")


def _user_frames(frame: FrameType | None) -> Iterator[tuple[FrameType, int]]:
    """`(frame, line)` from `frame` outwards, Reverie's frames left out."""
    return ((f, line) for f, line in traceback.walk_stack(frame) if not _in_reverie(f))


def remember_trace(node: GraphNode) -> None:
    """Keep where in the program `node` is being recorded (called only when enabled): the
    call stack outermost first, without Reverie's frames; source lines are read only when
    shown."""
    trace = traceback.StackSummary.extract(_user_frames(sys._getframe()), lookup_lines=False)
    trace.reverse()
    node.extra().trace = trace


# ---------------------------------------------------------------- checking


def _holds_nan(gradient: object) -> bool:
    """Whether a gradient (an array, a Tensor, or None) is floating and holds NaN."""
    if gradient is None:
        return False
    array = np.asarray(getattr(gradient, "_data", gradient))
    return array.dtype.kind in "fc" and bool(np.isnan(array).any())


def _input_position(node: GraphNode, edge_index: int) -> int:
    """The position among `node`'s inputs (torch's output index of the backward) of its
    `edge_index`-th edge: the edges are the inputs that are not None, in order."""
    positions = [i for i, edge in enumerate(node.input_edges()) if edge is not None]
    return positions[edge_index]


def check_gradients(node: GraphNode, gradients: Sequence[object]) -> None:
    """RuntimeError if a gradient `node` produced holds NaN (called only when enabled),
    after torch's warning with the traceback of the forward call that recorded `node`."""
    if not AnomalyMode.check_nan:
        return
    for index, gradient in enumerate(gradients):
        if _holds_nan(gradient):
            warn_forward_trace(node)
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its "
                               f"{_input_position(node, index)}th output. "
                               f"{_forward_call(node)}")


def _trace(node: GraphNode) -> traceback.StackSummary | None:
    """Where `node` was recorded (None if anomaly detection was off then)."""
    return None if node.extras is None else node.extras.trace


def _forward_call(node: GraphNode) -> str:
    """The user's line that recorded `node`, for the error message."""
    trace = _trace(node)
    if not trace:
        return ("Its forward call was recorded with anomaly detection off: turn it on "
                "for the forward pass too to see where.")
    call = trace[-1]
    return (f"Its forward call was recorded at {call.filename}:{call.lineno}, "
            f"in {call.name}: {call.line}")


def warn_forward_trace(node: GraphNode) -> None:
    """torch's UserWarning on an error in `node`'s backward: the traceback of the forward
    call that recorded it, shown at the user's line that runs the backward. A filter that
    makes the warning an error does not replace the backward's error: it is printed."""
    trace = _trace(node)
    if trace:
        message = (f"Error detected in {node.name()}. Traceback of forward call that caused "
                   "the error:\n" + "".join(trace.format()))
    else:
        message = (f"Error detected in {node.name()}. No forward pass information available. "
                   "Enable detect anomaly during forward pass for more information.")
    stacklevel = 1 + sum(1 for _ in _reverie_frames(sys._getframe()))
    try:
        warnings.warn(message, UserWarning, stacklevel=stacklevel)
    except Warning as error:  # a filter turned it into an error: report it, raise the NaN
        print(f"{type(error).__name__}: {error}", file=sys.stderr)


def _reverie_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """The frames from `frame` outwards up to the first that is not Reverie's."""
    while frame is not None and _in_reverie(frame):
        yield frame
        frame = frame.f_back
