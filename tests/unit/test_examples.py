"""Every `examples/*.rv` compiles, and every function in it matches a NumPy reference.

Arguments are generated from each function's typed IR signature: every symbolic dimension
is bound to a small size (`SIZES`), float tensors are random normal, and integer or scalar
parameters whose value matters (labels, step counts, widths) come from `SPECIAL_ARGS`.
Each function has a hand-written NumPy reference in `REFERENCES`; a new example function
without one fails `test_every_example_function_has_a_reference`. The programs in
`docs/language.md` must compile too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.types import NUMPY_DTYPES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.rv"))

SIZES = {
    "B": 2,
    "C": 3,
    "D": 4,
    "E": 3,
    "F": 2,
    "H": 5,
    "K": 3,
    "KH": 3,
    "KW": 2,
    "L": 7,
    "N": 6,
    "O": 2,
    "P": 3,
    "S": 4,
    "T": 5,
    "W": 6,
}

Rng = np.random.Generator
SPECIAL_ARGS: dict[str, Callable[[dict[str, int], Rng], object]] = {
    "labels": lambda dims, rng: rng.integers(0, dims["C"], dims["N"]),
    "steps": lambda dims, rng: 4,
    "t": lambda dims, rng: int(rng.integers(0, dims["T"])),
    "counts": lambda dims, rng: rng.integers(0, 10, dims["N"]),
    "alpha": lambda dims, rng: 0.2,
    "delta": lambda dims, rng: 0.7,
    "width": lambda dims, rng: 0.5,
    "lo": lambda dims, rng: -0.5,
    "hi": lambda dims, rng: 0.8,
    "h": lambda dims, rng: 0.1,
    "limit": lambda dims, rng: 1.0,
    "decay": lambda dims, rng: 0.01,
    "slope": lambda dims, rng: 0.1,
    "s": lambda dims, rng: rng.random(dims["N"]) + 0.5,
    "tol": lambda dims, rng: 1e-12,
    "tolerance": lambda dims, rng: 1e-3,
    "t_end": lambda dims, rng: 1.0,
    "stiffness": lambda dims, rng: 2.0,
    "damping": lambda dims, rng: 0.3,
}


def make_args(module: rv.Module, name: str, float_dtype: str, seed: int = 0) -> list[object]:
    """Random arguments fitting function `name`'s signature (dimensions from SIZES)."""
    rng = np.random.default_rng(seed)
    fn = module.lowering.specialise(name, float_dtype)
    args: list[object] = []
    for value, param in zip(fn.params, fn.param_names, strict=True):
        shape = tuple(dim.evaluate(SIZES) for dim in value.type.shape)
        dtype = NUMPY_DTYPES[value.type.dtype]
        if param in SPECIAL_ARGS:
            arg = SPECIAL_ARGS[param](SIZES, rng)
            args.append(np.asarray(arg, dtype=dtype) if shape else arg)
        elif dtype == np.bool_:
            args.append(rng.random(shape) < 0.3)
        elif dtype.kind == "i":
            args.append(rng.integers(-5, 5, shape).astype(dtype))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


# ---------------------------------------------------------------- NumPy references


def oscillator(u0: np.ndarray, k: float, c: float, t_end: float, tolerance: float
               ) -> np.ndarray:
    """examples/ode_adaptive.rv's integrator, step for step (Heun with an Euler estimate)."""
    def rate(u: np.ndarray, t: float) -> np.ndarray:
        return np.array([u[1], -k * u[0] - c * u[1] + np.sin(t)])

    u, t, h = np.array(u0, dtype=np.float64), 0.0, 0.01
    while t < t_end:
        euler = u + h * rate(u, t)
        heun = u + 0.5 * h * (rate(u, t) + rate(euler, t + h))
        err = np.abs(heun - euler).max() + 1e-300
        if err <= tolerance:
            u, t = heun, t + h
        h = min(h * min(max(0.9 * np.sqrt(tolerance / err), 0.2), 5.0), t_end - t)
    return u


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def logsumexp(z: np.ndarray, axis: int = -1) -> np.ndarray:
    m = z.max(axis=axis, keepdims=True)
    return (np.log(np.exp(z - m).sum(axis=axis, keepdims=True)) + m).squeeze(axis)


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    return z - np.expand_dims(logsumexp(z, axis), axis)


def mlp(x, w1, b1, w2, b2):
    return np.tanh(x @ w1 + b1) @ w2 + b2


def softmax_xent(logits, labels):
    return -log_softmax(logits, 1)[np.arange(len(labels)), labels].mean()


def conv1d_valid(x, w, bias):
    k = w.shape[2]
    windows = np.stack([x[:, :, i : i + k] for i in range(x.shape[2] - k + 1)], axis=2)
    return np.einsum("bcik,fck->bfi", windows, w) + bias[:, None]


def conv1d_same(x, kernel):
    k = len(kernel)
    padded = np.pad(x, ((0, 0), (k // 2, k - 1 - k // 2)))
    return np.stack([padded[:, i : i + k] @ kernel for i in range(x.shape[1])], axis=1)


def conv2d(x, w, bias):
    kh, kw = w.shape[2:]
    out_h, out_w = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = np.zeros((x.shape[0], w.shape[0], out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            y[:, :, i, j] = np.einsum("bcpq,fcpq->bf", x[:, :, i : i + kh, j : j + kw], w)
    return y + bias[:, None, None]


def box_blur(img):
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1)))
    h, w = img.shape[1:]
    return sum(padded[:, p : p + h, q : q + w] for p in range(3) for q in range(3)) / 9.0


def heat1d_final(u0, alpha, steps):
    u = u0.copy()
    for _ in range(steps):
        u = u + alpha * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u


def heat1d_dirichlet(u0, alpha, steps):
    u, energy = u0.copy(), 0.0
    for _ in range(steps):
        padded = np.concatenate(([0.0], u, [0.0]))
        u = u + alpha * (padded[:-2] - 2 * u + padded[2:])
        energy += np.sum(u**2)
    return u, energy


def rnn(xs, h0, wx, wh, b):
    h = h0
    for x in xs:
        h = np.tanh(x @ wx + h @ wh + b)
    return h


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def lstm_cell(x, h, c, wx, wh, b):
    z = x @ wx + h @ wh + b
    i, f, g, o = np.split(z, 4)
    c_next = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c_next), c_next


def lstm(xs, h0, c0, wx, wh, b):
    h, c, hs = h0, c0, []
    for x in xs:
        h, c = lstm_cell(x, h, c, wx, wh, b)
        hs.append(h)
    return np.stack(hs), c


def lstm_loss(xs, h0, c0, wx, wh, b, wo, targets):
    hs, c = lstm(xs, h0, c0, wx, wh, b)
    return np.sum((hs @ wo - targets) ** 2) + 0.1 * np.sum(c * c)


def gmm_log_components(x, mu, log_sigma, logits):
    d = x.shape[1]
    dist2 = ((x[:, None, :] - mu[None, :, :]) ** 2).sum(-1)
    log_normal = -0.5 * dist2 / np.exp(2 * log_sigma) - d * log_sigma - 0.5 * d * np.log(2 * np.pi)
    return log_softmax(logits) + log_normal


def rosenbrock(x, axis=None):
    head, tail = x[..., :-1], x[..., 1:]
    return np.sum(100 * (tail - head**2) ** 2 + (1 - head) ** 2, axis=axis)


def layer_norm(x, gamma, beta):
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma + beta


def causal_attention(q, k, v):
    scores = q @ k.T / np.sqrt(q.shape[1])
    mask = np.tril(np.ones((len(q), len(k)), dtype=bool))
    return softmax(np.where(mask, scores, -1e9)) @ v


def masked_mean(x, flagged, limit):
    keep = ~(flagged | (np.abs(x) > limit))
    return x[keep].sum() / keep.sum()


def moments(x):
    return x.mean(), x.var()


def linear_fit(x, y, w, b):
    prediction = x @ w + b
    return prediction, prediction - y, np.mean((prediction - y) ** 2)


REFERENCES: dict[tuple[str, str], Callable[..., object]] = {
    ("mlp", "mlp"): mlp,
    ("mlp", "mlp_loss"): lambda x, y, w1, b1, w2, b2: np.mean((mlp(x, w1, b1, w2, b2) - y) ** 2),
    ("softmax_xent", "softmax_xent"): softmax_xent,
    ("softmax_xent", "linear_classifier_loss"): lambda x, labels, w, b, decay: (
        softmax_xent(x @ w + b, labels) + decay * np.sum(w * w)
    ),
    ("softmax_xent", "accuracy"): lambda z, labels: np.mean(z.argmax(1) == labels),
    ("conv1d", "conv1d_valid"): conv1d_valid,
    ("conv1d", "conv1d_same"): conv1d_same,
    ("conv1d", "conv1d_loss"): lambda x, w, bias, target: np.mean(
        (np.maximum(conv1d_valid(x, w, bias), 0) - target) ** 2
    ),
    ("conv2d", "conv2d"): conv2d,
    ("conv2d", "box_blur"): box_blur,
    ("conv2d", "conv2d_loss"): lambda x, w, bias, head, target: np.mean(
        (np.maximum(conv2d(x, w, bias), 0).mean((2, 3)) @ head - target) ** 2
    ),
    ("heat1d", "heat1d_final"): heat1d_final,
    ("heat1d", "heat1d"): lambda u0, alpha, steps: np.sum(heat1d_final(u0, alpha, steps) ** 2),
    ("heat1d", "heat1d_dirichlet"): heat1d_dirichlet,
    ("rnn", "rnn"): rnn,
    ("lstm_update", "cell"): lstm_cell,
    ("lstm_update", "lstm"): lstm,
    ("lstm_update", "lstm_loss"): lstm_loss,
    ("rnn", "rnn_loss"): lambda xs, h0, wx, wh, b, wo, target: (
        (rnn(xs, h0, wx, wh, b) @ wo - target) ** 2
    ),
    ("gmm", "gmm_nll"): lambda *a: -np.mean(logsumexp(gmm_log_components(*a), 1)),
    ("gmm", "gmm_responsibilities"): lambda *a: softmax(gmm_log_components(*a), 1),
    ("rosenbrock", "rosenbrock"): rosenbrock,
    ("rosenbrock", "rosenbrock_batch"): lambda xs: rosenbrock(xs, axis=1),
    ("broadcast_reductions", "standardize"): lambda x: (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5),
    ("broadcast_reductions", "layer_norm"): layer_norm,
    ("broadcast_reductions", "covariance"): lambda x: np.cov(x, rowvar=False),
    ("broadcast_reductions", "image_stats"): lambda x: (
        x.mean((1, 2, 3)),
        x.max((1, 2, 3)),
        x.sum((2, 3)).argmax(1),
    ),
    ("broadcast_reductions", "clipped_range"): lambda x, lo, hi: np.ptp(np.clip(x, lo, hi)),
    ("shapes", "second_difference"): lambda u, h: (u[2:] - 2 * u[1:-1] + u[:-2]) / h**2,
    ("shapes", "forward_difference"): lambda u: np.append(np.diff(u), np.diff(u)[-1]),
    ("shapes", "alternating_sum"): lambda x: x[::2].sum() - x[1::2].sum(),
    ("shapes", "split_first_column"): lambda x: (x[:, 0], x[:, 1:]),
    ("shapes", "laplacian_2d"): lambda u: (
        np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u
    ),
    ("shapes", "roll_flat"): lambda x: np.roll(x, 1),
    ("shapes", "flatten_project"): lambda maps, w: maps.reshape(len(maps), -1) @ w,
    ("shapes", "gram"): lambda x: 2 * x.T @ x,
    ("shapes", "time_step"): lambda xs, t: xs[t],
    ("where", "huber"): lambda p, t, d: np.mean(
        np.where(np.abs(p - t) <= d, 0.5 * (p - t) ** 2, d * (np.abs(p - t) - 0.5 * d))
    ),
    ("where", "leaky_relu"): lambda x, slope: np.where(x > 0, x, slope * x),
    ("where", "band_pass"): lambda x, lo, hi: (
        np.where((x >= lo) & (x <= hi), x, 0),
        np.sum((x >= lo) & (x <= hi)),
    ),
    ("where", "masked_mean"): masked_mean,
    ("casts", "weighted_sum_f64"): lambda x, w: np.sum(x.astype(np.float64) * w),
    ("casts", "truncate"): lambda x: x.astype(np.int32),
    ("casts", "mean_count"): lambda counts: counts.mean(),
    ("casts", "fraction_positive"): lambda x: np.mean(x > 0),
    ("casts", "bucket"): lambda x, width: np.floor(x / width).astype(np.int64),
    ("tuple_return", "moments"): moments,
    ("tuple_return", "zscore"): lambda x: (x - x.mean()) / x.std(),
    ("tuple_return", "linear_fit"): linear_fit,
    ("attention", "attention"): lambda q, k, v: softmax(q @ k.T / np.sqrt(q.shape[1])) @ v,
    ("attention", "causal_attention"): causal_attention,
    ("topk_loss", "topk_loss"): lambda scores, weights: np.mean(
        -np.sort(-scores, axis=1, kind="stable")[:, :len(weights)] @ weights
    ),
    ("topk_loss", "trimmed_mean"): lambda x: np.sort(x)[1:-1].mean(),
    ("topk_loss", "ranks"): lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable"),
    ("topk_loss", "growth"): lambda r: (np.cumprod(1 + r), np.cumsum(np.cumprod(1 + r) - 1)),
    ("topk_loss", "prefix_sums"): lambda x: np.cumsum(x, axis=1),
    ("newton", "newton_sqrt"): lambda s, tol: np.sqrt(s),
    ("ode_adaptive", "rate"): lambda u, t, stiffness, damping: np.array(
        [u[1], -stiffness * u[0] - damping * u[1] + np.sin(t)]),
    ("ode_adaptive", "oscillator"): oscillator,
    ("ode_adaptive", "oscillator_loss"): lambda u0, k, c: np.sum(
        oscillator(u0, k, c, 1.0, 1e-3) ** 2),
    ("newton", "newton_loss"): lambda x, target: np.sum(
        ((-1.0 if target.mean() < 0 else 1.0) * np.sqrt(x * x + 1.0) - target) ** 2),
}


MODULES = {path.stem: rv.load(path, backend="interp") for path in EXAMPLE_FILES}
CASES = [(stem, name) for stem, module in MODULES.items() for name in module.kernels]


def test_examples_exist() -> None:
    names = {path.stem for path in EXAMPLE_FILES}
    for required in (
        "mlp",
        "softmax_xent",
        "conv1d",
        "conv2d",
        "heat1d",
        "rnn",
        "gmm",
        "rosenbrock",
        "broadcast_reductions",
    ):
        assert required in names


def test_every_example_starts_with_a_header_comment() -> None:
    for path in EXAMPLE_FILES:
        assert path.read_text().startswith("# "), f"{path.name} needs a header comment"


def test_every_example_function_has_a_reference() -> None:
    missing = [case for case in CASES if case not in REFERENCES]
    assert not missing, f"add NumPy references for {missing}"


def _float_dtypes(module: rv.Module, name: str) -> list[str]:
    """f64 always; f32 too when the function is generic in `float`."""
    return ["f64", "f32"] if module.lowering.uses_float(name) else ["f64"]


@pytest.mark.parametrize(("stem", "name"), CASES, ids=[f"{s}.{n}" for s, n in CASES])
def test_example_matches_numpy(stem: str, name: str) -> None:
    module = MODULES[stem]
    for float_dtype in _float_dtypes(module, name):
        args = make_args(module, name, float_dtype)
        got = module[name](*args)
        wide = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in args]
        expected = REFERENCES[(stem, name)](*wide)
        fn = module.lowering.specialise(name, float_dtype)
        got_parts = got if isinstance(got, tuple) else (got,)
        expected_parts = expected if isinstance(expected, tuple) else (expected,)
        assert len(got_parts) == len(expected_parts) == len(fn.result_types)
        tol = 2e-4 if _uses_f32(fn) else 1e-10
        for result, want, rtype in zip(got_parts, expected_parts, fn.result_types, strict=True):
            result = np.asarray(result)
            assert result.dtype == NUMPY_DTYPES[rtype.dtype]
            np.testing.assert_allclose(
                result, want, rtol=tol, atol=tol, err_msg=f"{stem}.{name} in {float_dtype}"
            )


def _uses_f32(fn: Function) -> bool:
    """Whether any parameter or result of `fn` is f32 (so results carry f32 rounding)."""
    types = [p.type for p in fn.params] + fn.result_types
    return any(t.dtype == "f32" for t in types)


def test_time_step_is_bounds_checked() -> None:
    module = MODULES["shapes"]
    xs = np.zeros((SIZES["T"], SIZES["D"]), np.float32)
    with pytest.raises(IndexError):
        module.time_step(xs, SIZES["T"])


def test_softmax_xent_rejects_out_of_range_labels() -> None:
    module = MODULES["softmax_xent"]
    logits = np.zeros((3, 4), np.float32)
    with pytest.raises(IndexError):
        module.softmax_xent(logits, np.array([0, 4, 1]))


def test_language_reference_programs_compile() -> None:
    text = (EXAMPLES.parent / "docs" / "language.md").read_text()
    programs = [block for block in re.findall(r"```rv\n(.*?)```", text, re.DOTALL)
                if "fn " in block]
    assert len(programs) >= 5
    for program in programs:
        rv.compile(program, backend="interp")
