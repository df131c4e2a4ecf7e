"""Instructions per recorded-path iteration, counted by valgrind: the load-free measure.

    python benchmarks/instructions.py [--parameters 1 4 8] [--few 500] [--many 20500]
                                      [--forward]
    python benchmarks/instructions.py --warm [KERNEL ...]

The recorded path of benchmarks/latency.py (`rv.tensor` → a recorded call of
`sum(x0*x0 + ...)` on `f64[16]` parameters → `rv.grad`) runs in a child under
`valgrind --tool=cachegrind --cache-sim=no`, once `--few` and once `--many` times; the
difference of the two instruction counts over the difference of the iterations is the cost
of one iteration, whatever the machine's load (start-up, imports and compiling cancel out,
but for their own scatter of a few million instructions, hence the 20,000 iterations
between the two runs: 3,000 left ±1-3k per iteration).
The child compiles its kernel first in a run of its own (the disk cache then holds it), and
freezes the heap before the loop (`gc.freeze`): a full collection of every object of the
process would otherwise land in one of the two runs and not the other; it runs with one
thread everywhere (`child_environment`).
`--forward` counts a plain forward call (`kernel(*args)` on arrays) instead.

`--warm` counts latency.py's warm start instead (its `WARM_CHILD`: a fresh process with a
populated cache, from the end of `import reverie` to the first gradient) for the kernels
named (function names of latency.py's `COLD_KERNELS`; default the MLP's): the warm child's
instructions minus those of the same child stopped after `import reverie`, the median of
`--runs` pairs and their range. Syscalls (opening files, `dlopen`)
count only their user-space side.
Needs valgrind on the PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import latency  # noqa: E402 -- the same kernels and children as latency.py's
from latency import overhead_source  # noqa: E402

CHILD = """
import gc, sys
import numpy as np
import reverie as rv
source, count, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
forward = sys.argv[4] == "forward"
args = [np.random.default_rng(10).standard_normal(16) for _ in range(count)]
kernel, first, rest = rv.compile(source).f, args[0], args[1:]
tensor, grad = rv.tensor, rv.grad
for _ in range(20):
    kernel(*args)
    leaf = tensor(first, requires_grad=True)
    grad(kernel(leaf, *rest), leaf)
gc.collect()
gc.freeze()
if forward:  # (the loops written out: a function per iteration would count its frame)
    for _ in range(iterations):
        kernel(*args)
else:
    for _ in range(iterations):
        leaf = tensor(first, requires_grad=True)
        grad(kernel(leaf, *rest), leaf)
"""


def child_environment(cache: str) -> dict[str, str]:
    """The child's environment: the disk cache in `cache`, and one thread for OpenBLAS,
    OpenMP and Reverie's pool (idle workers spinning under valgrind add instructions that
    vary from run to run)."""
    threads = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS", "REVERIE_NUM_THREADS")}
    return {**os.environ, **threads, "REVERIE_CACHE_DIR": cache}


def counted(script: str, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> int:
    """Instructions of `python -c script *argv` under valgrind (run in `cwd`)."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
               "--cachegrind-out-file=/dev/null", sys.executable, "-c", script, *argv]
    result = subprocess.run(command, capture_output=True, text=True, check=True, env=env,
                            cwd=cwd)
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{result.stderr}")
    return int(found.group(1).replace(",", ""))


def instructions(parameters: int, iterations: int, cache: str, path: str) -> int:
    """Instructions of one child running `iterations` iterations of `path` ("recorded"
    or "forward")."""
    return counted(CHILD, [overhead_source(parameters), str(parameters), str(iterations),
                           path], child_environment(cache))


def warm_start(function: str, runs: int) -> list[int]:
    """Instructions of `runs` warm starts of `function` as latency.py makes them (see the
    docstring)."""
    label, path, fn, wrt, dims = next(k for k in latency.COLD_KERNELS if k[2] == function)
    head, found, _ = latency.WARM_CHILD.partition("kernel = rv.load")
    if not found:
        raise RuntimeError("latency.WARM_CHILD no longer starts its span with rv.load")
    stopped = head + "print('{}')\n"  # the same child, stopped after `import reverie`
    with tempfile.TemporaryDirectory(prefix="reverie-instructions-") as cache:
        latency.run_child(latency.REVERIE_CHILD, [path, fn, wrt, json.dumps(dims)], cache)
        argv = [path, fn, wrt, *latency.warm_arguments(path, fn, dims, cache)]
        for _ in range(2):  # the second also finds the shared objects the first linked
            latency.run_child(latency.WARM_CHILD, argv, cache)
        env = {**child_environment(cache), "PYTHONHASHSEED": "0",
               "PYTHONPYCACHEPREFIX": latency.BYTECODE}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return [counted(latency.WARM_CHILD, argv, env, ROOT) - counted(stopped, argv, env, ROOT)
                for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--few", type=int, default=500)
    parser.add_argument("--many", type=int, default=20500)
    parser.add_argument("--forward", action="store_true",
                        help="a plain forward call instead of the recorded path")
    parser.add_argument("--warm", nargs="*", metavar="KERNEL",
                        help="latency.py's warm start of these kernels instead")
    parser.add_argument("--runs", type=int, default=3, help="pairs per warm start")
    options = parser.parse_args()
    if options.warm is not None:
        for function in options.warm or ["mlp_loss"]:
            spans = warm_start(function, options.runs)
            print(f"{function}: {statistics.median(spans) / 1e6:.2f} M instructions from the "
                  f"end of `import reverie` to the first gradient (median; "
                  f"{min(spans) / 1e6:.2f}-{max(spans) / 1e6:.2f} M)", flush=True)
        return
    path = "forward" if options.forward else "recorded"
    with tempfile.TemporaryDirectory(prefix="reverie-instructions-") as cache:
        for count in options.parameters:
            subprocess.run([sys.executable, "-c", CHILD, overhead_source(count), str(count),
                            "1", path], check=True, env=child_environment(cache))
            few = instructions(count, options.few, cache, path)
            many = instructions(count, options.many, cache, path)
            per = (many - few) / (options.many - options.few)
            print(f"{count} parameters: {per:,.0f} instructions per {path} iteration", flush=True)


if __name__ == "__main__":
    main()
