"""`dir(rv)` lists the public API only (issue 36 item 5): the names of `__all__`, the
submodules, the Tensor functions (`rv.exp`, `rv.where`, `rv.max`) and `__version__`,
each of which resolves; not the machinery of `reverie/__init__.py`."""

from __future__ import annotations

import subprocess
import sys

import reverie as rv

MACHINERY = ("importlib", "TYPE_CHECKING", "EXPORTS", "HOME_MODULES", "SUBMODULES",
             "ELEMENTWISE_FUNCTIONS_MODULE", "annotations", "runtime")


def test_dir_lists_public_names_only() -> None:
    names = dir(rv)
    assert names == sorted(names)
    for name in MACHINERY:
        assert name not in names
    assert not [n for n in names if n.startswith("_") and n != "__version__"]
    assert {"compile", "grad", "Tensor", "tensor", "trace", "no_grad", "torch", "jax",
            "exp", "where", "__version__"} <= set(names)


def test_every_listed_name_resolves() -> None:
    for name in dir(rv):
        if name not in rv.SUBMODULES:  # those import torch, jax or dask
            assert getattr(rv, name) is not None, name


def test_all_is_every_exported_name() -> None:
    assert sorted(rv.__all__) == sorted(rv.HOME_MODULES)
    assert set(rv.__all__) <= set(dir(rv))


def test_dir_before_any_use_in_a_fresh_process() -> None:
    shown = subprocess.run([sys.executable, "-c", "import reverie; print(dir(reverie))"],
                           capture_output=True, text=True, check=True).stdout
    assert "'grad'" in shown and "'importlib'" not in shown and "'EXPORTS'" not in shown
