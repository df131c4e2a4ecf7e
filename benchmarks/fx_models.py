"""The models of `benchmarks/fx_backend.py`: the torch.compile zoo's canonical models
(`tests/fx_zoo/models.py`) at realistic small sizes, each one full training step as its
author writes it (forward, loss, backward, optimiser step).

`BENCHMARKS[name]` is a `Model`: the zoo's `Case` with the benchmark's model and batch
(its training step, optimisers and compiled parts are the zoo's wherever the zoo's code
takes its sizes from the model or the data), the zoo module's size constants to set first
(`constants`: the DCGAN's channels, the WGAN-GP critic's width and batch, the LSTM LM's
vocabulary, BPTT length and batch, which the zoo's code reads from module globals), the
size in words, and whether the model is of the MLP/CNN type (for which the goal is a
Reverie step at most 0.8× eager's).
Where a zoo class hard-codes its small sizes, a subclass here sets the original's sizes and
keeps the zoo's `forward`. `Model.prepare(quick=True)` gives the zoo's own case at its
tiny sizes (the smoke test's setting).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from tests.fx_zoo import models
from tests.fx_zoo.harness import Batch, Case
from tests.fx_zoo.models import integers, normal, uniform


@dataclass(frozen=True)
class Model:
    """A zoo model at the benchmark's size (module docstring)."""

    case: Case
    size: str
    mlp_or_cnn: bool
    constants: dict[str, object] = field(default_factory=dict)

    def prepare(self, quick: bool) -> Case:
        """The case to run: the zoo's own at its tiny sizes (`quick`), else this one, with
        the zoo module's size constants set (done once, in the worker process)."""
        if quick:
            return models.ZOO[self.case.name]
        for constant, value in self.constants.items():
            setattr(models, constant, value)
        return self.case


def labelled(*shape: int, classes: int) -> Callable[[int, torch.dtype], Batch]:
    """A batch function: normal data of `shape` and one class label per row."""
    return lambda step, dtype: {"data": normal(step, *shape, dtype=dtype),
                                "target": integers(step, classes, shape[0])}


# ---------------------------------------------------------------- classes at their sizes

class MnistNet(models.MnistNet):
    """pytorch/examples mnist/main.py's Net at its own size: channels 32, 64 and fc1
    9216x128 for 28x28 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)


class ResNetStage(models.TinyResNet):
    """The zoo's one-stage torchvision ResNet at CIFAR-ResNet width: a 16-channel stem and
    one BasicBlock 16 -> 32 planes at stride 2 with its downsample branch (32x32 images;
    PyTorch's default initialisation, which the step's time does not depend on)."""

    def __init__(self, num_classes=10):
        super().__init__(num_classes)
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        downsample = nn.Sequential(models.conv1x1(16, 32, 2), nn.BatchNorm2d(32))
        self.layer1 = nn.Sequential(models.BasicBlock(16, 32, 2, downsample))
        self.fc = nn.Linear(32 * models.BasicBlock.expansion, num_classes)


class SineLearner(models.SineLearner):
    """The MAML paper's sine regressor at its own size, 1-40-40-1 (ReLU)."""

    def __init__(self):
        super().__init__()
        self.vars = nn.ParameterList()
        for fan_in, fan_out in [(1, 40), (40, 40), (40, 1)]:
            w = nn.Parameter(torch.ones(fan_out, fan_in))
            torch.nn.init.kaiming_normal_(w)
            self.vars.append(w)
            self.vars.append(nn.Parameter(torch.zeros(fan_out)))


# ---------------------------------------------------------------- batches at their sizes

GPT_CONFIG = models.GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=4, n_embd=64)
GPT_BATCH = 8
CORPUS = 4096  # tokens of the stand-in for train.bin


def gpt_batch(step: int, dtype: torch.dtype) -> Batch:
    """nanoGPT train.py's get_batch: `GPT_BATCH` windows at random offsets and their shift."""
    data = integers(step, GPT_CONFIG.vocab_size, CORPUS)
    ix = integers(step + 1, CORPUS - GPT_CONFIG.block_size, GPT_BATCH).tolist()
    return {"X": torch.stack([data[i:i + GPT_CONFIG.block_size] for i in ix]),
            "Y": torch.stack([data[i + 1:i + 1 + GPT_CONFIG.block_size] for i in ix])}


def pinn_batch(step: int, dtype: torch.dtype, boundary: int = 100,
               collocation: int = 2000) -> Batch:
    """Burgers' equation data: `boundary` points of u(x, 0) = -sin(pi x) and `collocation`
    points (x, t) where the residual is penalised (Raissi: 100 and 10,000)."""
    x_u = uniform(step, boundary, 1, dtype=dtype) * 2 - 1
    return {"x_u": x_u, "t_u": torch.zeros_like(x_u), "u": -torch.sin(math.pi * x_u),
            "x_f": uniform(step + 50, collocation, 1, dtype=dtype) * 2 - 1,
            "t_f": uniform(step + 60, collocation, 1, dtype=dtype)}


def maml_batch(step: int, dtype: torch.dtype, tasks: int = 25, shots: int = 10) -> Batch:
    """The MAML paper's sine setting: `tasks` (amplitude, phase) pairs per meta-batch,
    `shots` support and `shots` query points each."""
    amplitude = uniform(step, tasks, 1, 1, dtype=dtype) * 4.9 + 0.1
    phase = uniform(step + 1, tasks, 1, 1, dtype=dtype) * math.pi
    x = uniform(step + 2, tasks, 2 * shots, 1, dtype=dtype) * 10 - 5
    y = amplitude * torch.sin(x - phase)
    return {"x_spt": x[:, :shots], "y_spt": y[:, :shots],
            "x_qry": x[:, shots:], "y_qry": y[:, shots:]}


ZOO = models.ZOO
BENCHMARKS: dict[str, Model] = {
    "mnist": Model(
        replace(ZOO["mnist"], model=MnistNet, batch=labelled(64, 1, 28, 28, classes=10)),
        "channels 32/64, fc 9216-128-10, 28x28, batch 64", True),
    "lenet5": Model(
        replace(ZOO["lenet5"], batch=labelled(32, 3, 32, 32, classes=10)),
        "its own size, 3x32x32, batch 32", True),
    "resnet_block": Model(
        replace(ZOO["resnet_block"], model=ResNetStage, batch=labelled(32, 3, 32, 32,
                                                                        classes=10)),
        "stem 16, BasicBlock 16->32 stride 2, 32x32, batch 32", True),
    "vae": Model(
        replace(ZOO["vae"], batch=lambda step, dtype: {"data": uniform(step, 128, 1, 28, 28,
                                                                       dtype=dtype)}),
        "784-400-20, batch 128", True, {"VAE_SIZES": (784, 400, 20)}),
    "dcgan": Model(
        replace(ZOO["dcgan"], batch=lambda step, dtype: {
            "data": normal(step, 64, 3, 16, 16, dtype=dtype).tanh()}),
        "nz 100, ngf = ndf = 64, 3x16x16, batch 64", True,
        {"NC": 3, "NZ": 100, "NGF": 64, "NDF": 64}),
    "wgan_gp": Model(
        replace(ZOO["wgan_gp"], batch=lambda step, dtype: {
            "real": normal(step, 256, 2, dtype=dtype) * 0.05 + 2,
            "fake": normal(step + 100, 256, 2, dtype=dtype)}),
        "critic 2-512-512-512-1, batch 256", True, {"DIM": 512, "BATCH_SIZE": 256}),
    "lstm_lm": Model(
        replace(ZOO["lstm_lm"], model=lambda: models.RNNModel("LSTM", 1000, 128, 128, 2,
                                                              dropout=0.2)),
        "vocab 1000, 2x128 LSTM, bptt 35, batch 20", False,
        {"NTOKEN": 1000, "BPTT": 35, "LM_BATCH": 20}),
    "gru_classifier": Model(
        replace(ZOO["gru_classifier"], model=lambda: models.GRUClassifier(1000, 64, 128, 4),
                batch=lambda step, dtype: {"data": integers(step, 1000, 32, 32),
                                           "target": integers(step, 4, 32)}),
        "vocab 1000, embed 64, GRU 128, seq 32, batch 32", False),
    "transformer_encoder": Model(
        replace(ZOO["transformer_encoder"],
                model=lambda: models.TransformerClassifier(64, 4, 256, 4),
                batch=labelled(32, 32, 64, classes=4)),
        "d_model 64, 4 heads, ff 256, seq 32, batch 32", False),
    "nanogpt": Model(
        replace(ZOO["nanogpt"], model=lambda: models.GPT(GPT_CONFIG), batch=gpt_batch),
        "2 layers, n_embd 64, 4 heads, vocab 65, seq 64, batch 8", False),
    "pinn": Model(
        replace(ZOO["pinn"], model=lambda: models.DNN([2] + [20] * 8 + [1]),
                batch=pinn_batch),
        "2-(20x8)-1 tanh, 100 + 2000 points", True),
    "mlp_adam": Model(
        replace(ZOO["mlp_adam"],
                model=lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
                                            nn.Linear(256, 10)),
                batch=labelled(128, 784, classes=10),
                train_step=models.criterion_train(nn.CrossEntropyLoss())),
        "784-256-10, cross-entropy, batch 128", True),
    "maml": Model(
        replace(ZOO["maml"], model=SineLearner, batch=maml_batch),
        "1-40-40-1, 25 tasks x (10 + 10) points", True),
    "hvp": Model(
        replace(ZOO["hvp"], model=lambda: nn.Sequential(nn.Linear(784, 128), nn.Tanh(),
                                                        nn.Linear(128, 10)),
                batch=labelled(128, 784, classes=10)),
        "784-128-10 tanh, batch 128", True),
}
