"""A physics-informed network whose loss holds u_xx, trained with compiled derivatives.

The network u(x) solves the Poisson problem −u'' = π² sin(πx) on [0, 1] with
u(0) = u(1) = 0 (solution sin(πx)). Its loss is the squared residual of the equation at
collocation points plus the boundary terms,

    L = mean((u_xx + π² sin(πx))²) + u(0)² + u(1)²,

so u_xx is a second derivative of the network and the optimiser's step a third: the
network is `torch.compile(net, backend="reverie")`, whose every derivative runs as a
Reverie kernel (`torch.compile`'s default backend cannot run this: it refuses double
backward). The same training runs in eager PyTorch from the same weights, and the script
prints both losses, the error against sin(πx) and the time per step.

    python examples/pinn.py [--steps 500]
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch
from torch import nn


def pinn_loss(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The Poisson residual at the collocation points plus the boundary conditions."""
    x = x.requires_grad_(True)
    u = net(x)
    (u_x,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    (u_xx,) = torch.autograd.grad(u_x.sum(), x, create_graph=True)
    residual = u_xx + math.pi ** 2 * torch.sin(math.pi * x)
    ends = net(torch.tensor([[0.0], [1.0]], dtype=x.dtype))
    return (residual ** 2).mean() + (ends ** 2).sum()


def train(net: nn.Module, model: nn.Module, steps: int, points: int, label: str
          ) -> tuple[list[float], float]:
    """Adam on the PINN loss; the losses and mean seconds per step after the first."""
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-3)
    x = torch.linspace(0, 1, points, dtype=torch.float64).reshape(-1, 1)
    losses, started = [], None
    for step in range(steps):
        optimiser.zero_grad()
        loss = pinn_loss(model, x.clone())
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        if step == 0:
            started = time.perf_counter()
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            print(f"  {label:8s} step {step:4d}  loss {loss.item():.6f}")
    return losses, (time.perf_counter() - started) / max(1, steps - 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--points", type=int, default=64)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                        nn.Linear(32, 1)).double()
    twin = copy.deepcopy(net)
    compiled = torch.compile(net, backend="reverie", fullgraph=True)
    print(f"PINN for -u'' = pi^2 sin(pi x), {args.steps} steps, {args.points} points")
    reverie_losses, reverie_time = train(net, compiled, args.steps, args.points, "reverie")
    eager_losses, eager_time = train(twin, twin, args.steps, args.points, "eager")
    drift = max(abs(a - b) / max(abs(b), 1e-30)
                for a, b in zip(reverie_losses, eager_losses, strict=True))
    grid = torch.linspace(0, 1, 101, dtype=torch.float64).reshape(-1, 1)
    with torch.no_grad():
        error = (net(grid) - torch.sin(math.pi * grid)).abs().max().item()
    print(f"loss {reverie_losses[0]:.4f} -> {reverie_losses[-1]:.6f} (eager "
          f"{eager_losses[-1]:.6f}; largest relative difference {drift:.1e}); "
          f"max |u - sin(pi x)| = {error:.3e}")
    print(f"time per step: reverie {reverie_time * 1e3:.2f} ms, eager PyTorch "
          f"{eager_time * 1e3:.2f} ms ({eager_time / reverie_time:.2f}x)")


if __name__ == "__main__":
    main()
