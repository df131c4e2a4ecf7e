"""Grad mode and inference mode, ported from PyTorch's `test/test_autograd.py` (issue 32 item 5).

Ported: test_no_grad, test_enable_grad_decorator_no_paren, test_set_grad_enabled,
test_set_grad_generator_functions(_recursive), test_set_grad_coroutines (and its
_benign_exceptions, _critical_exceptions, _exit variants), test_inference_mode_context_manager,
_decorator, _tensor_creation, _inf_tensor_in_inf_mode_functional_op and
_inf_tensor_in_normal_mode_functional_op; then what torch does beyond its tests, each
checked on torch here: `set_grad_enabled` as a call, `inference_mode(False)`, `enable_grad`
inside `inference_mode`, decorated classes and coroutine functions, other threads.
Left out: test_no_grad_python_function and test_grad_mode_restored_reentrant (they need a
custom `autograd.Function`), test_no_grad_copy (grad buffers of custom functions), and the
inference-mode tests about views, in-place updates and version counters.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

import reverie as rv

torch = pytest.importorskip("torch")

MODES_OFF = {  # a grad mode that records nothing, torch's way of spelling it
    "no_grad": lambda lib: lib.no_grad(),
    "set_grad_enabled(False)": lambda lib: lib.set_grad_enabled(False),
    "inference_mode": lambda lib: lib.inference_mode(),
}


def ones(lib: object, shape: tuple[int, ...], requires_grad: bool = False) -> object:
    """A float64 tensor of ones of `lib` (torch or Reverie)."""
    return lib.tensor(np.ones(shape).tolist(), dtype=lib.float64, requires_grad=requires_grad)


@pytest.fixture(autouse=True)
def no_mode_left_switched() -> object:
    """Each test leaves grad mode on and inference mode off, in torch and in Reverie (a
    failing test does not switch recording off for the tests after it)."""
    yield
    left = [(lib.is_grad_enabled(), lib.is_inference_mode_enabled()) for lib in (torch, rv)]
    torch.set_grad_enabled(True)
    rv.set_grad_enabled(True)
    assert left == [(True, False), (True, False)]


@pytest.fixture
def is_inference() -> Callable[[object], bool]:
    """`t.is_inference()`, on torch's tensors and Reverie's alike."""
    return lambda t: t.is_inference()


# ---------------------------------------------------------------- ported: grad mode


def test_no_grad(lib) -> None:
    x = ones(lib, (5, 5), requires_grad=True)
    y = ones(lib, (5, 5)) * 4
    with lib.no_grad():
        w = x + y

    def adder(x, y):
        return x + y

    for decorated in [lib.no_grad()(adder), lib.no_grad(adder)]:
        z = decorated(x, y)
        assert not w.requires_grad
        with pytest.raises(RuntimeError):
            w.backward(ones(lib, (5, 5)))
        assert w.grad_fn is None
        assert not z.requires_grad
        with pytest.raises(RuntimeError):
            z.backward(ones(lib, (5, 5)))
        assert z.grad_fn is None

    with lib.no_grad():  # a decorated function inside the with-statement
        assert not lib.is_grad_enabled()
        w = decorated(x, y)
        assert not lib.is_grad_enabled()


def test_enable_grad_decorator_no_paren(lib) -> None:
    x = ones(lib, (1,), requires_grad=True)

    @lib.enable_grad
    def doubler(x):
        return x * 2

    with lib.no_grad():
        z = doubler(x)
    assert z.requires_grad


def test_set_grad_enabled(lib) -> None:
    x = lib.tensor([1.0], requires_grad=True)
    with lib.set_grad_enabled(False):
        y = x * 2
    assert not y.requires_grad
    with lib.set_grad_enabled(True):
        y = x * 2
    assert y.requires_grad
    with lib.set_grad_enabled(False):
        lib.set_grad_enabled(True)
        y = x * 2
    assert y.requires_grad


def test_set_grad_generator_functions(lib) -> None:
    @lib.no_grad()
    def gen_no_grad():
        for i in range(10):
            assert not lib.is_grad_enabled()
            yield i

    with lib.enable_grad():
        for _ in gen_no_grad():
            assert lib.is_grad_enabled()

    @lib.enable_grad()
    def gen_enable_grad():
        for i in range(10):
            assert lib.is_grad_enabled()
            yield i

    with lib.no_grad():
        for _ in gen_enable_grad():
            assert not lib.is_grad_enabled()


def test_set_grad_generator_functions_recursive(lib) -> None:
    # decorated functions and with-statements calling each other keep the caller's mode
    @lib.enable_grad()
    def enable_grad_decorator_recursive(depth):
        assert lib.is_grad_enabled()
        if depth > 0:
            no_grad_decorator_recursive(depth - 1)
            assert lib.is_grad_enabled()

    @lib.no_grad()
    def no_grad_decorator_recursive(depth):
        assert not lib.is_grad_enabled()
        if depth > 0:
            enable_grad_decorator_recursive(depth - 1)
            assert not lib.is_grad_enabled()

    def enable_grad_context_manager_recursive(depth):
        with lib.enable_grad():
            assert lib.is_grad_enabled()
            if depth > 0:
                no_grad_context_manager_recursive(depth - 1)
                assert lib.is_grad_enabled()

    def no_grad_context_manager_recursive(depth):
        with lib.no_grad():
            assert not lib.is_grad_enabled()
            if depth > 0:
                enable_grad_context_manager_recursive(depth - 1)
                assert not lib.is_grad_enabled()

    for outer, enabled in [(lib.enable_grad, True), (lib.no_grad, False)]:
        with outer():
            assert lib.is_grad_enabled() == enabled
            enable_grad_decorator_recursive(10)
            assert lib.is_grad_enabled() == enabled
            enable_grad_context_manager_recursive(10)
            assert lib.is_grad_enabled() == enabled


def test_set_grad_coroutines(lib) -> None:
    def coroutine_in(mode, enabled):
        @mode()
        def coro(n=10):
            assert lib.is_grad_enabled() == enabled
            for i in range(n):
                assert lib.is_grad_enabled() == enabled
                r = yield i
                assert lib.is_grad_enabled() == enabled
                assert i == r
            assert lib.is_grad_enabled() == enabled
        return coro

    for outer, inner, enabled in [(lib.enable_grad, lib.no_grad, True),
                                  (lib.no_grad, lib.enable_grad, False)]:
        with outer():
            coro, r = coroutine_in(inner, not enabled)(), None
            with pytest.raises(StopIteration):
                while True:
                    assert lib.is_grad_enabled() == enabled
                    r = coro.send(r)
                    assert lib.is_grad_enabled() == enabled


class RecoverableError(Exception):
    pass


class UnrecoverableError(Exception):
    pass


class SecondaryError(Exception):
    pass


def test_set_grad_coroutines_benign_exceptions(lib) -> None:
    def coroutine_in(mode, enabled):
        @mode()
        def coro(n=10):
            has_raised = False
            for i in range(n):
                try:
                    assert lib.is_grad_enabled() == enabled
                    yield (-i if has_raised else i)
                except RecoverableError:
                    assert lib.is_grad_enabled() == enabled
                    has_raised = True
        return coro

    for outer, inner, enabled in [(lib.enable_grad, lib.no_grad, True),
                                  (lib.no_grad, lib.enable_grad, False)]:
        with outer():
            coro = coroutine_in(inner, not enabled)()
            assert next(coro) == 0
            with pytest.raises(StopIteration):
                while True:
                    r = coro.throw(RecoverableError)
                    assert r < 0
                    assert lib.is_grad_enabled() == enabled


def test_set_grad_coroutines_critical_exceptions(lib) -> None:
    def coroutine_in(mode, enabled):
        @mode()
        def coro(n=10):
            for i in range(n):
                try:
                    assert lib.is_grad_enabled() == enabled
                    yield i
                except UnrecoverableError:
                    assert lib.is_grad_enabled() == enabled
                    raise SecondaryError from None
        return coro

    for outer, inner, enabled in [(lib.enable_grad, lib.no_grad, True),
                                  (lib.no_grad, lib.enable_grad, False)]:
        with outer():
            coro = coroutine_in(inner, not enabled)()
            assert next(coro) == 0
            with pytest.raises(SecondaryError):
                coro.throw(UnrecoverableError)
            assert lib.is_grad_enabled() == enabled


def test_set_grad_coroutines_exit(lib) -> None:
    def coroutine_in(mode, enabled, state):
        @mode()
        def coro():
            for i in range(10):
                try:
                    assert lib.is_grad_enabled() == enabled
                    yield i
                except GeneratorExit:
                    assert lib.is_grad_enabled() == enabled
                    state.add("GeneratorExit")
                    raise
        return coro

    for outer, inner, enabled in [(lib.enable_grad, lib.no_grad, True),
                                  (lib.no_grad, lib.enable_grad, False)]:
        state = set()
        with outer():
            coro = coroutine_in(inner, not enabled, state)()
            for _ in range(5):
                next(coro)
            coro.close()
            assert lib.is_grad_enabled() == enabled
        assert "GeneratorExit" in state


# ---------------------------------------------------------------- ported: inference mode


def test_inference_mode_context_manager(lib) -> None:
    assert not lib.is_inference_mode_enabled()
    with lib.inference_mode():
        assert lib.is_inference_mode_enabled()
        with lib.inference_mode(False):
            assert not lib.is_inference_mode_enabled()
        assert lib.is_inference_mode_enabled()
    assert not lib.is_inference_mode_enabled()


def test_inference_mode_decorator(lib, is_inference) -> None:
    @lib.inference_mode()
    def func(x):
        assert lib.is_inference_mode_enabled()
        return x * x

    for requires_grad in (True, False):
        c = ones(lib, (1, 2, 3), requires_grad=requires_grad)
        d = func(c)
        assert not d.requires_grad
        assert is_inference(d)


def test_inference_mode_tensor_creation(lib, is_inference) -> None:
    with lib.inference_mode():
        c = ones(lib, (1, 2, 3))  # tensors made by constructors are inference tensors
        assert not c.requires_grad
        assert is_inference(c)
        tmp = ones(lib, (1, 2, 3), requires_grad=True)  # requires_grad changes nothing
        assert tmp.requires_grad
        assert is_inference(tmp)
    assert not is_inference(ones(lib, (1, 2, 3)))


def test_inference_mode_inf_tensor_in_inf_mode_functional_op(lib, is_inference) -> None:
    with lib.inference_mode():
        for requires_grad in (True, False):
            c = ones(lib, (1, 2, 3), requires_grad=requires_grad)
            func_out = c * c  # an inference tensor that does not require grad
            assert not func_out.requires_grad
            assert is_inference(func_out)


def test_inference_mode_inf_tensor_in_normal_mode_functional_op(lib, is_inference) -> None:
    for requires_grad in (True, False):
        with lib.inference_mode():
            c = ones(lib, (1, 2, 3), requires_grad=requires_grad)
    func_out = c * c  # as torch's test: of the last `c` only
    assert not func_out.requires_grad
    assert func_out.is_leaf
    assert not is_inference(func_out)


# ---------------------------------------------------------------- beyond torch's tests


def test_set_grad_enabled_called_sets_the_mode_at_once(lib) -> None:
    try:
        lib.set_grad_enabled(False)
        assert not lib.is_grad_enabled()
        assert not (ones(lib, (2,), requires_grad=True) * 2.0).requires_grad
        lib.set_grad_enabled(True)
        assert lib.is_grad_enabled()
        with lib.no_grad():
            with lib.set_grad_enabled(True):
                assert lib.is_grad_enabled()
            assert not lib.is_grad_enabled()
    finally:
        lib.set_grad_enabled(True)


def test_set_grad_enabled_decorator_switches_nothing_until_called(lib) -> None:
    @lib.set_grad_enabled(False)
    def mode_inside():
        return lib.is_grad_enabled()

    assert lib.is_grad_enabled()  # the decorator line left the mode as it was
    assert mode_inside() is False
    assert lib.is_grad_enabled()
    with lib.no_grad():
        assert lib.set_grad_enabled(True)(lambda: lib.is_grad_enabled())() is True
        assert not lib.is_grad_enabled()


def test_set_grad_enabled_clone_and_repr(lib) -> None:
    with lib.set_grad_enabled(lib.is_grad_enabled()):
        for mode in (False, True):
            context = lib.set_grad_enabled(mode)
            cloned = context.clone()
            assert cloned is not context
            assert isinstance(cloned, lib.set_grad_enabled)
            assert cloned.mode == mode
            assert repr(context).endswith(f"set_grad_enabled(mode={mode})")
    assert lib.is_grad_enabled()


def test_set_grad_enabled_wants_a_bool(lib) -> None:
    for mode in (1, None, np.bool_(False)):
        with pytest.raises(TypeError):
            lib.set_grad_enabled(mode)
    assert lib.is_grad_enabled()


@pytest.mark.parametrize("mode", MODES_OFF)
def test_decorated_generator_runs_in_the_mode_at_every_resume(lib, mode: str) -> None:
    @MODES_OFF[mode](lib)
    def generator():
        request = None
        while request != "stop":
            request = yield lib.is_grad_enabled()
        return "done"

    running = generator()
    assert lib.is_grad_enabled()
    assert next(running) is False
    assert lib.is_grad_enabled()
    assert running.send("again") is False
    with pytest.raises(StopIteration) as stop:
        running.send("stop")
    assert stop.value.value == "done"
    assert lib.is_grad_enabled()


@pytest.mark.parametrize("mode", MODES_OFF)
def test_nothing_recorded_in_the_mode_off(lib, mode: str) -> None:
    x = ones(lib, (3,), requires_grad=True)
    with MODES_OFF[mode](lib):
        assert not lib.is_grad_enabled()
        assert not (x * 2.0).requires_grad
    assert (x * 2.0).requires_grad

    @MODES_OFF[mode](lib)
    def double(x):
        return x * 2.0

    assert not double(x).requires_grad


@pytest.mark.parametrize("mode", ["no_grad", "set_grad_enabled(False)"])
def test_recorded_again_under_enable_grad_inside(lib, mode: str) -> None:
    x = ones(lib, (3,), requires_grad=True)
    with MODES_OFF[mode](lib):
        with lib.enable_grad():
            (x * 2.0).sum().backward()
        with lib.set_grad_enabled(True):
            (x * 3.0).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad.detach()), [5.0, 5.0, 5.0])


def test_enable_grad_inside_inference_mode_records_nothing(lib) -> None:
    x = ones(lib, (3,), requires_grad=True)
    with lib.inference_mode():
        for enable in (lib.enable_grad(), lib.set_grad_enabled(True)):
            with enable:
                assert lib.is_grad_enabled()
                assert lib.is_inference_mode_enabled()
                assert not (x * 2.0).requires_grad
        assert not lib.is_grad_enabled()


def test_inference_mode_false_turns_grad_mode_on(lib) -> None:
    x = ones(lib, (3,), requires_grad=True)
    for outer in (lib.no_grad(), lib.inference_mode()):
        with outer:
            with lib.inference_mode(False):
                assert lib.is_grad_enabled()
                assert not lib.is_inference_mode_enabled()
                assert (x * 2.0).requires_grad
            assert not lib.is_grad_enabled()
    assert lib.is_grad_enabled() and not lib.is_inference_mode_enabled()


def test_inference_mode_decorator_no_paren(lib) -> None:
    def modes():
        return lib.is_grad_enabled(), lib.is_inference_mode_enabled()

    in_inference = lib.inference_mode(modes)  # as `@lib.inference_mode` does
    assert in_inference() == (False, True)
    assert in_inference.__name__ == "modes"
    with lib.inference_mode():
        assert lib.inference_mode(False)(modes)() == (True, False)


@pytest.mark.parametrize("decorator", ["no_grad()", "no_grad", "inference_mode",
                                       "set_grad_enabled(False)"])
def test_decorating_a_class_warns_and_constructs_it_in_the_mode(lib, decorator: str) -> None:
    make = {"no_grad()": lambda: lib.no_grad(), "no_grad": lambda: lib.no_grad,
            "inference_mode": lambda: lib.inference_mode,
            "set_grad_enabled(False)": lambda: lib.set_grad_enabled(False)}[decorator]()
    with pytest.warns(FutureWarning, match="Decorating classes is deprecated"):
        class Model:
            def __init__(self, scale):
                self.scale = scale
                self.grad_enabled = lib.is_grad_enabled()

        constructor = make(Model)
    assert lib.is_grad_enabled()
    model = constructor(2.0)
    assert isinstance(model, Model)
    assert (model.scale, model.grad_enabled) == (2.0, False)
    assert lib.is_grad_enabled()


def test_decorated_coroutine_function_runs_in_the_awaiting_mode(lib) -> None:
    @lib.no_grad()
    async def coroutine():
        return lib.is_grad_enabled()

    assert asyncio.run(coroutine()) is True  # as torch: only creating it is decorated
    with lib.no_grad():
        pending = coroutine()
    with lib.enable_grad(), pytest.raises(StopIteration) as stop:
        pending.send(None)
    assert stop.value.value is True


def test_grad_mode_is_the_threads_own(lib) -> None:
    seen = []
    thread = threading.Thread(target=lambda: seen.append(
        (lib.is_grad_enabled(), lib.is_inference_mode_enabled())))
    with lib.inference_mode(), lib.no_grad():
        thread.start()
        thread.join()
    assert seen == [(True, False)]


# ---------------------------------------------------------------- Reverie's own refusals


def test_decorating_something_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="inference_mode: mode must be a bool"):
        rv.inference_mode(1)  # torch wraps the 1 and fails when the "function" is called
    with pytest.raises(TypeError, match="decorates a function, got int"):
        rv.no_grad(3)
    with pytest.raises(TypeError, match="set_grad_enabled: mode must be a bool, got int"):
        rv.set_grad_enabled(1)


def test_a_reused_instance_restores_the_outer_mode_when_nested() -> None:
    context = rv.no_grad()
    with context:
        with context:
            assert not rv.is_grad_enabled()
        assert not rv.is_grad_enabled()
    assert rv.is_grad_enabled()  # torch's single `prev` would leave grad mode off here


def test_an_asyncio_tasks_modes_stay_in_the_task() -> None:
    """Beyond torch (whose modes are the thread's): a task's block leaks to no other task."""
    async def main() -> tuple[bool, bool]:
        entered, release = asyncio.Event(), asyncio.Event()

        async def in_inference_mode() -> bool:
            with rv.inference_mode():
                entered.set()
                await release.wait()
                return rv.is_inference_mode_enabled()

        task = asyncio.create_task(in_inference_mode())
        await entered.wait()
        seen_beside = rv.is_inference_mode_enabled() or not rv.is_grad_enabled()
        release.set()
        return seen_beside, await task

    assert asyncio.run(main()) == (False, True)
