"""The sort helper (`runtime_library/sort.py`) called directly: guard pages, strides, all dtypes.

Every key dtype, lengths around the insertion runs and merge widths, lines read forwards,
every other element and backwards, outputs written backwards, with the keys, the output
and the scratch each touching an inaccessible page (in a subprocess: a stray access kills
it), must give torch.sort(stable=True)'s permutation. In this process: a long line of
few distinct values (long runs of ties) and an already sorted and a reversed line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sort_cases import call_sort, reference

HERE = Path(__file__).resolve().parent


def test_no_access_outside_guarded_lines(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "sort_cases.py"], capture_output=True, text=True,
                          timeout=600, check=False, cwd=HERE,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok"]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("form", ["few values", "sorted", "reversed"])
def test_long_lines(form: str, descending: bool) -> None:
    n = 100_003
    values = {"few values": np.random.default_rng(0).integers(0, 3, n).astype(np.float64),
              "sorted": np.arange(n, dtype=np.float64),
              "reversed": np.arange(n, 0, -1).astype(np.float32)}[form]
    out = np.empty(n, np.int64)
    call_sort(values, out, descending)
    np.testing.assert_array_equal(out, reference(values, descending))
