"""A WGAN-GP critic trained with a gradient penalty, compiled by Reverie (docs/api.md §9).

The critic is an ordinary `nn.Module` compiled with `torch.compile(critic,
backend="reverie")`. Its loss holds the gradient penalty (Gulrajani et al., 2017)

    L = E[D(fake)] − E[D(real)] + λ E[(‖∇ₓ D(x̂)‖ − 1)²],   x̂ = ε real + (1 − ε) fake,

so each optimiser step differentiates a gradient: a double backward, which
`torch.compile`'s default backend refuses ("does not currently support double backward")
and Reverie runs as compiled VJP-of-VJP kernels. The same training runs in eager PyTorch
from the same initial weights, and the script prints both losses and the time per step.

    python examples/wgan_gp.py [--steps 300]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

LAMBDA = 10.0


def critic_loss(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor,
                epsilon: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The WGAN-GP critic loss and its gradient penalty."""
    mixed = (epsilon * real + (1 - epsilon) * fake).requires_grad_(True)
    (slopes,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    penalty = ((slopes.norm(dim=1) - 1) ** 2).mean()
    return critic(fake).mean() - critic(real).mean() + LAMBDA * penalty, penalty


def batches(steps: int, batch: int, seed: int = 0):
    """Real samples from a ring of 8 Gaussians, fake ones from a fixed broad Gaussian."""
    generator = torch.Generator().manual_seed(seed)
    angles = torch.arange(8) * (torch.pi / 4)
    centres = torch.stack([angles.cos(), angles.sin()], dim=1) * 2
    for _ in range(steps):
        pick = torch.randint(0, 8, (batch,), generator=generator)
        real = centres[pick] + 0.05 * torch.randn(batch, 2, generator=generator)
        fake = 1.5 * torch.randn(batch, 2, generator=generator)
        yield real, fake, torch.rand(batch, 1, generator=generator)


def train(critic: nn.Module, model: nn.Module, steps: int, batch: int, label: str
          ) -> tuple[list[float], float]:
    """Adam on the critic loss; returns the losses and the mean seconds per step after
    the first (which compiles)."""
    optimiser = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    losses, started = [], None
    for step, (real, fake, epsilon) in enumerate(batches(steps, batch)):
        optimiser.zero_grad()
        loss, penalty = critic_loss(model, real, fake, epsilon)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        if step == 0:
            started = time.perf_counter()
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            print(f"  {label:8s} step {step:4d}  critic loss {loss.item():9.4f}  "
                  f"penalty {penalty.item():.4f}")
    return losses, (time.perf_counter() - started) / max(1, steps - 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                           nn.Linear(64, 1))
    twin = copy.deepcopy(critic)
    compiled = torch.compile(critic, backend="reverie", fullgraph=True)
    print(f"WGAN-GP critic, {args.steps} steps of {args.batch} samples")
    reverie_losses, reverie_time = train(critic, compiled, args.steps, args.batch, "reverie")
    eager_losses, eager_time = train(twin, twin, args.steps, args.batch, "eager")
    drift = max(abs(a - b) for a, b in zip(reverie_losses, eager_losses, strict=True))
    print(f"loss {reverie_losses[0]:.4f} -> {reverie_losses[-1]:.4f} "
          f"(eager {eager_losses[-1]:.4f}; largest difference {drift:.1e})")
    print(f"time per step: reverie {reverie_time * 1e3:.2f} ms, eager PyTorch "
          f"{eager_time * 1e3:.2f} ms ({eager_time / reverie_time:.2f}x)")


if __name__ == "__main__":
    main()
