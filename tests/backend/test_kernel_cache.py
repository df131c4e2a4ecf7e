"""In-memory caches of compiled code: derived kernels cached by what they are, bounded
LRU caches, and JIT code shared between identical modules and released on eviction."""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest

import reverie as rv
from reverie import kernel as kernel_module
from reverie import module as module_module
from reverie.runtime.native import jit
from reverie.runtime.native.lru import LruCache
from reverie.runtime.native.native_kernel import NativeKernel

LOSS = "fn f(x: f64[N], w: f64[N], y: f64) -> f64 { return (sum(x * w) - y) ** 2.0; }"
FOUR = "fn f(a: f64, b: f64, c: f64, d: f64) -> f64 { return a * b * c * d + a * a * b; }"


@pytest.fixture
def loss() -> rv.Module:
    return rv.compile(LOSS)


TRANSFORMS = {
    "grad": lambda k: k.grad("w"),
    "value_and_grad": lambda k: k.value_and_grad("w"),
    "vjp": lambda k: k.vjp("w"),
    "jvp": lambda k: k.jvp("w"),
    "jacobian": lambda k: k.jacobian("w"),
    "hessian": lambda k: k.hessian("w"),
    "hvp": lambda k: k.hvp("w"),
    "grad of grad's vjp": lambda k: k.grad("w").vjp("x"),
    "jvp of vjp": lambda k: k.vjp(("x", "w")).jvp("y"),
}


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_asking_again_returns_the_same_kernel(loss: rv.Module, transform) -> None:
    assert transform(loss.f) is transform(loss.f)


def test_wrt_given_by_name_or_index_is_the_same_gradient(loss: rv.Module) -> None:
    assert loss.f.grad("w") is loss.f.grad(1) is loss.f.grad(-2)
    assert loss.f.grad(["w", "x"]) is loss.f.grad(("x", "w"))


def test_different_wrt_or_options_give_different_kernels(loss: rv.Module) -> None:
    kernels = [loss.f.grad("w"), loss.f.grad("x"), loss.f.grad(["w"]),
               loss.f.grad("w", checkpoint=True), loss.f.value_and_grad("w"), loss.f.vjp("w"),
               loss.f.jvp("w"), loss.f.jacobian("w"), loss.f.hessian("w"), loss.f.hvp("w")]
    assert len({id(k) for k in kernels}) == len(kernels)
    x, w = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    residual = x @ w - 3.0
    np.testing.assert_allclose(loss.f.grad("w")(x, w, 3.0), 2 * residual * x)
    np.testing.assert_allclose(loss.f.grad(["w"])(x, w, 3.0)[0], 2 * residual * x)
    np.testing.assert_allclose(loss.f.grad("x")(x, w, 3.0), 2 * residual * w)


def test_checkpoint_default_follows_the_module() -> None:
    module = rv.compile(LOSS, checkpoint=True)
    assert module.f.grad("w") is module.f.grad("w", checkpoint=True)
    assert module.f.grad("w") is not module.f.grad("w", checkpoint=False)


def test_a_cached_gradient_reuses_its_executable(loss: rv.Module) -> None:
    x, w = np.ones(3), np.ones(3)
    loss.f.grad("w")(x, w, 1.0)
    fn = loss.f.grad("w").ir_for("f64")
    assert loss.executable(fn) is loss.executable(fn)
    before = jit.live_library_count()
    for _ in range(50):
        loss.f.grad("w")(x, w, 1.0)
    assert jit.live_library_count() == before


def test_identical_modules_share_their_native_code() -> None:
    first, second = rv.compile(LOSS), rv.compile(LOSS)
    fn_first, fn_second = first.f.ir_for("f64"), second.f.ir_for("f64")
    assert fn_first is not fn_second
    assert NativeKernel(fn_first)._jit is NativeKernel(fn_second)._jit


def test_evicted_kernels_release_their_jit_code(uncached: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # (uncached: with launch records in the disk cache, gradients run from them and the
    # module's executable cache stays empty)
    monkeypatch.setattr(kernel_module, "TRANSFORM_CACHE_SIZE", 2)
    monkeypatch.setattr(module_module, "EXECUTABLE_CACHE_SIZE", 2)
    module = rv.compile(FOUR)
    args = (1.5, 2.0, -0.5, 3.0)
    gc.collect()
    before = jit.live_library_count()
    subsets = [s for r in range(1, 5) for s in itertools.combinations("abcd", r)]
    most = 0
    for wrt in subsets:  # 15 gradients, each with its own native code
        module.f.grad(list(wrt))(*args)
        gc.collect()
        most = max(most, jit.live_library_count() - before)
    assert most <= 2 + 2  # held by the transform cache, or only by the executable cache
    assert len(module._executables) == 2
    assert len(module.f._transforms) == 2


def test_lru_cache_forgets_the_least_recently_used_entry() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache["a"] = 1
    cache["b"] = 2
    assert cache.get("a") == 1  # "b" is now the least recently used
    assert cache.setdefault("c", 3) == 3
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert cache.setdefault("a", 10) == 1
    assert cache.get("missing", -1) == -1 and len(cache) == 2
    with pytest.raises(ValueError, match="maxsize"):
        LruCache(0)
