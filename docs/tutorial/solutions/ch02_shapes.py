"""Chapter 2: a wrong return shape, and a column-wise broadcast.

Exercise 1: declaring `steps` as `f64[N]` is a TypeCheckError at the function: the body
returns `f64[N - 1]`, and symbolic dimensions compare as polynomials, so N - 1 is not N.

Exercise 2: `mean(x, axis=0)` is `f64[D]`; subtracting it from `f64[N, D]` aligns the
trailing axes, as in NumPy, and lowering inserts `broadcast {shape = [N, D]}`.
"""

from __future__ import annotations

import reverie as rv

WRONG_RETURN = """fn steps(x: f64[N]) -> f64[N] {
    return x[1:] - x[:N - 1];
}
"""

CENTRED = """fn centred(x: f64[N, D]) -> f64[N, D] {
    return x - mean(x, axis=0);
}
"""


def wrong_return_message() -> str:
    """The compiler's message for WRONG_RETURN."""
    try:
        rv.compile(WRONG_RETURN)
    except rv.TypeCheckError as error:
        return error.diagnostics[0].message
    raise AssertionError("the source compiled")


def centred_broadcasts() -> list[str]:
    """The `broadcast` lines of CENTRED's tensor IR."""
    return [line.strip() for line in rv.compile(CENTRED).ir("tensor").splitlines()
            if "broadcast" in line]
