"""Native-code management: JIT compilation, the object and artefact caches, shared objects,
the call boundary, run-time helpers, the worker pool."""
