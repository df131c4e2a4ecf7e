"""PyTorch's AMP gradient penalty recipe, compiled by Reverie (docs/api.md §9, issue 37).

The recipe of PyTorch's "Automatic Mixed Precision examples" (Gradient penalty), on the
CPU: the forward and loss under `torch.autocast`, gradients of the scaled loss with
`create_graph=True`, unscaled by hand, their norm added to the loss under autocast, then
`scaler.scale(loss).backward()`, `scaler.step`, `scaler.update`. The model is compiled
with `torch.compile(model, backend="reverie", fullgraph=True)`: its kernels compute
autocast's dtypes (linear layers in bf16/f16, rounded once per op as eager's), and the
penalty's double backward runs Reverie's compiled VJP-of-VJP kernels. With `--whole-step`
the forward, the `torch.autograd.grad` call and the penalty are one Dynamo graph
(`torch._dynamo.config.trace_autograd_ops = True`), compiled around the autograd call.
The same training runs in eager PyTorch from the same weights; the script prints both
losses, their largest difference and the time per step.

    python examples/amp_gradient_penalty.py [--steps 200] [--dtype bf16|f16] [--whole-step]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def penalised_loss(model: nn.Module, input: torch.Tensor, target: torch.Tensor,
                   scale: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The recipe up to the penalised loss: `scale` is `scaler.get_scale()`, the factor
    `scaler.scale(loss)` multiplies by (a GradScaler method Dynamo does not trace)."""
    with torch.autocast(device_type="cpu", dtype=dtype):
        output = model(input)
        loss = nn.functional.mse_loss(output, target)
    scaled_grad_params = torch.autograd.grad(outputs=loss * scale,
                                             inputs=list(model.parameters()),
                                             create_graph=True)
    inv_scale = 1.0 / scale
    grad_params = [p * inv_scale for p in scaled_grad_params]
    with torch.autocast(device_type="cpu", dtype=dtype):
        grad_norm = 0
        for grad in grad_params:
            grad_norm += grad.pow(2).sum()
        grad_norm = grad_norm.sqrt()
        return loss + grad_norm, grad_norm


def batches(steps: int, batch: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
    """Inputs in [-1, 1]^8 and targets from a fixed smooth function of them."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.rand(batch, 8, generator=generator) * 2 - 1
        yield x, torch.sin(3 * x[:, :1]) * x[:, 1:2] + x[:, 2:3] ** 2


Step = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def train(model: nn.Module, step: Step, steps: int, batch: int, dtype: torch.dtype,
          label: str) -> tuple[list[float], float]:
    """SGD through a GradScaler; returns the losses and the mean seconds per step after
    the first (which compiles)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    losses, started = [], None
    for n, (input, target) in enumerate(batches(steps, batch)):
        optimizer.zero_grad()
        loss, grad_norm = step(model, input, target, scaler.get_scale(), dtype)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        if n == 0:
            started = time.perf_counter()
        if n % max(1, steps // 5) == 0 or n == steps - 1:
            print(f"  {label:8s} step {n:4d}  loss {loss.item():8.4f}  "
                  f"grad norm {grad_norm.item():.4f}  scale {scaler.get_scale():g}")
    return losses, (time.perf_counter() - started) / max(1, steps - 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--whole-step", action="store_true",
                        help="compile forward, autograd.grad and penalty as one graph")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 1))
    twin, dtype = copy.deepcopy(model), DTYPES[args.dtype]
    if args.whole_step:
        torch._dynamo.config.trace_autograd_ops = True
        compiled = torch.compile(penalised_loss, backend="reverie", fullgraph=True)
        step, route = compiled, "the whole step as one graph"
    else:
        compiled_model = torch.compile(model, backend="reverie", fullgraph=True)

        def step(_model: nn.Module, *rest: object) -> tuple[torch.Tensor, torch.Tensor]:
            return penalised_loss(compiled_model, *rest)

        route = "the model compiled whole"
    print(f"AMP gradient penalty in {args.dtype}, {args.steps} steps of {args.batch} "
          f"samples ({route})")
    reverie_losses, reverie_time = train(model, step, args.steps, args.batch, dtype,
                                         "reverie")
    eager_losses, eager_time = train(twin, penalised_loss, args.steps, args.batch, dtype,
                                     "eager")
    drift = max(abs(a - b) / max(abs(b), 1e-3)
                for a, b in zip(reverie_losses, eager_losses, strict=True))
    print(f"loss {reverie_losses[0]:.4f} -> {reverie_losses[-1]:.4f} "
          f"(eager {eager_losses[-1]:.4f}; largest relative difference {drift:.1e})")
    print(f"time per step: reverie {reverie_time * 1e3:.2f} ms, eager PyTorch "
          f"{eager_time * 1e3:.2f} ms ({eager_time / reverie_time:.2f}x)")


if __name__ == "__main__":
    main()
