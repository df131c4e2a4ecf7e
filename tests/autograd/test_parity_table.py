"""docs/api.md's torch.autograd parity table, checked against torch 2.13 and Reverie (issue 32).

Every public torch.autograd name is computed from torch at test time, so a name that a new
torch adds fails here until the table says what Reverie does with it. A row marked "same"
names what Reverie has (callable where torch's is); a row marked "not built" names what
raises an AttributeError that names it: nothing differs silently.

A table row is `| torch names | Reverie names | status |`. In a cell of several backticked
names, a bare one (`sub_`) continues the first one's prefix (`torch.Tensor.add_`); a name
in `(= ...)` is an alias of the one before it, the same object.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import reverie as rv  # noqa: E402
from reverie.autograd import NOT_BUILT  # noqa: E402

API = Path(__file__).parents[2] / "docs" / "api.md"
SECTION = ("### torch.autograd parity", "## 5.")
DETAILED = ("function", "graph", "forward_ad", "functional")  # tabulated name by name
TOP_LEVEL = ("no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
             "inference_mode", "is_inference_mode_enabled", "is_anomaly_enabled",
             "is_anomaly_check_nan_enabled", "set_anomaly_enabled", "is_inference")
TENSOR = ("requires_grad", "requires_grad_", "grad", "grad_fn", "is_leaf", "backward",
          "retain_grad", "retains_grad", "register_hook", "register_post_accumulate_grad_hook",
          "detach", "detach_", "clone", "numpy", "is_inference", "_version", "data",
          "output_nr", "_base", "add_", "sub_", "mul_", "div_", "pow_", "clamp_", "zero_",
          "fill_", "copy_", "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
          "__ipow__")


@dataclass(frozen=True)
class Row:
    """One row of the parity table."""

    torch_names: tuple[str, ...]
    reverie_names: tuple[str, ...]  # empty where not built
    aliases: tuple[str, ...]  # Reverie names in `(= ...)`: the same object as the first
    built: bool


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def qualified(names: list[str]) -> tuple[str, ...]:
    """The names of a cell, a bare one completed with the first name's prefix."""
    prefix = names[0].rpartition(".")[0] if names else ""
    return tuple(name if "." in name else f"{prefix}.{name}" for name in names)


def parse_row(line: str) -> Row:
    torch_cell, reverie_cell, status = (cell.strip() for cell in line.strip("|").split("|"))
    assert status.startswith(("same", "not built")), f"status neither same nor not built: {line}"
    aliases = re.findall(r"\(= `([^`]+)`\)", reverie_cell)
    reverie_names = backticked(re.sub(r"\(=[^)]*\)", "", reverie_cell))
    return Row(qualified(backticked(torch_cell)), qualified(reverie_names), tuple(aliases),
               status.startswith("same"))


def parity_rows() -> list[Row]:
    text = API.read_text(encoding="utf-8")
    section = text[text.index(SECTION[0]):text.index(SECTION[1])]
    return [parse_row(line) for line in section.splitlines() if line.startswith("| `torch")]


ROWS = parity_rows()


def row_id(row: Row) -> str:
    return row.torch_names[0]


def tabulated() -> set[str]:
    return {name for row in ROWS for name in row.torch_names}


def is_autograd_api(name: str) -> bool:
    """Whether torch.autograd's `name` is its own, not a module or helper it re-imports
    (`torch`, `warnings`, `typing.cast`, `collections.abc.Mapping`, torch.overrides')."""
    value = getattr(torch.autograd, name)
    if inspect.ismodule(value):
        return value.__name__.startswith("torch.autograd.")
    if value is getattr(torch.overrides, name, None):
        return False
    return getattr(value, "__module__", "").startswith("torch")


def torch_autograd_names() -> set[str]:
    """torch.autograd's public names, and those of the submodules tabulated name by name."""
    names = {f"torch.autograd.{name}" for name in dir(torch.autograd)
             if not name.startswith("_") and is_autograd_api(name)}
    for submodule in DETAILED:
        names |= {f"torch.autograd.{submodule}.{name}"
                  for name in getattr(torch.autograd, submodule).__all__}
    return names


NODE = "torch.autograd.graph.Node."


def torch_object(name: str) -> object:
    """What a torch name of the table is; a `Node` attribute read on a recorded node (the
    abstract `Node` declares as methods what the nodes have as properties)."""
    if name.startswith(NODE):
        return getattr((torch.ones(1, requires_grad=True) * 2).grad_fn, name.removeprefix(NODE))
    value = torch
    for part in name.split(".")[1:]:
        value = getattr(value, part)
    return value


def reverie_object(name: str) -> object:
    """What a Reverie name of the table is: `rv.<path>`, `Tensor.<attribute>` (of
    `rv.Tensor`) or `grad_fn.<attribute>` (of a recorded node)."""
    head, _, path = name.partition(".")
    node = (rv.tensor([1.0], requires_grad=True) * 2).grad_fn
    value = {"rv": rv, "Tensor": rv.Tensor, "grad_fn": node}[head]
    for part in path.split("."):
        value = getattr(value, part)
    return value


def missing_attribute(torch_name: str) -> tuple[object, str]:
    """Where a name that is not built is looked up in Reverie, and under which name:
    torch.autograd.X(.Y) as rv.autograd.X, torch.Tensor.X on a Tensor, torch.X as rv.X."""
    parts = torch_name.split(".")
    if parts[1] == "autograd":
        return rv.autograd, parts[2]
    if parts[1] == "Tensor":
        return rv.tensor([1.0]), parts[2]
    return rv, parts[1]


def test_every_torch_autograd_name_has_a_row() -> None:
    assert sorted(torch_autograd_names() - tabulated()) == []


def test_every_grad_mode_name_and_tensor_attribute_has_a_row() -> None:
    expected = {f"torch.{name}" for name in TOP_LEVEL}
    expected |= {f"torch.Tensor.{name}" for name in TENSOR}
    assert sorted(expected - tabulated()) == []


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_every_tabulated_name_is_torch_s(row: Row) -> None:
    for name in row.torch_names:
        torch_object(name)  # AttributeError: a misspelt name, or one torch removed


@pytest.mark.parametrize("row", [row for row in ROWS if row.built], ids=row_id)
def test_a_built_name_exists_in_reverie(row: Row) -> None:
    assert len(row.reverie_names) == len(row.torch_names), "one Reverie name per torch name"
    for torch_name, reverie_name in zip(row.torch_names, row.reverie_names, strict=True):
        value = reverie_object(reverie_name)
        assert callable(value) == callable(torch_object(torch_name)), reverie_name
    for alias in row.aliases:
        assert reverie_object(alias) is reverie_object(row.reverie_names[0]), alias


@pytest.mark.parametrize("row", [row for row in ROWS if not row.built], ids=row_id)
def test_a_name_not_built_raises_attribute_error_naming_it(row: Row) -> None:
    assert row.reverie_names == (), "a row not built names nothing in Reverie"
    for torch_name in row.torch_names:
        owner, attribute = missing_attribute(torch_name)
        assert not hasattr(owner, attribute), torch_name
        with pytest.raises(AttributeError, match=re.escape(attribute)):
            getattr(owner, attribute)


def test_not_built_table_is_the_doc_s() -> None:
    """rv.autograd's NOT_BUILT lists exactly the torch.autograd names the table marks not
    built, and each message names the torch name."""
    documented = {name.split(".")[2] for row in ROWS if not row.built
                  for name in row.torch_names if name.startswith("torch.autograd.")}
    assert sorted(documented ^ set(NOT_BUILT)) == []
    for name in NOT_BUILT:
        with pytest.raises(AttributeError, match=rf"torch\.autograd\.{name} is not built"):
            getattr(rv.autograd, name)


def test_rv_autograd_lists_no_name_that_is_not_built() -> None:
    assert set(dir(rv.autograd)).isdisjoint(NOT_BUILT)
    assert set(rv.autograd.__all__).isdisjoint(NOT_BUILT)


def test_an_unknown_name_gets_python_s_message() -> None:
    with pytest.raises(AttributeError, match="module 'reverie.autograd' has no attribute 'nope'"):
        rv.autograd.nope  # noqa: B018 -- the attribute access is the test
