"""The run-time library, written in LLVM IR: blocked and batched matrix products, the
merge sort, the worker pool and its threads, the workspace cache."""
