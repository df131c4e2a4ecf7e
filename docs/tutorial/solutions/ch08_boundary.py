"""Chapter 8: the call boundary and the cache.

Exercise 1: arguments convert by NumPy's `same_kind` rule (`runtime/native/call.py`): float64 to
float32 is the same kind and is converted (a copy, then the native code sees f32);
complex128 to float32 is not, and is refused with `ArgumentTypeError` before any native
code runs. The fast entry (`compiler/call_boundary/fastcall_entry.py`) takes exact dtypes only and
hands anything else to that Python path.

Exercise 2: a cold process compiles every stage and fills the cache directory (the
whole-pipeline artifacts and the object code); a warm one finds them there and is faster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import reverie as rv

LOSS = "docs/tutorial/kernels/loss.rv"
CALL = ("import numpy as np, reverie as rv; "
        f"print(float(rv.load({LOSS!r}).loss(np.ones(4, np.float32), np.ones(4, np.float32))))")


def converted_or_refused() -> tuple[float, str]:
    """`loss` of float64 arrays, and the error's class for a complex128 one."""
    loss = rv.load(LOSS).loss
    value = float(loss(np.ones(3), np.ones(3, np.float32)))
    try:
        loss(np.ones(3, np.complex128), np.ones(3, np.float32))
    except rv.ArgumentTypeError as error:
        return value, type(error).__name__
    raise AssertionError("complex128 was accepted")


def cold_then_warm(cache: Path, root: Path) -> tuple[int, float, float]:
    """Files in the emptied `cache` after one process, and both processes' seconds."""
    env = {**os.environ, "REVERIE_CACHE_DIR": str(cache)}
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", CALL], cwd=root, env=env, check=True,
                       capture_output=True)
        seconds.append(time.perf_counter() - start)
    files = sum(1 for path in cache.rglob("*") if path.is_file())
    return files, seconds[0], seconds[1]
