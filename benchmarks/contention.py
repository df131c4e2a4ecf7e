"""The worker pool beside other work: default threads against `REVERIE_NUM_THREADS=1`.

    python benchmarks/contention.py [--rounds 3] [--samples 15] [--only W1,W3,step]
                                    [--scenarios idle,busy,torch]

Workloads: W1 and W3 of `run.py` (Reverie's gradient), and `step`, a torch training step
(forward, backward, SGD) of a model whose activation is a Reverie kernel through
`rv.torch.function`. Scenarios: `idle`; `busy`, another process spinning `while True: pass`
(one core of a 2-core machine taken); `torch`, a thread of the same process training a torch
MLP all the while. Each (scenario, workload, threads) measurement is a process of its own;
the two thread settings alternate, round after round, and each process reports the median
of its samples. The table gives the median over rounds and default ÷ one thread (goals of
issue 31: at most 1.1 under `busy` and `torch`, at most 1 / 1.6 for W1 when idle).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = ("W1", "W3", "step")
SCENARIOS = ("idle", "busy", "torch")
THREADS = ("default", "1")
STEP_SOURCE = """
fn act(h: f32[B, H]) -> f32[B, H] { return tanh(h) * sin(h) + 0.5 * h; }
"""


def reverie_gradient(key: str) -> Callable[[], object]:
    """The timed call of W1 or W3: Reverie's gradient (`benchmarks/workloads`)."""
    sys.path.insert(0, str(HERE))
    from workloads import w1_elementwise, w3_mlp

    workload = {"W1": w1_elementwise, "W3": w3_mlp}[key].make()
    return workload.of_peer("reverie")[0].build()


def torch_step() -> Callable[[], object]:
    """One training step of Linear(256, 512) -> Reverie `act` -> Linear(512, 10), MSE."""
    import torch

    import reverie as rv

    torch.manual_seed(0)
    act = rv.torch.function(rv.compile(STEP_SOURCE).act)
    first, last = torch.nn.Linear(256, 512), torch.nn.Linear(512, 10)
    optimizer = torch.optim.SGD([*first.parameters(), *last.parameters()], lr=1e-3)
    x, y = torch.randn(1024, 256), torch.randn(1024, 10)

    def step() -> object:
        optimizer.zero_grad()
        loss = (last(act(first(x))) - y).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    return step


def start_scenario(scenario: str) -> Callable[[], None]:
    """Start the scenario's neighbour; returns the function that stops it."""
    if scenario == "busy":
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return hog.kill
    if scenario == "torch":
        import threading

        import torch

        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(),
                                    torch.nn.Linear(512, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        data = torch.randn(512, 256)
        stop = threading.Event()

        def train() -> None:
            while not stop.is_set():
                optimizer.zero_grad()
                model(data).square().mean().backward()
                optimizer.step()

        trainer = threading.Thread(target=train, daemon=True)
        trainer.start()
        return lambda: (stop.set(), trainer.join())
    return lambda: None


def child(workload: str, scenario: str, samples: int) -> None:
    """Measure in this process; print the median and fastest call in ms."""
    call = torch_step() if workload == "step" else reverie_gradient(workload)
    for _ in range(3):
        call()
    stop = start_scenario(scenario)
    time.sleep(0.3)
    times = []
    try:
        for _ in range(samples):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    finally:
        stop()
    print(f"{1e3 * statistics.median(times):.3f} {1e3 * min(times):.3f}")


def measure(workload: str, scenario: str, threads: str, samples: int) -> float:
    """One child process's median, ms."""
    env = dict(os.environ)
    env.pop("REVERIE_NUM_THREADS", None)
    if threads != "default":
        env["REVERIE_NUM_THREADS"] = threads
    out = subprocess.run([sys.executable, __file__, "--child", workload, scenario,
                          str(samples)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{workload} {scenario} {threads}: {out.stderr[-2000:]}")
    return float(out.stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        workload, scenario, samples = options.child
        child(workload, scenario, int(samples))
        return
    rows = []
    for scenario in options.scenarios.split(","):
        for workload in options.only.split(","):
            medians: dict[str, list[float]] = {t: [] for t in THREADS}
            for _ in range(options.rounds):
                for threads in THREADS:
                    medians[threads].append(measure(workload, scenario, threads,
                                                    options.samples))
            default, one = (statistics.median(medians[t]) for t in THREADS)
            rows.append(f"| {scenario} | {workload} | {default:.2f} | {one:.2f} | "
                        f"{default / one:.2f} | {min(medians['default']):.2f}–"
                        f"{max(medians['default']):.2f} / {min(medians['1']):.2f}–"
                        f"{max(medians['1']):.2f} |")
            print(rows[-1], flush=True)
    print("\n| scenario | workload | default threads (ms) | one thread (ms) | ratio | "
          "round medians (default / one) |\n|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
