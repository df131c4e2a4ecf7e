"""The LLVM back end: loop IR to LLVM IR (llvmlite), scalar and vector maths, parallel loops."""
