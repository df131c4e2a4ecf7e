"""The Reverie version, a leaf module (no imports), so the run time can put it in its cache
keys without importing `importlib.metadata` (slow to import) or the `reverie` package (which the
run-time layer may not import). It must equal pyproject.toml's `version`:
tests/backend/test_cache_security.py checks it against the installed distribution's metadata."""

VERSION = "0.1.0"
