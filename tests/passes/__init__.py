"""Tests by pass: one file per compiler pass, named after it (`test_simplify.py`, ...).

Each test lowers a small program (or builds the IR op by op), runs the pass alone and
checks the printed result with FileCheck-style directives (`filecheck.py`), including a
CHECK-NOT for what the pass removes. Loop passes are called through `loop_passes.py`, the
one place that knows their signatures. The whole-example goldens (tests/golden/) stay as
the smoke layer above these.
"""
