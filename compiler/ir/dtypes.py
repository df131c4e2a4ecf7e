"""The IR's element types by name, and the NumPy dtype of each (a leaf: NumPy only).

`bf16` and `f16` are storage types: every op reads them as f32 and rounds each result back
(`compute_dtype`), as torch and JAX do. NumPy has `float16` but no bfloat16: `ml_dtypes` (JAX's
own NumPy dtypes) supplies it, imported on first use: its import takes ~0.6 s.

`types.py` re-exports these beside the tensor types; the run time's call path imports them
from here, so a warm start (`runtime/native/fastcall.py`) checks and allocates by dtype without
loading the IR's classes.
"""

from __future__ import annotations

import numpy as np

STORAGE_DTYPES = ("bf16", "f16")
STORAGE_NUMPY_NAMES = {"bfloat16": "bf16", "float16": "f16"}  # their NumPy dtypes' names
FLOAT_DTYPES = ("f32", "f64", *STORAGE_DTYPES)
INT_DTYPES = ("i32", "i64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)


class _NumpyDtypes(dict):
    """The NumPy dtype of each element type; bf16's is looked up (ml_dtypes imported) on
    first use."""

    def __missing__(self, name: str) -> np.dtype:
        if name != "bf16":
            raise KeyError(name)
        import ml_dtypes

        self[name] = np.dtype(ml_dtypes.bfloat16)
        return self[name]

    def __contains__(self, name: object) -> bool:
        return name == "bf16" or super().__contains__(name)


NUMPY_DTYPES = _NumpyDtypes({
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f16": np.dtype(np.float16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
})


def compute_dtype(dtype: str) -> str:
    """The dtype ops on `dtype` compute in: f32 for a storage type, else `dtype` itself."""
    return "f32" if dtype in STORAGE_DTYPES else dtype


def computable(array: np.ndarray) -> np.ndarray:
    """`array` as the interpreters' ops read it: bf16/f16 values widened to f32 (exactly),
    others as they are."""
    return array.astype(np.float32) if array.dtype.name in STORAGE_NUMPY_NAMES else array


def dtype_name(dtype: np.dtype) -> str:
    """The element type of NumPy `dtype` ("bf16" for ml_dtypes.bfloat16; KeyError if none)."""
    if dtype.name == "bfloat16":
        return "bf16"
    for name, known in NUMPY_DTYPES.items():
        if known == dtype:
            return name
    raise KeyError(f"no element type for NumPy dtype {dtype}")
