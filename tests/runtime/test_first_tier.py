"""The first tier of a cold kernel (`runtime/native/first_tier.py`): its unoptimised code
runs at once, the optimised module is swapped in behind the same addresses, both give
the same bits, and the disk cache ends up with the optimised module alone.

In this process: the jump through each exported function's slot, `exact`, and the LLVM
thread's priorities. In fresh processes with an empty cache: a cold MLP gradient starting
in the first tier, its results against the optimised module's and against a run without
tiers, and a warm start after it that finds the optimised module.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reverie.runtime.native import compile_queue, jit
from reverie.runtime.native.first_tier import FirstTier, _split_types, exact

ROOT = Path(__file__).parents[2]
CHILD_TIMEOUT_S = 120
ANSWER = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


def answer_ir(offset: int) -> str:
    """A module exporting `answer(x) = x + offset` and `twice(x) = 2 * answer(x)`."""
    return (f"define i64 @answer(i64 %x) {{\n  %r = add i64 %x, {offset}\n  ret i64 %r\n}}\n"
            "define i64 @twice(i64 %x) {\n  %a = call i64 @answer(i64 %x)\n"
            "  %r = mul i64 %a, 2\n  ret i64 %r\n}\n")


def test_addresses_stay_and_calls_run_the_module_swapped_in() -> None:
    optimised = jit.compile_module(answer_ir(100), name="answer_optimised")
    tier = FirstTier(answer_ir(1), name="answer_first", optimise=lambda: optimised)
    answer, twice = ANSWER(tier.address("answer")), ANSWER(tier.address("twice"))
    assert (answer(1), twice(1)) == (2, 4)
    tier.tier_up()
    assert tier.optimised is optimised
    assert (answer(1), twice(1)) == (101, 202)
    assert ANSWER(tier.address("answer"))(1) == 101
    with pytest.raises(KeyError):
        tier.address("answer.first")


def test_parameter_types_split_at_top_level_commas_only() -> None:
    assert _split_types("ptr, { i64, double }, <4 x float>, [2 x i64]") == [
        "ptr", "{ i64, double }", "<4 x float>", "[2 x i64]"]
    assert _split_types("") == []


def test_only_ir_whose_results_the_optimiser_keeps_is_exact() -> None:
    assert exact("%r = fadd contract double %a, %b\n%s = fmul double %r, %r")
    for flags in ("reassoc nsz contract", "fast", "afn", "arcp", "nnan", "ninf"):
        assert not exact(f"%r = fadd {flags} double %a, %b")


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_NUM_THREADS", "2")
    monkeypatch.setenv("REVERIE_LLVM_THREAD", "1")


def test_the_llvm_thread_runs_the_most_urgent_job_first(two_threads: None) -> None:
    busy, release, done, ran = object(), threading.Event(), threading.Event(), []
    compile_queue.start(busy, lambda: release.wait(10))
    compile_queue.start(object(), lambda: (ran.append("optimised"), done.set()),
                        compile_queue.OPTIMISED)
    compile_queue.start(object(), lambda: ran.append("entry"), compile_queue.AFTER_FIRST_CALL)
    compile_queue.start(object(), lambda: ran.append("helper"))
    release.set()
    assert done.wait(10)
    assert ran == ["helper", "entry", "optimised"]


def run_child(code: str, cache: Path, tiers: str = "1") -> dict:
    """Run `code` in a fresh interpreter with the cache in `cache`, two threads allowed and
    the first tier on or off (`tiers`); its last line of output, as JSON."""
    environment = {**os.environ, "REVERIE_CACHE_DIR": str(cache), "REVERIE_NUM_THREADS": "2",
                   "REVERIE_LLVM_THREAD": "1", "REVERIE_FIRST_TIER": tiers}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S, env=environment, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# The MLP's value and gradient, each first call's results and (for the gradient, whose IR
# is exact) the same call's after the optimised module was swapped in, as hex bytes.
MLP_CHILD = """
import json, sys
import numpy as np
import reverie as rv
kernel = rv.load("examples/mlp.rv")["mlp_loss"]
rng = np.random.default_rng(3)
args = [rng.standard_normal(s) for s in [(16, 3), (16, 2), (3, 5), (5,), (5, 2), (2,)]]
grad = kernel.grad()
def results():
    value = kernel(*args)
    return [np.asarray(a).tobytes().hex() for a in (value, *grad(*args))]
first = results()
native = grad.module.executable(grad.ir_for("f64"))
tiered = native._first_tier is not None
native.optimised()
print(json.dumps({"first": first, "again": results(), "tiered": tiered,
                  "llvm": "llvmlite.binding" in sys.modules}))
"""


def test_a_cold_gradient_starts_in_the_first_tier_with_the_optimised_bits(
        tmp_path: Path) -> None:
    tiered = run_child(MLP_CHILD, tmp_path / "tiered")
    plain = run_child(MLP_CHILD, tmp_path / "plain", tiers="0")
    assert tiered["tiered"] and not plain["tiered"]
    assert tiered["first"] == tiered["again"] == plain["first"] == plain["again"]
    warm = run_child(MLP_CHILD, tmp_path / "tiered")  # the optimised modules, remembered
    assert not warm["tiered"]
    assert warm["first"] == plain["first"]
