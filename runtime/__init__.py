"""Reverie run time: native code (JIT, caches, the call boundary) in `native/`, tensors and
autograd in `tensors/`."""
