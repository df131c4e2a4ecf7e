"""The torch.compile backend "reverie" against eager PyTorch and torch.compile's default
backend (inductor), in one process run (issue 14 item 4).

Two steps are timed, each the median of several rounds after a warm-up that compiles:

- **W3 MLP step**: the W3 model (x: f32[1024, 256], hidden 512, 10 outputs, tanh, MSE) as
  an `nn.Module`; forward + `.backward()`.
- **WGAN-GP step**: a critic (2 → 64 → 64 → 1, tanh) whose loss holds a gradient penalty,
  so the step is a double backward; inductor cannot run it ("torch.compile does not
  currently support double backward"), so the peers are eager PyTorch alone.

    python benchmarks/fx_backend.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


def timed(step: Callable[[], object], rounds: int) -> float:
    """Median seconds per call of `step` over `rounds` samples of about 0.2 s each."""
    step()  # compiles
    step()
    samples = []
    for _ in range(rounds):
        calls, started = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - started < 0.2:
            step()
            calls += 1
        samples.append((time.perf_counter() - started) / calls)
    return statistics.median(samples)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 10))


def mlp_step(model: Callable[[torch.Tensor], torch.Tensor], params: list[torch.Tensor],
             x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    def step() -> object:
        for p in params:
            p.grad = None
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    return step


def critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 1))


def wgan_step(model: Callable[[torch.Tensor], torch.Tensor], params: list[torch.Tensor],
              real: torch.Tensor, fake: torch.Tensor, epsilon: torch.Tensor
              ) -> Callable[[], object]:
    def step() -> object:
        for p in params:
            p.grad = None
        mixed = (epsilon * real + (1 - epsilon) * fake).requires_grad_(True)
        (slopes,) = torch.autograd.grad(model(mixed).sum(), mixed, create_graph=True)
        penalty = ((slopes.norm(dim=1) - 1) ** 2).mean()
        loss = model(fake).mean() - model(real).mean() + 10 * penalty
        loss.backward()
        return loss

    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    x, y = torch.randn(1024, 256), torch.randn(1024, 10)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    rows = {}
    for label, wrap in (("eager", lambda m: m),
                        ("torch.compile (inductor)", torch.compile),
                        ("torch.compile(backend='reverie')",
                         lambda m: torch.compile(m, backend="reverie", fullgraph=True))):
        model = mlp()
        rows[label] = timed(mlp_step(wrap(model), list(model.parameters()), x, y), args.rounds)
    print("\nW3 MLP forward + backward, ms per step")
    for label, seconds in rows.items():
        print(f"  {label:34s} {seconds * 1e3:8.2f}   ({seconds / rows['eager']:.2f}x eager)")
    generator = torch.Generator().manual_seed(1)
    real, fake = torch.randn(256, 2, generator=generator), torch.randn(256, 2, generator=generator)
    epsilon = torch.rand(256, 1, generator=generator)
    gan = {}
    for label, wrap in (("eager", lambda m: m),
                        ("torch.compile(backend='reverie')",
                         lambda m: torch.compile(m, backend="reverie", fullgraph=True))):
        model = critic()
        gan[label] = timed(wgan_step(wrap(model), list(model.parameters()), real, fake,
                                     epsilon), args.rounds)
    print("\nWGAN-GP critic step (double backward), ms per step")
    for label, seconds in gan.items():
        print(f"  {label:34s} {seconds * 1e3:8.2f}   ({seconds / gan['eager']:.2f}x eager)")
    print("  torch.compile (inductor)           refuses: does not support double backward")


if __name__ == "__main__":
    main()
