"""torch.distributions as reinforcement-learning and generative-model code uses them,
compiled whole by `torch.compile(backend="reverie", fullgraph=True)` against eager torch.

A distribution's methods are plain torch code that Dynamo traces into the graph: its
arguments broadcast by `torch.broadcast_tensors`, `Categorical.log_prob` casts the action
with `.long()`, `Gamma.log_prob` takes `torch.as_tensor`, `MultivariateNormal` solves with
`torch.linalg.solve_triangular`, and `rsample` draws into `torch.empty(shape).normal_()`.
Deterministic cases compare value, gradient and gradient of the gradient (f32 and f64);
sampling cases compare the draws and the reparameterised gradient under one seed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
D = torch.distributions

from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    derivatives,
    fresh_dynamo,
    normal,
)

ACTIONS = torch.tensor([0, 3, 1, 2, 2, 0])


def sac_log_prob(p: torch.Tensor) -> torch.Tensor:
    """Soft actor-critic's tanh-squashed Gaussian policy (the log-probability of a fixed
    pre-squash action, with the change-of-variables term)."""
    mu, log_std = p[:, 0], p[:, 1].clamp(-20, 2)
    dist = D.Normal(mu, log_std.exp())
    u = mu + 0.3 * log_std.exp()
    return dist.log_prob(u) - torch.log(1 - torch.tanh(u).pow(2) + 1e-6)


CASES = {
    "Categorical from probs": lambda p: (
        D.Categorical(F.softmax(p, -1)).log_prob(ACTIONS) + D.Categorical(F.softmax(p, -1))
        .entropy()),
    "Categorical from logits": lambda p: (
        D.Categorical(logits=p).log_prob(ACTIONS) * 2 + D.Categorical(logits=p).entropy()),
    "OneHotCategorical": lambda p: D.OneHotCategorical(logits=p).log_prob(
        F.one_hot(ACTIONS, 4).to(p.dtype)),
    "Normal": lambda p: (D.Normal(p[:, 0], F.softplus(p[:, 1])).log_prob(p[:, 2].detach())
                         + D.Normal(p[:, 0], p[:, 1].exp()).entropy()),
    "Independent Normal": lambda p: D.Independent(D.Normal(p, torch.ones_like(p)), 1)
    .log_prob(p.detach() * 0.5),
    "Bernoulli": lambda p: (D.Bernoulli(logits=p[:, 0]).log_prob((p[:, 1] > 0).to(p.dtype))
                            + D.Bernoulli(logits=p[:, 0]).entropy()),
    "Laplace": lambda p: D.Laplace(p[:, 0], p[:, 1].exp()).log_prob(p[:, 2].detach()),
    "Beta": lambda p: D.Beta(F.softplus(p[:, 0]) + 1, F.softplus(p[:, 1]) + 1).log_prob(
        torch.full_like(p[:, 2], 0.3)),
    "Gamma": lambda p: D.Gamma(F.softplus(p[:, 0]) + 1, F.softplus(p[:, 1]) + 1).log_prob(
        torch.full_like(p[:, 2], 0.3)),
    "MultivariateNormal scale_tril": lambda p: D.MultivariateNormal(
        p[:, 0:2], scale_tril=torch.diag_embed(p[:, 2:4].exp())).log_prob(p[:, 0:2].detach() + 1),
    "tanh-squashed Normal (SAC)": sac_log_prob,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_distribution(case: str, dtype: torch.dtype) -> None:
    assert_same(CASES[case], [normal(dtype, 6, 4)], dtype)


def actor_critic_loss(probs: torch.Tensor, values: torch.Tensor, returns: torch.Tensor
                      ) -> torch.Tensor:
    """pytorch/examples reinforcement_learning/actor_critic.py's finish_episode loss."""
    m = D.Categorical(probs)
    advantage = returns - values.detach()
    return (-m.log_prob(ACTIONS) * advantage).sum() + F.smooth_l1_loss(values, returns)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_actor_critic_loss(dtype: torch.dtype) -> None:
    assert_same(lambda logits, v, r: actor_critic_loss(F.softmax(logits, -1), v, r),
                [normal(dtype, 6, 4), normal(dtype, 6), normal(dtype, 6)], dtype)


SAMPLED = {
    "Normal.rsample": lambda p: D.Normal(p[:, 0], p[:, 1].exp()).rsample() * p[:, 2],
    "Normal.rsample of a shape": lambda p: D.Normal(p[:, 0], p[:, 1].exp()).rsample((3,)),
    "MultivariateNormal.rsample": lambda p: D.MultivariateNormal(
        p[:, 0:2], scale_tril=torch.diag_embed(p[:, 2:4].exp())).rsample(),
    "fills of made tensors": lambda p: (
        torch.empty_like(p).uniform_(-1, 2) * p + torch.empty(6, 4, dtype=p.dtype).normal_(1, 2)
        + (p * 2).exponential_() + (p * 1).zero_() + p.clone().fill_(3.0) * p),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(SAMPLED))
def test_sampling_draws_what_eager_draws(case: str, dtype: torch.dtype) -> None:
    fn, p = SAMPLED[case], normal(dtype, 6, 4)
    compiled = torch.compile(fn, backend="reverie", fullgraph=True)
    results = []
    for run in (compiled, fn):
        torch.manual_seed(7)  # the same draws on both sides
        results.append(derivatives(run, [p], second=False))
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got.detach(), want.detach(),
                                   **({} if dtype == torch.float32 else
                                      {"rtol": 1e-10, "atol": 1e-12}))


def test_fill_of_a_graph_input_or_by_a_tensor_is_refused() -> None:
    x = normal(torch.float64, 3, 4)
    with pytest.raises(Exception, match="in place"):
        torch.compile(lambda x: x.normal_(), backend="reverie", fullgraph=True)(x.clone())
    with pytest.raises(Exception, match="value"):
        torch.compile(lambda x: (x * 1).fill_(x[0, 0]), backend="reverie", fullgraph=True)(x)
