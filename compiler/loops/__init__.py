"""The loop IR (buffers, loop nests, scalar statements), its printer, verifier and interpreter,
and the passes over it (dead code, interchange, loop fusion, peeling, splitting, parallel plans)."""
