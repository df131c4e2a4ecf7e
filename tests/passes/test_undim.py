"""The pass `undim` (compiler/transforms/undim.py): before batching over an i64 parameter
that doubles as a dimension, each top-level `dim` op naming it becomes integer arithmetic
on the parameter itself; a dimension that sizes a tensor or is used inside a region
cannot be rewritten."""

from __future__ import annotations

import pytest

from passes.filecheck import filecheck
from passes.inputs import lowered, printed
from reverie.compiler.transforms.undim import undim_parameters


def test_the_trip_count_of_a_loop_is_the_parameter_itself() -> None:
    fn = lowered("fn h(x: f64[N], steps: i64) -> f64 {"
                 " var y = x; for t in 0..steps { y = y * 0.5; } return sum(y) + f64(steps); }")
    filecheck(printed(fn), "CHECK: dim {dim = steps}")
    filecheck(printed(undim_parameters(fn, [1])), """
        CHECK-NOT: dim {
        CHECK: mul %1, %steps : i64
        CHECK: %y = for %4, %3, %x
        CHECK-NOT: dim {
    """)


def test_a_dimension_that_sizes_a_tensor_stays_a_dimension() -> None:
    fn = lowered("fn h(steps: i64) -> f64 {"
                 " let z[i in 0..steps] = f64(i); return sum(z); }")
    with pytest.raises(ValueError, match="a tensor is sized by steps"):
        undim_parameters(fn, [0])


def test_a_dimension_used_inside_a_loop_body_cannot_be_rewritten() -> None:
    fn = lowered("fn h(x: f64, steps: i64) -> f64 {"
                 " var y = x; for t in 0..steps { y = y + f64(steps); } return y; }")
    with pytest.raises(ValueError, match="inside a loop"):
        undim_parameters(fn, [1])
