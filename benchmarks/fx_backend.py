"""The torch.compile backend "reverie" on the zoo's training steps, beside eager PyTorch and
torch.compile's default backend (inductor), each in its own process.

    python benchmarks/fx_backend.py [--models mnist,vae] [--rounds 5] [--quick]

The models are the zoo's canonical models (`tests/fx_zoo/models.py`) at realistic small
sizes (`benchmarks/fx_models.py`; `--quick`: the zoo's own tiny sizes, one round), each
one full training step as its author writes it, in f32. Three variants of each:

- `eager`: the model as it is;
- `inductor`: `torch.compile(model)` (where it refuses, e.g. double backward, the table
  gives what it raised, in one line);
- `reverie`: `torch.compile(model, backend="reverie", fullgraph=True)`, or with
  `options={"fallback": True}` (unmapped nodes run by eager PyTorch) where fullgraph
  refuses; the table names the route that ran. RNN models compile with Dynamo's
  `allow_rnn` (the route Dynamo offers for them), as in the zoo's tests.

Every (model, variant) runs in a fresh process (`--worker MODEL VARIANT`, printing one
JSON line), so thread pools of different frameworks never share a process; a round runs
each model's variants in turn, their order reversed every other round. A worker builds the
model and its batch (seed 0), times its first training step, runs `WARMUP` more steps,
then times `SAMPLES` samples of at least `SAMPLE_S` seconds each and reports their median
per step. The tables give, per model, the median over rounds with the spread (min–max of
the rounds) and the ratio of medians to eager.

Compile cost is the first training step of a fresh process, imports, the model's
construction and `torch.compile`'s wrapping excluded. Each (model, route) has a disk cache
directory of its own (`REVERIE_CACHE_DIR`, `TORCHINDUCTOR_CACHE_DIR`), empty in round 1:
**cold** is round 1's first step (empty caches: Dynamo's tracing, Reverie's planning and
its whole compile pipeline, or inductor's); **warm** is the median of later rounds' first
steps (the disk cache holds the kernels: Dynamo's tracing, Reverie's planning of each
graph on fake tensors and its kernels loaded from disk, or inductor's FX graph cache).
Both include the step's own work (forward, backward, optimiser step), given beside them by
eager's first step. The host's CPU, its vector extensions and the load average head and
end the output; the tables are Markdown, ready for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.fx_zoo, whose models the benchmark trains
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from fx_models import BENCHMARKS  # noqa: E402

from tests.fx_zoo.harness import compile_module, make_loop  # noqa: E402

VARIANTS = ("eager", "inductor", "reverie")
ROUTES = ("fullgraph", "fallback")  # Reverie's, in order of preference
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")
WARMUP, SAMPLES, SAMPLE_S = 3, 5, 0.2  # --quick: one warm-up step, one timed step
WORKER_TIMEOUT_S = 900
GOALS = {"step": 1.0, "mlp_cnn_step": 0.8, "cold_s": 3.0, "warm_s": 0.05}


# ---------------------------------------------------------------- the worker

def compile_variant(module: torch.nn.Module, variant: str) -> Callable:
    """`module` as the variant's user compiles it (`variant`: eager, inductor or a route)."""
    if variant == "inductor":
        return torch.compile(module)
    return compile_module(module, variant)


def sampled_step_s(step: Callable[[], object], samples: int, sample_s: float) -> float:
    """The median over `samples` samples (each as many steps as fill `sample_s`) of the
    seconds per step."""
    per_step = []
    for _ in range(samples):
        calls, started = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - started < sample_s:
            step()
            calls += 1
        per_step.append((time.perf_counter() - started) / calls)
    return statistics.median(per_step)


def work(name: str, variant: str, quick: bool) -> dict[str, float]:
    """One process's figures: its first training step and the median step after warm-up."""
    warmup, samples, sample_s = (1, 1, 0.0) if quick else (WARMUP, SAMPLES, SAMPLE_S)
    case = BENCHMARKS[name].prepare(quick)
    torch.manual_seed(0)
    model, batch = case.model(), case.batch(0, torch.float32)
    with torch._dynamo.config.patch(allow_rnn=case.rnn and variant in ROUTES):
        loop = make_loop(case, model, variant, compile_variant)
        started = time.perf_counter()
        case.train_step(loop, batch)
        first_step_s = time.perf_counter() - started
        for _ in range(warmup):
            case.train_step(loop, batch)
        step_s = sampled_step_s(lambda: case.train_step(loop, batch), samples, sample_s)
    return {"first_step_s": first_step_s, "step_s": step_s}


def one_line(error: BaseException) -> str:
    """The error's type and the first line of its message (and the next line where the
    first ends in a colon: Dynamo's "backend='reverie' raised:")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    text = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return f"{type(error).__name__}: {text}"[:240]


def worker_main(name: str, variant: str, quick: bool) -> None:
    """Print one JSON line: the figures, or {"error": one line}."""
    try:
        result: dict[str, object] = work(name, variant, quick)
    except Exception as error:  # noqa: BLE001 -- any refusal is a result to report
        result = {"error": one_line(error)}
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- the rounds

@dataclass
class Outcome:
    """Every round's figures of one (model, variant), the Reverie route that ran, and why
    a route or the variant refused."""

    first_step_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    route: str | None = None
    refusals: dict[str, str] = field(default_factory=dict)
    refused: bool = False


def run_worker(name: str, route: str, quick: bool, caches: Path) -> dict:
    """A fresh process's figures of (`name`, `route`), with that pair's disk caches."""
    environment = dict(os.environ, REVERIE_CACHE_DIR=str(caches / "reverie"),
                       TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"))
    command = [sys.executable, __file__, "--worker", name, route] + (["--quick"] * quick)
    try:
        done = subprocess.run(command, env=environment, capture_output=True, text=True,
                              timeout=WORKER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": f"worker exited {done.returncode}: {done.stderr.strip()[-200:]}"}
    return json.loads(lines[-1])


def run_variant(outcome: Outcome, name: str, variant: str, quick: bool, workdir: Path
                ) -> None:
    """One round of (`name`, `variant`): Reverie's routes tried in order until one runs
    (in round 1; later rounds run the route found)."""
    routes = ROUTES if variant == "reverie" else (variant,)
    for route in [outcome.route] if outcome.route else routes:
        result = run_worker(name, route, quick, workdir / name / route)
        if "error" not in result:
            outcome.route = route
            outcome.first_step_s.append(result["first_step_s"])
            outcome.step_s.append(result["step_s"])
            return
        outcome.refusals[route] = result["error"]
    outcome.refused = True


def run_rounds(names: list[str], rounds: int, quick: bool, workdir: Path
               ) -> dict[tuple[str, str], Outcome]:
    """Every (model, variant)'s outcome over `rounds` rounds of fresh processes."""
    outcomes = {(name, variant): Outcome() for name in names for variant in VARIANTS}
    for number in range(rounds):
        order = VARIANTS if number % 2 == 0 else VARIANTS[::-1]
        for name in names:
            for variant in order:
                if not outcomes[name, variant].refused:
                    run_variant(outcomes[name, variant], name, variant, quick, workdir)
            print(f"round {number + 1}/{rounds}: {name} done", file=sys.stderr, flush=True)
    return outcomes


# ---------------------------------------------------------------- the report

def host_line() -> str:
    """The CPU's model name, which of `VECTOR_FLAGS` it has, the CPUs, torch's threads and
    version, and the load average."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), "CPU model unknown")
    flags = set(cpuinfo.split())
    vector = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in VECTOR_FLAGS)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (f"Host: {model}; {vector}; {os.cpu_count()} CPUs, torch {torch.__version__} with "
            f"{torch.get_num_threads()} threads; load average {load}")


def in_ms(seconds: float) -> str:
    """Milliseconds to three significant digits, whole ones from 1000 up."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def spread_ms(seconds: list[float]) -> str:
    """'median (min–max)' in ms."""
    return f"{in_ms(statistics.median(seconds))} ({in_ms(min(seconds))}–{in_ms(max(seconds))})"


def ratio(outcome: Outcome, eager: Outcome) -> float | None:
    """The outcome's median step over eager's (None where either has no figure)."""
    if not outcome.step_s or not eager.step_s:
        return None
    return statistics.median(outcome.step_s) / statistics.median(eager.step_s)


def step_cells(outcome: Outcome, eager: Outcome) -> list[str]:
    """A variant's step-time cell and its ratio to eager (or its refusal)."""
    if not outcome.step_s:
        return ["refused (note)", "—"]
    times = ratio(outcome, eager)
    return [spread_ms(outcome.step_s), "—" if times is None else f"{times:.2f}×"]


def route_cell(outcome: Outcome) -> str:
    if outcome.route is None:
        return "none (note)"
    return outcome.route + (" (note)" if outcome.route != ROUTES[0] else "")


def step_table(names: list[str], quick: bool, outcomes: dict[tuple[str, str], Outcome]
               ) -> str:
    """Markdown: per model (with its size, unless `quick`: the zoo's), the ms per training
    step of each variant."""
    lines = [f"| {'model' if quick else 'model (size)'} | eager ms | inductor ms | × eager "
             "| reverie ms | × eager | reverie route |", "|---|---|---|---|---|---|---|"]
    for name in names:
        eager = outcomes[name, "eager"]
        cells = [name if quick else f"{name} ({BENCHMARKS[name].size})",
                 *step_cells(eager, eager)[:1],
                 *step_cells(outcomes[name, "inductor"], eager),
                 *step_cells(outcomes[name, "reverie"], eager),
                 route_cell(outcomes[name, "reverie"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def first_step_cells(outcome: Outcome) -> list[str]:
    """Cold (round 1) and warm (median and spread of later rounds) first steps, in ms."""
    if not outcome.first_step_s:
        return ["—", "—"]
    cold = in_ms(outcome.first_step_s[0])
    warm = spread_ms(outcome.first_step_s[1:]) if len(outcome.first_step_s) > 1 else "—"
    return [cold, warm]


def compile_table(names: list[str], outcomes: dict[tuple[str, str], Outcome]) -> str:
    """Markdown: per model, each variant's first training step, cold and warm."""
    lines = ["| model | eager first step ms | inductor cold ms | inductor warm ms "
             "| reverie cold ms | reverie warm ms |", "|---|---|---|---|---|---|"]
    for name in names:
        eager = outcomes[name, "eager"].first_step_s
        cells = [name, spread_ms(eager) if eager else "—",
                 *first_step_cells(outcomes[name, "inductor"]),
                 *first_step_cells(outcomes[name, "reverie"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(names: list[str], outcomes: dict[tuple[str, str], Outcome]) -> list[str]:
    """One line per refusal: what a variant (or Reverie's route) raised."""
    lines = []
    for name in names:
        for variant in VARIANTS:
            for route, error in outcomes[name, variant].refusals.items():
                which = variant if route == variant else f"{variant} {route}"
                lines.append(f"- {name}, {which}: {error}")
    return lines


def verdict(label: str, misses: list[str], count: int) -> str:
    met = "met" if not misses else f"not met on {len(misses)}: {', '.join(misses)}"
    return f"- {label}: {count - len(misses)} of {count} — {met}"


def goal_lines(names: list[str], outcomes: dict[tuple[str, str], Outcome]) -> list[str]:
    """Issue 33 item 5's goals, judged on the tables' figures (a refusal is a miss)."""
    ratios = {name: ratio(outcomes[name, "reverie"], outcomes[name, "eager"]) for name in names}

    def slower(names_checked: list[str], bound: float) -> list[str]:
        return [f"{name} ({'refused' if ratios[name] is None else f'{ratios[name]:.2f}×'})"
                for name in names_checked if ratios[name] is None or ratios[name] > bound]

    mlp_cnn = [name for name in names if BENCHMARKS[name].mlp_or_cnn]
    firsts = {name: outcomes[name, "reverie"].first_step_s for name in names}
    cold = [f"{name} ({firsts[name][0]:.2f} s)" if firsts[name] else f"{name} (refused)"
            for name in names if not firsts[name] or firsts[name][0] > GOALS["cold_s"]]
    warm_measured = [name for name in names if len(firsts[name]) > 1]
    warm = [f"{name} ({statistics.median(firsts[name][1:]) * 1e3:.0f} ms)"
            for name in warm_measured
            if statistics.median(firsts[name][1:]) > GOALS["warm_s"]]
    return ["Goals (issue 33, item 5; first steps include the step's own work):",
            verdict("reverie step ≤ eager's", slower(names, GOALS["step"]), len(names)),
            verdict("reverie step ≤ 0.8× eager's on MLP/CNN-type models",
                    slower(mlp_cnn, GOALS["mlp_cnn_step"]), len(mlp_cnn)),
            verdict("cold first step ≤ 3 s", cold, len(names)),
            verdict("warm first step ≤ 50 ms", warm, len(warm_measured))
            if warm_measured else "- warm first step ≤ 50 ms: not measured (one round)"]


def report(names: list[str], rounds: int, quick: bool,
           outcomes: dict[tuple[str, str], Outcome]) -> str:
    sizes = "the zoo's tiny sizes (--quick)" if quick else "realistic small sizes"
    parts = [f"Training step, f32, {sizes}: median ms over {rounds} round(s) of one fresh "
             f"process per (model, variant), (min–max of the rounds), ratio of medians.",
             step_table(names, quick, outcomes),
             "First training step of a fresh process (compile cost; cold: empty disk "
             "caches, round 1; warm: the disk caches filled, later rounds).",
             compile_table(names, outcomes),
             "\n".join(["Notes:", *notes(names, outcomes)]),
             "\n".join(goal_lines(names, outcomes)), host_line()]
    return "\n\n".join(parts)


# ---------------------------------------------------------------- the command line

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(BENCHMARKS),
                        help=f"comma-separated, of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--rounds", type=int, help="processes per (model, variant); "
                        "default 5, 1 with --quick")
    parser.add_argument("--quick", action="store_true",
                        help="the zoo's tiny sizes, one round, one short sample (smoke test)")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "VARIANT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(*args.worker, args.quick)
        return
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(BENCHMARKS)}")
    rounds = args.rounds or (1 if args.quick else 5)
    print(host_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="reverie-fx-bench-") as workdir:
        outcomes = run_rounds(names, rounds, args.quick, Path(workdir))
    print(f"\n{report(names, rounds, args.quick, outcomes)}")


if __name__ == "__main__":
    main()
