"""The margin and embedding losses of `rv.fx` and the spellings Dynamo records of losses,
comparisons and operators, against eager torch.

Each case compiles through `torch.compile(backend="reverie", fullgraph=True)` and compares
the value, the gradient of every float input and the gradient of that gradient with eager
PyTorch in float32 and float64; the nn modules compile as `call_module` nodes through
`rv.fx.compile`.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import reverie as rv  # noqa: E402
from tests.api.fx_helpers import (  # noqa: E402, F401
    DTYPES,
    assert_same,
    fresh_dynamo,
    normal,
    refused,
    tolerance,
)


def signs(*shape):
    return torch.randint(0, 2, shape) * 2 - 1


def counts(dtype, *shape):
    return torch.randint(0, 6, shape).to(dtype)


LOSSES = {
    "margin_ranking_loss": lambda d: (
        lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3),
        [normal(d, 7), normal(d, 7), signs(7).to(d)]),
    "margin_ranking_loss none": lambda d: (
        lambda a, b, y: F.margin_ranking_loss(a, b, y, reduction="none"),
        [normal(d, 4, 3), normal(d, 4, 3), signs(4, 3).to(d)]),
    "hinge_embedding_loss": lambda d: (
        lambda x, y: F.hinge_embedding_loss(x, y, margin=0.8),
        [normal(d, 4, 5), signs(4, 5).to(d)]),
    "hinge_embedding_loss labels not ±1": lambda d: (
        lambda x, y: F.hinge_embedding_loss(x, y, reduction="sum"),
        [normal(d, 6), torch.tensor([1, -1, 0, 2, 1, -1])]),
    "soft_margin_loss": lambda d: (lambda x, y: F.soft_margin_loss(x, y),
                                   [normal(d, 4, 3), signs(4, 3).to(d)]),
    "cosine_embedding_loss": lambda d: (
        lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.2),
        [normal(d, 6, 4), normal(d, 6, 4), signs(6)]),
    "cosine_embedding_loss one row": lambda d: (
        lambda a, b, y: F.cosine_embedding_loss(a, b, y, reduction="none"),
        [normal(d, 5), normal(d, 5), torch.tensor(-1)]),
    "poisson_nll_loss": lambda d: (lambda x, t: F.poisson_nll_loss(x, t),
                                   [normal(d, 4, 3), counts(d, 4, 3)]),
    "poisson_nll_loss rates full": lambda d: (
        lambda x, t: F.poisson_nll_loss(x.exp(), t, log_input=False, full=True,
                                        reduction="sum"),
        [normal(d, 4, 3), counts(d, 4, 3)]),
    "pairwise_distance p=3 keepdim": lambda d: (
        lambda a, b: F.pairwise_distance(a, b, p=3.0, keepdim=True),
        [normal(d, 4, 5), normal(d, 4, 5)]),
    "triplet_margin_loss": lambda d: (
        lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5),
        [normal(d, 5, 4), normal(d, 5, 4), normal(d, 5, 4)]),
    "triplet_margin_loss p=1 swap": lambda d: (
        lambda a, p, n: F.triplet_margin_loss(a, p, n, p=1, swap=True, reduction="none"),
        [normal(d, 5, 4), normal(d, 5, 4), normal(d, 5, 4)]),
    "multi_margin_loss": lambda d: (lambda x, y: F.multi_margin_loss(x, y),
                                    [normal(d, 5, 4), torch.tensor([0, 3, 1, 1, 2])]),
    "multi_margin_loss p=2 weight": lambda d: (
        lambda x, y, w: F.multi_margin_loss(x, y, p=2, margin=0.7, weight=w, reduction="none"),
        [normal(d, 5, 4), torch.tensor([0, 3, 1, 1, 2]), torch.rand(4, dtype=d)]),
    "multilabel_margin_loss": lambda d: (
        lambda x, y: F.multilabel_margin_loss(x, y),
        [normal(d, 3, 4), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 0, 0]])]),
    "multilabel_margin_loss repeated label": lambda d: (
        lambda x, y: F.multilabel_margin_loss(x, y, reduction="none"),
        [normal(d, 2, 4), torch.tensor([[2, 2, -1, 0], [1, 3, 3, -1]])]),
}

# inputs torch does not differentiate (class weights), or not at ±1 labels
FROZEN = {"margin_ranking_loss": (2,), "margin_ranking_loss none": (2,),
          "hinge_embedding_loss": (1,), "soft_margin_loss": (1,),
          "multi_margin_loss p=2 weight": (2,), "poisson_nll_loss rates full": (1,)}
# eager torch has no second derivative of these (its backward kernels have none)
FIRST_ONLY = ("multi_margin_loss", "multilabel_margin_loss")
FIRST_ORDER = {"second": False}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(LOSSES))
def test_loss(case: str, dtype: torch.dtype) -> None:
    fn, inputs = LOSSES[case](dtype)
    assert_same(fn, inputs, dtype, frozen=FROZEN.get(case, ()),
                second=not case.startswith(FIRST_ONLY))


def test_loss_arguments_refused_by_name() -> None:
    x = normal(torch.float64, 4, 3)
    refused(lambda x: F.multi_margin_loss(x, torch.tensor([0, 1, 2, 0]), p=3), [x], "p")
    refused(lambda x: F.multi_margin_loss(x[0], torch.tensor(1)), [x], "input")
    refused(lambda x: F.pairwise_distance(x, x, p=0.0), [x], "p")


# ---------------------------------------------------------------- the modules

MODULES = [
    (nn.MarginRankingLoss(margin=0.1), lambda d: [normal(d, 6), normal(d, 6), signs(6).to(d)]),
    (nn.HingeEmbeddingLoss(margin=0.5, reduction="sum"),
     lambda d: [normal(d, 6), signs(6).to(d)]),
    (nn.SoftMarginLoss(), lambda d: [normal(d, 6), signs(6).to(d)]),
    (nn.CosineEmbeddingLoss(margin=0.1), lambda d: [normal(d, 3, 4), normal(d, 3, 4),
                                                    signs(3)]),
    (nn.PoissonNLLLoss(full=True), lambda d: [normal(d, 6), counts(d, 6)]),
    (nn.PairwiseDistance(p=1.5), lambda d: [normal(d, 3, 4), normal(d, 3, 4)]),
    (nn.TripletMarginLoss(margin=0.4, swap=True),
     lambda d: [normal(d, 3, 4), normal(d, 3, 4), normal(d, 3, 4)]),
    (nn.MultiMarginLoss(p=2, weight=torch.rand(4)), lambda d: [normal(d, 3, 4),
                                                               torch.tensor([1, 0, 3])]),
    (nn.MultiLabelMarginLoss(), lambda d: [normal(d, 2, 4), torch.tensor([[1, -1, 0, 0],
                                                                          [3, 2, 1, 0]])]),
]


class Called(nn.Module):
    """`loss` as a submodule of two inputs, so symbolic tracing keeps it a `call_module`
    node."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, a, b):
        return self.loss(a, b)


class CalledOnThree(Called):
    def forward(self, a, b, c):
        return self.loss(a, b, c)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index", range(len(MODULES)),
                         ids=[type(m).__name__ for m, _ in MODULES])
def test_loss_module_compiles_as_eager(index: int, dtype: torch.dtype) -> None:
    loss, make = MODULES[index]
    inputs = make(dtype)
    model = (Called if len(inputs) == 2 else CalledOnThree)(loss).to(dtype)
    compiled = rv.fx.compile(torch.fx.symbolic_trace(model), inputs)
    graph = torch.fx.symbolic_trace(model).graph
    assert any(node.op == "call_module" for node in graph.nodes)
    torch.testing.assert_close(compiled(*inputs), model(*inputs), **tolerance(dtype))


# ---------------------------------------------------------------- spellings

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # torch's enum of a reduction


def spelled(dtype):
    """(functional form, ATen spelling, inputs, how to compare) of each loss Dynamo may
    record at ATen level (`torch._C._nn.mse_loss(x, t, 1)`: the reduction as torch's enum)."""
    x, t, p = normal(dtype, 4, 3), normal(dtype, 4, 3), torch.rand(4, 3, dtype=dtype)
    labels, ones = torch.tensor([0, 2, 1, 1]), signs(4, 3).to(dtype)
    nn_ = torch._C._nn
    return [
        (lambda x, t, r: F.mse_loss(x, t, reduction=r),
         lambda x, t, r: nn_.mse_loss(x, t, REDUCTIONS[r]), [x, t], {}),
        (lambda x, t, r: F.l1_loss(x, t, reduction=r),
         lambda x, t, r: nn_.l1_loss(x, t, REDUCTIONS[r]), [x, t], {}),
        (lambda x, t, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.5),
         lambda x, t, r: nn_.smooth_l1_loss(x, t, REDUCTIONS[r], 0.5), [x, t], {}),
        (lambda x, t, r: F.huber_loss(x, t, reduction=r, delta=0.5),
         lambda x, t, r: nn_.huber_loss(x, t, REDUCTIONS[r], 0.5), [x, t], {}),
        (lambda x, y, r: F.nll_loss(x.log_softmax(1), y, reduction=r, ignore_index=2),
         lambda x, y, r: nn_.nll_loss(x.log_softmax(1), y, None, REDUCTIONS[r], 2),
         [x, labels], {}),
        (lambda x, y, r: F.nll_loss(x.log_softmax(1), y, reduction=r),
         lambda x, y, r: nn_.nll_loss2d(x.log_softmax(1), y, None, REDUCTIONS[r]),
         [normal(dtype, 2, 3, 2, 2), torch.randint(0, 3, (2, 2, 2))], {}),
        (lambda x, t, r: F.binary_cross_entropy(x.sigmoid(), t, reduction=r),
         lambda x, t, r: nn_.binary_cross_entropy(x.sigmoid(), t, None, REDUCTIONS[r]),
         [x, p], {}),
        (lambda x, t, r: F.binary_cross_entropy_with_logits(x, t, reduction=r),
         lambda x, t, r: torch.binary_cross_entropy_with_logits(x, t, None, None,
                                                               REDUCTIONS[r]), [x, p], {}),
        (lambda x, t, r: F.kl_div(x.log_softmax(1), t, reduction=r),
         lambda x, t, r: torch.kl_div(x.log_softmax(1), t, REDUCTIONS[r]), [x, p], {}),
        (lambda x, y, r: F.soft_margin_loss(x, y, reduction=r),
         lambda x, y, r: nn_.soft_margin_loss(x, y, REDUCTIONS[r]), [x, ones], {"frozen": (1,)}),
        (lambda x, y, r: F.multi_margin_loss(x, y, reduction=r),
         lambda x, y, r: nn_.multi_margin_loss(x, y, 1, 1.0, None, REDUCTIONS[r]),
         [x, labels], FIRST_ORDER),
        (lambda x, y, r: F.multilabel_margin_loss(x, y, reduction=r),
         lambda x, y, r: nn_.multilabel_margin_loss(x, y, REDUCTIONS[r]),
         [x, torch.tensor([[1, -1, 0], [2, 0, 1], [0, 1, -1], [-1, 0, 0]])], FIRST_ORDER),
        (lambda a, b, y, r: F.margin_ranking_loss(a, b, y, 0.1, reduction=r),
         lambda a, b, y, r: torch.margin_ranking_loss(a, b, y, 0.1, REDUCTIONS[r]),
         [x, t, ones], {"frozen": (2,)}),
        (lambda x, y, r: F.hinge_embedding_loss(x, y, 0.5, reduction=r),
         lambda x, y, r: torch.hinge_embedding_loss(x, y, 0.5, REDUCTIONS[r]), [x, ones],
         {"frozen": (1,)}),
        (lambda a, b, y, r: F.cosine_embedding_loss(a, b, y, 0.1, reduction=r),
         lambda a, b, y, r: torch.cosine_embedding_loss(a, b, y, 0.1, REDUCTIONS[r]),
         [x, t, signs(4)], {}),
        (lambda x, t, r: F.poisson_nll_loss(x, t, reduction=r),
         lambda x, t, r: torch.poisson_nll_loss(x, t, True, False, 1e-8, REDUCTIONS[r]),
         [x, counts(dtype, 4, 3)], {}),
        (lambda a, p, n, r: F.triplet_margin_loss(a, p, n, reduction=r),
         lambda a, p, n, r: torch.triplet_margin_loss(a, p, n, 1.0, 2.0, 1e-6, False,
                                                     REDUCTIONS[r]), [x, t, p], {}),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_aten_spelling_of_each_loss_is_its_functional_row(reduction: str, dtype) -> None:
    """Each ATen spelling compiles to what eager gives for it, which is the functional
    form's value (so the enum is read as torch reads it)."""
    for functional, aten, inputs, compare in spelled(dtype):
        torch._dynamo.reset()
        assert_same(lambda *a, loss=aten: loss(*a, reduction), inputs, dtype, **compare)
        torch.testing.assert_close(aten(*inputs, reduction), functional(*inputs, reduction))


LABELS = torch.tensor([0, 2, 1, 1])
LEFT_OUT = {  # ATen spellings called without their reduction
    "mse_loss": lambda x, t: torch._C._nn.mse_loss(x, t),
    "smooth_l1_loss": lambda x, t: torch._C._nn.smooth_l1_loss(x, t),
    "nll_loss": lambda x, t: torch._C._nn.nll_loss(x.log_softmax(1), LABELS),
    "binary_cross_entropy_with_logits": lambda x, t: torch.binary_cross_entropy_with_logits(
        x, t.sigmoid()),
    "kl_div": lambda x, t: torch.kl_div(x, t.exp()),
    "triplet_margin_loss": lambda x, t: torch.triplet_margin_loss(x, t, x * t),
}


@pytest.mark.parametrize("name", LEFT_OUT)
def test_aten_spelling_with_the_reduction_left_out_is_unreduced_as_eager(name: str) -> None:
    """torch's Python bindings of these read a left-out reduction as 0 ("none")."""
    x, t = normal(torch.float64, 4, 3), normal(torch.float64, 4, 3)
    got = torch.compile(LEFT_OUT[name], backend="reverie", fullgraph=True)(x, t)
    torch.testing.assert_close(got, LEFT_OUT[name](x, t), **tolerance(torch.float64))
    assert got.ndim >= 1


def test_reduction_enum_outside_torch_is_refused_by_name() -> None:
    x = normal(torch.float64, 4, 3)
    refused(lambda x: torch._C._nn.mse_loss(x, x, 3), [x], "reduction")


COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less",
               "less_equal", "not_equal"]


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison_spellings(name: str) -> None:
    """torch.gt(x, y), x.gt(y) and x.__gt__(y) (as Dynamo records a method call) compile,
    on mixed float dtypes too (torch's promotion), and give eager's booleans."""
    x = torch.tensor([0.5, 1.0, -2.0, 3.0, 1.0])
    y = torch.tensor([0.5, 2.0, -3.0, 3.0, 0.0], dtype=torch.bfloat16)
    calls = [lambda a, b: getattr(torch, name)(a, b), lambda a, b: getattr(a, name)(b)]
    dunder = f"__{name}__"
    if hasattr(torch.Tensor, dunder):
        calls.append(lambda a, b: getattr(a, dunder)(b))
    for call in calls:
        torch._dynamo.reset()
        got = torch.compile(call, backend="reverie", fullgraph=True)(x, y)
        assert got.dtype == torch.bool
        assert torch.equal(got, call(x, y))


ARITHMETIC = ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__div__", "__pow__", "__rpow__", "__matmul__"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ARITHMETIC)
def test_operator_method_spellings(name: str, dtype) -> None:
    """x.__rsub__(y) is y − x, and so on: each compiles to eager's value and gradients."""
    x, y = torch.rand(3, 3, dtype=dtype) + 0.5, torch.rand(3, 3, dtype=dtype) + 0.5
    assert_same(lambda a, b: getattr(a, name)(b), [x, y], dtype)


def test_neg_method_spelling() -> None:
    x = normal(torch.float64, 3)
    assert_same(lambda a: a.__neg__() * a, [x], torch.float64)
