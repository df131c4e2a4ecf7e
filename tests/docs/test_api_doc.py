"""`docs/api.md` prints what it says, names every public name, and lists every torch
target `rv.fx` maps (issue 13 item 4, issue 14)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tutorial_runner import ROOT, failures

import reverie as rv

API = ROOT / "docs" / "api.md"


def test_every_example_prints_what_the_page_says() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    assert failures(API) == []


def test_every_public_name_is_documented() -> None:
    text = API.read_text(encoding="utf-8")
    for name in rv.__all__:
        assert re.search(rf"rv\.{name}\b", text), name
    for qualified in ("rv.torch.function", "rv.jax.function", "rv.fx.compile",
                      "rv.fx.UnsupportedNodeError", "rv.dask", "rv.exp"):
        assert qualified in text, qualified


def test_every_mapped_torch_target_is_listed() -> None:
    pytest.importorskip("torch")
    from reverie.fx_targets import supported_targets
    from reverie.tracing import UNARY_BUILTINS

    text = Path(API).read_text(encoding="utf-8")
    section = text[text.index("Supported targets"):text.index("## 10.")]
    listed = set(re.findall(r"\w+", section)) | set(re.findall(r"nn\.\w+", section))
    targets = supported_targets()
    for module in targets["modules"]:
        assert module in listed, module
    for method in targets["methods"]:
        name = method.removeprefix("Tensor.")
        assert name in listed or name in UNARY_BUILTINS, method
    for function in targets["functions"]:
        name = function.rsplit(".", 1)[1]
        assert name in listed or name in UNARY_BUILTINS or function.startswith(
            ("_operator.", "builtins.")), function
