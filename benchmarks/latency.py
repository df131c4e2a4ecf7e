"""Latency: what a user feels first — call overhead, cold compile, warm start.

    python benchmarks/latency.py [--quick] [--skip-jax]
                                 [--calls-only | --cold-only | --warm-only]
                                 [--cpu-time] [--warm-runs N]

Three parts, each with its peer measured in the same run:

1. **Call overhead** (in this process): a forward call, an `f.grad` call and the recorded
   path (`rv.tensor` → recorded call → `rv.grad`) of `sum(x0*x0 + ... )` with 1, 4 and 8
   parameters `f64[16]`, beside NumPy by hand (`2 * x`) and `jax.jit(jax.grad)`. Each
   figure is the fastest of rounds (each the mean of many calls, in microseconds) that
   alternate the four calls of a row (`per_call_us`; with `--cpu-time`, rounds timed in
   this process's CPU time, which a machine shared with other work inflates less than
   the wall clock).
2. **Cold compile** (a fresh subprocess per measurement, empty Reverie cache): the time of
   `import reverie`, then compiling `examples/mlp.rv` and getting the first value and
   gradient; and larger kernels' first gradients; beside `jax.jit(jax.grad)`'s first call
   on the same MLP, also in a fresh subprocess.
3. **Warm start**: a fresh subprocess with the cache the cold one just populated, timed
   from the end of `import reverie` to the first gradient result, its arguments (the cold
   run's, passed as raw bytes) made before Reverie is imported; and the times of
   `import numpy` and of `import reverie` after it, in the same child. `--warm-runs N`
   starts N such children per kernel and shows the one of median CPU time.

Parts 2 and 3 also give, in brackets, the child's CPU time over the same span (all its
threads), which a machine shared with other work inflates far less than the wall clock.
`REVERIE_SHARED_OBJECTS=0` in the environment measures warm starts through LLVM's JIT.

Children keep their bytecode in a private prefix written by a first, unmeasured run, as an
installed package has it.

The results print as Markdown tables, ready for `benchmarks/README.md`. `--calls-only`
measures part 1 alone (seconds, not minutes: for work on the call path); `--cold-only`
part 2 alone (for work on cold compiles: run it in turn from the checkouts compared);
`--warm-only` parts 2 and 3 without JAX (the cold children still populate the caches the
warm ones use).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PARAMETER_COUNTS = (1, 4, 8)


def overhead_source(parameters: int) -> str:
    """`fn f(x0: f64[N], ...) -> f64 { return sum(x0 * x0 + ...); }`."""
    names = [f"x{i}" for i in range(parameters)]
    params = ", ".join(f"{n}: f64[N]" for n in names)
    body = " + ".join(f"{n} * {n}" for n in names)
    return f"fn f({params}) -> f64 {{ return sum({body}); }}"


CPU_TIME = False  # --cpu-time: rounds timed in process CPU time, not the wall clock


def per_call_us(calls: dict[str, Callable[[], object]], rounds: int,
                min_round_s: float = 0.005) -> dict[str, float]:
    """The fastest round's mean time per call of each of `calls`, in µs: every round runs
    a batch (lasting ~`min_round_s`) of each call in turn, so the figures of one table row
    share the machine's state. This shared 2-core machine switches between a quiet state
    and a contended one in which every call, NumPy's `2*x` too, runs ~1.8 x slower (within
    one process, round to round: benchmarks/README.md); a median over a few rounds measured
    one figure after the other landed in either state, so the fastest round is the figure
    of the quiet machine, as `timeit` advises."""
    clock = time.process_time if CPU_TIME else time.perf_counter
    batches = {}
    for name, call in calls.items():
        call()
        start = time.perf_counter()
        call()
        batches[name] = max(1, int(min_round_s / max(time.perf_counter() - start, 1e-7)))
    fastest = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            start = clock()
            for _ in range(batches[name]):
                call()
            fastest[name] = min(fastest[name], (clock() - start) / batches[name])
    return {name: seconds * 1e6 for name, seconds in fastest.items()}


def call_overhead(rounds: int, with_jax: bool) -> list[dict]:
    """One row per parameter count: µs per forward, grad and recorded call, and peers."""
    import reverie as rv

    rng = np.random.default_rng(10)
    rows = []
    for count in PARAMETER_COUNTS:
        args = [rng.standard_normal(16) for _ in range(count)]
        kernel = rv.compile(overhead_source(count)).f
        grad = kernel.grad("x0")

        def recorded(kernel: rv.Kernel = kernel, args: list = args) -> object:
            leaf = rv.tensor(args[0], requires_grad=True)
            return rv.grad(kernel(leaf, *args[1:]), leaf)

        rows.append({"parameters": count, **per_call_us({
            "forward": lambda kernel=kernel, args=args: kernel(*args),
            "grad": lambda grad=grad, args=args: grad(*args),
            "recorded": recorded,
            "numpy": lambda x=args[0]: 2 * x}, rounds)})
    if with_jax:  # after every Reverie figure: JAX's threads then never share their CPU time
        import jax

        jax.config.update("jax_enable_x64", True)
        for row in rows:
            args = [rng.standard_normal(16) for _ in range(row["parameters"])]
            jitted = jax.jit(jax.grad(lambda *xs: sum((x * x).sum() for x in xs)))
            device_args = [jax.device_put(a) for a in args]
            row["jax"] = per_call_us({"jax": lambda f=jitted, a=device_args:
                                      jax.block_until_ready(f(*a))}, rounds)["jax"]
    return rows


# Child scripts: each prints one JSON object on its last line.
REVERIE_CHILD = """
import json, sys, time
start = time.perf_counter()
import numpy as np
import reverie as rv
imported = time.perf_counter()
cpu_imported = time.process_time()
path, fn, wrt, dims = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
from reverie.cli_grad import random_arguments
module = rv.load(path)
kernel = module[fn]
args = random_arguments(kernel.ir_for("f64"), dims, np.random.default_rng(0))
value = kernel(*args)
first_value = time.perf_counter()
grad = kernel.grad(None if wrt == "-" else wrt.split(","))(*args)
done = time.perf_counter()
print(json.dumps({"import": imported - start, "value": first_value - imported,
                  "gradient": done - imported, "cpu": time.process_time() - cpu_imported}))
"""

# The warm start: arguments read from raw bytes (nothing imported for them) before
# `import reverie`, so the measured span is Reverie's alone.
WARM_CHILD = """
import json, sys, time
start, cpu_start = time.perf_counter(), time.process_time()
import numpy as np
numpy_done, cpu_numpy = time.perf_counter(), time.process_time()
path, fn, wrt, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
with open(sys.argv[5], "rb") as file:
    data = file.read()
args, offset = [], 0
for dtype, shape, size in arguments:
    args.append(np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, offset)
                .reshape(shape).copy())
    offset += size
begin = time.perf_counter()
import reverie as rv
imported, cpu_imported = time.perf_counter(), time.process_time()
kernel = rv.load(path)[fn]
value = kernel(*args)
grad = kernel.grad(None if wrt == "-" else wrt.split(","))(*args)
done, cpu_done = time.perf_counter(), time.process_time()
modules = sorted(m for m in sys.modules if m.startswith(("reverie.", "llvmlite", "lark")))
print(json.dumps({"numpy": numpy_done - start, "reverie": imported - begin,
                  "gradient": done - imported, "cpu": cpu_done - cpu_imported,
                  "cpu_numpy": cpu_numpy - cpu_start, "modules": modules}))
"""

JAX_CHILD = """
import json, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
def loss(x, y, w1, b1, w2, b2):
    return jnp.mean((jnp.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)
rng = np.random.default_rng(0)
B, D, H, O = 64, 8, 32, 4
args = [rng.standard_normal(s) for s in [(B, D), (B, O), (D, H), (H,), (H, O), (O,)]]
start, cpu_start = time.perf_counter(), time.process_time()
grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4, 5)))
jax.block_until_ready(grad(*args))
print(json.dumps({"gradient": time.perf_counter() - start,
                  "cpu": time.process_time() - cpu_start}))
"""

COLD_KERNELS = (  # (label, file, function, wrt or "-" for every float parameter, dims)
    ("MLP loss (examples/mlp.rv)", "examples/mlp.rv", "mlp_loss", "-",
     {"B": 64, "D": 8, "H": 32, "O": 4}),
    ("mixture log-likelihood (examples/gmm.rv)", "examples/gmm.rv", "gmm_nll", "-",
     {"N": 200, "D": 8, "K": 10}),
    ("RNN (examples/rnn.rv)", "examples/rnn.rv", "rnn_loss", "-",
     {"T": 16, "D": 8, "H": 16}),
    ("LSTM (examples/lstm_update.rv)", "examples/lstm_update.rv", "lstm_loss", "-",
     {"T": 16, "D": 8, "H": 16}),
)


BYTECODE = tempfile.mkdtemp(prefix="reverie-latency-pycache-")


def run_child(script: str, args: list[str], cache: str) -> dict:
    """Run a child script in a fresh interpreter with `REVERIE_CACHE_DIR=cache`, with
    bytecode kept in one private prefix (as an installed package has it), whatever
    PYTHONDONTWRITEBYTECODE says here."""
    env = {**os.environ, "REVERIE_CACHE_DIR": cache, "JAX_PLATFORMS": "cpu",
           "PYTHONPYCACHEPREFIX": BYTECODE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode:
        raise RuntimeError(f"child failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm_arguments(path: str, fn: str, dims: dict, directory: str) -> list[str]:
    """The cold child's arguments for `fn` of `path` (same generator, same seed) written as
    raw bytes to a file in `directory`: WARM_CHILD's argv after `path, fn, wrt`."""
    import reverie as rv
    from reverie.cli_grad import random_arguments

    kernel = rv.load(path)[fn]
    args = [np.array(a, order="C") for a in  # (ascontiguousarray makes 0-d arrays 1-d)
            random_arguments(kernel.ir_for("f64"), dims, np.random.default_rng(0))]
    data = os.path.join(directory, "arguments.bin")
    with open(data, "wb") as file:
        for a in args:
            file.write(a.tobytes())
    return [json.dumps([(a.dtype.str, a.shape, a.nbytes) for a in args]), data]


def warm_start(argv: list[str], cache: str) -> dict:
    """One warm start (WARM_CHILD) with the populated `cache`; it must not have imported
    the compiler (reported in the row: `compiler_imported`)."""
    warm = run_child(WARM_CHILD, argv, cache)
    compiler = [m for m in warm.pop("modules") if m.startswith((
        "reverie.compiler.ir.core", "reverie.compiler.pipeline", "reverie.dsl.parser",
        "llvmlite.binding", "lark"))]
    return {**warm, "compiler_imported": compiler}


def cold_and_warm(with_jax: bool, warm_runs: int) -> tuple[list[dict], dict | None]:
    """Cold then warm first-gradient times per kernel, each in a fresh subprocess (the
    warm start: the child of median CPU time of `warm_runs`; none: cold only)."""
    rows = []
    with tempfile.TemporaryDirectory() as cache:  # writes the bytecode, measures nothing
        run_child(REVERIE_CHILD, [*COLD_KERNELS[0][1:4], json.dumps(COLD_KERNELS[0][4])], cache)
    for label, path, fn, wrt, dims in COLD_KERNELS:
        with tempfile.TemporaryDirectory() as cache:
            argv = [path, fn, wrt, json.dumps(dims)]
            cold = run_child(REVERIE_CHILD, argv, cache)
            row = {"kernel": label, "import": cold["import"], "cold": cold["gradient"],
                   "cold_cpu": cold["cpu"]}
            if warm_runs:
                warm_argv = [path, fn, wrt, *warm_arguments(path, fn, dims, cache)]
                runs = sorted((warm_start(warm_argv, cache) for _ in range(warm_runs)),
                              key=lambda run: run["cpu"])
                warm = runs[len(runs) // 2]
                row.update({"warm": warm["gradient"], "warm_import": warm["reverie"],
                            "warm_numpy": warm["numpy"], "warm_cpu": warm["cpu"],
                            "warm_numpy_cpu": warm["cpu_numpy"],
                            "compiler_imported": warm["compiler_imported"]})
        rows.append(row)
    jax_row = run_child(JAX_CHILD, [], tempfile.gettempdir()) if with_jax else None
    return rows, jax_row


def report(calls: list[dict], compiles: list[dict], jax_row: dict | None) -> str:
    """The measurements as Markdown tables."""
    lines = [f"Measured {time.strftime('%Y-%m-%d')}, load average "
             f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs."]
    if calls:
        lines += ["", "| parameters | forward µs | `f.grad` µs | recorded path µs | recorded − "
                  "(forward + `f.grad`) µs | NumPy `2*x` µs | jax.jit(grad) µs | grad ÷ NumPy |",
                  "|---|---|---|---|---|---|---|---|"]
    for row in calls:
        jax_cell = f"{row['jax']:.1f}" if "jax" in row else "—"
        bookkeeping = row["recorded"] - row["forward"] - row["grad"]
        lines.append(f"| {row['parameters']} | {row['forward']:.1f} | {row['grad']:.1f} | "
                     f"{row['recorded']:.1f} | {bookkeeping:.1f} | {row['numpy']:.2f} | "
                     f"{jax_cell} | {row['grad'] / row['numpy']:.1f} |")
    if compiles:
        lines += ["", "| kernel | `import reverie` s | cold: compile + first gradient s "
                  "(CPU s) | warm: first gradient after import ms (CPU ms) |",
                  "|---|---|---|---|"]
    for row in compiles:
        warm_cell = (f"{row['warm'] * 1e3:.1f} ({row['warm_cpu'] * 1e3:.1f})" if "warm" in row
                     else "—")
        lines.append(f"| {row['kernel']} | {row['import']:.2f} | {row['cold']:.2f} "
                     f"({row['cold_cpu']:.2f}) | {warm_cell} |")
    if jax_row is not None:
        lines.append(f"| JAX `jit(grad)` first call, same MLP (peer) | — | "
                     f"{jax_row['gradient']:.2f} ({jax_row['cpu']:.2f}) | — |")
    warm_rows = [row for row in compiles if "warm" in row]
    if warm_rows:
        lines += ["", "Warm start (fresh process, populated cache), `import numpy` beside it:", "",
                  "| kernel | `import numpy` ms (CPU ms) | then `import reverie` ms | warm: "
                  "first gradient after import ms (CPU ms) | warm CPU ÷ numpy import CPU | "
                  "compiler imported |", "|---|---|---|---|---|---|"]
    for row in warm_rows:
        lines.append(f"| {row['kernel']} | {row['warm_numpy'] * 1e3:.0f} "
                     f"({row['warm_numpy_cpu'] * 1e3:.0f}) | {row['warm_import'] * 1e3:.1f} | "
                     f"{row['warm'] * 1e3:.1f} ({row['warm_cpu'] * 1e3:.1f}) | "
                     f"{row['warm_cpu'] / row['warm_numpy_cpu']:.2f} | "
                     f"{', '.join(row['compiler_imported']) or 'none'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--skip-jax", action="store_true", help="no JAX peer")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--calls-only", action="store_true",
                      help="only the call overhead (part 1)")
    only.add_argument("--cold-only", action="store_true",
                      help="only the cold compiles and JAX's first call (part 2)")
    only.add_argument("--warm-only", action="store_true",
                      help="only the cold and warm starts (parts 2 and 3), without JAX")
    parser.add_argument("--cpu-time", action="store_true",
                        help="part 1 timed in CPU time (for a loaded machine)")
    parser.add_argument("--warm-runs", type=int, default=1, metavar="N",
                        help="warm starts per kernel; the one of median CPU time is shown")
    options = parser.parse_args()
    global CPU_TIME
    CPU_TIME = options.cpu_time
    with_jax = not (options.skip_jax or options.warm_only)
    calls = ([] if options.cold_only or options.warm_only else
             call_overhead(40 if options.quick else 120, with_jax))
    warm_runs = 0 if options.cold_only else max(1, options.warm_runs)
    compiles, jax_row = (([], None) if options.calls_only else
                         cold_and_warm(with_jax, warm_runs))
    print(report(calls, compiles, jax_row))


if __name__ == "__main__":
    main()
