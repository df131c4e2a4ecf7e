"""The precision rule for `float` parameters (docs/language.md §3, §3.1), at every entry of a call.

`float` means f32 when an array argument of a `float` parameter is float32, else f64
(Python numbers alone: f64, as NumPy). A result's dtype depends only on that call's
arguments, never on the calls before: each entry below is called in both orders (a
Python number first, then a float32 argument, then the number again; and the reverse) in
a fresh kernel, through the Python path (interp backend), the native entries, the Tensor
path, the transforms, and a warm start's entries made from the disk cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import reverie as rv

ROOT = Path(__file__).parents[2]
SOURCE = """
fn f(s: float) -> float { return s * s + s + 1.0; }
fn g(x: float[N], s: float) -> float { return sum(x) * s; }
"""
NUMBER, SINGLE = 1e-10, np.float32(0.5)
ORDERS = {"number first": (NUMBER, SINGLE, NUMBER), "float32 first": (SINGLE, NUMBER, SINGLE)}
_modules = iter(range(1_000_000))


def fresh_module(backend: str = "native") -> rv.Module:
    """A module no other test called (its kernels have entered no native entry yet)."""
    return rv.compile(SOURCE, name=f"precision{next(_modules)}", backend=backend)


def expected(argument: object) -> np.dtype:
    """What the rule gives a call whose one `float` argument is `argument`."""
    return np.dtype(np.float32 if isinstance(argument, np.float32) else np.float64)


def dtypes_of(result: object) -> set[np.dtype]:
    """The dtypes of every array or scalar in `result` (nested tuples, Tensors)."""
    if isinstance(result, tuple | list):
        return set().union(*map(dtypes_of, result))
    return {np.asarray(result).dtype}


# How each entry calls the kernel `f` of a module with one `float` argument.
ENTRIES: dict[str, Callable[[rv.Module, object], object]] = {
    "forward": lambda m, s: m["f"](s),
    "0-d array": lambda m, s: m["f"](np.asarray(s)),
    "grad": lambda m, s: m["f"].grad()(s),
    "value_and_grad": lambda m, s: m["f"].value_and_grad()(s),
    "vjp": lambda m, s: m["f"].vjp()(s, 1.0),
    "jvp": lambda m, s: m["f"].jvp("s")(s, 1.0),
    "hvp": lambda m, s: m["f"].hvp("s")(s, 1.0),
    "jacobian": lambda m, s: m["f"].jacobian()(s),
    "tensor": lambda m, s: m["f"](rv.Tensor(s, requires_grad=True)).detach().numpy(),
    "with an array": lambda m, s: m["g"](np.ones(3, expected(s)), 2.0),
}


@pytest.mark.parametrize("backend", ["native", "interp"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_result_dtype_depends_only_on_its_call(entry: str, order: str, backend: str) -> None:
    module, call = fresh_module(backend), ENTRIES[entry]
    seen = [dtypes_of(call(module, argument)) for argument in ORDERS[order]]
    assert seen == [{expected(argument)} for argument in ORDERS[order]]


def test_a_number_after_float32_gives_the_f64_value() -> None:
    # the issue: after one float32 call, f(1e-10) returned float32(1.0)
    f = fresh_module()["f"]
    f(SINGLE)
    assert f(NUMBER) == NUMBER * NUMBER + NUMBER + 1.0
    assert f(NUMBER) != 1.0


# A warm start (entries made from the disk cache's launch records) calls in one order.
WARM = """
import json, sys
import numpy as np
import reverie as rv
m = rv.compile('''{source}''', name="warm precision")
arguments = [1e-10, np.float32(0.5)]
if sys.argv[1] == "float32 first":
    arguments.reverse()
print(json.dumps([str(np.asarray(m["f"](a)).dtype) for a in arguments * 2]))
"""


@pytest.mark.parametrize("order", ["number first", "float32 first"])
def test_a_warm_start_keeps_the_rule(order: str, tmp_path: Path) -> None:
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(tmp_path)}
    script = WARM.format(source=SOURCE)
    runs = [subprocess.run([sys.executable, "-c", script, first], capture_output=True,
                           text=True, timeout=300, env=environment, cwd=ROOT)
            for first in ("number first", order)]  # the first run fills the cache
    for run in runs:
        assert run.returncode == 0, run.stderr
    expected_dtypes = ["float64", "float32"] if order == "number first" else \
        ["float32", "float64"]
    assert json.loads(runs[1].stdout) == expected_dtypes * 2
