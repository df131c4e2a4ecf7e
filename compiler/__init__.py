"""Reverie's middle and back end: tensor IR, transforms (autodiff, batching), lowering, codegen."""
