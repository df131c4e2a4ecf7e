"""Grad mode and inference mode: whether calls on Tensors are recorded (docs/api.md §4).

Consumes the `with` blocks, calls and decorated functions that switch the modes
(`rv.no_grad`, `rv.enable_grad`, `rv.set_grad_enabled`, `rv.inference_mode`); produces
`grad_enabled()`, which the tape calls before recording a call (`tape.python_call_path`),
and `inference_mode_enabled()`, which the Tensor core reads to mark the tensors it creates
as inference tensors (`Tensor.is_inference()`).

As torch's:
- grad mode (`is_grad_enabled()`) says whether calls are recorded; inference mode
  (`is_inference_mode_enabled()`) records nothing even where grad mode is on inside it,
  so a call is recorded only with grad mode on and inference mode off (`grad_enabled()`).
- `rv.inference_mode()` turns grad mode off and inference mode on; `rv.inference_mode(False)`
  turns inference mode off and grad mode on; both restore the two modes on exit.
- `rv.set_grad_enabled(mode)` sets grad mode at once when called; used with `with`, the mode
  it found when called is restored on exit; as a decorator it sets nothing until the call.
- Every one is a decorator: a decorated function runs in the mode; a decorated generator
  function's body runs in the mode at every resume (`next`, `send`, `throw`, `close`) and
  its caller's mode is back between yields. A coroutine function is not special: only the
  creation of the coroutine object runs in the mode, its body runs in the awaiting code's.
  Decorating a class warns (FutureWarning) and gives a function that constructs it in the mode.

The modes are the thread's own (a new thread starts with recording on): each is kept in a
`ContextVar`, which every thread has its own of, and which is cheaper to read than a
`threading.local` attribute (it is read on every recorded call); an asyncio task starts with
the modes of the code that created it, and its own blocks do not leak out.

    with rv.no_grad():          # nothing recorded: results do not require grad
        y = x * 2.0
    @rv.enable_grad()           # recorded again inside, even under no_grad
    def step(x): ...
    rv.set_grad_enabled(False)  # off from here on, in this thread
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import warnings
from collections.abc import Callable, Generator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., object])

_GRAD_MODE = contextvars.ContextVar("reverie_grad_mode", default=True)
_INFERENCE_MODE = contextvars.ContextVar("reverie_inference_mode", default=False)
_RECORDING = contextvars.ContextVar("reverie_recording", default=True)
# _RECORDING is `grad mode and not inference mode`, kept beside the two so that the tape
# reads one ContextVar per call

grad_enabled: Callable[[], bool] = _RECORDING.get
# whether a call on a Tensor that requires grad is recorded here (read on every call)
is_grad_enabled: Callable[[], bool] = _GRAD_MODE.get
# torch.is_grad_enabled: False inside `no_grad` and `inference_mode`, unless re-enabled
inference_mode_enabled: Callable[[], bool] = _INFERENCE_MODE.get
# whether a Tensor created now is an inference tensor (read by the Tensor core)
is_inference_mode_enabled = inference_mode_enabled  # torch's name for the same


def _set_modes(grad: bool, inference: bool) -> None:
    """Grad mode `grad` and inference mode `inference` from now on, in this context."""
    _GRAD_MODE.set(grad)
    _INFERENCE_MODE.set(inference)
    _RECORDING.set(grad and not inference)


def _set_grad_mode(grad: bool) -> None:
    """Grad mode `grad` from now on, in this context; inference mode as it is."""
    _GRAD_MODE.set(grad)
    _RECORDING.set(grad and not _INFERENCE_MODE.get())


def _checked_mode(name: str, mode: object) -> bool:
    """`mode`, the argument of `name`, if it is a bool (as torch, nothing else is)."""
    if not isinstance(mode, bool):
        raise TypeError(f"{name}: mode must be a bool, got {type(mode).__name__}")
    return mode


# ---------------------------------------------------------------- decorating


def _construct_in_mode(make_context: Callable[[], Any], cls: type, stacklevel: int
                       ) -> Callable[..., object]:
    """A function that constructs `cls` in the mode, with torch's FutureWarning
    (`stacklevel`: the user's frame as a `warnings.warn` in the caller would name it)."""
    warnings.warn("Decorating classes is deprecated and will be disabled in future versions: "
                  "decorate functions or methods only (to keep this behaviour, decorate the "
                  "class's `__init__`).", FutureWarning, stacklevel=stacklevel + 1)

    @functools.wraps(cls, updated=())
    def construct(*args: object, **kwargs: object) -> object:
        with make_context():
            return cls(*args, **kwargs)
    return construct


def _generator_in_mode(make_context: Callable[[], Any],
                       function: Callable[..., Generator[Any, Any, Any]]
                       ) -> Callable[..., Generator[Any, Any, Any]]:
    """Generator function `function` whose body runs in a fresh `make_context()` at every
    resume, the caller's mode restored whenever it yields (torch's `_wrap_generator`)."""

    @functools.wraps(function)
    def generator_in_mode(*args: object, **kwargs: object) -> Generator[Any, Any, Any]:
        generator = function(*args, **kwargs)
        try:
            with make_context():
                response = generator.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with make_context():
                        generator.close()
                    raise
                except BaseException as thrown:  # the caller's `throw`: into the body
                    with make_context():
                        response = generator.throw(thrown)
                else:
                    with make_context():
                        response = generator.send(request)
        except StopIteration as stop:
            return stop.value
    return generator_in_mode


def _decorate(make_context: Callable[[], Any], function: object, stacklevel: int
              ) -> Callable[..., object]:
    """`function` running in a fresh `make_context()` at each call (for a generator
    function, at each resume); `stacklevel`: the user's frame as a `warnings.warn` in the
    caller would name it (for the warning on a class)."""
    if inspect.isclass(function):
        return _construct_in_mode(make_context, function, stacklevel + 1)
    if not callable(function):
        raise TypeError(f"a grad mode decorates a function, got {type(function).__name__}")
    if inspect.isgeneratorfunction(function):
        return _generator_in_mode(make_context, function)

    @functools.wraps(function)
    def in_mode(*args: object, **kwargs: object) -> object:
        with make_context():
            return function(*args, **kwargs)
    return in_mode


class _ModeContext:
    """A context manager that is also a decorator (`@rv.no_grad()`); each decorated call
    runs in a fresh copy of it (`clone`), so calls may nest and run in several threads."""

    def __enter__(self) -> None:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        raise NotImplementedError

    def clone(self) -> _ModeContext:
        """A new context manager setting the same mode."""
        return type(self)()

    def __call__(self, function: F) -> F:
        """`function` running in this mode (`@rv.no_grad()`)."""
        return _decorate(self.clone, function, stacklevel=2)  # type: ignore[return-value]


class _GradModeContext(_ModeContext):
    """`no_grad` or `enable_grad`: grad mode `ENABLED` inside, decorating without
    parentheses too (`@rv.no_grad`)."""

    ENABLED = True

    def __new__(cls, function: F | None = None) -> Any:
        """A new context manager; given a function (`@rv.no_grad` without parentheses),
        that function running with this grad mode."""
        if function is None:
            return super().__new__(cls)
        return _decorate(cls, function, stacklevel=2)

    def __init__(self) -> None:
        self._previous: list[bool] = []  # a stack: one instance may be entered nested

    def __enter__(self) -> None:
        self._previous.append(is_grad_enabled())
        _set_grad_mode(self.ENABLED)

    def __exit__(self, *exc: object) -> None:
        _set_grad_mode(self._previous.pop())


class no_grad(_GradModeContext):  # noqa: N801 -- spelled as torch.no_grad
    """Record nothing inside: `with rv.no_grad():` or `@rv.no_grad()`."""

    ENABLED = False


class enable_grad(_GradModeContext):  # noqa: N801 -- spelled as torch.enable_grad
    """Record again inside (also inside `no_grad`): `with rv.enable_grad():`."""

    ENABLED = True


class set_grad_enabled(_ModeContext):  # noqa: N801 -- spelled as torch.set_grad_enabled
    """Grad mode `mode`, set when called: `rv.set_grad_enabled(False)` turns recording
    off from here on; `with rv.set_grad_enabled(is_train):` restores the mode on exit;
    `@rv.set_grad_enabled(False)` sets it only while the decorated function runs."""

    def __init__(self, mode: bool) -> None:
        self.mode = _checked_mode("set_grad_enabled", mode)
        self.prev = is_grad_enabled()
        _set_grad_mode(mode)

    def __call__(self, function: F) -> F:
        """`function` running with grad mode `mode`; the mode set by the constructor
        is undone (the decorator line does not switch the mode)."""
        _set_grad_mode(self.prev)
        return _decorate(self.clone, function, stacklevel=2)  # type: ignore[return-value]

    def __enter__(self) -> None:
        _set_grad_mode(self.mode)

    def __exit__(self, *exc: object) -> None:
        _set_grad_mode(self.prev)

    def clone(self) -> set_grad_enabled:
        """A new `set_grad_enabled(mode)` (which sets the mode, as a call does)."""
        return type(self)(self.mode)

    def __repr__(self) -> str:
        return f"set_grad_enabled(mode={self.mode})"


class inference_mode(_ModeContext):  # noqa: N801 -- spelled as torch.inference_mode
    """Inference mode inside: nothing is recorded (grad mode off, and `enable_grad` inside
    does not record either) and the Tensors created are inference tensors;
    `rv.inference_mode(False)` leaves it (grad mode on). `with rv.inference_mode():`,
    `@rv.inference_mode()`, or `@rv.inference_mode` without parentheses."""

    def __new__(cls, mode: bool | Callable[..., object] = True) -> Any:
        """A new context manager; given a function instead of a bool (`@rv.inference_mode`
        without parentheses), that function running in inference mode."""
        if isinstance(mode, bool):
            return super().__new__(cls)
        if not callable(mode):
            raise TypeError("inference_mode: mode must be a bool or a function to decorate, "
                            f"got {type(mode).__name__}")
        return _decorate(cls, mode, stacklevel=2)

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self._previous: list[tuple[bool, bool]] = []  # (grad mode, inference mode)

    def __enter__(self) -> None:
        self._previous.append((is_grad_enabled(), inference_mode_enabled()))
        _set_modes(grad=not self.mode, inference=self.mode)

    def __exit__(self, *exc: object) -> None:
        _set_modes(*self._previous.pop())

    def clone(self) -> inference_mode:
        """A new context manager for the same mode."""
        return type(self)(self.mode)
