"""`rv.Tensor` and autograd: the tape, grad mode, in-place writes and views, the graph API,
custom functions, anomaly detection, gradcheck, and the compiled kernels behind the operators."""
