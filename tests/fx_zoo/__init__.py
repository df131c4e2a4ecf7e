"""The zoo of canonical PyTorch models through torch.compile(backend="reverie") (issue 33)."""
