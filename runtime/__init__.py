"""Reverie run time: JIT, object cache, the call boundary, tensors and autograd."""
