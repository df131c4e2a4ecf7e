"""The loop IR (buffers, loop nests, scalar statements), its printer and fusion planning."""
