"""Ports of PyTorch's graph-API tests (`test/test_autograd.py`; issue 32 item 7).

Each test runs on torch (proving the port) and on Reverie. `grad_fn.name()`,
`next_functions` (one `(node, output index)` per differentiable input, `(None, 0)` where
the input does not require grad, the leaf's one `AccumulateGrad` with `.variable`) and
`metadata`, on recorded ops, custom Functions and in-place writes. Reverie's nodes are what
it runs (one compiled VJP per recorded kernel call), so their names differ from torch's
(`mul_backward` for `MulBackward0`): the tests compare structure, never names. Tests named
`test_graph_*` beyond torch's pin behaviour torch 2.13 shows (run here on both libraries).

Left out: torch's `graph_desc` expect files (`test_function`, `test_once_differentiable`:
torch's node names), `test_grad_fn_badcalls` (calling a node directly),
`test_grad_fn_input_metadata` (`_input_metadata`, an internal), `test_naughty_anomaly_access`
(an expected failure in torch), `test_graph_save_on_cpu*` (saved-tensor hooks, which Reverie
lacks).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.autograd.parity import assert_close

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402

RNG = np.random.default_rng(7)


def rand(lib: object, shape: tuple[int, ...], requires_grad: bool = False) -> object:
    return lib.tensor(RNG.random(shape), dtype=lib.float64, requires_grad=requires_grad)


def is_accumulate_grad(node: object) -> bool:
    return type(node).__name__ == "AccumulateGrad"


def function(lib: object, name: str, forward: object, backward: object) -> object:
    """A `lib.autograd.Function` subclass with these static forward and backward."""
    return type(name, (lib.autograd.Function,), {"forward": staticmethod(forward),
                                                 "backward": staticmethod(backward)})


def test_next_functions(lib):
    x = rand(lib, (5, 5), requires_grad=True)
    y = rand(lib, (5, 5), requires_grad=True)
    a = x + y
    assert a.grad_fn is not None
    next_functions = a.grad_fn.next_functions
    assert len(next_functions) == 2
    assert is_accumulate_grad(next_functions[0][0])
    assert next_functions[0][1] == 0
    assert is_accumulate_grad(next_functions[1][0])
    assert next_functions[1][1] == 0

    b = a + 5
    next_functions = b.grad_fn.next_functions
    assert len(next_functions) == 2
    assert next_functions[0][0] is a.grad_fn
    assert next_functions[1][0] is None


def test_graph_next_functions_accumulate_grad_is_one_per_leaf(lib):
    x = rand(lib, (2,), requires_grad=True)
    d = x * x
    (first, _), (second, _) = d.grad_fn.next_functions
    assert first is second
    assert first is d.grad_fn.next_functions[0][0]
    assert first is x.clone().grad_fn.next_functions[0][0]
    assert first.variable is x
    assert first.next_functions == ()
    assert x.grad_fn is None


def test_graph_next_functions_none_where_no_grad(lib):
    x = rand(lib, (2,), requires_grad=True)
    w = x.detach()
    e = w * x
    assert e.grad_fn.next_functions[0] == (None, 0)
    assert is_accumulate_grad(e.grad_fn.next_functions[1][0])
    c = (x + 1) * rand(lib, (2,))
    assert c.grad_fn.next_functions[1] == (None, 0)


def test_graph_next_functions_output_index_of_multi_output_node(lib):
    double_mul = function(lib, "DoubleMul", lambda ctx, x: (x * 2, x * 3),
                          lambda ctx, g1, g2: g1 * 2 + g2 * 3)
    x = rand(lib, (3,), requires_grad=True)
    p, q = double_mul.apply(x)
    assert p.grad_fn is q.grad_fn
    node = p.grad_fn
    assert len(node.next_functions) == 1
    assert node.next_functions[0][0] is x.clone().grad_fn.next_functions[0][0]
    assert (q * 2).grad_fn.next_functions[0] == (node, 1)
    assert (p * 2).grad_fn.next_functions[0] == (node, 0)


def test_graph_grad_fn_of_inplace_writes(lib):
    x = rand(lib, (2,), requires_grad=True)
    z = x.clone()
    old = z.grad_fn
    z.mul_(2)
    assert z.grad_fn is not old
    assert z.grad_fn.next_functions[0][0] is old
    assert z.grad_fn.next_functions[1] == (None, 0)

    z = x.clone()
    old = z.grad_fn
    z[0] = 5.0
    assert z.grad_fn.next_functions == ((old, 0), (None, 0))

    w = rand(lib, (2,), requires_grad=True)
    z = x.clone()
    old = z.grad_fn
    z[0] = w[1]
    assert len(z.grad_fn.next_functions) == 2
    assert z.grad_fn.next_functions[0] == (old, 0)
    assert z.grad_fn.next_functions[1][0] is not None
    z.sum().backward()
    assert_close(w.grad, [0.0, 1.0])
    assert_close(x.grad, [0.0, 1.0])


def test_graph_metadata_is_a_dict_that_persists(lib):
    x = rand(lib, (2,), requires_grad=True)
    y = x * 2
    metadata = y.grad_fn.metadata
    assert isinstance(metadata, dict)
    assert metadata == {}
    metadata["tag"] = 1
    assert y.grad_fn.metadata is metadata
    assert y.grad_fn.metadata == {"tag": 1}
    acc = y.grad_fn.next_functions[0][0]
    acc.metadata["leaf"] = True
    assert x.clone().grad_fn.next_functions[0][0].metadata == {"leaf": True}
    y.sum().backward()
    assert y.grad_fn.metadata == {"tag": 1}


def test_graph_name_is_a_string(lib):
    x = rand(lib, (2,), requires_grad=True)
    custom = function(lib, "Twice", lambda ctx, x: x * 2, lambda ctx, g: g * 2)
    nodes = [(x * 2).grad_fn, (x * 2).grad_fn.next_functions[0][0], custom.apply(x).grad_fn]
    z = x.clone()
    z.add_(1.0)
    nodes.append(z.grad_fn)
    for node in nodes:
        assert isinstance(node.name(), str)
        assert node.name()
    assert nodes[1].name().endswith("AccumulateGrad")
    assert "Twice" in nodes[2].name()


def test_graph_walk_reaches_every_leaf(lib):
    # a torch-style walk over next_functions finds the leaves through AccumulateGrad
    x = rand(lib, (3,), requires_grad=True)
    y = rand(lib, (3,), requires_grad=True)
    out = ((x * y).exp() + x).sum()
    leaves, stack, seen = [], [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if is_accumulate_grad(node):
            leaves.append(node.variable)
        stack.extend(n for n, _ in node.next_functions)
    assert len(leaves) == 2
    assert any(leaf is x for leaf in leaves)
    assert any(leaf is y for leaf in leaves)


def test_graph_node_hooks_run_on_the_graph_walked(lib):
    x = rand(lib, (3,), requires_grad=True)
    y = (x * 2).exp()
    seen = []
    mul_node = y.grad_fn.next_functions[0][0]
    mul_node.register_prehook(lambda go: seen.append(("pre", go[0].shape)))
    handle = mul_node.register_hook(lambda gi, go: seen.append(("post", len(gi))))
    y.sum().backward(retain_graph=True)
    assert seen == [("pre", (3,)), ("post", 2)]
    handle.remove()
    y.sum().backward()
    assert seen == [("pre", (3,)), ("post", 2), ("pre", (3,))]


def test_graph_reverie_node_is_one_compiled_call():
    # Reverie only: a kernel call is one node however many ops its body has
    module = rv.compile("fn f(x: f64[N]) -> f64 { return sum(exp(x * 2.0) + x); }")
    x = rv.tensor(RNG.random(3), requires_grad=True)
    out = module["f"](x)
    assert len(out.grad_fn.next_functions) == 1
    assert out.grad_fn.next_functions[0][0].variable is x
