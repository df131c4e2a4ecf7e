"""PyTorch's CPU autocast op lists (`torch/testing/_internal/autocast_test_lists.py`,
`AutocastCPUTestLists`, run by `test/test_autocast.py`) through the `reverie` backend.

torch's test calls each op under `torch.autocast("cpu", dtype)` and checks the dtype of its
result (the lower-precision list in bf16/f16, the fp32 list in f32, the promoting ops in
their operands' widest dtype) and its value against the op run on operands cast by hand.
Here each op is compiled whole (`torch.compile(backend="reverie", fullgraph=True)`) and
called under autocast: its result has eager autocast's dtype, is within a few roundoffs of
eager's value, and is no further from the op computed in f64 than eager is. (Reverie rounds
once per op; eager's CPU kernels round some partial sums too — `addbmm` sums its batch in
bf16, f16 transposed convolutions accumulate in f16 — so there Reverie is the nearer.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.api.fx_helpers import fresh_dynamo  # noqa: E402, F401

LOW = {"bf16": torch.bfloat16, "f16": torch.float16}
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}  # unit roundoff
N = 8
nn_ = torch._C._nn


def f32(*shape):
    return torch.randn(*shape)


def low(dtype, *shape):
    return torch.randn(*shape, dtype=dtype)


def rates(dtype, *shape):
    return torch.rand(*shape, dtype=dtype)


# (list, op name, module or None for the Tensor method, make(low dtype) -> args, kwargs)
# torch_16 and nn_16: autocast's lower-precision ops (result bf16/f16)
LOWER = [
    ("conv1d", torch, lambda d: (f32(N, N, N), f32(N, N, N)), {}),
    ("conv2d", torch, lambda d: (f32(N, N, N, N), f32(N, N, N, N)), {}),
    ("conv3d", torch, lambda d: (f32(N, N, N, N, N), f32(N, N, N, N, N)), {}),
    ("bmm", torch, lambda d: (f32(N, N, N), f32(N, N, N)), {}),
    ("mm", torch, lambda d: (f32(N, N), f32(N, N)), {}),
    ("matmul", torch, lambda d: (f32(N, N), f32(N, N)), {}),
    ("baddbmm", torch, lambda d: (f32(N, N, N), f32(N, N, N), f32(N, N, N)), {}),
    ("addmm", torch, lambda d: (f32(N, N), f32(N, N), f32(N, N)), {}),
    ("_addmm_activation", torch, lambda d: (f32(N, N), f32(N, N), f32(N, N)),
     {"beta": 1, "alpha": 1, "use_gelu": True}),
    ("addbmm", torch, lambda d: (f32(N, N), f32(N, N, N), f32(N, N, N)), {}),
    ("conv_tbc", torch, lambda d: (f32(10, 7, 3), f32(5, 3, 5), f32(5), 0), {}),
    ("conv_transpose1d", torch, lambda d: (f32(N, N, N), f32(N, N, N)), {}),
    ("conv_transpose2d", torch, lambda d: (f32(N, N, N, N), f32(N, N, N, N)), {}),
    ("conv_transpose3d", torch, lambda d: (f32(N, N, N, N, N), f32(N, N, N, N, N)), {}),
    ("prelu", torch, lambda d: (f32(N), f32(1)), {}),
    ("linear", nn_, lambda d: (f32(N, N), f32(N, N)), {}),
]

# torch_fp32 and nn_fp32: autocast's f32 ops (bf16/f16 operands, result f32)
FP32 = [
    ("poisson_nll_loss", torch, lambda d: (low(d, N, N), low(d, N, N), True, False, 1e-8, 1),
     {}),
    ("cosine_embedding_loss", torch, lambda d: (
        torch.tensor([[1, 2, 3]], dtype=d), torch.tensor([[1, 3, 4]], dtype=d),
        torch.tensor([1], dtype=torch.int)), {}),
    ("hinge_embedding_loss", torch, lambda d: (low(d, N, N), torch.ones(N, dtype=torch.int)),
     {}),
    ("margin_ranking_loss", torch, lambda d: (low(d, N, N), low(d, N, N),
                                              torch.ones(N, dtype=d)), {}),
    ("triplet_margin_loss", torch, lambda d: (low(d, N, N), low(d, N, N), low(d, N, N)), {}),
    ("binary_cross_entropy_with_logits", torch, lambda d: (low(d, N, N), rates(d, N, N)), {}),
    ("avg_pool3d", nn_, lambda d: (low(d, N, N, N, N),),
     {"kernel_size": (3, 3, 3), "stride": (1, 1, 1)}),
    ("binary_cross_entropy", nn_, lambda d: (rates(d, N, N), rates(d, N, N)), {}),
    ("reflection_pad1d", nn_, lambda d: (low(d, N, N, N),), {"padding": (3, 3)}),
    ("nll_loss", nn_, lambda d: (rates(d, N, N), torch.zeros(N, dtype=torch.long)), {}),
    ("nll_loss2d", nn_, lambda d: (rates(d, N, N, N, N), torch.zeros(N, N, N, dtype=torch.long)),
     {}),
    ("l1_loss", nn_, lambda d: (low(d, N, N), low(d, N, N)), {}),
    ("smooth_l1_loss", nn_, lambda d: (low(d, N, N), low(d, N, N)), {}),
    ("mse_loss", nn_, lambda d: (low(d, N, N), low(d, N, N)), {}),
    ("multilabel_margin_loss", nn_, lambda d: (low(d, N, N), torch.ones(N, N, dtype=torch.long)),
     {}),
    ("soft_margin_loss", nn_, lambda d: (low(d, N, N), torch.ones(N, N, dtype=torch.long)), {}),
    ("multi_margin_loss", nn_, lambda d: (low(d, N, N), torch.ones(N, dtype=torch.long)), {}),
    ("huber_loss", nn_, lambda d: (low(d, N, N), low(d, N, N)), {}),
]

# torch_expect_builtin_promote, methods_expect_builtin_promote, torch_need_autocast_promote:
# an f32 and a bf16/f16 operand, promoted by the op itself
PROMOTE = [
    *((name, torch, lambda d: (f32(N), low(d, N)), {})
      for name in ("eq", "ge", "gt", "le", "lt", "ne", "add", "div", "mul")),
    *((f"__{name}__", None, lambda d: (f32(N), low(d, N)), {})
      for name in ("eq", "ge", "gt", "le", "lt", "ne", "add", "div", "mul")),
    ("cat", torch, lambda d: ((low(d, N), f32(N)),), {}),
    ("stack", torch, lambda d: ((low(d, N), f32(N)),), {}),
]

CASES = {f"{kind} {name}": (kind, name, module, make, kwargs)
         for kind, rows in (("lower", LOWER), ("fp32", FP32), ("promote", PROMOTE))
         for name, module, make, kwargs in rows}


def call(name: str, module, args, kwargs):
    """The op as torch's test calls it: `module.name(*args)`, or the Tensor method."""
    if module is None:
        return getattr(args[0], name)(*args[1:], **kwargs)
    return getattr(module, name)(*args, **kwargs)


def in_f64(args, dtype: torch.dtype | None):
    """The operands as f64, first rounded to `dtype` where given (autocast's cast)."""
    def widened(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return (value if dtype is None else value.to(dtype)).double()
        if isinstance(value, tuple | list):
            return type(value)(widened(v) for v in value)
        return value

    return widened(args)


def expected_dtype(kind: str, dtype: torch.dtype, eager: torch.Tensor) -> torch.dtype:
    if kind == "lower":
        return dtype
    if kind == "fp32":
        return torch.float32
    return torch.bool if eager.dtype == torch.bool else torch.float32


@pytest.mark.parametrize("low_name", LOW)
@pytest.mark.parametrize("case", CASES)
def test_op_under_autocast_as_eager(case: str, low_name: str) -> None:
    kind, name, module, make, kwargs = CASES[case]
    dtype = LOW[low_name]
    args = make(dtype)
    compiled = torch.compile(lambda *a: call(name, module, a, kwargs), backend="reverie",
                             fullgraph=True)
    with torch.autocast("cpu", dtype=dtype):
        want = call(name, module, args, kwargs)
        got = compiled(*args)
    assert want.dtype == expected_dtype(kind, dtype, want)  # torch's own test
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.bool:
        assert torch.equal(got, want)
        return
    exact = call(name, module, in_f64(args, dtype if kind == "lower" else None), kwargs)
    got, want = got.double(), want.double()
    scale = float(exact.abs().max()) or 1.0
    roundoff = EPS[dtype] * scale
    torch.testing.assert_close(got, want, rtol=0, atol=64 * roundoff)
    assert (got - exact).abs().max() <= (want - exact).abs().max() + 2 * roundoff


def test_native_multi_head_attention_is_refused_by_name() -> None:
    """The fused attention kernel of `nn.MultiheadAttention`'s inference fast path has no
    mapping: compiled whole, it is refused, naming it."""
    q = torch.randn(N, N, N)
    args = (q, q, q, N, 4, torch.randn(3 * N, N), torch.randn(3 * N), torch.randn(N, N),
            torch.randn(N))
    with pytest.raises(Exception, match="_native_multi_head_attention"), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        torch.compile(torch._native_multi_head_attention, backend="reverie",
                      fullgraph=True)(*args)
