"""Rows of the `rv.fx` target table (`fx_targets.py`): the convolution family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reverie.tracing import RECORDER_FILES

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]

FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {}
METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {}
MODULES: dict[type, Callable[..., Any]] = {}
