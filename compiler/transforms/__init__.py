"""IR → IR passes: simplification, reverse and forward mode, batching, lowering to loops."""
