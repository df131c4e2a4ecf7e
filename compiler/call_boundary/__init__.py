"""Call boundaries in LLVM IR: the CPython fast-call entry of every kernel, its per-kernel
`bind`, the descriptor the run time reads, and the XLA FFI handler."""
