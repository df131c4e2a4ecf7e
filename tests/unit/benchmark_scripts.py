"""The benchmark scripts as modules, for the tests that run them at tiny sizes (no timing).

`benchmarks/` is not a package: its scripts import one another by plain name (`from
workloads import ...`, `from latency import ...`), as Python allows for a script's own
folder. The tests put that folder on the path the same way and import the scripts by name.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """`benchmarks/<name>.py` (or the package `benchmarks/<name>/`) imported as `name`."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
