"""Special functions among the elementwise ops: their declarations and NumPy semantics.

Declared like the other elementwise ops (`elementwise.py`): one row each, whose local
derivative gives both differentiation modes and whose `math` flag sends float operands to
the math library's function of the same name (`codegen/mathlib_special.py`). The NumPy
semantics use only NumPy and the standard library (SciPy is not a run-time dependency).

    erf(x)   the error function, 2/√π ∫₀ˣ exp(−t²) dt        (math.erf, elementwise)
"""

from __future__ import annotations

import math

import numpy as np

from .elementwise import scale, unary

TWO_OVER_SQRT_PI = 1.1283791670955126

_erf = np.vectorize(math.erf, otypes=[np.float64])

unary("erf", lambda x: _erf(x).astype(x.dtype), builtin=True, math=True,
      mlir={"float": "math.erf"},
      derivative=scale("d erf(x)/dx = 2/√π · exp(−x²)",
                       lambda s, x, y, a: s.mul(s.const(TWO_OVER_SQRT_PI, x.type),
                                                s.op("exp", [s.neg(s.mul(x, x))]))))
