"""Chapter 1, exercise 2: where the parser reports a missing `;`.

The answer: line 2, column 14, just after `x`, with "expected ';' or an operator but found
'return'". The parser cannot know the statement ended at the end of line 2: `let y = x`
could go on with an operator (line breaks only separate tokens, so `let y = x\n * 2;` is
one statement). It fails at the first token that cannot continue it, `return` on line 3,
and points the diagnostic at the end of the statement it broke off, where the `;` belongs.
"""

from __future__ import annotations

import reverie as rv
from reverie.dsl.diagnostics import Diagnostic

SOURCE = """fn twice(x: f32[N]) -> f32[N] {
    let y = x
    return y + y;
}
"""


def missing_semicolon_diagnostic() -> Diagnostic:
    """The one diagnostic the parser gives for SOURCE."""
    try:
        rv.compile(SOURCE)
    except rv.ParseError as error:
        (diagnostic,) = error.diagnostics
        return diagnostic
    raise AssertionError("the source compiled")
