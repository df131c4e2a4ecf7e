"""IR → IR passes over the tensor IR: simplification, contractions, hoisting, reverse and
forward mode, batching, the VJP split."""
