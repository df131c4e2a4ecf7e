"""Twenty canonical PyTorch models and training patterns, as their authors write them.

Each model is the original code (pytorch/examples, the PyTorch tutorials, torchvision,
karpathy/nanoGPT, the AMP docs, ...) at small sizes, so that each compiles in seconds;
each training pattern is the body of the original training loop. Where the original
differs, a comment says how (sizes; data drawn in the model's dtype; CUDA-only branches
left out). `ZOO` lists them as `harness.Case`s.
"""

from __future__ import annotations

import math
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 (the authors' spelling)
from torch import autograd, nn, optim
from torch.distributions import Categorical

from .harness import Batch, Case, Loop, Results

# ---------------------------------------------------------------- data


def normal(step: int, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Data of a step: the same draws on both sides, whatever the global seed."""
    generator = torch.Generator().manual_seed(step * 7919 + sum(shape))
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def uniform(step: int, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(step * 7919 + sum(shape) + 1)
    return torch.rand(*shape, generator=generator, dtype=torch.float64).to(dtype)


def integers(step: int, high: int, *shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(step * 7919 + sum(shape) + 2)
    return torch.randint(0, high, shape, generator=generator)


def classify(loop: Loop, batch: Batch) -> Results:
    """Evaluation of a classifier: its output on the batch."""
    return {"output": loop.net(batch["data"])}


# ---------------------------------------------------------------- 1. pytorch/examples MNIST

class MnistNet(nn.Module):
    """pytorch/examples mnist/main.py's Net; channels 32, 64 -> 4, 8, fc1 9216x128 -> 128x16
    for 12x12 images (28x28 in the original)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(128, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def mnist_train(loop: Loop, batch: Batch) -> Results:
    (optimizer,) = loop.optimizers
    data, target = batch["data"], batch["target"]
    optimizer.zero_grad()
    output = loop.net(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    return {"output": output, "loss": loss}


MNIST = Case(
    "mnist", MnistNet,
    lambda step, dtype: {"data": normal(step, 4, 1, 12, 12, dtype=dtype),
                         "target": integers(step, 10, 4)},
    mnist_train, classify, lambda model: [optim.Adadelta(model.parameters(), lr=1.0)])


# ---------------------------------------------------------------- 2. LeNet-5

class LeNet(nn.Module):
    """The CIFAR-10 tutorial's LeNet-5 (Training a Classifier), at its own size."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def criterion_train(criterion: nn.Module):
    """The tutorials' loop body: zero_grad, forward, criterion, backward, step."""

    def train_step(loop: Loop, batch: Batch) -> Results:
        (optimizer,) = loop.optimizers
        inputs, labels = batch["data"], batch["target"]
        optimizer.zero_grad()
        outputs = loop.net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        return {"output": outputs, "loss": loss}

    return train_step


LENET = Case(
    "lenet5", LeNet,
    lambda step, dtype: {"data": normal(step, 2, 3, 32, 32, dtype=dtype),
                         "target": integers(step, 10, 2)},
    criterion_train(nn.CrossEntropyLoss()), classify,
    lambda model: [optim.SGD(model.parameters(), lr=0.001, momentum=0.9)])


# ---------------------------------------------------------------- 3. ResNet BasicBlock

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    """torchvision.models.resnet's 3x3 convolution with padding."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation,
                     groups=groups, bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    """torchvision.models.resnet's 1x1 convolution."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, norm_layer=None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class TinyResNet(nn.Module):
    """torchvision's ResNet with one stage of one BasicBlock (stride 2, so with its
    downsample branch); 64 -> 4 and 8 planes, a 3x3 stem without max pool, 8x8 images."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        downsample = nn.Sequential(conv1x1(4, 8, 2), nn.BatchNorm2d(8))
        self.layer1 = nn.Sequential(BasicBlock(4, 8, 2, downsample))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * BasicBlock.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d | nn.GroupNorm):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.layer1(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


RESNET = Case(
    "resnet_block", TinyResNet,
    lambda step, dtype: {"data": normal(step, 4, 3, 8, 8, dtype=dtype),
                         "target": integers(step, 10, 4)},
    criterion_train(nn.CrossEntropyLoss()), classify,
    lambda model: [optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)])


# ---------------------------------------------------------------- 4. VAE

VAE_SIZES = (64, 32, 4)  # pixels, hidden, latent: 784-400-20 in the original (28x28 images)


class VAE(nn.Module):
    """pytorch/examples vae/main.py's VAE; 784-400-20 -> `VAE_SIZES` (8x8 images)."""

    def __init__(self):
        super().__init__()
        pixels, hidden, latent = VAE_SIZES
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, VAE_SIZES[0]))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence losses summed over all elements and batch."""
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, VAE_SIZES[0]), reduction="sum")  # noqa: N806
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())  # noqa: N806
    return BCE + KLD


def vae_train(loop: Loop, batch: Batch) -> Results:
    (optimizer,) = loop.optimizers
    data = batch["data"]
    optimizer.zero_grad()
    recon_batch, mu, logvar = loop.net(data)
    loss = vae_loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    return {"recon": recon_batch, "mu": mu, "logvar": logvar, "loss": loss}


def vae_test(loop: Loop, batch: Batch) -> Results:
    data = batch["data"]
    recon_batch, mu, logvar = loop.net(data)
    return {"recon": recon_batch, "test_loss": vae_loss_function(recon_batch, data, mu, logvar)}


VAE_CASE = Case(
    "vae", VAE, lambda step, dtype: {"data": uniform(step, 4, 1, 8, 8, dtype=dtype)},
    vae_train, vae_test, lambda model: [optim.Adam(model.parameters(), lr=1e-3)])


# ---------------------------------------------------------------- 5. DCGAN

NC, NZ, NGF, NDF = 1, 4, 4, 4  # pytorch/examples dcgan: 3, 100, 64, 64 (64x64 images)


class Generator(nn.Module):
    """pytorch/examples dcgan's Generator, three layers for 16x16 images (five for 64x64)."""

    def __init__(self, ngpu=1):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(NGF * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 4 x 4
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NGF),
            nn.ReLU(True),
            # state size. (ngf) x 8 x 8
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 16 x 16
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


class Discriminator(nn.Module):
    """pytorch/examples dcgan's Discriminator, three layers for 16x16 images."""

    def __init__(self, ngpu=1):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 16 x 16
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 8 x 8
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 4 x 4
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        return output.view(-1, 1).squeeze(1)


def weights_init(m):
    """Custom weights initialization called on netG and netD."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class DCGAN(nn.Module):
    """netG and netD, each compiled by the user; held together for the comparison."""

    def __init__(self):
        super().__init__()
        self.netG = Generator()
        self.netG.apply(weights_init)
        self.netD = Discriminator()
        self.netD.apply(weights_init)


def dcgan_optimizers(model: DCGAN) -> list[torch.optim.Optimizer]:
    return [optim.Adam(model.netD.parameters(), lr=0.0002, betas=(0.5, 0.999)),
            optim.Adam(model.netG.parameters(), lr=0.0002, betas=(0.5, 0.999))]


def dcgan_train(loop: Loop, batch: Batch) -> Results:
    """The loop body of dcgan/main.py (the noise drawn in the model's dtype)."""
    netD, netG = loop.nets["netD"], loop.nets["netG"]  # noqa: N806
    optimizerD, optimizerG = loop.optimizers  # noqa: N806
    criterion = nn.BCELoss()
    real_label, fake_label = 1, 0
    ############################
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    ###########################
    # train with real
    loop.model.netD.zero_grad()
    real_cpu = batch["data"]
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
    output = netD(real_cpu)
    errD_real = criterion(output, label)  # noqa: N806
    errD_real.backward()
    # train with fake
    noise = torch.randn(batch_size, NZ, 1, 1, dtype=real_cpu.dtype)
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)  # noqa: N806
    errD_fake.backward()
    errD = errD_real + errD_fake  # noqa: N806
    optimizerD.step()
    ############################
    # (2) Update G network: maximize log(D(G(z)))
    ###########################
    loop.model.netG.zero_grad()
    label.fill_(real_label)  # fake labels are real for generator cost
    output = netD(fake)
    errG = criterion(output, label)  # noqa: N806
    errG.backward()
    optimizerG.step()
    return {"fake": fake, "D_G_z2": output, "errD": errD, "errG": errG}


def dcgan_sample(loop: Loop, batch: Batch) -> Results:
    noise = torch.randn(batch["data"].size(0), NZ, 1, 1, dtype=batch["data"].dtype)
    fake = loop.nets["netG"](noise)
    return {"fake": fake, "D_fake": loop.nets["netD"](fake),
            "D_real": loop.nets["netD"](batch["data"])}


DCGAN_CASE = Case(
    "dcgan", DCGAN, lambda step, dtype: {"data": normal(step, 4, NC, 16, 16, dtype=dtype).tanh()},
    dcgan_train, dcgan_sample, dcgan_optimizers, parts=("netG", "netD"))


# ---------------------------------------------------------------- 6. WGAN-GP

DIM, LAMBDA, BATCH_SIZE = 16, 0.1, 8  # caogang/wgan-gp gan_toy.py: DIM = 512


class ToyDiscriminator(nn.Module):
    """caogang/wgan-gp gan_toy.py's Discriminator (the critic of the 8 Gaussians)."""

    def __init__(self):
        super().__init__()
        main = nn.Sequential(
            nn.Linear(2, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, 1),
        )
        self.main = main

    def forward(self, inputs):
        output = self.main(inputs)
        return output.view(-1)


def calc_gradient_penalty(netD, real_data, fake_data):  # noqa: N803
    """gan_toy.py's gradient penalty (CUDA branches left out); also returns the slopes."""
    alpha = torch.rand(BATCH_SIZE, 1, dtype=real_data.dtype)
    alpha = alpha.expand(real_data.size())
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates = interpolates.requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size(),
                                                      dtype=real_data.dtype),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA
    return gradient_penalty, gradients


def wgan_gp_train(loop: Loop, batch: Batch) -> Results:
    """One critic iteration of gan_toy.py (fake samples given, as from a frozen G)."""
    (optimizerD,) = loop.optimizers  # noqa: N806
    netD = loop.net  # noqa: N806
    real_data, fake = batch["real"], batch["fake"]
    one = torch.tensor(1, dtype=real_data.dtype)
    mone = one * -1
    loop.model.zero_grad()
    D_real = netD(real_data)  # noqa: N806
    D_real = D_real.mean()  # noqa: N806
    D_real.backward(mone)
    D_fake = netD(fake)  # noqa: N806
    D_fake = D_fake.mean()  # noqa: N806
    D_fake.backward(one)
    gradient_penalty, gradients = calc_gradient_penalty(netD, real_data, fake)
    gradient_penalty.backward()
    D_cost = D_fake - D_real + gradient_penalty  # noqa: N806
    Wasserstein_D = D_real - D_fake  # noqa: N806
    optimizerD.step()
    return {"D_cost": D_cost, "Wasserstein_D": Wasserstein_D, "gradients": gradients,
            "gradient_penalty": gradient_penalty}


WGAN_GP = Case(
    "wgan_gp", ToyDiscriminator,
    lambda step, dtype: {"real": normal(step, BATCH_SIZE, 2, dtype=dtype) * 0.05 + 2,
                         "fake": normal(step + 100, BATCH_SIZE, 2, dtype=dtype)},
    wgan_gp_train, lambda loop, batch: {"D_real": loop.net(batch["real"])},
    lambda model: [optim.Adam(model.parameters(), lr=1e-4, betas=(0.5, 0.9))])


# ---------------------------------------------------------------- 7. word-level LSTM LM

NTOKEN, BPTT, LM_BATCH = 20, 5, 3


class RNNModel(nn.Module):
    """pytorch/examples word_language_model/model.py's RNNModel (encoder, a recurrent
    module, decoder); emsize/nhid 200 -> 8, 2 layers, dropout 0.2, as in the example."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def lm_batch(step: int, dtype: torch.dtype) -> Batch:
    """get_batch's data and targets from a (BPTT + 1) x batch stretch of the corpus."""
    source = integers(step, NTOKEN, BPTT + 1, LM_BATCH)
    return {"data": source[:BPTT], "targets": source[1:].reshape(-1)}


def lm_train(loop: Loop, batch: Batch, lr: float = 20.0, clip: float = 0.25) -> Results:
    """The body of word_language_model/main.py's train() (plain SGD by hand, clipping)."""
    model, criterion = loop.model, nn.NLLLoss()
    if "hidden" not in loop.state:
        loop.state["hidden"] = model.init_hidden(LM_BATCH)
    data, targets = batch["data"], batch["targets"]
    model.zero_grad()
    hidden = repackage_hidden(loop.state["hidden"])
    output, hidden = loop.net(data, hidden)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    loop.state["hidden"] = hidden
    return {"output": output, "hidden": hidden, "loss": loss}


def lm_evaluate(loop: Loop, batch: Batch) -> Results:
    hidden = loop.model.init_hidden(LM_BATCH)
    output, hidden = loop.net(batch["data"], hidden)
    return {"output": output, "hidden": hidden,
            "loss": nn.NLLLoss()(output, batch["targets"])}


WORD_LM = Case(
    "lstm_lm", lambda: RNNModel("LSTM", NTOKEN, 8, 8, 2, dropout=0.2), lm_batch,
    lm_train, lm_evaluate, lambda model: [], rnn=True)


# ---------------------------------------------------------------- 8. GRU classifier

class GRUClassifier(nn.Module):
    """A text classifier as the tutorials write it: embedding, a batch-first GRU, and a
    linear layer on the last hidden state."""

    def __init__(self, vocab_size, embed_dim, hidden_dim, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.gru = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, text):
        embedded = self.embedding(text)
        _, hidden = self.gru(embedded)
        return self.fc(hidden[-1])


GRU_CASE = Case(
    "gru_classifier", lambda: GRUClassifier(20, 8, 8, 3),
    lambda step, dtype: {"data": integers(step, 20, 4, 6), "target": integers(step, 3, 4)},
    criterion_train(nn.CrossEntropyLoss()), classify,
    lambda model: [optim.Adam(model.parameters(), lr=1e-3)], rnn=True)


# ---------------------------------------------------------------- 9. TransformerEncoderLayer

class TransformerClassifier(nn.Module):
    """nn.TransformerEncoderLayer (d_model 8, 2 heads, feed-forward 16, dropout 0.1,
    batch first) on feature sequences, mean-pooled into a linear classifier."""

    def __init__(self, d_model=8, nhead=2, dim_feedforward=16, num_classes=3):
        super().__init__()
        self.encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward,
                                                        dropout=0.1, batch_first=True)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, src):
        x = self.encoder_layer(src)
        return self.classifier(x.mean(dim=1))


def transformer_train(loop: Loop, batch: Batch) -> Results:
    """The loop body of the tutorial "Language Modeling with nn.Transformer": SGD at lr 5
    with gradients clipped to norm 0.5. (Adam would turn the rounding noise of the key
    bias's gradient, zero in exact arithmetic, into steps of size lr.)"""
    (optimizer,) = loop.optimizers
    output = loop.net(batch["data"])
    loss = nn.CrossEntropyLoss()(output, batch["target"])
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(loop.model.parameters(), 0.5)
    optimizer.step()
    return {"output": output, "loss": loss}


TRANSFORMER = Case(
    "transformer_encoder", TransformerClassifier,
    lambda step, dtype: {"data": normal(step, 3, 5, 8, dtype=dtype),
                         "target": integers(step, 3, 3)},
    transformer_train, classify, lambda model: [optim.SGD(model.parameters(), lr=5.0)])


# ---------------------------------------------------------------- 10. nanoGPT

class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    """karpathy/nanoGPT model.py's attention (its flash path: scaled_dot_product_attention)."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()  # noqa: N806 (batch size, sequence length, n_embd)

        # calculate query, key, values for all heads in batch and move head forward
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
            is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 8  # nanoGPT: 1024
    vocab_size: int = 16  # 50304
    n_layer: int = 1  # 12
    n_head: int = 2  # 12
    n_embd: int = 8  # 768
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    """nanoGPT's GPT (training forward; generate, from_pretrained and MFU left out)."""

    def __init__(self, config=None):
        super().__init__()
        config = config or GPTConfig()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve time dim
            loss = None

        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def gpt_batch(step: int, dtype: torch.dtype) -> Batch:
    """train.py's get_batch: x and y, its shift by one, from random offsets of the data."""
    data = integers(step, GPTConfig.vocab_size, 2 * GPTConfig.block_size + 1)
    ix = [0, 3]
    return {"X": torch.stack([data[i:i + GPTConfig.block_size] for i in ix]),
            "Y": torch.stack([data[i + 1:i + 1 + GPTConfig.block_size] for i in ix])}


def gpt_train(loop: Loop, batch: Batch, grad_clip: float = 1.0) -> Results:
    """train.py's step (one micro step, no grad scaler: bfloat16/float32 need none)."""
    (optimizer,) = loop.optimizers
    logits, loss = loop.net(batch["X"], batch["Y"])
    loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(loop.model.parameters(), grad_clip)
    optimizer.step()
    grads = {f"grad {n}": p.grad.clone() for n, p in loop.model.named_parameters()}
    optimizer.zero_grad(set_to_none=True)
    return {"logits": logits, "loss": loss} | grads


def gpt_estimate_loss(loop: Loop, batch: Batch) -> Results:
    logits, loss = loop.net(batch["X"], batch["Y"])
    return {"logits": logits, "loss": loss}


NANOGPT = Case(
    "nanogpt", GPT, gpt_batch, gpt_train, gpt_estimate_loss,
    lambda model: [model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))])


# ---------------------------------------------------------------- 11. PINN

class DNN(nn.Module):
    """The PyTorch port of Raissi's PINNs (Burgers' equation): tanh layers in an
    OrderedDict; layers [2, 20 x 8, 1] -> [2, 16, 16, 1]."""

    def __init__(self, layers):
        super().__init__()
        # parameters
        self.depth = len(layers) - 1
        # set up layer order dict
        self.activation = torch.nn.Tanh
        layer_list = list()
        for i in range(self.depth - 1):
            layer_list.append((f"layer_{i}", torch.nn.Linear(layers[i], layers[i + 1])))
            layer_list.append((f"activation_{i}", self.activation()))
        layer_list.append((f"layer_{self.depth - 1}",
                           torch.nn.Linear(layers[-2], layers[-1])))
        layerDict = OrderedDict(layer_list)  # noqa: N806
        # deploy layers
        self.layers = torch.nn.Sequential(layerDict)

    def forward(self, x):
        out = self.layers(x)
        return out


NU = 0.01 / math.pi


def net_u(dnn, x, t):
    return dnn(torch.cat([x, t], dim=1))


def net_f(dnn, x, t):
    """The residual of Burgers' equation, u_t + u u_x - nu u_xx, by autograd."""
    u = net_u(dnn, x, t)
    u_t = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u),
                              retain_graph=True, create_graph=True)[0]
    u_x = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u),
                              retain_graph=True, create_graph=True)[0]
    u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x),
                               retain_graph=True, create_graph=True)[0]
    f = u_t + u * u_x - NU * u_xx
    return f, {"u_t": u_t, "u_x": u_x, "u_xx": u_xx}


def pinn_train(loop: Loop, batch: Batch) -> Results:
    (optimizer,) = loop.optimizers
    x_u, t_u, u = batch["x_u"], batch["t_u"], batch["u"]
    x_f, t_f = batch["x_f"].requires_grad_(True), batch["t_f"].requires_grad_(True)
    optimizer.zero_grad()
    u_pred = net_u(loop.net, x_u, t_u)
    f_pred, derivatives = net_f(loop.net, x_f, t_f)
    loss = torch.mean((u - u_pred) ** 2) + torch.mean(f_pred ** 2)
    loss.backward()
    optimizer.step()
    return {"u_pred": u_pred, "f_pred": f_pred, "loss": loss} | derivatives


def pinn_batch(step: int, dtype: torch.dtype) -> Batch:
    x_u = uniform(step, 6, 1, dtype=dtype) * 2 - 1
    return {"x_u": x_u, "t_u": torch.zeros_like(x_u), "u": -torch.sin(math.pi * x_u),
            "x_f": uniform(step + 50, 10, 1, dtype=dtype) * 2 - 1,
            "t_f": uniform(step + 60, 10, 1, dtype=dtype)}


PINN = Case(
    "pinn", lambda: DNN([2, 16, 16, 1]), pinn_batch, pinn_train,
    lambda loop, batch: {"u_pred": net_u(loop.net, batch["x_f"], batch["t_f"])},
    lambda model: [optim.Adam(model.parameters(), lr=1e-3)])


# ---------------------------------------------------------------- 12. MLP + Adam

MLP_CASE = Case(
    "mlp_adam",
    lambda: nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 1)),
    lambda step, dtype: {"data": normal(step, 16, 10, dtype=dtype),
                         "target": normal(step + 1, 16, 1, dtype=dtype)},
    criterion_train(nn.MSELoss()), classify,
    lambda model: [optim.Adam(model.parameters(), lr=1e-3)])


# ---------------------------------------------------------------- 13. MAML, second order

class SineLearner(nn.Module):
    """The MAML paper's sine regressor (1-40-40-1 -> 1-16-16-1, ReLU), written as
    dragen1860/MAML-Pytorch's Learner: forward takes the weights to use."""

    def __init__(self):
        super().__init__()
        self.vars = nn.ParameterList()
        for fan_in, fan_out in [(1, 16), (16, 16), (16, 1)]:
            w = nn.Parameter(torch.ones(fan_out, fan_in))
            torch.nn.init.kaiming_normal_(w)
            self.vars.append(w)
            self.vars.append(nn.Parameter(torch.zeros(fan_out)))

    def forward(self, x, vars=None):
        if vars is None:
            vars = self.vars
        x = F.relu(F.linear(x, vars[0], vars[1]))
        x = F.relu(F.linear(x, vars[2], vars[3]))
        return F.linear(x, vars[4], vars[5])


def maml_train(loop: Loop, batch: Batch, update_lr: float = 0.01) -> Results:
    """Meta.forward with one inner step per task, second order (create_graph=True)."""
    (meta_optim,) = loop.optimizers
    net, params = loop.net, list(loop.model.parameters())
    x_spt, y_spt, x_qry, y_qry = batch["x_spt"], batch["y_spt"], batch["x_qry"], batch["y_qry"]
    task_num = x_spt.size(0)
    loss_q, results = 0, {}
    for i in range(task_num):
        loss = F.mse_loss(net(x_spt[i]), y_spt[i])
        grad = torch.autograd.grad(loss, params, create_graph=True)
        fast_weights = [p - update_lr * g for g, p in zip(grad, params, strict=True)]
        loss_q = loss_q + F.mse_loss(net(x_qry[i], fast_weights), y_qry[i])
        results |= {f"task {i} inner grad {j}": g for j, g in enumerate(grad)}
    loss_q = loss_q / task_num
    meta_optim.zero_grad()
    loss_q.backward()
    meta_optim.step()
    return results | {"loss_q": loss_q}


def maml_batch(step: int, dtype: torch.dtype) -> Batch:
    """Two sine tasks (amplitude, phase), five support and five query points each."""
    amplitude = uniform(step, 2, 1, 1, dtype=dtype) * 4.9 + 0.1
    phase = uniform(step + 1, 2, 1, 1, dtype=dtype) * math.pi
    x = uniform(step + 2, 2, 10, 1, dtype=dtype) * 10 - 5
    y = amplitude * torch.sin(x - phase)
    return {"x_spt": x[:, :5], "y_spt": y[:, :5], "x_qry": x[:, 5:], "y_qry": y[:, 5:]}


MAML = Case(
    "maml", SineLearner, maml_batch, maml_train,
    lambda loop, batch: {"output": loop.net(batch["x_qry"][0])},
    lambda model: [optim.Adam(model.parameters(), lr=1e-3)])


# ---------------------------------------------------------------- 14. Hessian-vector product

def get_params_grad(model):
    """PyHessian's utils: the parameters and their gradients (graphs kept)."""
    params = []
    grads = []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        params.append(param)
        grads.append(0. if param.grad is None else param.grad + 0.)
    return params, grads


def group_product(xs, ys):
    return sum([torch.sum(x * y) for (x, y) in zip(xs, ys, strict=True)])


def normalization(v):
    s = group_product(v, v)
    s = s ** 0.5
    return [vi / (s + 1e-6) for vi in v]


def hessian_vector_product(gradsH, params, v):  # noqa: N803
    hv = torch.autograd.grad(gradsH, params, grad_outputs=v, only_inputs=True,
                             retain_graph=True)
    return hv


def hvp_train(loop: Loop, batch: Batch) -> Results:
    """PyHessian's power-iteration step for the top eigenvalue, then an SGD step."""
    (optimizer,) = loop.optimizers
    optimizer.zero_grad(set_to_none=True)
    outputs = loop.net(batch["data"])
    loss = nn.CrossEntropyLoss()(outputs, batch["target"])
    loss.backward(create_graph=True)
    params, gradsH = get_params_grad(loop.model)  # noqa: N806
    v = normalization([torch.randn(p.size(), dtype=p.dtype) for p in params])
    Hv = hessian_vector_product(gradsH, params, v)  # noqa: N806
    eigenvalue = group_product(Hv, v)
    optimizer.step()
    return {"outputs": outputs, "loss": loss, "eigenvalue": eigenvalue} | {
        f"Hv {i}": hv for i, hv in enumerate(Hv)}


HVP = Case(
    "hvp",
    lambda: nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3)),
    lambda step, dtype: {"data": normal(step, 8, 6, dtype=dtype),
                         "target": integers(step, 3, 8)},
    hvp_train, classify, lambda model: [optim.SGD(model.parameters(), lr=0.1)])


# ---------------------------------------------------------------- 15. AMP gradient penalty

def amp_gradient_penalty_train(loop: Loop, batch: Batch) -> Results:
    """The AMP examples' "Gradient penalty" under torch.autocast("cpu", torch.bfloat16)
    (bfloat16 needs no GradScaler, so the unscaled form)."""
    (optimizer,) = loop.optimizers
    model, loss_fn = loop.net, nn.MSELoss()
    input, target = batch["data"], batch["target"]
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        output = model(input)
        loss = loss_fn(output, target)

    # Creates gradients
    grad_params = torch.autograd.grad(outputs=loss, inputs=loop.model.parameters(),
                                      create_graph=True)

    # Computes the penalty term and adds it to the loss
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        grad_norm = 0
        for grad in grad_params:
            grad_norm += grad.pow(2).sum()
        grad_norm = grad_norm.sqrt()
        loss = loss + grad_norm

    loss.backward()
    optimizer.step()
    return {"output": output, "loss": loss, "grad_norm": grad_norm} | {
        f"grad_params {i}": g for i, g in enumerate(grad_params)}


def amp_evaluate(loop: Loop, batch: Batch) -> Results:
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        return {"output": loop.net(batch["data"])}


AMP_GP = Case(
    "amp_gradient_penalty",
    lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
    lambda step, dtype: {"data": normal(step, 8, 8, dtype=dtype),
                         "target": normal(step + 1, 8, 4, dtype=dtype)},
    amp_gradient_penalty_train, amp_evaluate,
    lambda model: [optim.SGD(model.parameters(), lr=0.01)],
    tolerances={torch.float32: {"rtol": 2e-2, "atol": 2e-2}})  # bfloat16 results in f32


# ---------------------------------------------------------------- 16. fast neural style

class ConvLayer(nn.Module):
    """pytorch/examples fast_neural_style/neural_style/transformer_net.py's ConvLayer."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(nn.Module):
    """transformer_net.py's ResidualBlock (introduced in the ResNet paper)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(nn.Module):
    """transformer_net.py's UpsampleConvLayer: nearest upsampling, then a convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest',
                                                   scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


class TransformerNet(nn.Module):
    """transformer_net.py's TransformerNet; channels 32, 64, 128 -> 4, 8, 8, one residual
    block of five, for 8x8 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = ConvLayer(3, 4, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(4, affine=True)
        self.conv2 = ConvLayer(4, 8, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(8, affine=True)
        self.res1 = ResidualBlock(8)
        self.deconv1 = UpsampleConvLayer(8, 4, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(4, affine=True)
        self.deconv3 = ConvLayer(4, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):  # noqa: N803 (the authors' name)
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res1(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.deconv3(y)
        return y


def style_train(loop: Loop, batch: Batch) -> Results:
    """neural_style.py's training step with its content loss alone (the original compares
    VGG-16 features of y and x, weighted by 1e5, and adds a style loss of Gram matrices;
    here the MSE of the images themselves)."""
    (optimizer,) = loop.optimizers
    x = batch["data"]
    optimizer.zero_grad()
    y = loop.net(x)
    content_loss = nn.MSELoss()(y, x)
    content_loss.backward()
    optimizer.step()
    return {"output": y, "loss": content_loss}


FAST_NEURAL_STYLE = Case(
    "fast_neural_style", TransformerNet,
    lambda step, dtype: {"data": uniform(step, 2, 3, 8, 8, dtype=dtype)},
    style_train, classify,
    # SGD where the original has Adam: each convolution's bias before an InstanceNorm has a
    # gradient of zero up to rounding (the norm removes it), which Adam scales to a step of
    # lr, so two correct implementations' biases part by their rounding noise
    lambda model: [optim.SGD(model.parameters(), lr=1e-2)])


# ---------------------------------------------------------------- 17. super resolution

class SuperResolutionNet(nn.Module):
    """pytorch/examples super_resolution/model.py's Net; channels 64, 64, 32 -> 8, 8, 4."""

    def __init__(self, upscale_factor):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 4, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(4, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        nn.init.orthogonal_(self.conv1.weight, nn.init.calculate_gain('relu'))
        nn.init.orthogonal_(self.conv2.weight, nn.init.calculate_gain('relu'))
        nn.init.orthogonal_(self.conv3.weight, nn.init.calculate_gain('relu'))
        nn.init.orthogonal_(self.conv4.weight)


def super_resolution_train(loop: Loop, batch: Batch) -> Results:
    """super_resolution/main.py's train() body."""
    (optimizer,) = loop.optimizers
    criterion = nn.MSELoss()
    input, target = batch["data"], batch["target"]
    optimizer.zero_grad()
    output = loop.net(input)
    loss = criterion(output, target)
    loss.backward()
    optimizer.step()
    return {"output": output, "loss": loss}


SUPER_RESOLUTION = Case(
    "super_resolution", lambda: SuperResolutionNet(upscale_factor=2),
    lambda step, dtype: {"data": uniform(step, 2, 1, 6, 6, dtype=dtype),
                         "target": uniform(step + 1, 2, 1, 12, 12, dtype=dtype)},
    super_resolution_train, classify, lambda model: [optim.Adam(model.parameters(), lr=0.01)])


# ---------------------------------------------------------------- 18. GAT

class GraphAttentionLayer(nn.Module):
    """pytorch/examples gat/main.py's GraphAttentionLayer (the Graph Attention Networks
    paper's layer: e_ij = LeakyReLU(a^T [W h_i || W h_j]), softmax over neighbours j)."""

    def __init__(self, in_features: int, out_features: int, n_heads: int, concat: bool = False,
                 dropout: float = 0.4, leaky_relu_slope: float = 0.2):
        super().__init__()

        self.n_heads = n_heads  # Number of attention heads
        self.concat = concat  # wether to concatenate the final attention heads
        self.dropout = dropout  # Dropout rate

        if concat:  # concatenating the attention heads
            self.out_features = out_features  # Number of output features per node
            assert out_features % n_heads == 0  # out_features is a multiple of n_heads
            self.n_hidden = out_features // n_heads
        else:  # averaging output over the attention heads (Used in the main paper)
            self.n_hidden = out_features

        #  A shared linear transformation, parametrized by a weight matrix W is applied to
        #  every node; initialize the weight matrix W
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))

        # Initialize the attention weights a
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))

        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)  # LeakyReLU activation function
        self.softmax = nn.Softmax(dim=1)  # softmax activation function to the coefficients

        self.reset_parameters()  # Reset the parameters

    def reset_parameters(self):
        """Reinitialize learnable parameters."""
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed: torch.Tensor):
        """The attention scores e_ij = LeakyReLU(a^T [Wh_i || Wh_j]) of all pairs of nodes,
        shape (n_heads, n_nodes, n_nodes)."""

        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])

        # broadcast add
        # (n_heads, n_nodes, 1) + (n_heads, 1, n_nodes) = (n_heads, n_nodes, n_nodes)
        e = source_scores + target_scores.mT
        return self.leakyrelu(e)

    def forward(self, h: torch.Tensor, adj_mat: torch.Tensor):
        """A graph attention layer on node features `h` and the graph's `adj_mat`."""
        n_nodes = h.shape[0]

        # Apply linear transformation to node feature -> W h
        # output shape (n_nodes, n_hidden * n_heads)
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)

        # splitting the heads by reshaping the tensor and putting heads dim first
        # output shape (n_heads, n_nodes, n_hidden)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)

        # getting the attention scores
        # output shape (n_heads, n_nodes, n_nodes)
        e = self._get_attention_scores(h_transformed)

        # Set the attention score for non-existent edges to -9e15 (MASKING NON-EXISTENT EDGES)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)  # masked attention scores

        # attention coefficients are computed as a softmax over the rows
        # for each column j in the attention score matrix e
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)

        # final node embeddings are computed as a weighted average of the features of its
        # neighbors
        h_prime = torch.matmul(attention, h_transformed)

        # concatenating/averaging the attention heads
        # output shape (n_nodes, out_features)
        if self.concat:
            h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        else:
            h_prime = h_prime.mean(dim=0)

        return h_prime


class GAT(nn.Module):
    """gat/main.py's GAT: two GraphAttentionLayers, an ELU between them, log-softmax."""

    def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4,
                 leaky_relu_slope=0.2):
        super().__init__()

        # Define the Graph Attention layers
        self.gat1 = GraphAttentionLayer(
            in_features=in_features, out_features=n_hidden, n_heads=n_heads,
            concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope
        )

        self.gat2 = GraphAttentionLayer(
            in_features=n_hidden, out_features=num_classes, n_heads=1,
            concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope
        )

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor):
        # Apply the first Graph Attention layer
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x)  # Apply ELU activation function to the output of the first layer

        # Apply the second Graph Attention layer
        x = self.gat2(x, adj_mat)

        return F.log_softmax(x, dim=1)  # Apply log softmax activation function


GAT_NODES, GAT_FEATURES, GAT_CLASSES = 7, 6, 3  # Cora: 2708 nodes, 1433 features, 7 classes


def gat_batch(step: int, dtype: torch.dtype) -> Batch:
    """A fixed graph as load_cora gives (the original trains on Cora, full batch, every
    epoch): 0/1 features scaled to sum to one per node, a random symmetric dense 0/1
    adjacency plus self loops, labels, and the training and test node indices."""
    features = (uniform(0, GAT_NODES, GAT_FEATURES, dtype=dtype) < 0.5).to(dtype)
    features[:, 0] = 1  # no empty row (load_cora maps 1/0 to 0)
    features = torch.diag(1 / torch.sum(features, dim=1)) @ features
    edges = (uniform(1, GAT_NODES, GAT_NODES, dtype=dtype) < 0.35).to(dtype).fill_diagonal_(0)
    adj_mat = torch.eye(GAT_NODES, dtype=dtype) + ((edges + edges.T) > 0).to(dtype)
    idx = torch.randperm(GAT_NODES, generator=torch.Generator().manual_seed(13))
    return {"features": features, "adj_mat": adj_mat, "labels": integers(0, GAT_CLASSES, GAT_NODES),
            "idx_train": idx[3:], "idx_test": idx[:3]}


def gat_train(loop: Loop, batch: Batch) -> Results:
    """gat/main.py's train_iter (its evaluations on the masks are `gat_test`)."""
    (optimizer,) = loop.optimizers
    criterion, input = nn.NLLLoss(), (batch["features"], batch["adj_mat"])
    target, mask_train = batch["labels"], batch["idx_train"]
    optimizer.zero_grad()

    # Forward pass
    output = loop.net(*input)
    loss = criterion(output[mask_train], target[mask_train])  # the loss on the training mask

    loss.backward()
    optimizer.step()
    return {"output": output, "loss": loss}


def gat_test(loop: Loop, batch: Batch) -> Results:
    """gat/main.py's test() on the test mask (loss and accuracy as tensors, not .item())."""
    mask, criterion = batch["idx_test"], nn.NLLLoss()
    output = loop.net(batch["features"], batch["adj_mat"])
    output, target = output[mask], batch["labels"][mask]

    loss = criterion(output, target)
    acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return {"output": output, "loss": loss, "acc": acc}


GAT_CASE = Case(
    "gat",
    # main.py's defaults (dropout 0.6, lr 0.005, weight decay 5e-4), hidden 64 -> 8, 8 heads -> 2
    lambda: GAT(in_features=GAT_FEATURES, n_hidden=8, n_heads=2, num_classes=GAT_CLASSES,
                concat=False, dropout=0.6, leaky_relu_slope=0.2),
    gat_batch, gat_train, gat_test,
    lambda model: [optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)])


# ---------------------------------------------------------------- 19. actor-critic

class Policy(nn.Module):
    """pytorch/examples reinforcement_learning/actor_critic.py's Policy (actor and critic in
    one model); affine1 4x128 -> 4x16."""

    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)

        # actor's layer
        self.action_head = nn.Linear(16, 2)

        # critic's layer
        self.value_head = nn.Linear(16, 1)

        # action & reward buffer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        """forward of both actor and critic"""
        x = F.relu(self.affine1(x))

        # actor: choses action to take from state s_t
        # by returning probability of each action
        action_prob = F.softmax(self.action_head(x), dim=-1)

        # critic: evaluates being in the state s_t
        state_values = self.value_head(x)

        # return values for both actor and critic as a tuple of 2 values:
        # 1. a list with the probability of each action over the action space
        # 2. the value from state s_t
        return action_prob, state_values


SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])
EPISODE = 6  # CartPole steps of an episode


def actor_critic_batch(step: int, dtype: torch.dtype) -> Batch:
    """An episode: its states, the actions taken (sampled beforehand, as CartPole's
    select_action would have) and CartPole's reward of 1 a step."""
    return {"states": normal(step, EPISODE, 4, dtype=dtype), "actions": integers(step, 2, EPISODE),
            "rewards": torch.ones(EPISODE, dtype=dtype)}


def actor_critic_train(loop: Loop, batch: Batch, gamma: float = 0.99) -> Results:
    """select_action over the episode's states (one batched forward; its sample given), then
    finish_episode's loss, backward and Adam step."""
    model, (optimizer,) = loop.model, loop.optimizers
    eps = torch.finfo(torch.float32).eps  # np.finfo(np.float32).eps.item()
    probs, state_value = loop.net(batch["states"])

    # create a categorical distribution over the list of probabilities of actions
    m = Categorical(probs)
    action = batch["actions"]

    # save to action buffer
    model.saved_actions.extend(SavedAction(log_prob, value) for log_prob, value in
                               zip(m.log_prob(action), state_value, strict=True))
    model.rewards.extend(batch["rewards"].tolist())

    # finish_episode
    R = 0  # noqa: N806
    saved_actions = model.saved_actions
    policy_losses = []  # list to save actor (policy) loss
    value_losses = []  # list to save critic (value) loss
    returns = []  # list to save the true values

    # calculate the true value using rewards returned from the environment
    for r in model.rewards[::-1]:
        # calculate the discounted value
        R = r + gamma * R  # noqa: N806
        returns.insert(0, R)

    returns = torch.tensor(returns, dtype=probs.dtype)
    returns = (returns - returns.mean()) / (returns.std() + eps)

    for (log_prob, value), R in zip(saved_actions, returns, strict=True):  # noqa: N806
        advantage = R - value.detach()  # value.item() in the original

        # calculate actor (policy) loss
        policy_losses.append(-log_prob * advantage)

        # calculate critic (value) loss using L1 smooth loss
        value_losses.append(F.smooth_l1_loss(value, R.reshape(1)))  # torch.tensor([R])

    # reset gradients
    optimizer.zero_grad()

    # sum up all the values of policy_losses and value_losses
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    # perform backprop
    loss.backward()
    optimizer.step()

    # reset rewards and action buffer
    del model.rewards[:]
    del model.saved_actions[:]
    return {"probs": probs, "state_value": state_value, "returns": returns, "loss": loss}


def actor_critic_select(loop: Loop, batch: Batch) -> Results:
    """select_action's forward and distribution (the sample given)."""
    probs, state_value = loop.net(batch["states"])
    m = Categorical(probs)
    return {"probs": probs, "state_value": state_value,
            "log_prob": m.log_prob(batch["actions"]), "entropy": m.entropy()}


ACTOR_CRITIC = Case(
    "actor_critic", Policy, actor_critic_batch, actor_critic_train, actor_critic_select,
    lambda model: [optim.Adam(model.parameters(), lr=3e-2)])


# ---------------------------------------------------------------- 20. time sequence prediction

SEQ_HIDDEN = 8  # time_sequence_prediction/train.py: 51


class Sequence(nn.Module):
    """pytorch/examples time_sequence_prediction/train.py's Sequence (two LSTMCells and a
    linear layer, its zero states in torch.double); hidden 51 -> `SEQ_HIDDEN`."""

    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, SEQ_HIDDEN)
        self.lstm2 = nn.LSTMCell(SEQ_HIDDEN, SEQ_HIDDEN)
        self.linear = nn.Linear(SEQ_HIDDEN, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), SEQ_HIDDEN, dtype=torch.double)
        c_t = torch.zeros(input.size(0), SEQ_HIDDEN, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), SEQ_HIDDEN, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), SEQ_HIDDEN, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


SEQ_T, SEQ_LENGTH, SEQ_WAVES, SEQ_FUTURE = 20, 8, 5, 3  # generate_sine_wave.py: T 20, L 1000,
# N 100; train.py predicts 1000 steps into the future


def sine_waves(step: int) -> torch.Tensor:
    """generate_sine_wave.py's data: sin(x / T) at x = range(L) shifted by a random integer
    in [-4T, 4T) per wave (float64, as the original's)."""
    shift = integers(step, 8 * SEQ_T, SEQ_WAVES, 1) - 4 * SEQ_T
    x = torch.arange(SEQ_LENGTH) + shift
    return torch.sin(x / 1.0 / SEQ_T).to(torch.float64)


def sequence_batch(step: int, dtype: torch.dtype) -> Batch:
    """train.py's training set (waves 3 on, one step ahead) and test set (waves 0 to 2)."""
    data = sine_waves(0).to(dtype)
    return {"input": data[3:, :-1], "target": data[3:, 1:],
            "test_input": data[:3, :-1], "test_target": data[:3, 1:]}


def sequence_train(loop: Loop, batch: Batch) -> Results:
    """One STEP of train.py: LBFGS's step with its closure (up to max_iter evaluations)."""
    seq, (optimizer,) = loop.net, loop.optimizers
    criterion, input, target = nn.MSELoss(), batch["input"], batch["target"]
    losses = []

    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        losses.append(loss.detach())  # print('loss:', loss.item()) in the original
        loss.backward()
        return loss

    loss = optimizer.step(closure)
    return {"loss": loss, "closure losses": torch.stack(losses)}


def sequence_predict(loop: Loop, batch: Batch) -> Results:
    """train.py's prediction after each step, under no_grad: `future` steps on."""
    criterion, future = nn.MSELoss(), SEQ_FUTURE
    pred = loop.net(batch["test_input"], future=future)
    loss = criterion(pred[:, :-future], batch["test_target"])
    return {"pred": pred, "test loss": loss}


TIME_SEQUENCE = Case(
    "time_sequence", Sequence, sequence_batch, sequence_train, sequence_predict,
    # use LBFGS as optimizer since we can load the whole data to train; max_iter 20 -> 5:
    # LBFGS's curvature pairs amplify rounding ~10x every few evaluations, so over 3 x 20
    # evaluations two f64 runs one ulp apart (eager against eager, one weight nudged by one
    # ulp) part to 1e-8 in their gradients, past the f64 tolerance; over 3 x 5, 1e-14
    lambda model: [optim.LBFGS(model.parameters(), lr=0.8, max_iter=5)])

# Cases that run in some dtypes only (the others run in every dtype of harness.DTYPES):
# Sequence hard-codes its zero states in torch.double, as the original does.
CASE_DTYPES = {"time_sequence": ("f64",)}


ZOO = {case.name: case for case in (
    MNIST, LENET, RESNET, VAE_CASE, DCGAN_CASE, WGAN_GP, WORD_LM, GRU_CASE, TRANSFORMER,
    NANOGPT, PINN, MLP_CASE, MAML, HVP, AMP_GP, FAST_NEURAL_STYLE, SUPER_RESOLUTION, GAT_CASE,
    ACTOR_CRITIC, TIME_SEQUENCE)}
