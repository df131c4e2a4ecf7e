"""Code generation: loop IR to LLVM IR (llvmlite), with vector math and a blocked matmul."""
