"""The IR's element types by name, and the NumPy dtype of each (a leaf: NumPy only).

`types.py` re-exports these beside the tensor types; the run time's call path imports them
from here, so a warm start (`runtime/native/fastcall.py`) checks and allocates by dtype without
loading the IR's classes.
"""

from __future__ import annotations

import numpy as np

FLOAT_DTYPES = ("f32", "f64")
INT_DTYPES = ("i32", "i64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

NUMPY_DTYPES = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
