"""Tensor IR to loop IR: fusion planning, then one loop nest per root op (reductions, scans,
sorts, matrix products, control flow), written by the `Emitter`."""
